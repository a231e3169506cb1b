package service

import (
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestScalePerHost: a service of strategy each or fill is scaled per
// host, as it was deployed. A scale down removes each host's excess with
// no placement, also when the rules take no host now; a scale up tops
// every host up, all or nothing (a refusal changes nothing), then removes
// any excess.
func TestScalePerHost(t *testing.T) {
	for _, st := range []alloc.Strategy{alloc.Each, alloc.Fill} {
		t.Run(string(st), func(t *testing.T) {
			f := newHealFixture(t, "a", "b")
			deploy := DeployRequest{Service: "ag", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
				Size: model.Size{Pieces: 10, Memory: 64 << 20}, Scheduling: model.Scheduling{Strategy: string(st)}}}
			if _, err := f.DeployWithRules(f.ctx, deploy); err != nil {
				t.Fatal(err)
			}
			perHost := func() map[string]int {
				return map[string]int{"a": len(f.on("a")), "b": len(f.on("b")), "c": len(f.on("c"))}
			}
			if res, err := f.Scale(f.ctx, "ag", 1); err != nil || res.Count != 2 || len(res.Removed) != 2 {
				t.Fatalf("scale ag 1 = %+v, %v; want 2 removed, 2 left", res, err)
			}
			if got := perHost(); got["a"] != 1 || got["b"] != 1 {
				t.Fatalf("after scale ag 1: %v, want one per host", got)
			}
			// A third host: scale 2 tops a, b and c up to 2.
			if _, err := f.RegisterHost(f.ctx, RegisterHostRequest{Name: "c", Topology: topologytest.Laptop().Topology(),
				Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
				t.Fatal(err)
			}
			if res, err := f.Scale(f.ctx, "ag", 2); err != nil || res.Count != 6 || len(res.Added) != 4 {
				t.Fatalf("scale ag 2 = %+v, %v; want 4 added, 6 in all", res, err)
			}
			// 500 per host (32 GiB) fits nowhere: refused, nothing changes.
			rev := f.st.Rev()
			if _, err := f.Scale(f.ctx, "ag", 500); CodeOf(err) != Exhausted || f.st.Rev() != rev {
				t.Fatalf("scale ag 500 = %v (store changed: %t), want Exhausted and nothing changed", err, f.st.Rev() != rev)
			}
			// Every host disabled: no placement may take one, and a scale
			// down still removes.
			for _, h := range []string{"a", "b", "c"} {
				f.set(h, false)
			}
			if res, err := f.Scale(f.ctx, "ag", 1); err != nil || res.Count != 3 {
				t.Fatalf("scale ag 1 with no host allowed = %+v, %v; want each host's excess removed, 3 left", res, err)
			}
			if got := perHost(); got["a"] != 1 || got["b"] != 1 || got["c"] != 1 {
				t.Errorf("after scale ag 1: %v, want one per host", got)
			}
		})
	}
}

// TestPerHostSaysWhatItDidNot (a new user's trial and the attack review
// of issue 38): a service placed per host names the hosts its rules allow
// that had no room for one more (they run none: the deploy said "placed 1
// instance on 1 host" and nothing of b); a scale past the service's max
// per host says it was capped; and count × hosts is bounded per call, as
// a deploy's count is (scale --count 2000 on 3 hosts added 6,000).
func TestPerHostSaysWhatItDidNot(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	v, _ := f.Host("b")
	full := DeployRequest{Service: "full", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
		Size: model.Size{Pieces: 10, Memory: v.Host.MemoryBytes}, Rules: model.Rules{Constraint: "HostName == b"}}}
	if _, err := f.DeployWithRules(f.ctx, full); err != nil {
		t.Fatal(err)
	}
	ag := DeployRequest{Service: "ag", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
		Size: model.Size{Pieces: 10, Memory: 64 << 20}, Scheduling: model.Scheduling{Strategy: string(alloc.Each), MaxPerHost: 3}}}
	res, err := f.DeployWithRules(f.ctx, ag)
	if err != nil || len(res.Instances) != 1 || len(res.NoRoom) != 1 || res.NoRoom[0] != "b" {
		t.Fatalf("deploy each = %+v, %v; want 1 instance and no room on b", res, err)
	}
	// A scale tops every host up, all or nothing: b, a candidate without
	// room, refuses it by name.
	if sc, err := f.Scale(f.ctx, "ag", 2); CodeOf(err) != Exhausted || !strings.Contains(err.Error(), "b takes 0") {
		t.Fatalf("scale ag 2 = %+v, %v; want refused naming b", sc, err)
	}
	f.set("b", false)
	sc, err := f.Scale(f.ctx, "ag", 2)
	if err != nil || sc.Count != 2 || len(sc.NoRoom) != 0 || sc.CappedPerHost != 0 {
		t.Fatalf("scale ag 2 with b disabled = %+v, %v; want 2 on a, no cap", sc, err)
	}
	if sc, err = f.Scale(f.ctx, "ag", 5); err != nil || sc.Count != 3 || sc.CappedPerHost != 3 {
		t.Fatalf("scale ag 5 with max per host 3 = %+v, %v; want 3 on a, capped at 3", sc, err)
	}
	// count × hosts: 30,000 per host on 2 hosts is 60,000 in one call.
	f.set("b", true)
	rev := f.st.Rev()
	huge := ag
	huge.Service, huge.MaxPerHost, huge.Count = "huge", 0, 30_000
	if _, err := f.DeployWithRules(f.ctx, huge); CodeOf(err) != Invalid || f.st.Rev() != rev {
		t.Fatalf("deploy each 30,000 per host on 2 hosts = %v, want Invalid and nothing changed", err)
	}
	f.set("b", false) // one schedulable host: 30,000 is within the bound
	if _, err := f.Scale(f.ctx, "ag", 30_000); CodeOf(err) == Invalid {
		t.Fatalf("scale ag 30,000 on 1 schedulable host = %v, want not refused as invalid", err)
	}
}
