package alloc

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// Resize asks to change one running instance by deltas (seed 004 "实时重分配":
// the user passes the difference, not the target).
type Resize struct {
	Host string
	// Current is the instance's allocation now; the host's usage includes it.
	// For a memory-first instance CPUs is empty and CPUQuota holds its quota.
	Current     model.Allocation
	CPUDelta    int   // pieces; may be negative
	MemoryDelta int64 // bytes; may be negative
	// Bind is the mode after the resize (switching bind <-> memory-first).
	Bind bool
}

// PlanResize returns the instance's new allocation on h:
//  1. new CPU = current + delta and new memory = current + delta; the result
//     must stay above zero (a bound instance needs at least one piece);
//  2. give the current allocation back to a copy of the host;
//  3. memory-first target: memory must fit, the quota must fit the shared pool;
//  4. bound target: try the current NUMA node first, then the other NUMA
//     nodes in ascending ID order, then cross-node (an instance that is
//     cross-node now tries cross-node first, to keep its CPUs); inside a set,
//     keep the instance's CPUs wherever possible: its old whole CPUs stay
//     whole first, then its old fragment CPU, and the fragment stays where it
//     was if it still fits. No CPU ever gives the instance more than
//     ShareBase pieces.
//
// If it does not fit the error has CodeResizeNoFit and nothing changes.
func PlanResize(p Params, h *Host, rz Resize) (Placement, error) {
	if err := p.Validate(); err != nil {
		return Placement{}, err
	}
	cur := rz.Current
	curPieces := cur.Pieces()
	newPieces, newMem := curPieces+rz.CPUDelta, cur.Memory+rz.MemoryDelta
	switch {
	case rz.Bind && newPieces < 1:
		return Placement{}, invalid("resize.cpu_delta", FormatPieces(rz.CPUDelta, p.ShareBase),
			"the instance has %s CPUs; a bound instance must keep more than 0", FormatPieces(curPieces, p.ShareBase))
	case newPieces < 0:
		return Placement{}, invalid("resize.cpu_delta", FormatPieces(rz.CPUDelta, p.ShareBase),
			"the instance has %s CPUs; the result would be negative", FormatPieces(curPieces, p.ShareBase))
	case newMem <= 0:
		return Placement{}, invalid("resize.memory_delta_bytes", Size(rz.MemoryDelta),
			"the instance has %s; the result must stay above 0", FormatBytes(cur.Memory))
	}
	released, err := release(p, h, cur)
	if err != nil {
		return Placement{}, err
	}
	noFit := func(why string, args ...any) error {
		return &Error{Code: CodeResizeNoFit, Hosts: []string{h.Name},
			Message: fmt.Sprintf("resize on host %s to %s CPUs (%s) and %s does not fit: %s; nothing was changed",
				h.Name, FormatPieces(newPieces, p.ShareBase), mode(rz.Bind), FormatBytes(newMem), fmt.Sprintf(why, args...))}
	}
	s := newHostState(p, released)
	if cur.WholeCores {
		switch {
		case !rz.Bind:
			return Placement{}, invalid("resize.bind", false, "the instance holds whole cores (whole_cores): it stays bound")
		case newPieces%p.ShareBase != 0:
			return Placement{}, invalid("resize.cpu_delta", FormatPieces(rz.CPUDelta, p.ShareBase),
				"the instance holds whole cores (whole_cores): it resizes by whole CPUs")
		}
		return s.resizeCores(cur, newPieces/p.ShareBase, newMem, noFit)
	}
	if !rz.Bind {
		if newMem > s.memFree {
			return Placement{}, noFit("memory: %s free", FormatBytes(s.memFree))
		}
		if newPieces > s.poolPieces() {
			return Placement{}, noFit("cpu: the shared pool has %s CPUs", FormatPieces(s.poolPieces(), p.ShareBase))
		}
		return Placement{Host: h.Name, Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, NUMANode: -1, Memory: newMem, CPUQuota: newPieces}}, nil
	}
	sh := shape{sb: p.ShareBase, x: newPieces / p.ShareBase, f: newPieces % p.ShareBase, mem: newMem}
	keep := map[cpuset.CPUID]int{}
	if rz.Current.Bind {
		keep = cur.CPUs
	}
	for _, try := range resizeOrder(s, cur.NUMANode, rz.Current.Bind) {
		set, numa := s.all, cpuset.NUMANodeID(-1)
		memFree := s.memFree
		if try >= 0 {
			set, numa = s.sets[try], s.h.NUMANodes[try].ID
			memFree = min(memFree, s.numaFree[try])
		}
		if memFree < newMem {
			continue
		}
		if _, ok := newCounter(sh, s.values(set), s.convAllowance).feasible(1); !ok {
			continue
		}
		if pl, ok := s.pickKeeping(sh, set, numa, keep); ok {
			return pl, nil
		}
		pl, err := s.placeSet(sh, set, 1, numa, consumption{}) // exact fallback
		if err != nil {
			return Placement{}, err
		}
		return pl[0], nil
	}
	return Placement{}, noFit("no NUMA node and not the whole host has %d whole CPUs plus %d pieces with %s free", sh.x, sh.f, FormatBytes(newMem))
}

