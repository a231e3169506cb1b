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

// TestServiceDocumentKeepsItsKeys: a service record written before its
// body became model.Deploy (the keys of c14b09e's state.Service, rules as
// a nested object, none when no rule is set) reads back to the same
// values and writes back the same document, so records in etcd survive
// the change both ways.
func TestServiceDocumentKeepsItsKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc string }{
		{"with rules", `{"name":"web","image":"nginx:1.27","command":["nginx","-g","daemon off;"],"env":["A=1"],"network":"host",` +
			`"volumes":["/srv:/srv:ro"],"read_only":true,"cpu_pieces":150,"bind":true,"whole_cores":true,"memory_bytes":536870912,` +
			`"memory_soft_bytes":268435456,"strategy":"each","max_per_host":2,"rules":{"constraint":"HostType == \"big\"",` +
			`"affinity":{"hard":["db"],"soft":null},"anti_affinity":{"hard":null,"soft":["web2"]},"placement_policy":"nodes_order",` +
			`"hosts_order":["h1","h2"],"domain_spread":"off"}}`},
		{"no rules", `{"name":"w","image":"i","cpu_pieces":0,"bind":false,"memory_bytes":6291456,"memory_soft_bytes":0,"strategy":"auto","max_per_host":0}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s state.Service
			if err := json.Unmarshal([]byte(tc.doc), &s); err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var before, after map[string]any
			_ = json.Unmarshal([]byte(tc.doc), &before)
			_ = json.Unmarshal(b, &after)
			bb, _ := json.Marshal(before) // sorted keys: the documents compare as values
			ab, _ := json.Marshal(after)
			if string(bb) != string(ab) {
				t.Errorf("the record changed through model.Deploy:\n before %s\n after  %s", bb, ab)
			}
		})
	}
	// Guard: the rules were read (a Service without them would pass the
	// round trip above only if the keys vanished both ways).
	var s state.Service
	_ = json.Unmarshal([]byte(`{"name":"x","rules":{"constraint":"a == \"b\"","hosts_order":["h1"]}}`), &s)
	if s.Rules.Constraint != `a == "b"` || len(s.Rules.HostsOrder) != 1 || s.Deploy.Rules.IsZero() {
		t.Errorf("rules not read into model.Deploy: %+v", s.Rules)
	}
}
