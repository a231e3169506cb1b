package alloc

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// Readmit checks that an allocation planned before can be given back on
// host h exactly as it was: a resize the host refused rolls back to the
// instance's previous allocation, which must still fit what changed since.
// h's usage must not include a. Each CPU of a bound allocation must have
// its pieces free and be held by no whole-cores instance (a whole-cores
// allocation's CPUs must be wholly free); host and NUMA node memory must
// fit; and the shared pool left must hold the largest memory-first quota,
// a's own included (the pool's floor, which a bound plan keeps). A misfit
// is an *Error with CodeResizeNoFit naming the first check that fails.
func Readmit(p Params, h *Host, a model.Allocation) error {
	if err := p.Validate(); err != nil {
		return err
	}
	noFit := func(why string, args ...any) error {
		return &Error{Code: CodeResizeNoFit, Hosts: []string{h.Name},
			Message: fmt.Sprintf("the allocation does not fit host %s again: %s", h.Name, fmt.Sprintf(why, args...))}
	}
	after := *h
	after.Memo = nil // the copy is changed
	after.CPUs = slices.Clone(h.CPUs)
	if a.Bind {
		for _, id := range slices.Sorted(maps.Keys(a.CPUs)) {
			v := a.CPUs[id]
			i, ok := slices.BinarySearchFunc(after.CPUs, id, func(c CPU, id cpuset.CPUID) int { return cmp.Compare(c.ID, id) })
			if !ok {
				return noFit("CPU %d is not one of its CPUs", id)
			}
			c := &after.CPUs[i]
			switch {
			case c.WholeCores:
				return noFit("CPU %d is held by a whole-cores instance", id)
			case a.WholeCores && c.Used > 0:
				return noFit("CPU %d of its whole cores holds %d pieces of other instances", id, c.Used)
			case c.Used+v > c.Capacity:
				return noFit("CPU %d has %d of its %d pieces free, %d needed", id, max(c.Capacity-c.Used, 0), c.Capacity, v)
			}
			c.Used += v
		}
	} else {
		after.MemoryFirst = maps.Clone(h.MemoryFirst)
		if after.MemoryFirst == nil {
			after.MemoryFirst = map[int]int{}
		}
		after.MemoryFirst[a.CPUQuota]++
	}
	if free := h.MemoryBytes - h.MemoryUsed; a.Memory > free {
		return noFit("memory: %s free, %s needed", FormatBytes(max(free, 0)), FormatBytes(a.Memory))
	}
	if a.NUMANode >= 0 {
		i, ok := slices.BinarySearchFunc(h.NUMANodes, a.NUMANode, func(n NUMANode, id cpuset.NUMANodeID) int { return cmp.Compare(n.ID, id) })
		if !ok {
			return noFit("it has no NUMA node %d", a.NUMANode)
		}
		if n := h.NUMANodes[i]; a.Memory > n.MemoryBytes-n.MemoryUsed {
			return noFit("NUMA node %d memory: %s free, %s needed", a.NUMANode, FormatBytes(max(n.MemoryBytes-n.MemoryUsed, 0)), FormatBytes(a.Memory))
		}
	}
	if floor, pool := after.PoolFloor(), after.SharedPool(); floor > pool.Len()*p.ShareBase {
		return noFit("the shared pool would be %d CPUs (%q), below a memory-first quota of %s CPUs", pool.Len(), pool.String(), FormatPieces(floor, p.ShareBase))
	}
	return nil
}