func mode(bind bool) string {
	if bind {
		return "bound"
	}
	return "memory-first"
}

// resizeOrder lists NUMA set indexes to try, -1 standing for cross-node.
func resizeOrder(s *hostState, cur cpuset.NUMANodeID, bound bool) []int {
	if len(s.sets) == 0 || (bound && cur < 0) {
		return []int{-1}
	}
	var out []int
	if i, ok := s.numaIndex(cur); ok && bound {
		out = append(out, i)
	}
	for i := range s.sets {
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return append(out, -1)
}

// release returns a copy of h without cur's usage, or an error when h does
// not hold cur (the input is inconsistent).
func release(p Params, h *Host, cur model.Allocation) (*Host, error) {
	bound := cur.Bind
	c := *h
	c.Memo = nil // the copy is changed
	c.CPUs = slices.Clone(h.CPUs)
	c.NUMANodes = slices.Clone(h.NUMANodes)
	if !bound && h.MemoryFirst[cur.CPUQuota] > 0 {
		c.MemoryFirst = maps.Clone(h.MemoryFirst)
		c.MemoryFirst[cur.CPUQuota]--
	}
	if bound {
		for _, id := range slices.Sorted(maps.Keys(cur.CPUs)) {
			v := cur.CPUs[id]
			i, ok := slices.BinarySearchFunc(c.CPUs, id, func(x CPU, id cpuset.CPUID) int { return int(x.ID) - int(id) })
			if !ok {
				return nil, invalid(fmt.Sprintf("resize.current.cpus[%d]", id), v, "CPU %d is not a CPU of host %s", id, h.Name)
			}
			if v <= 0 || v > p.ShareBase || v > c.CPUs[i].Used {
				return nil, invalid(fmt.Sprintf("resize.current.cpus[%d]", id), v, "want 1..%d pieces, no more than the host's used %d", p.ShareBase, c.CPUs[i].Used)
			}
			c.CPUs[i].Used -= v
			if cur.WholeCores {
				c.CPUs[i].WholeCores = false
			}
		}
	}
	if cur.Memory <= 0 || cur.Memory > c.MemoryUsed {
		return nil, invalid("resize.current.memory_bytes", cur.Memory, "want 1..%d (the host's used memory)", c.MemoryUsed)
	}
	c.MemoryUsed -= cur.Memory
	if bound && cur.NUMANode >= 0 {
		i, ok := slices.BinarySearchFunc(c.NUMANodes, cur.NUMANode, func(n NUMANode, id cpuset.NUMANodeID) int { return int(n.ID) - int(id) })
		if !ok {
			return nil, invalid("resize.current.numa_node", cur.NUMANode, "host %s has no such NUMA node", h.Name)
		}
		for id := range cur.CPUs {
			if !c.NUMANodes[i].CPUs.Contains(id) {
				return nil, invalid("resize.current.numa_node", cur.NUMANode, "CPU %d is not on NUMA node %d", id, cur.NUMANode)
			}
		}
		c.NUMANodes[i].MemoryUsed = max(c.NUMANodes[i].MemoryUsed-cur.Memory, 0)
	}
	return &c, nil
}

// pickKeeping tries to place one instance in set reusing keep's CPUs: old
// whole CPUs first, then the old fragment CPU, then the rest in topology
// order for whole CPUs; the fragment prefers its old CPU, then the other
// kept CPUs, then best fit. It reports false when this greedy choice does
// not work out (placeSet then finds a plan if one exists).
func (s *hostState) pickKeeping(sh shape, set []int32, numa cpuset.NUMANodeID, keep map[cpuset.CPUID]int) (Placement, bool) {
	inSet := func(p int32) bool { return slices.Contains(set, p) }
	rank := func(p int32) int { // lower is kept first
		switch v := keep[s.ids[p]]; {
		case v == s.p.ShareBase:
			return 0
		case v > 0:
			return 1
		}
		return 2
	}
	var whole []int32
	for _, p := range set {
		if v := s.free[p]; v >= s.p.ShareBase && v%s.p.ShareBase == 0 {
			whole = append(whole, p)
		}
	}
	slices.SortStableFunc(whole, func(a, b int32) int { return rank(a) - rank(b) })
	var picked []int32
	for _, p := range whole {
		if len(picked) == sh.x || rank(p) == 2 {
			break
		}
		picked = append(picked, p)
	}
	if len(picked) < sh.x { // the rest in topology order, avoiding the picked ones
		var rest []int32
		for _, p := range whole {
			if !slices.Contains(picked, p) {
				rest = append(rest, p)
			}
		}
		sortTopo(s, rest)
		picked = s.pickWholeTopo(rest, sh.x-len(picked), picked)
	}
	if len(picked) < sh.x {
		return Placement{}, false
	}
	pl := Placement{Host: s.h.Name, Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{}, NUMANode: numa, Memory: sh.mem}}
	for _, p := range picked {
		pl.CPUs[s.ids[p]] = sh.sb
	}
	if sh.f > 0 {
		frag := int32(-1)
		for _, p := range set { // kept CPUs first: old fragment (rank 1), then old whole (rank 0)
			if _, used := pl.CPUs[s.ids[p]]; used || s.free[p] < sh.f || keep[s.ids[p]] == 0 {
				continue
			}
			if frag < 0 || rank(p) > rank(frag) {
				frag = p
			}
		}
		converts := frag >= 0 && s.free[frag]%s.p.ShareBase == 0
		if frag < 0 || (converts && s.convAllowance == 0) {
			var pool []int32
			for _, p := range set {
				if _, used := pl.CPUs[s.ids[p]]; !used && inSet(p) && s.free[p]%s.p.ShareBase != 0 {
					pool = append(pool, p)
				}
			}
			var ok bool
			if frag, ok = s.pickFragment(pool, sh.f, -2, -2, nil, false); !ok {
				// Convert a whole-capable CPU, in placeSet's conversion order
				// (highest core, then highest ID), if the allowance permits.
				if s.convAllowance == 0 {
					return Placement{}, false
				}
				for _, p := range set {
					if _, used := pl.CPUs[s.ids[p]]; used || s.free[p] < sh.f {
						continue
					}
					if frag < 0 || s.coreKey[p] > s.coreKey[frag] || (s.coreKey[p] == s.coreKey[frag] && s.ids[p] > s.ids[frag]) {
						frag = p
					}
				}
				if frag < 0 {
					return Placement{}, false
				}
			}
		}
		pl.CPUs[s.ids[frag]] = sh.f
	}
	return pl, true
}

