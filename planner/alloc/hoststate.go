package alloc

import (
	"cmp"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// hostState is a host's working copy during one planning pass. CPUs are
// addressed by position in the host's CPU list (sorted by ID); a position is
// never confused with a CPU ID.
type hostState struct {
	p    Params
	h    *Host
	ids  []cpuset.CPUID
	free []int
	// coreKey is the lowest sibling ID of the CPU's physical core, l3Key the
	// lowest CPU ID of its L3 group (-1 unknown); coreSize counts the host's
	// CPUs on that core. Without a topology every CPU is its own core.
	coreKey  []cpuset.CPUID
	l3Key    []cpuset.CPUID
	coreSize []int
	// numaKey is the index in sets of the CPU's NUMA node (-1 none).
	numaKey []int16
	// sets are the positions of each NUMA node's CPUs (h.NUMANodes order); all
	// is every position.
	sets [][]int32
	all  []int32
	// memFree and numaFree are never below 0: a host or NUMA node using
	// more memory than it has (lowered under its instances, or a heal that
	// used the overbooking) has none free, as a CPU used past its capacity
	// has no pieces free; a negative value would count as -1 instances and
	// take room away from the other hosts' total.
	memFree  int64
	numaFree []int64
	// convAllowance is how many more CPUs may become fragment CPUs
	// (MaxFragmentCores minus the fragmented CPUs); -1 means no cap.
	convAllowance int
	// how is the consumption capacity chose for shape howFor (when
	// howSet), which placement of that shape follows.
	how    consumption
	howFor shape
	howSet bool
}

func newHostState(p Params, h *Host) *hostState {
	n := len(h.CPUs)
	s := &hostState{p: p, h: h, ids: make([]cpuset.CPUID, n), free: make([]int, n),
		coreKey: make([]cpuset.CPUID, n), l3Key: make([]cpuset.CPUID, n), coreSize: make([]int, n), numaKey: make([]int16, n),
		all: make([]int32, n), memFree: max(h.MemoryBytes-h.MemoryUsed, 0)}
	fragmented := 0
	for i, c := range h.CPUs {
		s.ids[i] = c.ID
		s.free[i] = max(c.Capacity-c.Used, 0)
		if c.WholeCores {
			s.free[i] = 0 // never shared, whatever its capacity
		}
		s.all[i] = int32(i)
		s.coreKey[i], s.l3Key[i], s.coreSize[i], s.numaKey[i] = c.ID, -1, 1, -1
		if v := s.free[i]; v > 0 && v%p.ShareBase != 0 {
			fragmented++
		}
	}
	s.keepPool()
	s.convAllowance = -1
	if p.MaxFragmentCores >= 0 {
		s.convAllowance = max(p.MaxFragmentCores-fragmented, 0)
	}
	if t := h.Topology; t != nil {
		hostCPUs := cpuset.Of(s.ids...)
		for i, id := range s.ids {
			c, ok := t.CPU(id)
			if !ok {
				continue
			}
			sib := c.Siblings.Intersect(hostCPUs)
			if k, ok := sib.Min(); ok {
				s.coreKey[i], s.coreSize[i] = k, sib.Len()
			}
			if k, ok := c.L3.Intersect(hostCPUs).Min(); ok {
				s.l3Key[i] = k
			}
		}
	}
	for _, nn := range h.NUMANodes {
		var set []int32
		for id := range nn.CPUs.All() {
			if i, ok := s.pos(id); ok {
				set = append(set, int32(i))
				s.numaKey[i] = int16(len(s.sets))
			}
		}
		s.sets = append(s.sets, set)
		s.numaFree = append(s.numaFree, max(nn.MemoryBytes-nn.MemoryUsed, 0))
	}
	return s
}

// pos returns the position of CPU id.
func (s *hostState) pos(id cpuset.CPUID) (int, bool) {
	return slices.BinarySearch(s.ids, id)
}

func (s *hostState) values(set []int32) []int {
	out := make([]int, len(set))
	for i, p := range set {
		out[i] = s.free[p]
	}
	return out
}

// poolPieces is the memory-first shared pool (Host.SharedPool), ShareBase
// pieces a CPU (an oversold CPU is still one CPU of time).
func (s *hostState) poolPieces() int {
	return s.h.SharedPool().Len() * s.p.ShareBase
}

// keepPool hides from bound placement the pool CPUs the memory-first
// instances need (Host.KeptPool: the largest quota, rounded up to whole
// CPUs, the highest IDs of the pool).
func (s *hostState) keepPool() {
	if s.h.PoolFloor() == 0 {
		return
	}
	for id := range s.h.KeptPool(s.p.ShareBase).All() {
		if i, ok := s.pos(id); ok {
			s.free[i] = 0
		}
	}
}

// numaIndex returns the position of NUMA node id in h.NUMANodes.
func (s *hostState) numaIndex(id cpuset.NUMANodeID) (int, bool) {
	return slices.BinarySearchFunc(s.h.NUMANodes, id, func(n NUMANode, id cpuset.NUMANodeID) int { return cmp.Compare(n.ID, id) })
}
