package service

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// portOf is in's host port named name (0: none).
func portOf(in model.Instance, name string) int {
	p, _ := model.PortOf(in.HostPorts, name)
	return p.Host
}

// TestPortsDeployResizeReplace: a static port lands once per host and a
// third instance asking for it is refused naming the Ports rule; dynamic
// ports are the lowest free on each host and held in its usage; a resize
// keeps the ports, a replace keeps the static one and gives the new
// container dynamic ports of its own.
func TestPortsDeployResizeReplace(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	web := DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Ports: []model.Port{{Name: "http", Host: 8080}, {Name: "admin"}}}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}}
	ins, err := f.Deploy(f.ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	if ins[0].Host == ins[1].Host {
		t.Fatalf("both instances on %s: they would hold port 8080 twice", ins[0].Host)
	}
	for _, in := range ins {
		if portOf(in, "http") != 8080 || portOf(in, "admin") != model.DynamicPortMin {
			t.Errorf("instance %s holds %v, want http 8080 and admin %d", in.ID, in.HostPorts, model.DynamicPortMin)
		}
		if v, _ := f.Host(in.Host); v.Alloc.Ports[8080] != 1 || v.Alloc.Ports[model.DynamicPortMin] != 1 {
			t.Errorf("host %s usage holds ports %v", in.Host, v.Alloc.Ports)
		}
	}
	// A third instance asking for 8080 is refused by the Ports rule.
	api := DeployRequest{Service: "api", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Ports: []model.Port{{Name: "http", Host: 8080}}}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}}
	_, err = f.Deploy(f.ctx, api)
	var se *Error
	if CodeOf(err) != Exhausted || !strings.Contains(err.Error(), "no host has port 8080 free") || !errors.As(err, &se) ||
		!slices.ContainsFunc(se.Eliminations, func(e placement.Elimination) bool { return e.Rule == placement.RulePorts && len(e.Hosts) == 2 }) {
		t.Fatalf("a third instance on 8080 = %v, want refused by the Ports rule over both hosts", err)
	}
	if !strings.Contains(err.Error(), "Ports                2 eliminated: a b") {
		t.Errorf("the refusal's report does not list the Ports rule:\n%v", err)
	}
	// A dynamic port beside them gets the next free one.
	api.Spec.Ports = []model.Port{{Name: "http"}}
	got, err := f.Deploy(f.ctx, api)
	if err != nil || portOf(got[0], "http") != model.DynamicPortMin+1 {
		t.Fatalf("dynamic beside web = %v, %v; want port %d", got, err, model.DynamicPortMin+1)
	}
	f.verify()
	// Resize keeps the ports.
	res, err := f.Resize(f.ctx, ResizeRequest{Target: "web", CPUDelta: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range res {
		if portOf(in, "http") != 8080 || portOf(in, "admin") != model.DynamicPortMin {
			t.Errorf("resized %s holds %v, want its ports kept", in.ID, in.HostPorts)
		}
	}
	f.verify()
	// Replace: the static port stays, the dynamic one is new (the old
	// container holds the old one until it goes), the old is released.
	rep, err := f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range rep {
		want := model.DynamicPortMin + 1 // the lowest free: 20000 is the old container's
		if in.Host == got[0].Host {
			want = model.DynamicPortMin + 2 // api holds 20001 there
		}
		if portOf(in, "http") != 8080 || portOf(in, "admin") != want {
			t.Errorf("replaced %s on %s holds %v, want http 8080 and admin %d", in.ID, in.Host, in.HostPorts, want)
		}
		if v, _ := f.Host(in.Host); v.Alloc.Ports[model.DynamicPortMin] != 0 {
			t.Errorf("host %s still holds the old dynamic port: %v", in.Host, v.Alloc.Ports)
		}
	}
	f.verify()
}

// TestPortsValidation: bad ports and a health check naming no port are
// refused naming the field and value; nothing is deployed.
func TestPortsValidation(t *testing.T) {
	f := newHealFixture(t, "a")
	for _, tc := range []struct {
		spec model.Spec
		want string
	}{
		{model.Spec{Image: "i", Ports: []model.Port{{Name: "http", Host: 70000}}}, `port "http=70000": port 70000 is outside 1-65535`},
		{model.Spec{Image: "i", Ports: []model.Port{{Name: "9http"}}}, `port "9http": name "9http"`},
		{model.Spec{Image: "i", Ports: []model.Port{{Name: "http", Container: 80}}, Network: "host"}, `under network host`},
		{model.Spec{Image: "i", Ports: []model.Port{{Name: "http"}}, Health: &model.HealthCheck{Port: "web"}}, `health port = "web": not one of the instance's ports (http)`},
		{model.Spec{Image: "i", Ports: []model.Port{{Name: "http"}}, Health: &model.HealthCheck{Port: "http", HTTP: "80/x"}}, `want a bare /PATH`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := f.Deploy(f.ctx, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: tc.spec, Size: model.Size{Pieces: 100, Memory: gib}}})
			if CodeOf(err) != Invalid || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want invalid containing %q", err, tc.want)
			}
		})
	}
	if n := len(f.on("a")); n != 0 {
		t.Errorf("%d instances deployed by refused requests", n)
	}
}

