package service

import (
	"testing"

	"github.com/pinfold/pinfold/planner/model"
)

// TestPreemptionSearchIsBounded: the one-host plans a preemption search
// makes are bounded per request (maxPreemptFits): past it the deploy is
// refused as not fitting and nothing is stopped; within it (the control,
// the same deploy) it preempts.
func TestPreemptionSearchIsBounded(t *testing.T) {
	f := newHealFixture(t, "h1")
	batch := DeployRequest{Service: "b", Count: 8, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
		Size: model.Size{Pieces: 100, Bind: true, Memory: 256 << 20}, Scheduling: model.Scheduling{Priority: model.PriorityBatch}}}
	if _, err := f.DeployWithRules(f.ctx, batch); err != nil {
		t.Fatal(err)
	}
	web := DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
		Size: model.Size{Pieces: 200, Bind: true, Memory: 256 << 20}}}
	saved := maxPreemptFits
	t.Cleanup(func() { maxPreemptFits = saved })
	maxPreemptFits = 2
	rev := f.st.Rev()
	if res, err := f.DeployWithRules(f.ctx, web); CodeOf(err) != Exhausted || f.st.Rev() != rev {
		t.Fatalf("deploy past the search bound = %+v, %v (store changed: %t); want refused, nothing changed", res, err, f.st.Rev() != rev)
	}
	maxPreemptFits = saved
	if res, err := f.DeployWithRules(f.ctx, web); err != nil || len(res.Preempted) != 2 {
		t.Fatalf("deploy within the bound = %+v, %v; want 2 batch instances preempted", res, err)
	}
}