func sortTopo(s *hostState, ps []int32) {
	slices.SortFunc(ps, func(a, b int32) int {
		if s.l3Key[a] != s.l3Key[b] {
			return int(s.l3Key[a]) - int(s.l3Key[b])
		}
		if s.coreKey[a] != s.coreKey[b] {
			return int(s.coreKey[a]) - int(s.coreKey[b])
		}
		return int(s.ids[a]) - int(s.ids[b])
	})
}

// resizeCores resizes a whole-cores instance (its current usage already
// released from s) to x CPUs and mem bytes: whole free cores of one size
// dividing x, its own cores first (a shrink keeps a subset of them, a grow
// keeps them all), then cores of its own L3 group, then by L3 group and
// core; its NUMA node first, then the others, then cross-node.
func (s *hostState) resizeCores(cur model.Allocation, x int, mem int64, noFit func(string, ...any) error) (Placement, error) {
	sb := s.p.ShareBase
	own := map[cpuset.CPUID]bool{}
	ownL3 := map[cpuset.CPUID]bool{}
	for id := range cur.CPUs {
		if i, ok := s.pos(id); ok {
			own[s.coreKey[i]], ownL3[s.l3Key[i]] = true, true
		}
	}
	if t := s.coreSizeNotDividing(x); t > 0 {
		return Placement{}, noFit("whole cores: %d CPUs is not a multiple of its %d threads per core", x, t)
	}
	for _, try := range resizeOrder(s, cur.NUMANode, true) {
		set, numa, free := s.all, cpuset.NUMANodeID(-1), s.memFree
		if try >= 0 {
			set, numa, free = s.sets[try], s.h.NUMANodes[try].ID, min(free, s.numaFree[try])
		}
		if free < mem {
			continue
		}
		cores := s.freeCores(set)
		for _, t := range sizesFor(cores, x) {
			l := cores[t]
			if len(l) < x/t {
				continue
			}
			slices.SortStableFunc(l, func(a, b freeCore) int {
				return cmp.Or(cmpBool(own[a.key], own[b.key]), cmpBool(ownL3[a.l3], ownL3[b.l3]))
			})
			pl := Placement{Host: s.h.Name, Allocation: model.Allocation{Bind: true, WholeCores: true, CPUs: make(map[cpuset.CPUID]int, x),
				NUMANode: numa, Memory: mem, MemorySoft: cur.MemorySoft}}
			for _, c := range l[:x/t] {
				for _, q := range c.cpus {
					pl.CPUs[s.ids[q]] = sb
				}
			}
			return pl, nil
		}
	}
	return Placement{}, noFit("no NUMA node and not the whole host has %d CPUs of wholly free cores with %s free", x, FormatBytes(mem))
}

// cmpBool orders true before false.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}
