package topology_test

import (
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestValidate breaks a valid 2-socket topology one invariant at a time.
func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		break_    func(*topology.Topology)
		wantField string
	}{
		{"valid", func(*topology.Topology) {}, ""},
		{"no nodes", func(tp *topology.Topology) { tp.NUMANodes = nil }, "numa_nodes"},
		{"no cpus", func(tp *topology.Topology) { tp.CPUs = nil }, "cpus"},
		{"nodes unsorted", func(tp *topology.Topology) { tp.NUMANodes[0], tp.NUMANodes[1] = tp.NUMANodes[1], tp.NUMANodes[0] }, "numa_nodes[1].id"},
		{"cpus unsorted", func(tp *topology.Topology) { tp.CPUs[0], tp.CPUs[1] = tp.CPUs[1], tp.CPUs[0] }, "cpus[1].id"},
		{"negative memory", func(tp *topology.Topology) { tp.NUMANodes[1].MemoryBytes = -1 }, "numa_nodes[1].memory_bytes"},
		{"cpu in two nodes", func(tp *topology.Topology) {
			tp.NUMANodes[1].CPUs = tp.NUMANodes[1].CPUs.Union(cpuset.Of[cpuset.CPUID](0))
		}, "numa_nodes[1].cpus"},
		{"cpu on wrong node", func(tp *topology.Topology) { tp.CPUs[0].NUMANode = 1 }, "cpus[0].numa_node"},
		{"cpu on unknown node", func(tp *topology.Topology) { tp.CPUs[0].NUMANode = 7 }, "cpus[0].numa_node"},
		{"online differs", func(tp *topology.Topology) { tp.Online = cpuset.MustParseCPUs("0-78") }, "online"},
		{"isolated not online", func(tp *topology.Topology) { tp.Isolated = cpuset.MustParseCPUs("200") }, "isolated"},
		{"siblings without self", func(tp *topology.Topology) { tp.CPUs[0].Siblings = cpuset.MustParseCPUs("40") }, "cpus[0].siblings"},
		{"siblings disagree", func(tp *topology.Topology) { tp.CPUs[0].Siblings = cpuset.MustParseCPUs("0,1") }, "cpus[0].siblings"},
		{"sibling on other package", func(tp *topology.Topology) { tp.CPUs[40].PackageID = 1 }, "cpus[0].siblings"},
		{"l3 without self", func(tp *topology.Topology) { tp.CPUs[0].L3 = cpuset.MustParseCPUs("1") }, "cpus[0].l3"},
		{"l3 disagree", func(tp *topology.Topology) { tp.CPUs[0].L3 = cpuset.MustParseCPUs("0-1") }, "cpus[0].l3"},
		// A member whose own group is smaller (it lists only itself)
		// agrees with itself; the group naming it does not.
		{"l3 member alone", func(tp *topology.Topology) { tp.CPUs[1].L3 = cpuset.MustParseCPUs("1") }, "cpus[0].l3"},
		{"sibling alone", func(tp *topology.Topology) { tp.CPUs[40].Siblings = cpuset.MustParseCPUs("40") }, "cpus[0].siblings"},
		{"sibling not online", func(tp *topology.Topology) { tp.CPUs[0].Siblings = cpuset.MustParseCPUs("0,40,200") }, "cpus[0].siblings"},
		{"distance row short", func(tp *topology.Topology) { delete(tp.NUMANodes[0].Distances, 1) }, "numa_nodes[0].distances"},
		{"distance to unknown node", func(tp *topology.Topology) {
			delete(tp.NUMANodes[0].Distances, 1)
			tp.NUMANodes[0].Distances[9] = 21
		}, "numa_nodes[0].distances[9]"},
		{"local distance not 10", func(tp *topology.Topology) { tp.NUMANodes[1].Distances[1] = 12 }, "numa_nodes[1].distances[1]"},
		{"remote distance below 10", func(tp *topology.Topology) { tp.NUMANodes[1].Distances[0] = 5 }, "numa_nodes[1].distances[0]"},
		{"unknown source", func(tp *topology.Topology) { tp.NUMASource = "guess" }, "numa_source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp := topologytest.DualXeonGold6230().Topology()
			tt.break_(tp)
			err := tp.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error on %s", tt.wantField)
			}
			if !strings.HasPrefix(err.Error(), "topology: "+tt.wantField+" = ") {
				t.Errorf("Validate() = %q, want it to name field %s", err, tt.wantField)
			}
		})
	}
}

func TestQueries(t *testing.T) {
	t.Parallel()
	tp := topologytest.DualXeonSNC2().Topology()
	if got := tp.MemoryBytes(); got != 4*64*topologytest.GiB {
		t.Errorf("MemoryBytes = %d", got)
	}
	pk := tp.Packages()
	if len(pk) != 2 || pk[1].CPUs.String() != "32-63,96-127" {
		t.Errorf("Packages = %+v", pk)
	}
	cores := tp.Cores()
	if len(cores) != 64 || cores[1].CPUs.String() != "1,65" || cores[1].ID != 1 {
		t.Errorf("Cores[1] = %+v of %d", cores[1], len(cores))
	}
	if _, ok := tp.CPU(500); ok {
		t.Errorf("CPU(500) found")
	}
	if d, ok := tp.Distance(3, 0); !ok || d != 21 {
		t.Errorf("Distance(3,0) = %d,%v", d, ok)
	}
}

// TestValidateWide: the largest topology (8,192 CPUs sharing one L3)
// validates, and a disagreement in it is found and named.
func TestValidateWide(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		break_    func(*topology.Topology)
		wantField string
	}{
		{"valid", func(*topology.Topology) {}, ""},
		{"last CPU's l3 alone", func(tp *topology.Topology) { tp.CPUs[8191].L3 = cpuset.Of[cpuset.CPUID](8191) }, "cpus[0].l3"},
		{"last CPU's siblings alone", func(tp *topology.Topology) { tp.CPUs[8191].Siblings = cpuset.Of[cpuset.CPUID](8191) }, "cpus[8190].siblings"},
		{"sibling on another die", func(tp *topology.Topology) { tp.CPUs[8191].DieID = 1 }, "cpus[8190].siblings"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp := topologytest.Wide()
			tt.break_(tp)
			err := tp.Validate()
			switch {
			case tt.wantField == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantField != "" && (err == nil || !strings.HasPrefix(err.Error(), "topology: "+tt.wantField+" = ")):
				t.Fatalf("Validate() = %v, want an error on %s", err, tt.wantField)
			}
		})
	}
}

// TestValidateClipsEcho: an error repeats a bounded part of a huge value
// (a 3 MB numa_source came back whole in a 3 MB error, issue 26 N12).
func TestValidateClipsEcho(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 3<<20)
	for _, tt := range []struct {
		name   string
		break_ func(*topology.Topology)
	}{
		{"numa_source", func(tp *topology.Topology) { tp.NUMASource = huge }},
		{"isolated", func(tp *topology.Topology) {
			var odd []cpuset.CPUID
			for id := cpuset.CPUID(1); id <= cpuset.MaxID; id += 2 {
				odd = append(odd, id)
			}
			tp.Isolated = cpuset.Of(odd...)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp := topologytest.DualXeonGold6230().Topology()
			tt.break_(tp)
			err := tp.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), "topology: "+tt.name+" = ") {
				t.Fatalf("Validate() = %.300v, want an error on %s", err, tt.name)
			}
			if n := len(err.Error()); n > 1024 {
				t.Errorf("Validate() error is %d bytes, want at most 1024: %.300s", n, err)
			}
		})
	}
}
