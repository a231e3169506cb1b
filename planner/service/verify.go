package service

import (
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Verify re-checks the store's invariants from its documents, read at one
// revision (state.Store.ReadFleet): every host's allocation document equals the
// sum of its instances, no CPU holds more pieces than its capacity, memory
// (host and NUMA node) is not oversold, and no instance gets more than
// ShareBase pieces of one CPU, the shared pool holds the largest
// memory-first quota, a whole-cores instance shares no core, and no two
// instances on a host hold one host port. It returns
// every violation found, in one order every time: hosts by name, CPUs and
// NUMA nodes by ID (health lists them). Capacity is the overbooked one where the cluster's
// settings overbook a resource (what a replacement may use: placement's
// adjust): what placement did is never flagged.
func Verify(st Store, shareBase int) []string {
	var bad []string
	// One revision: usage and instances committed together are read
	// together; in place, without a copy of every instance (issue 39).
	st.ReadFleet(func(f state.Fleet) { bad = verifyFleet(f, shareBase, nil) })
	return bad
}

// verifyFleet is Verify on the fleet f. Each host's instances are read in
// the cache's order, which is not the same every time; a host with
// anything to report (rare) is audited again with its instances sorted by
// ID, so that what is reported is in one order. each, when not nil, is
// called with every host, in order, and its instances counted per
// service (health's counts, in the same pass; the map is reused).
func verifyFleet(f state.Fleet, shareBase int, each func(v state.HostView, perService map[string]int)) []string {
	var bad []string
	ps := f.Placement()
	var sorted []model.Instance // reused: one buffer for the hosts reported
	var count map[string]int
	if each != nil {
		count = map[string]int{}
	}
	for v := range f.Hosts() {
		name := v.Host.Name
		clear(count)
		found := auditHost(v, f.Instances(name), ps, shareBase, count)
		if each != nil {
			each(v, count)
		}
		if len(found) == 0 {
			continue
		}
		sorted = slices.AppendSeq(sorted[:0], f.Instances(name))
		slices.SortFunc(sorted, func(a, b model.Instance) int { return strings.Compare(a.ID, b.ID) })
		bad = append(bad, auditHost(v, slices.Values(sorted), ps, shareBase, nil)...)
	}
	return bad
}

// auditHost is the audit of host v whose instances are instances (read
// twice when two of them hold one host port), in their order; it counts
// them per service in count, when not nil.
func auditHost(v state.HostView, instances iter.Seq[model.Instance], ps placement.Settings, shareBase int, count map[string]int) []string {
	var bad []string
	limit := func(resource string, capacity int64) int64 {
		o, ok := ps.Overbooking[resource]
		switch {
		case !ok:
			return capacity
		case o == -1:
			return math.MaxInt64
		}
		return int64(math.Floor(float64(capacity) * (1 + o)))
	}
	name := v.Host.Name
	sum := state.NewAlloc()
	var wholeCores []model.Instance
	for in := range instances {
		if count != nil {
			count[in.Service]++
		}
		sum.Add(in, +1)
		for id, p := range in.CPUs {
			if p > shareBase {
				bad = append(bad, fmt.Sprintf("instance %s holds %d pieces of CPU %d", in.ID, p, id))
			}
		}
		if in.WholeCores {
			wholeCores = append(wholeCores, in)
		}
	}
	// A whole-cores instance holds every thread of its cores, and nobody
	// else holds a piece of them.
	for _, in := range wholeCores {
		if v.Host.Topology == nil {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(in.CPUs)) {
			c, ok := v.Host.Topology.CPU(id)
			if !ok {
				continue
			}
			for sib := range c.Siblings.All() {
				if in.CPUs[sib] != shareBase || sum.Used[sib] != shareBase {
					bad = append(bad, fmt.Sprintf("host %s: whole-cores instance %s on CPU %d: sibling CPU %d holds %d of its pieces, %d in all", name, in.ID, id, sib, in.CPUs[sib], sum.Used[sib]))
				}
			}
		}
	}
	if !maps.Equal(sum.Used, v.Alloc.Used) || sum.MemoryUsed != v.Alloc.MemoryUsed || !maps.Equal(sum.NUMAUsed, v.Alloc.NUMAUsed) || !maps.Equal(sum.Instances, v.Alloc.Instances) ||
		sum.MemoryFirstQuota != v.Alloc.MemoryFirstQuota || !maps.Equal(sum.MemoryFirst, v.Alloc.MemoryFirst) || !maps.Equal(sum.WholeCores, v.Alloc.WholeCores) ||
		!maps.Equal(sum.Ports, v.Alloc.Ports) {
		bad = append(bad, fmt.Sprintf("host %s: allocation document %+v != sum of instances %+v", name, v.Alloc, sum))
	}
	// No two instances on a host hold one host port.
	for _, port := range slices.Sorted(maps.Keys(sum.Ports)) {
		if sum.Ports[port] > 1 {
			var holders []string
			for in := range instances {
				if slices.ContainsFunc(in.HostPorts, func(p model.Port) bool { return p.Host == port }) {
					holders = append(holders, in.ID)
				}
			}
			bad = append(bad, fmt.Sprintf("host %s: host port %d held by %d instances: %s", name, port, sum.Ports[port], strings.Join(holders, ", ")))
		}
	}
	oversold := func(id cpuset.CPUID) bool { return int64(sum.Used[id]) > limit("cpu", int64(v.Host.CPUs[id])) }
	someOversold := false
	for id := range sum.Used { // sorted only to report
		if oversold(id) {
			someOversold = true
			break
		}
	}
	if someOversold {
		for _, id := range slices.Sorted(maps.Keys(sum.Used)) {
			if oversold(id) {
				bad = append(bad, fmt.Sprintf("host %s: CPU %d oversold: %d of %d pieces", name, id, sum.Used[id], v.Host.CPUs[id]))
			}
		}
	}
	// The shared pool holds every memory-first quota on the host (counted
	// here as AllocHost would, which is built only for the message: one
	// engine view a host was a fifth of the audit).
	if poolShort(v.Host, sum, shareBase) {
		ah := state.AllocHost(v.Host, sum)
		pool := ah.SharedPool()
		bad = append(bad, fmt.Sprintf("host %s: a memory-first quota of %s CPUs does not fit the shared pool of %d CPUs (%q)",
			name, alloc.FormatPieces(ah.PoolFloor(), shareBase), pool.Len(), pool.String()))
	}
	if sum.MemoryUsed > limit("memory", v.Host.MemoryBytes) {
		bad = append(bad, fmt.Sprintf("host %s: memory oversold: %d of %d", name, sum.MemoryUsed, v.Host.MemoryBytes))
	}
	for _, n := range slices.Sorted(maps.Keys(sum.NUMAUsed)) { // by ID: health lists these, the same every time
		if m := sum.NUMAUsed[n]; m > limit("memory", v.Host.NUMAMemory[n]) {
			bad = append(bad, fmt.Sprintf("host %s: NUMA node %d memory oversold: %d of %d", name, n, m, v.Host.NUMAMemory[n]))
		}
	}
	return bad
}

// poolShort is whether host h with usage a has a memory-first quota
// larger than its shared pool: AllocHost(h, a).PoolFloor() >
// SharedPool().Len()*shareBase, without building the engine view.
func poolShort(h state.Host, a state.Alloc, shareBase int) bool {
	floor := 0
	for q, n := range a.MemoryFirst {
		if n > 0 {
			floor = max(floor, q)
		}
	}
	if a.MemoryFirst == nil && a.MemoryFirstQuota > 0 {
		floor = a.MemoryFirstQuota // a usage document from before the counts by quota (AllocHost)
	}
	if floor == 0 {
		return false
	}
	pool := 0
	for id, capacity := range h.CPUs {
		if a.Used[id] == 0 && capacity > 0 && (h.Topology == nil || !h.Topology.Isolated.Contains(id)) {
			pool++
		}
	}
	return floor > pool*shareBase
}
