package topology

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// LocalDistance is the SLIT distance of a NUMA node to itself.
const LocalDistance = 10

// Where the NUMA layout came from.
const (
	SourceSysfs = "sysfs" // devices/system/node
	SourceFlat  = "flat"  // no NUMA information: one node holds every online CPU
)

// Topology describes one host's CPUs and NUMA nodes.
type Topology struct {
	// NUMANodes is sorted by ID; IDs may be discontinuous and a node may have
	// no CPUs (memory-only node).
	NUMANodes []NUMANode `json:"numa_nodes"`
	// CPUs lists the online logical CPUs sorted by ID. The index is NOT the ID.
	CPUs []CPU `json:"cpus"`
	// Online is the set of online CPUs (devices/system/cpu/online); it equals
	// the IDs in CPUs.
	Online cpuset.CPUs `json:"online"`
	// Isolated is devices/system/cpu/isolated (isolcpus=); a subset of Online.
	Isolated cpuset.CPUs `json:"isolated"`
	// NUMASource says where the NUMA layout came from: SourceSysfs or SourceFlat.
	NUMASource string `json:"numa_source"`
}

// NUMANode is one NUMA node.
type NUMANode struct {
	ID          cpuset.NUMANodeID `json:"id"`
	CPUs        cpuset.CPUs       `json:"cpus"`         // online CPUs of the node; empty for memory-only nodes
	MemoryBytes int64             `json:"memory_bytes"` // MemTotal of the node
	// Distances is the SLIT row of this node keyed by the other node's ID
	// (never by position); LocalDistance for itself.
	Distances map[cpuset.NUMANodeID]int `json:"distances"`
}

// CPU is one online logical CPU.
type CPU struct {
	ID cpuset.CPUID `json:"id"`
	// CoreID is topology/core_id: unique only inside one package and die, and
	// not contiguous on many machines. Core identity is Siblings.
	CoreID    int               `json:"core_id"`
	PackageID int               `json:"package_id"`
	DieID     int               `json:"die_id"`
	NUMANode  cpuset.NUMANodeID `json:"numa_node"`
	// Siblings are the online SMT threads of this CPU's physical core,
	// this CPU included.
	Siblings cpuset.CPUs `json:"siblings"`
	// L3 are the online CPUs sharing this CPU's last-level (L3) cache, this CPU
	// included; empty when the host does not report an L3 cache.
	L3 cpuset.CPUs `json:"l3"`
}

// Core is one physical core: the SMT siblings that share it.
type Core struct {
	ID        cpuset.CPUID // the lowest sibling: unique across packages
	CPUs      cpuset.CPUs
	PackageID int
	NUMANode  cpuset.NUMANodeID
}

// Package is one socket.
type Package struct {
	ID   int
	Dies []int // sorted die IDs
	CPUs cpuset.CPUs
}

// CPU returns the CPU with the given ID.
func (t *Topology) CPU(id cpuset.CPUID) (CPU, bool) {
	i, ok := slices.BinarySearchFunc(t.CPUs, id, func(c CPU, id cpuset.CPUID) int { return cmp.Compare(c.ID, id) })
	if !ok {
		return CPU{}, false
	}
	return t.CPUs[i], true
}

// NUMANode returns the NUMA node with the given ID.
func (t *Topology) NUMANode(id cpuset.NUMANodeID) (NUMANode, bool) {
	i, ok := slices.BinarySearchFunc(t.NUMANodes, id, func(n NUMANode, id cpuset.NUMANodeID) int { return cmp.Compare(n.ID, id) })
	if !ok {
		return NUMANode{}, false
	}
	return t.NUMANodes[i], true
}

// NUMANodeIDs returns the set of NUMA node IDs.
func (t *Topology) NUMANodeIDs() cpuset.Mems {
	ids := make([]cpuset.NUMANodeID, len(t.NUMANodes))
	for i, n := range t.NUMANodes {
		ids[i] = n.ID
	}
	return cpuset.Of(ids...)
}

