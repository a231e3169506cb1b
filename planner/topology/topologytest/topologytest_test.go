package topologytest_test

import (
	"testing"

	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestMachines builds every shape (Topology panics on an inconsistent one) and
// checks the counts a data sheet gives.
func TestMachines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		shape                 topologytest.Shape
		cpus, cores, l3, numa int
	}{
		{topologytest.Laptop(), 8, 4, 1, 1},
		{topologytest.DualXeonGold6230(), 80, 40, 2, 2},
		{topologytest.DualXeonSNC2(), 128, 64, 2, 4},
		{topologytest.EPYC7402(), 96, 48, 16, 2},
		{topologytest.SMTOffSparse(), 8, 8, 1, 1},
		{topologytest.MemoryOnlyDiscontig(), 32, 16, 2, 3},
		{topologytest.FlatVM(), 4, 4, 1, 1},
		{topologytest.BenchHost(), 128, 64, 2, 2},
	}
	for _, tt := range tests {
		top := tt.shape.Topology()
		if len(top.CPUs) != tt.cpus || len(top.Cores()) != tt.cores || len(top.L3Groups()) != tt.l3 || len(top.NUMANodes) != tt.numa {
			t.Errorf("%s: cpus=%d cores=%d l3=%d numa=%d, want %d %d %d %d", tt.shape.Name,
				len(top.CPUs), len(top.Cores()), len(top.L3Groups()), len(top.NUMANodes), tt.cpus, tt.cores, tt.l3, tt.numa)
		}
	}
}
