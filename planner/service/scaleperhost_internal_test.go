package service

import (
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
