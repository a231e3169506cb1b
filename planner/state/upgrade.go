package state

import (
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// Usage documents written before whole-cores marks were kept (Alloc's
// WholeCores) lack them: without the marks the engine would offer the
// pieces of those instances' cores to others, and the audit would find the
// usage unlike the sum of its instances. On every load the marks of a
// usage document that has none are derived from its host's whole-cores
// instances (cache.deriveWholeCores); the next write of the document
// stores them.

// deriveMarks gives host's usage document in allocs the whole-cores marks
// of its instances when it has none, and reports whether it changed it.
func deriveMarks(allocs map[string]Doc[Alloc], instances map[string]map[string]Doc[model.Instance], host string) bool {
	d := allocs[host]
	if d.Value.WholeCores != nil {
		return false
	}
	var marks map[cpuset.CPUID]int
	for _, in := range instances[host] {
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
	if marks == nil {
		return false
	}
	d.Value = d.Value.Clone()
	d.Value.WholeCores = marks
	allocs[host] = d
	return true
}
