package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// auditFixture is the API over a real service and etcd, its callers told
// apart by a test header standing in for a verified client certificate
// ("OU/CN", OU "" for a certificate with no role). The event writer does
// not run unless a test starts it.
type auditFixture struct {
	svc *service.Service
	cli pinfoldv1connect.PlannerServiceClient
	// srv serves the API over TLS and HTTP/2 (gRPC clients too); read
	// counts the request body bytes the API read.
	srv     *httptest.Server
	read    atomic.Int64
	metrics *Metrics
}

func newAuditFixture(t *testing.T) *auditFixture {
	return newAuditFixtureWith(t, Options{Authorize: true})
}

func newAuditFixtureWith(t *testing.T, o Options) *auditFixture {
	t.Helper()
	c := statetest.Start(t, 1)
	st := c.Open(t, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	svc := service.New(st, nil)
	if o.Metrics == nil {
		o.Metrics = NewMetrics(svc)
	}
	h := Handler(svc, o)
	f := &auditFixture{svc: svc, metrics: o.Metrics}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countedBody{r.Body, &f.read}
		if who := r.Header.Get("X-Test-Cert"); who != "" {
			ou, cn, _ := strings.Cut(who, "/")
			cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
			if ou != "" {
				cert.Subject.OrganizationalUnit = []string{"pinfold:" + ou}
			}
			r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
		}
		h.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	if _, err := svc.RegisterHost(t.Context(), service.RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	f.srv, f.cli = srv, pinfoldv1connect.NewPlannerServiceClient(srv.Client(), srv.URL)
	return f
}

// countedBody counts the bytes read of a request body.
type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// as is a request from the certificate who ("admin/alice").
func as[T any](who string, m *T) *connect.Request[T] {
	r := connect.NewRequest(m)
	r.Header().Set("X-Test-Cert", who)
	return r
}

// runEvents starts the event writer; the returned func stops it, and
// returns once it wrote what was queued.
func (f *auditFixture) runEvents(t *testing.T) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.svc.RunEvents(ctx); close(done) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func (f *auditFixture) events(t *testing.T) []state.Event {
	t.Helper()
	var all []state.Event
	after := ""
	for {
		evs, err := f.svc.Events(t.Context(), service.EventQuery{After: after})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
		if len(evs) < service.MaxEventsListed {
			return all
		}
		after = evs[len(evs)-1].ID
	}
}

func deployReq(svc string) *pinfoldv1.DeployRequest {
	return &pinfoldv1.DeployRequest{Service: svc, Image: "busybox", Count: 1, Cpu: "1", MemoryBytes: 64 << 20,
		Env: []string{"SECRET=hunter2", "MODE=fast"}}
}

// TestCommittedChangeHasItsEvent: the event of an acknowledged change is
// in etcd when the call returns, with no event writer running: a planner
// killed right after it answered loses no event (issue 26 N10). Before,
// every event waited in the background writer's queue.
func TestCommittedChangeHasItsEvent(t *testing.T) {
	f := newAuditFixture(t)
	ctx := t.Context()
	dep, err := f.cli.Deploy(ctx, as("admin/alice", deployReq("web")))
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		kind string
		call func() error
	}{
		{"Deploy", func() error { return nil }},
		{"Resize", func() error {
			_, err := f.cli.Resize(ctx, as("admin/alice", &pinfoldv1.ResizeRequest{Target: dep.Msg.Instances[0].Id, MemoryDeltaBytes: 64 << 20}))
			return err
		}},
		{"SetHostEnabled", func() error {
			_, err := f.cli.SetHostEnabled(ctx, as("admin/alice", &pinfoldv1.SetHostEnabledRequest{Name: "h1", Enabled: false}))
			return err
		}},
		{"SetPlacementSettings", func() error {
			_, err := f.cli.SetPlacementSettings(ctx, as("admin/alice", &pinfoldv1.PlacementSettings{}))
			return err
		}},
		{"Remove", func() error {
			_, err := f.cli.Remove(ctx, as("admin/alice", &pinfoldv1.RemoveRequest{Target: "web"}))
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.kind, func(t *testing.T) {
			if err := c.call(); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ev := range f.events(t) {
				if ev.Kind == c.kind && ev.Identity == "admin:alice" && ev.Outcome == "ok" {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d %s events of admin:alice in etcd right after the call, want 1 (written with the change)", n, c.kind)
			}
		})
	}
}

// TestRefusedFloodBounded: 1,000 refused calls of a viewer write at most
// RefusedEventsPerMinute events a minute, the rest counted in the metric
// and summarized; an admin's call made after them has its event (1,000
// refused viewer calls once pushed admin calls' events out, issue 26 N1).
func TestRefusedFloodBounded(t *testing.T) {
	f := newAuditFixture(t)
	stop := f.runEvents(t)
	ctx := t.Context()
	const flood = 1000
	big := strings.Repeat("x", 4<<10)
	for range flood {
		if _, err := f.cli.Deploy(ctx, as("viewer/bob", deployReq(big))); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("viewer deploy = %v, want permission denied", err)
		}
	}
	if _, err := f.cli.SetHostEnabled(ctx, as("admin/alice", &pinfoldv1.SetHostEnabledRequest{Name: "h1", Enabled: false})); err != nil {
		t.Fatal(err)
	}
	stop() // writes what is queued, and the summary of the minute
	written, suppressed, admin := 0, 0, 0
	for _, ev := range f.events(t) {
		switch {
		case ev.Identity == "admin:alice" && ev.Kind == "SetHostEnabled":
			admin++
		case ev.Identity == "viewer:bob" && ev.Kind == "Deploy":
			written++
		case ev.Identity == "viewer:bob" && ev.Kind == "Suppressed":
			var n int
			if _, err := fmt.Sscan(ev.Outcome, &n); err != nil {
				t.Fatalf("summary %q: %v", ev.Outcome, err)
			}
			suppressed += n
		}
	}
	if admin != 1 {
		t.Errorf("%d events of the admin's call, want 1", admin)
	}
	// The flood may straddle a minute: two budgets at most.
	if written == 0 || written > 2*service.RefusedEventsPerMinute {
		t.Errorf("%d refused viewer calls written, want 1..%d", written, 2*service.RefusedEventsPerMinute)
	}
	if written+suppressed != flood {
		t.Errorf("%d written + %d summarized as suppressed = %d, want %d", written, suppressed, written+suppressed, flood)
	}
	counted, _ := f.svc.RefusedCalls()
	if got := counted[service.RefusalKey{Identity: "viewer:bob", Method: "Deploy"}]; got != flood {
		t.Errorf("refused calls counted for viewer:bob Deploy = %d, want %d", got, flood)
	}
}

// TestEnvNamesOnly: environment values are never written to the event
// log (a deploy, a refused one, a failed one) nor shown to a viewer
// (issue 26 N7); an admin still sees them.
func TestEnvNamesOnly(t *testing.T) {
	f := newAuditFixture(t)
	stop := f.runEvents(t)
	ctx := t.Context()
	if _, err := f.cli.Deploy(ctx, as("admin/alice", deployReq("web"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Deploy(ctx, as("viewer/bob", deployReq("web2"))); err == nil {
		t.Fatal("viewer deploy succeeded")
	}
	bad := deployReq("web3")
	bad.Env = append(bad.Env, "BROKEN=hunter2\x00")
	if _, err := f.cli.Deploy(ctx, as("admin/alice", bad)); err == nil {
		t.Fatal("deploy with a NUL in env succeeded")
	}
	stop()
	evs := f.events(t)
	if len(evs) < 3 {
		t.Fatalf("%d events, want the 3 deploys'", len(evs))
	}
	for _, ev := range evs {
		if strings.Contains(ev.Request, "hunter2") || strings.Contains(ev.Outcome, "hunter2") {
			t.Errorf("event %s %s of %s holds an environment value: request %q outcome %q", ev.Kind, ev.Subject, ev.Identity, ev.Request, ev.Outcome)
		}
		if ev.Kind == "Deploy" && ev.Identity == "viewer:bob" && ev.Request != "" {
			// Refused before its request was read: nothing of it recorded.
			t.Errorf("event %s of %s: request %q, want none (refused unread)", ev.Subject, ev.Identity, ev.Request)
		}
		if ev.Kind == "Deploy" && ev.Identity != "viewer:bob" && !strings.Contains(ev.Request, "SECRET") {
			t.Errorf("event %s of %s: request %q lacks the environment's names", ev.Subject, ev.Identity, ev.Request)
		}
	}
	for who, want := range map[string]string{"viewer/bob": "SECRET", "admin/alice": "SECRET=hunter2"} {
		r, err := f.cli.ListInstances(ctx, as(who, &pinfoldv1.ListInstancesRequest{}))
		if err != nil || len(r.Msg.Instances) != 1 {
			t.Fatalf("%s: ListInstances = %v, %v", who, r, err)
		}
		if got := r.Msg.Instances[0].Env; len(got) != 2 || got[0] != want {
			t.Errorf("%s sees env %q, want %q first", who, got, want)
		}
	}
}

// TestNoRoleRecordedByName: a call from a CA-signed certificate with no
// valid role is refused and recorded by the certificate's name, never as
// "local", the identity of a planner without TLS (issue 26 N8).
func TestNoRoleRecordedByName(t *testing.T) {
	f := newAuditFixture(t)
	stop := f.runEvents(t)
	if _, err := f.cli.Deploy(t.Context(), as("/mallory", deployReq("web"))); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("deploy with no role = %v, want unauthenticated", err)
	}
	stop()
	evs := f.events(t)
	if len(evs) != 1 || evs[0].Identity != "mallory (no role)" {
		t.Fatalf("events = %+v, want one of identity %q", evs, "mallory (no role)")
	}
}

// TestReadsCannotEraseTheAudit: a viewer's successful dry-run rebalances
// change nothing and are sampled (at most RefusedEventsPerMinute a minute
// written, the rest summarized), so they cannot push the admin's events
// out of retention (issue 36 E1: 12,000 of them left none of 64 admin
// events). Control: the admin's own dry runs are all written.
func TestReadsCannotEraseTheAudit(t *testing.T) {
	f := newAuditFixture(t)
	stop := f.runEvents(t)
	ctx := t.Context()
	if _, err := f.cli.Deploy(ctx, as("admin/alice", deployReq("web"))); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for _, who := range []string{"viewer/bob", "admin/alice"} {
		for i := range n {
			if _, err := f.cli.Rebalance(ctx, as(who, &pinfoldv1.RebalanceRequest{})); err != nil {
				t.Fatalf("%s's dry run %d: %v", who, i+1, err)
			}
		}
	}
	stop()
	count := map[string]int{}
	for _, ev := range f.events(t) {
		count[ev.Identity+" "+ev.Kind]++
	}
	if got := count["viewer:bob Rebalance"]; got > service.RefusedEventsPerMinute+1 {
		t.Errorf("%d of viewer:bob's %d dry runs written, want at most %d (and a summary)", got, n, service.RefusedEventsPerMinute)
	}
	if count["viewer:bob Suppressed"] != 1 {
		t.Errorf("summaries of viewer:bob's suppressed calls: %d, want 1 (%v)", count["viewer:bob Suppressed"], count)
	}
	if got := count["admin:alice Rebalance"]; got != n {
		t.Errorf("control: %d of admin:alice's %d dry runs written, want all", got, n)
	}
	if count["admin:alice Deploy"] != 1 {
		t.Errorf("the admin's deploy has %d events, want 1", count["admin:alice Deploy"])
	}
}