// MaxNodeMemory bounds one NUMA node's memory (256 TiB): far above any
// machine, and low enough that a sum over 8,192 nodes cannot overflow.
const MaxNodeMemory = 1 << 48

// MemoryBytes is the sum of the NUMA nodes' memory.
func (t *Topology) MemoryBytes() int64 {
	var sum int64
	for _, n := range t.NUMANodes {
		sum += n.MemoryBytes
	}
	return sum
}

// Cores returns the physical cores sorted by ID (their lowest sibling).
func (t *Topology) Cores() []Core {
	var out []Core
	for _, c := range t.CPUs {
		if first, _ := c.Siblings.Min(); first != c.ID {
			continue
		}
		out = append(out, Core{ID: c.ID, CPUs: c.Siblings, PackageID: c.PackageID, NUMANode: c.NUMANode})
	}
	return out
}

// L3Groups returns the distinct L3 cache groups, ordered by their lowest CPU.
// CPUs without L3 information are left out.
func (t *Topology) L3Groups() []cpuset.CPUs {
	var out []cpuset.CPUs
	for _, c := range t.CPUs {
		if first, ok := c.L3.Min(); ok && first == c.ID {
			out = append(out, c.L3)
		}
	}
	return out
}

// Packages returns the sockets sorted by ID.
func (t *Topology) Packages() []Package {
	byID := map[int]*Package{}
	for _, c := range t.CPUs {
		p, ok := byID[c.PackageID]
		if !ok {
			p = &Package{ID: c.PackageID}
			byID[c.PackageID] = p
		}
		p.CPUs = p.CPUs.Union(cpuset.Of(c.ID))
		if !slices.Contains(p.Dies, c.DieID) {
			p.Dies = append(p.Dies, c.DieID)
		}
	}
	out := make([]Package, 0, len(byID))
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		p := byID[id]
		slices.Sort(p.Dies)
		out = append(out, *p)
	}
	return out
}

// Distance returns the SLIT distance between two NUMA nodes.
func (t *Topology) Distance(from, to cpuset.NUMANodeID) (int, bool) {
	n, ok := t.NUMANode(from)
	if !ok {
		return 0, false
	}
	d, ok := n.Distances[to]
	return d, ok
}

// ValidationError names the inconsistency Validate found.
type ValidationError struct {
	Field  string // e.g. "cpus[3].siblings"
	Value  string // cut to maxEcho bytes: a topology comes from outside
	Reason string // cut to twice that
}

// maxEcho bounds how much of a value an error repeats: a registration
// may carry megabytes in one field, and its error must not.
const maxEcho = 200

func (e *ValidationError) Error() string {
	return fmt.Sprintf("topology: %s = %s: %s", e.Field, e.Value, e.Reason)
}

