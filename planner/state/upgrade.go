package state

import (
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// Usage documents written before whole-cores marks were kept (Alloc's
// WholeCores) lack them: without the marks the engine would offer the
// pieces of those instances' cores to others, and the audit would find the
// usage unlike the sum of its instances. On every load the marks of a
// usage document that has none are derived from its host's whole-cores
// instances (the caller holds mu); the next write of the document stores
// them.
func (s *Store) deriveWholeCores() {
	for _, host := range slices.Sorted(maps.Keys(s.allocs)) {
		d := s.allocs[host]
		if d.Value.WholeCores != nil {
			continue
		}
		var marks map[cpuset.CPUID]int
		for _, in := range s.instances[host] {
			if !in.Value.WholeCores {
				continue
			}
			if marks == nil {
				marks = map[cpuset.CPUID]int{}
			}
			for id := range in.Value.CPUs {
				marks[id]++
			}
		}
		if marks != nil {
			d.Value = d.Value.Clone()
			d.Value.WholeCores = marks
			s.allocs[host] = d
			s.dropResources(host)
		}
	}
}
