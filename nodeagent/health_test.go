package nodeagent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/model"
)

// TestHealthy: each kind of health check passes and fails as it should.
func TestHealthy(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tcpPort := tcp.Addr().(*net.TCPAddr).Port
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	_, httpPort, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	for _, tc := range []struct {
		name     string
		probe    *Probe
		health   string
		execCode int
		exits    bool
		want     string // "" = healthy, else a part of the error
	}{
		{"no check, keeps running", nil, "", 0, false, ""},
		{"no check, exits", nil, "", 0, true, "exited"},
		{"HEALTHCHECK healthy", nil, "healthy", 0, false, ""},
		{"HEALTHCHECK unhealthy", nil, "unhealthy", 0, false, "unhealthy"},
		{"HEALTHCHECK stuck starting", nil, "starting", 0, false, "did not pass within"},
		{"exec passes", &Probe{Exec: []string{"true"}}, "", 0, false, ""},
		{"exec fails", &Probe{Exec: []string{"false"}, Timeout: time.Second}, "", 1, false, "exited 1"},
		{"probe beats an unhealthy HEALTHCHECK", &Probe{Exec: []string{"true"}}, "unhealthy", 0, false, ""},
		{"tcp open", &Probe{TCP: tcpPort}, "", 0, false, ""},
		{"tcp closed", &Probe{TCP: closedPort, Timeout: time.Second}, "", 0, false, "tcp"},
		{"http 200", &Probe{HTTP: httpPort + "/healthz"}, "", 0, false, ""},
		{"http 503", &Probe{HTTP: httpPort + "/other", Timeout: time.Second}, "", 0, false, "status 503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, eng, _, _ := newTestAgent(t)
			eng.health, eng.execCode, eng.exitOnRun = tc.health, tc.execCode, tc.exits
			id, _ := eng.Create(context.Background(), docker.CreateSpec{Name: "x", Image: "img", Service: "s", Instance: "s-1"})
			_ = eng.Start(context.Background(), id)
			err := a.healthy(context.Background(), id, tc.probe)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("healthy = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("healthy = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestReplaceRollsBackOnProbe: a replacement whose probe fails is removed
// and the old container resumes; the failure is reported.
func TestReplaceRollsBackOnProbe(t *testing.T) {
	a, eng, _, pl := newTestAgent(t)
	ctx := context.Background()
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	next := memInst(2, 128<<20)
	next.Image, next.Health = "img:2", &model.HealthCheck{Exec: []string{"test", "-f", "/ready"}, Timeout: "300ms"}
	eng.execCode = 1
	a.SetDesired([]model.Instance{next})
	settle(t, a)
	cs, _ := eng.List(ctx)
	if len(cs) != 1 || cs[0].ID != "c1" || cs[0].Paused || !cs[0].Running {
		t.Errorf("after a failed probe: %+v, want only c1, running, not paused", cs)
	}
	if r := pl.last("db-1"); !strings.Contains(r.Error, "rolled back") || !strings.Contains(r.Error, "exited 1") || r.RefusedGeneration != 2 {
		t.Errorf("report %+v, want the rollback and the probe's exit code", r)
	}
	if len(eng.execs) == 0 || eng.execs[0][0] != "test" {
		t.Errorf("probe not run in the container: %v", eng.execs)
	}
}

// TestReplaceSameImageSwaps: a replace with the image and command the
// container already runs (SpecGeneration grows) still makes a new
// container; a resize after it does not. With Pull always the host pulls
// first; with the default, only an image the engine lacks is pulled.
func TestReplaceSameImageSwaps(t *testing.T) {
	a, eng, _, pl := newTestAgent(t)
	ctx := context.Background()
	eng.images = map[string]bool{}
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	if !slices.Equal(eng.pulls, []string{"img"}) {
		t.Errorf("pulls after creating from a missing image = %v, want [img] (pull missing)", eng.pulls)
	}
	restart := memInst(2, 128<<20)
	restart.SpecGeneration, restart.Pull = 2, model.PullAlways
	a.SetDesired([]model.Instance{restart})
	a.Reconcile(ctx) // reports the old container, then replaces it
	if r := pl.last("db-1"); r.Generation != 1 {
		t.Errorf("the old container was reported at generation %d; want 1 (it predates the replace)", r.Generation)
	}
	settle(t, a)
	cs, _ := eng.List(ctx)
	if len(cs) != 1 || cs[0].ID == "c1" || cs[0].Labels[LabelGeneration] != "2" {
		t.Fatalf("after a replace with the same image: %+v, want one new container of generation 2", cs)
	}
	if !slices.Equal(eng.pulls, []string{"img", "img"}) {
		t.Errorf("pulls = %v, want the image pulled again (pull always)", eng.pulls)
	}
	if r := pl.last("db-1"); r.State != "running" || r.Generation != 2 {
		t.Errorf("report after the restart: %+v", r)
	}
	resized := restart
	resized.Generation, resized.Memory = 3, 96<<20
	a.SetDesired([]model.Instance{resized})
	settle(t, a)
	if cs2, _ := eng.List(ctx); len(cs2) != 1 || cs2[0].ID != cs[0].ID {
		t.Errorf("a resize after the restart replaced the container: %+v", cs2)
	}
	eng.pullErr = errors.New("registry unreachable")
	again := resized
	again.Generation, again.SpecGeneration = 4, 4
	a.SetDesired([]model.Instance{again})
	settle(t, a)
	if cs3, _ := eng.List(ctx); len(cs3) != 1 || cs3[0].ID != cs[0].ID || !cs3[0].Running {
		t.Errorf("a replace whose pull failed: %+v, want the old container running on", cs3)
	}
	if r := pl.last("db-1"); !strings.Contains(r.Error, "registry unreachable") || r.RefusedGeneration != 4 {
		t.Errorf("report after a failed pull: %+v, want the pull's error and generation 4 refused", r)
	}
}

// TestMoveHealthGate: an instance that replaces another (a move) is
// reported running only after its health gate; one that fails it is
// removed, reported refused, and not created again.
func TestMoveHealthGate(t *testing.T) {
	a, eng, _, pl := newTestAgent(t)
	ctx := context.Background()
	in := memInst(1, 128<<20)
	in.Replaces, in.Health = "db-0", &model.HealthCheck{Exec: []string{"test", "-f", "/ready"}, Timeout: "300ms"}
	eng.execCode = 1
	a.SetDesired([]model.Instance{in})
	a.Reconcile(ctx)
	a.Reconcile(ctx)
	if cs, _ := eng.List(ctx); len(cs) != 0 {
		t.Errorf("after a failed health gate: %+v, want the container removed", cs)
	}
	r := pl.last("db-1")
	if r == nil || r.RefusedGeneration != 1 || !strings.Contains(r.Error, "health gate") || r.State == "running" {
		t.Fatalf("report after a failed gate: %+v, want refused generation 1 naming the gate", r)
	}
	creates := eng.creates
	settle(t, a)
	if eng.creates != creates {
		t.Errorf("a move whose gate failed was created again (%d creates, was %d)", eng.creates, creates)
	}
	// The same with a passing probe: running once the gate passed.
	b, eng2, _, pl2 := newTestAgent(t)
	eng2.execCode = 0
	b.SetDesired([]model.Instance{in})
	settle(t, b)
	if r := pl2.last("db-1"); r == nil || r.State != "running" || r.Error != "" || r.Generation != 1 {
		t.Errorf("report after a passing gate: %+v", r)
	}
	if len(eng2.execs) == 0 {
		t.Errorf("the probe never ran")
	}
}
