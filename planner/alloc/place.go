package alloc

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// This file picks concrete CPUs. For k instances in one CPU set:
//  1. Convert the same number of whole-capable CPUs into fragment CPUs as
//     capacity.go counted (the fewest), choosing among equal values the CPUs
//     whose core has the highest ID first, both threads of a core together,
//     so fragments stay packed on as few physical cores as possible.
//  2. Whole CPUs of each instance: when no CPU is oversold, inside the L3
//     group with the fewest free CPUs that still holds all X (best fit);
//     within it, whole free physical cores first (all SMT siblings), then
//     CPUs of cores that are already broken, then breaking a new core; ties
//     by lowest core ID, then CPU ID. On a host with oversold CPUs, the X CPUs
//     with the most free pieces (ties by CPU ID), which keeps the count exact.
//  3. The fragment: the CPU with the fewest free pieces that still holds F
//     (best fit, so already-fragmented CPUs fill up first); ties prefer the
//     instance's own L3 group, then the lowest CPU ID. Inside a NUMA node,
//     when that leaves the cross-node phase more (capacity.go's
//     consumption), the CPUs converted in step 1 come after all others, and
//     on oversold CPUs step 2 takes the CPUs with the fewest free pieces.
// Steps 1-3 consume the same multiset of free values as counter.residual,
// so a count from capacity.go can always be placed.
//
// When no later phase reads what a set leaves (the set is the last one this
// request places in), the fragment goes by topology instead: a CPU of the
// instance's own L3 group, then of its NUMA node, best fit within those;
// when none of the fragment CPUs is in its L3 group, a whole free CPU there
// becomes one, if the rest of the request still fits (not on oversold
// hosts). Any fragment CPU lowers the set's fragment count by exactly one,
// and the whole CPUs are checked, so the count still holds.

// placeHost places k instances of a CPU-bound request on the host: NUMA nodes
// in ascending ID order, each up to its capacity, then cross-node.
func (s *hostState) placeHost(sh shape, k int) ([]Placement, error) {
	if sh.cores {
		n, pl := s.runCores(sh, k, sh.mem, true)
		if n < k {
			return nil, fmt.Errorf("alloc: internal error: %d of %d whole-cores instances fit where capacity said they would (host %s)", n, k, s.h.Name)
		}
		return pl, nil
	}
	out := make([]Placement, 0, k)
	how := s.how
	if len(s.sets) > 0 && (!s.howSet || s.howFor != sh) {
		_, how = s.bindCapacity(sh, sh.mem)
	}
	// How many each NUMA node takes, counted before any is placed (the
	// nodes' CPUs are disjoint, so placing one changes no other's count,
	// only the host's memory and conversion allowance, tracked here).
	counts := make([]int, len(s.sets))
	memLeft, conv, left := s.memFree, s.convAllowance, k
	for i, set := range s.sets {
		if left == 0 {
			break
		}
		c := newCounter(sh, s.values(set), conv)
		n, _ := c.max(int(min(min(s.numaFree[i], memLeft)/sh.mem, unlimited)))
		t := min(n, left)
		if conv >= 0 {
			j, _ := c.conversions(t)
			conv -= j
		}
		memLeft -= int64(t) * sh.mem
		left -= t
		counts[i] = t
	}
	// Fragments go by topology where no cross-node phase reads what the
	// NUMA nodes leave.
	how.topo = left == 0
	for i, set := range s.sets {
		if k == 0 {
			break
		}
		t := counts[i]
		pl, err := s.placeSet(sh, set, t, s.h.NUMANodes[i].ID, how)
		if err != nil {
			return nil, err
		}
		s.numaFree[i] -= int64(t) * sh.mem
		out = append(out, pl...)
		k -= t
	}
	if k > 0 {
		pl, err := s.placeSet(sh, s.all, k, -1, consumption{topo: true})
		if err != nil {
			return nil, err
		}
		out = append(out, pl...)
	}
	return out, nil
}

