package service

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestHealthFlagsOversoldCPUs (issue 36 AG1): a host record whose CPUs or
// NUMA nodes offer less than its instances hold, as an old planner, an
// agent's registration before AG1 or a store edited by hand could have
// left it, is a health warning naming the host, the CPU and both piece
// counts; hosts by name, then CPUs and NUMA nodes by ID, the same every
// time. Before the lines are written the store is healthy.
func TestHealthFlagsOversoldCPUs(t *testing.T) {
	f := newHealFixture(t, "h1", "h2")
	// Full hosts: every laptop CPU held whole (16 instances, at most 8 a
	// host), then the Xeon's CPUs on both NUMA nodes (60 of its 80 CPUs,
	// the laptops disabled meanwhile).
	if _, err := f.Deploy(f.ctx, DeployRequest{Service: "web", Count: 16, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib / 2}, Scheduling: model.Scheduling{MaxPerHost: 8}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.RegisterHost(f.ctx, RegisterHostRequest{Name: "x", Topology: topologytest.DualXeonGold6230().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, enabled := range []bool{false, true} {
		for _, h := range []string{"h1", "h2"} {
			if _, err := f.SetEnabled(f.ctx, h, enabled); err != nil {
				t.Fatal(err)
			}
		}
		if !enabled {
			if _, err := f.Deploy(f.ctx, DeployRequest{Service: "db", Count: 60, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := f.Health(time.Now()); len(got) != 0 {
		t.Fatalf("Health before the store is changed = %v, want none", got)
	}
	// The records as written behind the planner's back.
	var c state.Change
	lower := func(name string, change func(*state.Host)) {
		v, ok := f.Host(name)
		if !ok {
			t.Fatalf("host %s is not registered", name)
		}
		h := v.Host
		h.CPUs, h.NUMAMemory = maps.Clone(h.CPUs), maps.Clone(h.NUMAMemory)
		change(&h)
		c.GuardHost(name, v.HostRev)
		c.PutHost(h)
	}
	lower("h2", func(h *state.Host) { h.CPUs[3], h.CPUs[1] = 90, 50 })
	lower("h1", func(h *state.Host) { h.CPUs[5] = 99 })
	v, _ := f.Host("x")
	if len(v.Alloc.NUMAUsed) < 2 {
		t.Fatalf("host x holds memory on NUMA nodes %v, want both", slices.Sorted(maps.Keys(v.Alloc.NUMAUsed)))
	}
	lower("x", func(h *state.Host) {
		for n := range h.NUMAMemory {
			h.NUMAMemory[n] = 1 << 20
		}
	})
	if _, err := f.st.Commit(f.ctx, &c); err != nil {
		t.Fatal(err)
	}
	var want []Warning
	for _, d := range []string{
		"host h1: CPU 5 oversold: 100 of 99 pieces",
		"host h2: CPU 1 oversold: 100 of 50 pieces",
		"host h2: CPU 3 oversold: 100 of 90 pieces",
		numaLine("x", 0, v.Alloc.NUMAUsed[0]),
		numaLine("x", 1, v.Alloc.NUMAUsed[1]),
	} {
		want = append(want, Warning{Kind: placement.RuleCapacity, Subject: "store", Detail: d})
	}
	for i := range 20 { // map order differs between runs; the answer may not
		if diff := cmp.Diff(want, f.Health(time.Now())); diff != "" {
			t.Fatalf("Health (call %d) (-want +got):\n%s", i, diff)
		}
	}
}

func numaLine(host string, n cpuset.NUMANodeID, used int64) string {
	return fmt.Sprintf("host %s: NUMA node %d memory oversold: %d of %d", host, n, used, 1<<20)
}

// TestHealthWarnsOverbookedHosts (issue 38): a heal that found no host
// with nominal room used the overbooking; the host it went to is an
// Overbooked warning naming it and the resource with used/nominal (health
// said nothing), the heal's event says it, and a host within its nominal
// capacity gives none. Past the capacity of a resource the cluster does
// not overbook the audit's oversold line stands alone (not both).
func TestHealthWarnsOverbookedHosts(t *testing.T) {
	f := newHealFixture(t, "h1", "h2", "h3")
	if _, err := f.SetPlacementSettings(f.ctx, placement.Settings{Overbooking: map[string]float64{"memory": 0.2}}); err != nil {
		t.Fatal(err)
	}
	nine := model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Memory: 9 * gib}}
	f.deployOn("h1", []string{"h1", "h2", "h3"}, DeployRequest{Service: "a", Count: 1, Deploy: nine})
	f.deployOn("h2", []string{"h1", "h2", "h3"}, DeployRequest{Service: "b", Count: 1, Deploy: nine})
	f.set("h3", false)
	if got := f.Health(time.Now()); len(got) != 0 {
		t.Fatalf("Health before the heal = %v, want none", got)
	}
	moved, err := f.Heal(f.ctx, "h1", true)
	if err != nil || len(moved) != 1 || moved[0].To.Host != "h2" {
		t.Fatalf("Heal(h1) = %+v, %v; want a's instance on h2", moved, err)
	}
	v, _ := f.Host("h2")
	mark := fmt.Sprintf("memory 18 GiB/%s", alloc.FormatBytes(v.Host.MemoryBytes))
	if note := moved[0].OverbookedNote(); note != "; placed on h2 using overbooking: "+mark {
		t.Errorf("the heal's note = %q, want it to name h2 and %s", note, mark)
	}
	want := []Warning{{Kind: KindOverbooked, Subject: "h2", Detail: "above its nominal capacity, using the overbooking (headroom for emergencies): " + mark}}
	if diff := cmp.Diff(want, f.Health(time.Now())); diff != "" {
		t.Errorf("Health after the heal (-want +got):\n%s", diff)
	}
	// Without the memory overbooking the audit reports h2 oversold; no
	// Overbooked warning repeats it.
	if _, err := f.SetPlacementSettings(f.ctx, placement.Settings{}); err != nil {
		t.Fatal(err)
	}
	got := f.Health(time.Now())
	if len(got) != 1 || got[0].Kind != placement.RuleCapacity || !strings.Contains(got[0].Detail, "host h2: memory oversold") {
		t.Errorf("Health without overbooking = %+v; want the audit's line that h2's memory is oversold, alone", got)
	}
}

// TestRoomKeySharesOnlyEqualAnswers: Health asks Capacity once per key,
// so two records share a key only where Capacity answers them alike: the
// same size and hard rules, and, under a max per host, the same service
// (its own instances cap a host's room). Control: with the name left out
// of a capped record's key, or the constraint left out, the cases that
// must differ share one.
func TestRoomKeySharesOnlyEqualAnswers(t *testing.T) {
	rec := func(name string, change func(*state.Service)) state.Service {
		d := state.Service{Name: name, Deploy: model.Deploy{Size: model.Size{Pieces: 10, Memory: 64 << 20}}}
		if change != nil {
			change(&d)
		}
		return d
	}
	capped := func(d *state.Service) { d.MaxPerHost = 2 }
	for _, tc := range []struct {
		name string
		a, b state.Service
		same bool
	}{
		{"two services of one shape", rec("web", nil), rec("api", nil), true},
		{"a soft rule does not count", rec("web", nil), rec("api", func(d *state.Service) { d.Rules.Policy = "spread" }), true},
		{"another size", rec("web", nil), rec("api", func(d *state.Service) { d.Memory = 128 << 20 }), false},
		{"another constraint", rec("web", nil), rec("api", func(d *state.Service) { d.Rules.Constraint = `HostType == "big"` }), false},
		{"another hard anti-affinity", rec("web", nil), rec("api", func(d *state.Service) { d.Rules.AntiAffinity.Hard = []string{"db"} }), false},
		{"capped: two services", rec("web", capped), rec("api", capped), false},
		{"capped: one service", rec("web", capped), rec("web", capped), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if same := roomKey(tc.a) == roomKey(tc.b); same != tc.same {
				t.Errorf("one key: %v, want %v (%s, %s)", same, tc.same, roomKey(tc.a), roomKey(tc.b))
			}
		})
	}
}
