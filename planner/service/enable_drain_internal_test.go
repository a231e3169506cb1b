package service

import (
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
)

// TestEnableEndsADrain: a drain that cannot finish (its instance fits
// nowhere else) leaves the host disabled and draining; enabling it lets it
// take work again, so the drain ends (as drain --cancel) with its stuck
// reason. Before, the host was up and still draining: every instance placed
// on it was moved off again at the next tick.
func TestEnableEndsADrain(t *testing.T) {
	hosts := []string{"a", "b"}
	f := newHealFixture(t, hosts...)
	// 6 CPUs on a: nothing else has room once b holds 6 of its 8.
	f.deployOn("a", hosts, DeployRequest{Service: "big", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 600, Bind: true, Memory: gib}}})
	f.deployOn("b", hosts, DeployRequest{Service: "fill", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 600, Bind: true, Memory: gib}}})
	if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	tr, now := newTracker(), time.Now()
	f.tick(f.ctx, tr, now)
	if v, _ := f.Host("a"); !v.Host.Draining || !strings.HasPrefix(v.Host.Stuck, "drain") {
		t.Fatalf("a drain with nowhere to go: %+v, want draining and stuck", v.Host)
	}
	f.set("a", true)
	if v, _ := f.Host("a"); v.Host.Disabled || v.Host.Draining || v.Host.Stuck != "" || v.State() != "up" {
		t.Errorf("after enable: disabled %t, draining %t, stuck %q, state %s; want an up host that is not draining",
			v.Host.Disabled, v.Host.Draining, v.Host.Stuck, v.State())
	}
	// It takes work, and keeps it (b has room for it).
	small := f.deployOn("a", hosts, DeployRequest{Service: "small", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.tick(f.ctx, tr, now.Add(time.Minute))
	if v, ok := f.st.Instance(small[0].ID); !ok || v.Instance.Host != "a" || len(f.st.ServiceInstances("small")) != 1 {
		t.Errorf("an instance placed on the enabled host was moved: %+v", f.st.ServiceInstances("small"))
	}
	f.verify()
}