// placeSet places k instances inside one CPU set and charges host memory,
// consuming its CPUs as how says.
func (s *hostState) placeSet(sh shape, set []int32, k int, numa cpuset.NUMANodeID, how consumption) ([]Placement, error) {
	if k == 0 {
		return nil, nil
	}
	c := newCounter(sh, s.values(set), s.convAllowance)
	j, ok := c.feasible(k)
	if !ok || int64(k)*sh.mem > s.memFree {
		return nil, fmt.Errorf("alloc: internal error: %d instances do not fit where capacity said they would (host %s, NUMA node %d)", k, s.h.Name, numa)
	}
	var whole, frag []int32
	for _, p := range set {
		switch v := s.free[p]; {
		case v <= 0:
		case v%sh.sb == 0:
			whole = append(whole, p)
		default:
			frag = append(frag, p)
		}
	}
	// 1. Conversions: smallest value first, then highest core, then highest ID.
	slices.SortFunc(whole, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.free[a], s.free[b]), cmp.Compare(s.coreKey[b], s.coreKey[a]), cmp.Compare(s.ids[b], s.ids[a]))
	})
	var converted map[int32]bool
	if sh.f > 0 {
		if how.fragmentedFirst && j > 0 {
			converted = make(map[int32]bool, j)
			for _, p := range whole[:j] {
				converted[p] = true
			}
		}
		frag = append(frag, whole[:j]...)
	}
	whole = whole[j:]
	if s.convAllowance >= 0 {
		s.convAllowance -= j
	}
	// Topology order for step 2: by L3 group, then core, then CPU.
	slices.SortFunc(whole, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.l3Key[a], s.l3Key[b]), cmp.Compare(s.coreKey[a], s.coreKey[b]), cmp.Compare(s.ids[a], s.ids[b]))
	})
	out := make([]Placement, 0, k)
	picked := make([]int32, 0, sh.x)
	for i := range k {
		picked = picked[:0]
		if c.single {
			picked = s.pickWholeTopo(whole, sh.x, picked)
		} else {
			picked = s.pickWholeOversold(whole, sh.x, picked, how.drainWhole)
		}
		if len(picked) < sh.x {
			return nil, fmt.Errorf("alloc: internal error: found %d of %d whole CPUs on host %s", len(picked), sh.x, s.h.Name)
		}
		pl := Placement{Host: s.h.Name, Allocation: model.Allocation{Bind: true, CPUs: make(map[cpuset.CPUID]int, sh.x+1), NUMANode: numa, Memory: sh.mem}}
		for _, p := range picked {
			s.free[p] -= sh.sb
			pl.CPUs[s.ids[p]] = sh.sb
		}
		if sh.f > 0 {
			l3, numaK := cpuset.CPUID(-2), int16(-2)
			if len(picked) > 0 {
				l3, numaK = s.l3Key[picked[0]], s.numaKey[picked[0]]
			}
			p, ok := s.pickFragment(frag, sh.f, l3, numaK, converted, how.topo)
			if !ok {
				return nil, fmt.Errorf("alloc: internal error: no fragment CPU with %d free pieces on host %s", sh.f, s.h.Name)
			}
			if how.topo && c.single && l3 >= 0 && s.l3Key[p] != l3 && s.convAllowance != 0 {
				if q, ok := s.localFragment(whole, l3, sh, (k-1-i)*sh.x); ok {
					p = q
					frag = append(frag, q)
					if s.convAllowance > 0 {
						s.convAllowance--
					}
				}
			}
			s.free[p] -= sh.f
			pl.CPUs[s.ids[p]] = sh.f
		}
		s.memFree -= sh.mem
		out = append(out, pl)
	}
	return out, nil
}

