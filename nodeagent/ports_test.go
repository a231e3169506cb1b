package nodeagent

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/model"
)

// withPorts is memInst holding static port web 8080 (container 80) and
// dynamic port http 20000.
func withPorts(gen int64) model.Instance {
	in := memInst(gen, 128<<20)
	in.Env = []string{"A=1"}
	in.Ports = []model.Port{{Name: "web", Host: 8080, Container: 80}, {Name: "http"}}
	in.HostPorts = []model.Port{{Name: "web", Host: 8080, Container: 80}, {Name: "http", Host: 20000, Container: 20000}}
	return in
}

// TestPortsReachTheContainer: each held port is published and passed to
// the container as PINFOLD_PORT_<NAME>, after the instance's own env.
func TestPortsReachTheContainer(t *testing.T) {
	a, eng, _, _ := newTestAgent(t)
	a.SetDesired([]model.Instance{withPorts(1)})
	settle(t, a)
	s, ok := eng.specs["c1"]
	if !ok {
		t.Fatalf("no container created: %v", eng.specs)
	}
	if want := []string{"A=1", "PINFOLD_PORT_WEB=8080", "PINFOLD_PORT_HTTP=20000"}; !slices.Equal(s.Env, want) {
		t.Errorf("env %q, want %q", s.Env, want)
	}
	if want := []docker.PortMapping{{Host: 8080, Container: 80}, {Host: 20000, Container: 20000}}; !slices.Equal(s.Ports, want) {
		t.Errorf("published %v, want %v", s.Ports, want)
	}
}

// TestReplaceStopFirstWithStaticPort: an instance holding a static port is
// replaced stop-first (a paused container keeps its published port); a
// replacement that fails its check is removed and the old container
// started again.
func TestReplaceStopFirstWithStaticPort(t *testing.T) {
	a, eng, _, pl := newTestAgent(t)
	ctx := context.Background()
	a.SetDesired([]model.Instance{withPorts(1)})
	settle(t, a)
	next := withPorts(2)
	next.Image, next.SpecGeneration = "img:2", 2
	next.Health = &model.HealthCheck{Exec: []string{"false"}, Timeout: "300ms"}
	eng.execCode = 1
	a.SetDesired([]model.Instance{next})
	settle(t, a)
	if !slices.Contains(eng.stops, "c1") {
		t.Errorf("stops %v: the old container was not stopped first", eng.stops)
	}
	cs, _ := eng.List(ctx)
	if len(cs) != 1 || cs[0].ID != "c1" || !cs[0].Running || cs[0].Paused {
		t.Errorf("after a failed replace: %+v, want c1 running again", cs)
	}
	if r := pl.last("db-1"); !strings.Contains(r.Error, "rolled back") {
		t.Errorf("report %+v, want the rollback", r)
	}
	// Without a static port the old container is paused, never stopped.
	eng.stops = nil
	dyn := withPorts(3)
	dyn.Ports, dyn.HostPorts = dyn.Ports[1:], dyn.HostPorts[1:]
	a.SetDesired([]model.Instance{dyn})
	settle(t, a)
	dyn.Image, dyn.Generation, dyn.SpecGeneration = "img:3", 4, 4
	eng.execCode = 0
	a.SetDesired([]model.Instance{dyn})
	settle(t, a)
	if len(eng.stops) != 0 {
		t.Errorf("stops %v with dynamic ports only, want none (pause)", eng.stops)
	}
}

// TestProbeOnNamedPort: a check naming a port goes to its container port.
func TestProbeOnNamedPort(t *testing.T) {
	for _, tc := range []struct {
		h    model.HealthCheck
		want Probe
	}{
		{model.HealthCheck{Port: "web"}, Probe{TCP: 80}},
		{model.HealthCheck{Port: "http", HTTP: "/healthz"}, Probe{HTTP: "20000/healthz"}},
		{model.HealthCheck{Port: "nope"}, Probe{Missing: "nope"}},
		{model.HealthCheck{TCP: 9}, Probe{TCP: 9}},
	} {
		in := withPorts(1)
		in.Health = &tc.h
		if got := probeOf(&in); got == nil || got.TCP != tc.want.TCP || got.HTTP != tc.want.HTTP || got.Missing != tc.want.Missing {
			t.Errorf("probeOf(%+v) = %+v, want %+v", tc.h, got, tc.want)
		}
	}
}