// Validate checks the invariants the planner relies on:
//   - NUMA nodes and CPUs are sorted by ID without duplicates, IDs in range;
//   - every CPU is in exactly one NUMA node, the node's CPU set says so too,
//     and Online is exactly the CPU IDs;
//   - siblings contain the CPU, agree with each other, and share package,
//     die and NUMA node;
//   - L3 groups, where known, contain the CPU and agree with each other;
//   - every node has a distance to every node, LocalDistance to itself and
//     at least LocalDistance to others (ACPI SLIT);
//   - a node's memory is 0..MaxNodeMemory; Isolated ⊆ Online.
//
// IDs run 0..cpuset.MaxID, so a topology has at most 8,192 CPUs and 8,192
// NUMA nodes; validating the largest takes milliseconds (its cost grows
// with the number of CPUs times the size of a CPU set, never with pairs of
// CPUs: BenchmarkValidate8192). An error repeats at most maxEcho bytes of
// the offending value.
//
// SLIT rows need not be symmetric: ACPI allows asymmetric tables.
func (t *Topology) Validate() error {
	bad := func(field string, value any, reason string, args ...any) error {
		return &ValidationError{Field: field, Value: clip.Text(fmt.Sprint(value), maxEcho), Reason: clip.Text(fmt.Sprintf(reason, args...), 2*maxEcho)}
	}
	if len(t.NUMANodes) == 0 {
		return bad("numa_nodes", "[]", "a host has at least one NUMA node")
	}
	if len(t.CPUs) == 0 {
		return bad("cpus", "[]", "a host has at least one online CPU")
	}
	nodeIDs := t.NUMANodeIDs()
	var nodeCPUs cpuset.CPUs
	for i, n := range t.NUMANodes {
		f := fmt.Sprintf("numa_nodes[%d]", i)
		if n.ID < 0 || n.ID > cpuset.MaxID {
			return bad(f+".id", n.ID, "outside 0..%d", cpuset.MaxID)
		}
		if i > 0 && n.ID <= t.NUMANodes[i-1].ID {
			return bad(f+".id", n.ID, "not sorted or duplicate (previous %d)", t.NUMANodes[i-1].ID)
		}
		if n.MemoryBytes < 0 || n.MemoryBytes > MaxNodeMemory {
			return bad(f+".memory_bytes", n.MemoryBytes, "want 0..%d (256 TiB)", int64(MaxNodeMemory))
		}
		if overlap := nodeCPUs.Intersect(n.CPUs); !overlap.IsEmpty() {
			return bad(f+".cpus", n.CPUs, "CPUs %s are in another NUMA node too", overlap)
		}
		nodeCPUs = nodeCPUs.Union(n.CPUs)
		if len(n.Distances) != len(t.NUMANodes) {
			return bad(f+".distances", fmt.Sprint(n.Distances), "has %d entries for %d NUMA nodes", len(n.Distances), len(t.NUMANodes))
		}
		for _, to := range slices.Sorted(maps.Keys(n.Distances)) {
			d := n.Distances[to]
			df := fmt.Sprintf("%s.distances[%d]", f, to)
			switch {
			case !nodeIDs.Contains(to):
				return bad(df, d, "no NUMA node %d", to)
			case to == n.ID && d != LocalDistance:
				return bad(df, d, "distance to itself must be %d", LocalDistance)
			case d < LocalDistance:
				return bad(df, d, "below the local distance %d", LocalDistance)
			}
		}
	}
	ids := make([]cpuset.CPUID, 0, len(t.CPUs))
	for i, c := range t.CPUs {
		f := fmt.Sprintf("cpus[%d]", i)
		if c.ID < 0 || c.ID > cpuset.MaxID {
			return bad(f+".id", c.ID, "outside 0..%d", cpuset.MaxID)
		}
		if i > 0 && c.ID <= t.CPUs[i-1].ID {
			return bad(f+".id", c.ID, "not sorted or duplicate (previous %d)", t.CPUs[i-1].ID)
		}
		ids = append(ids, c.ID)
		n, ok := t.NUMANode(c.NUMANode)
		if !ok {
			return bad(f+".numa_node", c.NUMANode, "no such NUMA node")
		}
		if !n.CPUs.Contains(c.ID) {
			return bad(f+".numa_node", c.NUMANode, "NUMA node %d's cpus %q do not contain CPU %d", n.ID, n.CPUs, c.ID)
		}
	}
	online := cpuset.Of(ids...)
	if !online.Equal(t.Online) {
		return bad("online", t.Online, "differs from the CPUs listed (%s)", online)
	}
	if !nodeCPUs.Equal(online) {
		return bad("numa_nodes[].cpus", nodeCPUs, "NUMA nodes hold CPUs that are not listed online (%s)", online)
	}
	if !t.Isolated.IsSubsetOf(online) {
		return bad("isolated", t.Isolated, "not a subset of online %s", online)
	}
	// A CPU's sibling and L3 sets must agree with those of every CPU they
	// name. Checking that pairwise costs O(n²) set comparisons (a minute
	// for 8,192 CPUs that all share one L3); groupsAgree decides it for
	// every CPU in one pass, and only a CPU whose group disagrees is
	// looked at pairwise, to say which member disagrees.
	siblingsOK := t.groupsAgree(func(c CPU) cpuset.CPUs { return c.Siblings }, func(a, b CPU) bool {
		return a.PackageID == b.PackageID && a.DieID == b.DieID && a.NUMANode == b.NUMANode
	})
	l3OK := t.groupsAgree(func(c CPU) cpuset.CPUs { return c.L3 }, func(CPU, CPU) bool { return true })
	for i, c := range t.CPUs {
		f := fmt.Sprintf("cpus[%d]", i)
		if !c.Siblings.Contains(c.ID) {
			return bad(f+".siblings", c.Siblings, "does not contain CPU %d itself", c.ID)
		}
		for s := range c.Siblings.All() {
			if siblingsOK[i] {
				break
			}
			sc, ok := t.CPU(s)
			if !ok {
				return bad(f+".siblings", c.Siblings, "sibling %d is not an online CPU", s)
			}
			if !sc.Siblings.Equal(c.Siblings) {
				return bad(f+".siblings", c.Siblings, "CPU %d says its siblings are %s", s, sc.Siblings)
			}
			if sc.PackageID != c.PackageID || sc.DieID != c.DieID || sc.NUMANode != c.NUMANode {
				return bad(f+".siblings", c.Siblings, "sibling %d is on another package, die or NUMA node", s)
			}
		}
		if c.L3.IsEmpty() {
			continue
		}
		if !c.L3.Contains(c.ID) {
			return bad(f+".l3", c.L3, "does not contain CPU %d itself", c.ID)
		}
		if !c.L3.IsSubsetOf(online) {
			return bad(f+".l3", c.L3, "holds CPUs that are not online")
		}
		for s := range c.L3.All() {
			if l3OK[i] {
				break
			}
			if sc, _ := t.CPU(s); !sc.L3.Equal(c.L3) {
				return bad(f+".l3", c.L3, "CPU %d says its L3 group is %q", s, sc.L3)
			}
		}
	}
	if t.NUMASource != SourceSysfs && t.NUMASource != SourceFlat {
		return bad("numa_source", t.NUMASource, "want %q or %q", SourceSysfs, SourceFlat)
	}
	return nil
}