// TestPortsHeal: a dead host's instances are placed again where their
// ports are free: the static one only on a host that does not hold it
// (the Ports rule), the dynamic one on the lowest free port of its new
// host.
func TestPortsHeal(t *testing.T) {
	hosts := []string{"a", "b", "c"}
	f := newHealFixture(t, hosts...)
	spec := func(p model.Port) model.Spec { return model.Spec{Image: "i", Ports: []model.Port{p}} }
	f.deployOn("b", hosts, DeployRequest{Service: "other", Count: 1, Deploy: model.Deploy{Spec: spec(model.Port{Name: "http", Host: 8080}), Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.deployOn("c", hosts, DeployRequest{Service: "fill", Count: 1, Deploy: model.Deploy{Spec: spec(model.Port{Name: "http"}), Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.deployOn("a", hosts, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: spec(model.Port{Name: "http", Host: 8080}), Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.deployOn("a", hosts, DeployRequest{Service: "dyn", Count: 1, Deploy: model.Deploy{Spec: spec(model.Port{Name: "http"}), Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.dies("a")
	tr := newTracker()
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	f.tick(f.ctx, tr, t0)
	f.tick(f.ctx, tr, t0.Add(f.st.PlacementSettings().Grace()))
	if got := f.on("a"); len(got) != 0 {
		t.Fatalf("after the grace: %v still on a", got)
	}
	for _, v := range f.st.ServiceInstances("web") {
		if in := v.Instance; in.Host != "c" || portOf(in, "http") != 8080 {
			t.Errorf("healed web on %s with %v, want c (b holds 8080) with 8080", in.Host, in.HostPorts)
		}
	}
	for _, v := range f.st.ServiceInstances("dyn") {
		in := v.Instance
		want := map[string]int{"b": model.DynamicPortMin, "c": model.DynamicPortMin + 1}[in.Host]
		if portOf(in, "http") != want {
			t.Errorf("healed dyn on %s with %v, want port %d (the lowest free there)", in.Host, in.HostPorts, want)
		}
	}
	if v, _ := f.Host("a"); len(v.Alloc.Ports) != 0 {
		t.Errorf("the dead host still holds ports %v", v.Alloc.Ports)
	}
	f.verify()
}

// TestPortsDrain: a drain moves an instance blue-green onto a host where
// its static port is free, never onto one that holds it, and gives its
// dynamic port anew there; both old and new hold their ports while the
// move is in flight, each on its own host.
func TestPortsDrain(t *testing.T) {
	hosts := []string{"a", "b", "c"}
	f := newHealFixture(t, hosts...)
	for _, h := range hosts {
		f.agent(h)
	}
	ports := []model.Port{{Name: "http", Host: 8080}, {Name: "admin"}}
	f.deployOn("b", hosts, DeployRequest{Service: "other", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Ports: ports[:1]}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.deployOn("a", hosts, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Ports: ports}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.tick(f.ctx, newTracker(), time.Now())
	var moved model.Instance
	for _, in := range f.on("c") {
		if in.Service == "web" {
			moved = in
		}
	}
	if moved.ID == "" || moved.Replaces == "" {
		t.Fatalf("no move of web to c (b holds 8080): on b %v, on c %v", f.on("b"), f.on("c"))
	}
	if portOf(moved, "http") != 8080 || portOf(moved, "admin") != model.DynamicPortMin {
		t.Errorf("moved instance holds %v, want http 8080 and admin %d on c", moved.HostPorts, model.DynamicPortMin)
	}
	for _, in := range f.on("b") {
		if in.Service == "web" {
			t.Errorf("web moved onto b, which holds 8080: %+v", in)
		}
	}
	f.verify()
}

// TestPortsReplaceSeveralOnOneHost: a replace of several instances on one
// host gives each new container dynamic ports none of the old containers
// hold (they all run until their replacement passed its check).
func TestPortsReplaceSeveralOnOneHost(t *testing.T) {
	f := newHealFixture(t, "a")
	ins, err := f.Deploy(f.ctx, DeployRequest{Service: "web", Count: 3, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Ports: []model.Port{{Name: "http"}}}, Size: model.Size{Pieces: 50, Memory: gib}}})
	if err != nil {
		t.Fatal(err)
	}
	old := map[int]bool{}
	for _, in := range ins {
		old[portOf(in, "http")] = true
	}
	rep, err := f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:2"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, in := range rep {
		p := portOf(in, "http")
		if old[p] || seen[p] {
			t.Errorf("replaced %s got port %d: held by an old container or another replacement (old %v)", in.ID, p, old)
		}
		seen[p] = true
	}
	f.verify()
}

// TestReplaceHealthNamesAPort: a replace's health check may name one of
// the instances' ports (a trial found every such replace refused, "not one
// of the instance's ports ()").
func TestReplaceHealthNamesAPort(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	web := DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Ports: []model.Port{{Name: "http", Host: 8180, Container: 80}, {Name: "metrics"}}}, Size: model.Size{Pieces: 20, Memory: gib}}}
	ins, err := f.Deploy(f.ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"web", ins[0].ID} {
		rep, err := f.Replace(f.ctx, ReplaceRequest{Target: target, Image: "i:2", Health: &model.HealthCheck{Port: "metrics", HTTP: "/m"}})
		if err != nil {
			t.Fatalf("replace %s with a check on port metrics: %v", target, err)
		}
		if h := rep[0].Health; h == nil || h.Port != "metrics" {
			t.Errorf("replaced %s: health %+v", rep[0].ID, h)
		}
	}
	if _, err := f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:3", Health: &model.HealthCheck{Port: "nope"}}); CodeOf(err) != Invalid {
		t.Errorf("replace with a check on a port the instances lack = %v, want invalid", err)
	}
	// An env entry naming a port's variable would be overridden unseen.
	clash := DeployRequest{Service: "clash", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Env: []string{"PINFOLD_PORT_HTTP=1"}, Ports: []model.Port{{Name: "http"}}}, Size: model.Size{Pieces: 20, Memory: gib}}}
	if _, err := f.Deploy(f.ctx, clash); CodeOf(err) != Invalid || !strings.Contains(err.Error(), "PINFOLD_PORT_HTTP is the host port of port") {
		t.Errorf("deploy with env PINFOLD_PORT_HTTP and port http = %v, want invalid", err)
	}
	f.verify()
}
