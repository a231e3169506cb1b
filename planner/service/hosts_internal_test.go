package service

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestSetHostApply: SetHost's decision, without etcd: what changes, and
// what is refused with which code, naming the field and value.
func TestSetHostApply(t *testing.T) {
	t.Parallel()
	h, err := state.NewHost("h1", topologytest.Laptop().Topology(), state.Config{ShareBase: 100, MaxFragmentCores: -1}, state.CapacitySettings{MemoryShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	web := model.Instance{ID: "web-1", Service: "web", Host: "h1",
		Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{2: 100, 3: 50}, NUMANode: 0, Memory: 1 << 30}}
	used := state.NewAlloc()
	used.Add(web, +1)
	v := state.HostView{Host: h, Alloc: used}
	ins := []state.InstanceView{{Instance: web}}
	fd, ud, badUD := "fd:/dc1/r2", "UD1", "u d"
	for _, tc := range []struct {
		name string
		r    SetHostRequest
		code Code
		want string // a part of the error, or of the changed host's %+v
	}{
		{"re-price a CPU", SetHostRequest{AddCPUs: map[cpuset.CPUID]int{5: 300}}, "", "5:300"},
		{"remove a free CPU", SetHostRequest{RemoveCPUs: cpuset.MustParseCPUs("7")}, "", "6:100]"},
		{"remove a held CPU", SetHostRequest{RemoveCPUs: cpuset.MustParseCPUs("3")}, Precond, "cannot remove CPUs 3: in use by instances [web-1]"},
		{"price below use", SetHostRequest{AddCPUs: map[cpuset.CPUID]int{3: 40}}, Precond, "CPU 3 pieces = 40: below the 50 in use"},
		{"offline CPU", SetHostRequest{AddCPUs: map[cpuset.CPUID]int{64: 100}}, Invalid, "add CPU 64: not an online CPU"},
		{"too many pieces", SetHostRequest{AddCPUs: map[cpuset.CPUID]int{1: 10001}}, Invalid, "CPU 1: pieces per CPU = 10001: want 1..10000"},
		{"pieces not a multiple of the share base", SetHostRequest{AddCPUs: map[cpuset.CPUID]int{1: 150}}, Invalid, "CPU 1: pieces per CPU = 150: above the share base (100) it must be a multiple of it (100 or 200)"},
		{"memory below use", SetHostRequest{MemoryBytes: new(int64(1 << 29))}, Precond, "memory 512 MiB is below the 1 GiB in use"},
		{"NUMA node that is not there", SetHostRequest{NUMAMemory: map[cpuset.NUMANodeID]int64{3: 1}}, Invalid, "NUMA node 3: no such NUMA node"},
		{"domains and a property", SetHostRequest{FaultDomain: &fd, UpgradeDomain: &ud, SetProperties: map[string]placement.Value{"ssd": placement.BoolVal(true)}}, "", "fd:/dc1/r2"},
		{"bad upgrade domain", SetHostRequest{UpgradeDomain: &badUD}, Invalid, `upgrade domain "u d"`},
		{"remove a property it lacks", SetHostRequest{RemoveProperties: []string{"gpu"}}, Invalid, `remove property "gpu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Name = "h1"
			got, err := tc.r.apply(v, ins, 100)
			if tc.code != "" {
				if CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("err = %v, want %s containing %q", err, tc.code, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(fmtHost(got), tc.want) {
				t.Errorf("host = %s, want it to contain %q", fmtHost(got), tc.want)
			}
			if len(v.Host.CPUs) != 8 || v.Host.Properties != nil {
				t.Errorf("apply changed its input: %+v", v.Host)
			}
		})
	}
}

func fmtHost(h state.Host) string {
	return fmt.Sprintf("%v %s %s %v", h.CPUs, h.FaultDomain, h.UpgradeDomain, h.Properties)
}

// TestHostInputParity: what the API accepts is what the CLI would: host
// names, fault domains and memory arithmetic are checked on the way in.
func TestHostInputParity(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a..b", ".a", "a.", "a b", strings.Repeat("x", 254)} {
		if err := state.ValidateHostName(name); err == nil {
			t.Errorf("host name %q accepted", name)
		}
	}
	for _, fd := range []string{"fd:/../../x", "fd:/dc1/./r", "fd:/dc1//r", "rack1"} {
		if err := placement.ValidateFaultDomain(fd); err == nil {
			t.Errorf("fault domain %q accepted", fd)
		}
	}
	h, err := state.NewHost("h1", topologytest.Laptop().Topology(), state.Config{ShareBase: 100, MaxFragmentCores: -1}, state.CapacitySettings{MemoryShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = SetHostRequest{Name: "h1", MemoryDelta: math.MaxInt64}.apply(state.HostView{Host: h, Alloc: state.NewAlloc()}, nil, 100)
	if CodeOf(err) != Invalid || !strings.Contains(err.Error(), "overflows") {
		t.Errorf("memory delta of MaxInt64 = %v, want an overflow refusal", err)
	}
	top := topologytest.Laptop().Topology()
	top.NUMANodes[0].MemoryBytes = 7 << 60
	if err := top.Validate(); err == nil {
		t.Errorf("a NUMA node of 7 EiB validated")
	}
}

// TestSetHostAboveMemory: a host whose instances use more memory than it
// has (a heal placed them with the memory overbooking) still takes a
// property, and a raise of its memory; only a lower memory is refused.
// Before, every SetHost was refused "memory … below the … in use"
// (simulation seeds 4 and 8).
// maxInt64 is an 8 EiB memory.
var maxInt64 int64 = math.MaxInt64

func TestSetHostAboveMemory(t *testing.T) {
	t.Parallel()
	h, err := state.NewHost("h1", topologytest.Laptop().Topology(), state.Config{ShareBase: 100, MaxFragmentCores: -1}, state.CapacitySettings{MemoryShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	big := model.Instance{ID: "big-1", Service: "big", Host: "h1", Allocation: model.Allocation{CPUQuota: 10, NUMANode: -1, Memory: h.MemoryBytes + 1<<30}}
	used := state.NewAlloc()
	used.Add(big, +1)
	v := state.HostView{Host: h, Alloc: used}
	for _, tc := range []struct {
		name string
		r    SetHostRequest
		ok   bool
	}{
		{"a property", SetHostRequest{SetProperties: map[string]placement.Value{"ssd": placement.BoolVal(true)}}, true},
		{"memory raised, still below use", SetHostRequest{MemoryDelta: 1 << 20}, true},
		{"memory lowered", SetHostRequest{MemoryDelta: -(1 << 20)}, false},
		// An attack trial set 8 EiB; health then overflowed scaling it.
		{"memory of 8 EiB", SetHostRequest{MemoryBytes: &maxInt64}, false},
		{"memory over 1 PiB by a delta", SetHostRequest{MemoryDelta: 1 << 50}, false},
		{"a NUMA node of 8 EiB", SetHostRequest{NUMAMemory: map[cpuset.NUMANodeID]int64{0: math.MaxInt64}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Name = "h1"
			_, err := tc.r.apply(v, []state.InstanceView{{Instance: big}}, 100)
			if (err == nil) != tc.ok {
				t.Errorf("apply = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
