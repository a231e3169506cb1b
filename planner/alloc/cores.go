package alloc

import (
	"cmp"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// This file plans whole-cores requests (Request.WholeCores, kubelet's
// full-pcpus-only): an instance gets X whole CPUs as whole physical cores,
// so no SMT sibling of its CPUs runs another instance. A core qualifies
// when all its siblings are the host's CPUs (none reserved for the system)
// and each is wholly free and not oversold. An instance's cores are all of
// one size T (threads per core) with T dividing X; sizes are tried largest
// first. Capacity and placement run the same function, so they agree:
// each NUMA node in ascending ID order takes what its cores and memory
// allow, then the cores the NUMA nodes left are pooled for cross-node
// instances. Within a phase an instance's cores come from the L3 group
// with the fewest qualifying cores that still holds them (best fit), ties
// by the lowest core ID.

// freeCore is one qualifying core: its positions, in CPU ID order.
type freeCore struct {
	l3, key cpuset.CPUID
	cpus    []int32
}

// freeCores returns the qualifying cores of set by size, each list in
// (L3 group, core) order.
func (s *hostState) freeCores(set []int32) map[int][]freeCore {
	byKey := map[cpuset.CPUID]*freeCore{}
	var keys []cpuset.CPUID
	bad := map[cpuset.CPUID]bool{}
	for _, p := range set {
		k := s.coreKey[p]
		c := s.h.CPUs[p]
		if c.Used != 0 || c.Capacity != s.p.ShareBase || s.free[p] != s.p.ShareBase { // free below: kept for the shared pool
			bad[k] = true
		}
		fc, ok := byKey[k]
		if !ok {
			fc = &freeCore{l3: s.l3Key[p], key: k}
			byKey[k] = fc
			keys = append(keys, k)
		}
		fc.cpus = append(fc.cpus, p)
	}
	out := map[int][]freeCore{}
	for _, k := range keys {
		fc := byKey[k]
		if bad[k] || len(fc.cpus) != s.threadsOf(fc.cpus[0]) {
			continue
		}
		out[len(fc.cpus)] = append(out[len(fc.cpus)], *fc)
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b freeCore) int { return cmp.Or(cmp.Compare(a.l3, b.l3), cmp.Compare(a.key, b.key)) })
	}
	return out
}

// threadsOf is how many CPUs the core of position p has in the topology
// (1 without one).
func (s *hostState) threadsOf(p int32) int {
	if s.h.Topology == nil {
		return 1
	}
	c, ok := s.h.Topology.CPU(s.ids[p])
	if !ok {
		return 1
	}
	return max(c.Siblings.Len(), 1)
}

// coreSizeNotDividing is the smallest core size (threads per core) of the
// host when none of its core sizes divides x, so that no whole-cores
// instance of x CPUs can ever be made there; 0 when one does.
func (s *hostState) coreSizeNotDividing(x int) int {
	smallest := 0
	for _, p := range s.all {
		t := s.threadsOf(p)
		if x%t == 0 {
			return 0
		}
		if smallest == 0 || t < smallest {
			smallest = t
		}
	}
	return smallest
}

// sizesFor are the core sizes an instance of x CPUs can be made of, largest first.
func sizesFor(cores map[int][]freeCore, x int) []int {
	var out []int
	for t := range cores {
		if x%t == 0 {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b int) int { return cmp.Compare(b, a) })
	return out
}

// coresFit is how many instances of x CPUs cores give.
func coresFit(cores map[int][]freeCore, x int) int {
	n := 0
	for _, t := range sizesFor(cores, x) {
		n += len(cores[t]) / (x / t)
	}
	return n
}

// runCores counts (place false) or places (place true) up to k whole-cores
// instances of sh; mem 0 ignores memory. Placing charges the host state.
func (s *hostState) runCores(sh shape, k int, mem int64, place bool) (int, []Placement) {
	memN := func(free int64) int {
		if mem == 0 {
			return unlimited
		}
		return int(min(free/mem, unlimited))
	}
	var out []Placement
	total := 0
	take := func(cores map[int][]freeCore, n int, numa cpuset.NUMANodeID) {
		for _, t := range sizesFor(cores, sh.x) {
			per := sh.x / t
			for n > 0 && len(cores[t]) >= per {
				got := pickCores(cores[t], per)
				if place {
					pl := Placement{Host: s.h.Name, Allocation: model.Allocation{Bind: true, WholeCores: true,
						CPUs: make(map[cpuset.CPUID]int, sh.x), NUMANode: numa, Memory: sh.mem}}
					for _, i := range got {
						for _, p := range cores[t][i].cpus {
							s.free[p] -= sh.sb
							pl.CPUs[s.ids[p]] = sh.sb
						}
					}
					s.memFree -= sh.mem
					out = append(out, pl)
				}
				cores[t] = remove(cores[t], got)
				n--
			}
		}
	}
	memLeft := s.memFree
	left := map[int][]freeCore{}
	if len(s.sets) == 0 {
		cores := s.freeCores(s.all)
		n := min(coresFit(cores, sh.x), memN(memLeft), k)
		take(cores, n, -1)
		return n, out
	}
	for i, set := range s.sets {
		cores := s.freeCores(set)
		n := min(coresFit(cores, sh.x), memN(min(s.numaFree[i], memLeft)), k-total)
		take(cores, n, s.h.NUMANodes[i].ID)
		if place {
			s.numaFree[i] -= int64(n) * sh.mem
		}
		memLeft -= int64(n) * mem
		total += n
		for t, l := range cores {
			left[t] = append(left[t], l...)
		}
	}
	for _, l := range left {
		slices.SortFunc(l, func(a, b freeCore) int { return cmp.Or(cmp.Compare(a.l3, b.l3), cmp.Compare(a.key, b.key)) })
	}
	n := min(coresFit(left, sh.x), memN(memLeft), k-total)
	take(left, n, -1)
	return total + n, out
}

// pickCores chooses per cores of l (in L3 group order): the L3 group with
// the fewest cores that still holds per, else the first per in order. It
// returns their indices, ascending.
func pickCores(l []freeCore, per int) []int {
	lo, hi, best := 0, per, -1
	for i := 0; i < len(l); {
		j := i
		for j < len(l) && l[j].l3 == l[i].l3 {
			j++
		}
		if n := j - i; n >= per && (best < 0 || n < best) {
			lo, hi, best = i, i+per, n
		}
		i = j
	}
	out := make([]int, 0, per)
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// remove returns l without the cores at the (ascending) indices idx.
func remove(l []freeCore, idx []int) []freeCore {
	out := l[:0:0]
	k := 0
	for i, c := range l {
		if k < len(idx) && idx[k] == i {
			k++
			continue
		}
		out = append(out, c)
	}
	return out
}
