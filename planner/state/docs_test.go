package state_test

import (
	"encoding/json"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
)

// TestAllocWholeCores: the usage document keeps which CPUs whole-cores
// instances hold, through JSON, and the engine's view of the host marks
// them (alloc.CPU.WholeCores: never shared, whatever the overbooking),
// until the instance is released.
func TestAllocWholeCores(t *testing.T) {
	t.Parallel()
	h := state.Host{Name: "h", CPUs: map[cpuset.CPUID]int{0: 100, 1: 100, 2: 100, 3: 100}, MemoryBytes: 1 << 30}
	wc := model.Instance{ID: "wc-1", Service: "wc", Allocation: model.Allocation{Bind: true, WholeCores: true,
		CPUs: map[cpuset.CPUID]int{0: 100, 1: 100}, NUMANode: -1, Memory: 1 << 20}}
	bound := model.Instance{ID: "b-1", Service: "b", Allocation: model.Allocation{Bind: true,
		CPUs: map[cpuset.CPUID]int{2: 100, 3: 50}, NUMANode: -1, Memory: 1 << 20}}
	marked := func(a state.Alloc) map[cpuset.CPUID]bool {
		out := map[cpuset.CPUID]bool{}
		for _, c := range state.AllocHost(h, a).CPUs {
			if c.WholeCores {
				out[c.ID] = true
			}
		}
		return out
	}
	a := state.NewAlloc()
	a.Add(wc, +1)
	a.Add(bound, +1)
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var read state.Alloc
	if err := json.Unmarshal(b, &read); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		a    state.Alloc
		want map[cpuset.CPUID]bool
	}{
		{"both instances", a, map[cpuset.CPUID]bool{0: true, 1: true}},
		{"read back from JSON", read, map[cpuset.CPUID]bool{0: true, 1: true}},
		{"whole-cores instance released", func() state.Alloc { c := a.Clone(); c.Add(wc, -1); return c }(), map[cpuset.CPUID]bool{}},
		{"bound instance released", func() state.Alloc { c := a.Clone(); c.Add(bound, -1); return c }(), map[cpuset.CPUID]bool{0: true, 1: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := marked(tc.a)
			if len(got) != len(tc.want) {
				t.Fatalf("CPUs marked whole cores = %v, want %v", got, tc.want)
			}
			for id := range tc.want {
				if !got[id] {
					t.Fatalf("CPUs marked whole cores = %v, want %v", got, tc.want)
				}
			}
		})
	}
	c := a.Clone()
	c.Add(wc, -1)
	if a.WholeCores[0] != 1 {
		t.Errorf("releasing from a clone changed the original: %v", a.WholeCores)
	}
	empty := a.Clone()
	empty.Add(wc, -1)
	empty.Add(bound, -1)
	if empty.WholeCores != nil {
		t.Errorf("empty usage keeps whole_cores %v, want none (omitted from the document)", empty.WholeCores)
	}
}
