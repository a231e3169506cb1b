package topology_test

import (
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
)

// wide is the largest topology Validate accepts (cpuset.MaxID+1 = 8,192
// CPUs): one NUMA node, two SMT threads a core, and one L3 cache shared by
// every CPU, so that each CPU lists all 8,192 as its L3 group (the shape
// of the registration that took a minute to validate, issue 26 N2).
func wide() *topology.Topology {
	const n = cpuset.MaxID + 1
	all := cpuset.Range[cpuset.CPUID](0, n-1)
	t := &topology.Topology{Online: all, NUMASource: topology.SourceSysfs,
		NUMANodes: []topology.NUMANode{{ID: 0, CPUs: all, MemoryBytes: 1 << 40, Distances: map[cpuset.NUMANodeID]int{0: topology.LocalDistance}}}}
	for id := range cpuset.CPUID(n) {
		core := id &^ 1
		t.CPUs = append(t.CPUs, topology.CPU{ID: id, CoreID: int(core / 2), Siblings: cpuset.Of(core, core+1), L3: all})
	}
	return t
}

// BenchmarkValidate8192 validates the 8,192-CPU topology of wide.
func BenchmarkValidate8192(b *testing.B) {
	t := wide()
	if err := t.Validate(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := t.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