// groupsAgree reports, for each CPU (by index), whether every CPU in its
// group (set(c): its siblings or its L3 group) is an online CPU with the
// same group and alike(c, member). It costs one set comparison per CPU,
// not one per pair: every CPU is compared with its group's lowest member
// r, and the group agrees when r is online, the CPUs that match r are
// exactly as many as the group holds (they all lie in it, since each
// contains itself) and c matches r.
func (t *Topology) groupsAgree(set func(CPU) cpuset.CPUs, alike func(a, b CPU) bool) []bool {
	matches := func(c, r CPU) bool { return set(c).Equal(set(r)) && alike(c, r) }
	reps := make([]int, len(t.CPUs)) // index of the group's lowest member; -1: none
	count := map[int]int{}           // by rep: the CPUs that match it
	for i, c := range t.CPUs {
		reps[i] = -1
		g := set(c)
		lo, ok := g.Min()
		if !ok || !g.Contains(c.ID) {
			continue
		}
		r, ok := slices.BinarySearchFunc(t.CPUs, lo, func(c CPU, id cpuset.CPUID) int { return cmp.Compare(c.ID, id) })
		if !ok || !matches(c, t.CPUs[r]) {
			continue
		}
		reps[i] = r
		count[r]++
	}
	out := make([]bool, len(t.CPUs))
	for i, r := range reps {
		out[i] = r >= 0 && count[r] == set(t.CPUs[r]).Len()
	}
	return out
}