// pickWholeTopo is step 2 for hosts without oversold CPUs. pool is in
// topology order; CPUs with free >= ShareBase are candidates.
func (s *hostState) pickWholeTopo(pool []int32, x int, picked []int32) []int32 {
	if x == 0 {
		return picked
	}
	sb := s.p.ShareBase
	// Best-fit L3 group: the run with the fewest candidates that still has x.
	lo, hi, best := 0, len(pool), -1
	for i := 0; i < len(pool); {
		j, n := i, 0
		for ; j < len(pool) && s.l3Key[pool[j]] == s.l3Key[pool[i]]; j++ {
			if s.free[pool[j]] >= sb {
				n++
			}
		}
		if n >= x && (best < 0 || n < best) {
			lo, hi, best = i, j, n
		}
		i = j
	}
	sel := pool[lo:hi]
	need := x
	take := func(p int32) {
		s.free[p] -= sb // mark taken; restored by the caller's accounting below
		picked = append(picked, p)
		need--
	}
	// Walk the core runs: pass 0 whole free cores, pass 1 broken cores, pass 2 anything.
	for pass := 0; pass < 3 && need > 0; pass++ {
		for i := 0; i < len(sel) && need > 0; {
			j, n := i, 0
			for ; j < len(sel) && s.coreKey[sel[j]] == s.coreKey[sel[i]]; j++ {
				if s.free[sel[j]] >= sb {
					n++
				}
			}
			size := s.coreSize[sel[i]]
			full := n == size
			if (pass == 0 && full && need >= size) || (pass == 1 && !full && n > 0) || pass == 2 {
				for q := i; q < j && need > 0; q++ {
					if s.free[sel[q]] >= sb {
						take(sel[q])
					}
				}
			}
			i = j
		}
	}
	for _, p := range picked { // undo the marks; placeSet charges the pieces
		s.free[p] += sb
	}
	return picked
}

// pickWholeOversold is step 2 on hosts with oversold CPUs: the x
// candidates with the most free pieces (or, draining, the fewest that still
// hold a whole CPU, when the cross-node phase gains from it), ties by CPU ID.
func (s *hostState) pickWholeOversold(pool []int32, x int, picked []int32, drain bool) []int32 {
	cand := make([]int32, 0, len(pool))
	for _, p := range pool {
		if s.free[p] >= s.p.ShareBase {
			cand = append(cand, p)
		}
	}
	slices.SortFunc(cand, func(a, b int32) int {
		byFree := cmp.Compare(s.free[b], s.free[a])
		if drain {
			byFree = -byFree
		}
		return cmp.Or(byFree, cmp.Compare(s.ids[a], s.ids[b]))
	})
	return append(picked, cand[:min(x, len(cand))]...)
}

// localFragment is a whole free CPU of L3 group l3 that may become the
// instance's fragment CPU while pool keeps need whole CPUs for the rest of
// the request: the one of the most broken core (its sibling already
// taken), then the highest ID, so whole cores stay whole.
func (s *hostState) localFragment(pool []int32, l3 cpuset.CPUID, sh shape, need int) (int32, bool) {
	// A core is broken when fewer of its CPUs are wholly free than it has.
	wholeFree := map[cpuset.CPUID]int{}
	for q := range s.ids {
		if s.free[q] >= sh.sb {
			wholeFree[s.coreKey[q]]++
		}
	}
	broken := func(p int32) bool { return wholeFree[s.coreKey[p]] < s.coreSize[p] }
	best, free := int32(-1), 0
	for _, p := range pool {
		if s.free[p] < sh.sb {
			continue
		}
		free++
		if s.l3Key[p] != l3 {
			continue
		}
		if best < 0 || broken(p) && !broken(best) || broken(p) == broken(best) && s.ids[p] > s.ids[best] {
			best = p
		}
	}
	return best, best >= 0 && free-1 >= need
}

// pickFragment is step 3; CPUs in converted (fragmentedFirst) come after
// all the others. With topo, CPUs of the L3 group l3 come first, then those
// of NUMA node index numaK.
func (s *hostState) pickFragment(pool []int32, f int, l3 cpuset.CPUID, numaK int16, converted map[int32]bool, topo bool) (int32, bool) {
	best := int32(-1)
	better := func(a, b int32) bool { // is a better than b?
		if topo {
			if (s.l3Key[a] == l3) != (s.l3Key[b] == l3) {
				return s.l3Key[a] == l3
			}
			if (s.numaKey[a] == numaK) != (s.numaKey[b] == numaK) {
				return s.numaKey[a] == numaK
			}
		}
		if converted[a] != converted[b] {
			return !converted[a]
		}
		if s.free[a] != s.free[b] {
			return s.free[a] < s.free[b]
		}
		if (s.l3Key[a] == l3) != (s.l3Key[b] == l3) {
			return s.l3Key[a] == l3
		}
		return s.ids[a] < s.ids[b]
	}
	for _, p := range pool {
		if s.free[p] >= f && (best < 0 || better(p, best)) {
			best = p
		}
	}
	return best, best >= 0
}
