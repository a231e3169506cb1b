package api

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// healthPlanner answers Health (no warnings), and nothing else.
type healthPlanner struct{ unreachedPlanner }

func (healthPlanner) Health(time.Time) []service.Warning { return nil }

// certServer serves Handler(healthPlanner, o) through NewHTTPServer, each
// request's caller named by its X-Test-Cert header ("role/name", as a
// verified client certificate; none: no TLS, "local").
func certServer(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	return certServerOf(t, healthPlanner{}, o)
}

// certServerOf is certServer serving svc.
func certServerOf(t *testing.T, svc Planner, o Options) *httptest.Server {
	t.Helper()
	h := Handler(svc, o).(limitedHandler)
	named := limitedHandler{lim: h.lim, links: h.links, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.Header.Get("X-Test-Cert"); c != "" {
			ou, cn, _ := strings.Cut(c, "/")
			cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: []string{"pinfold:" + ou}}}
			r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
		}
		h.ServeHTTP(w, r)
	})}
	srv := httptest.NewUnstartedServer(named)
	srv.Config = NewHTTPServer(named, Timeouts{})
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// certTransport sends every request as who, on connections of its own.
type certTransport struct {
	who string
	tr  *http.Transport
}

func newCertTransport(who string) *certTransport {
	return &certTransport{who: who, tr: &http.Transport{MaxIdleConnsPerHost: 1}}
}

func (c *certTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if c.who != "" {
		r.Header.Set("X-Test-Cert", c.who)
	}
	return c.tr.RoundTrip(r)
}

func (c *certTransport) health(t *testing.T, url string) error {
	t.Helper()
	cl := pinfoldv1connect.NewPlannerServiceClient(&http.Client{Transport: c}, url)
	_, err := cl.Health(t.Context(), connect.NewRequest(&pinfoldv1.HealthRequest{}))
	return err
}

// TestConnsPerIdentity: one identity holds at most ConnsPerIdentity
// connections; a request on one more is refused with resource_exhausted
// naming the identity, the bound and its flag, and that connection is
// closed; another identity is served, and so is the first once it closed
// a connection. Callers without TLS are not bounded (issue 26 item 3).
func TestConnsPerIdentity(t *testing.T) {
	m := NewMetrics(healthPlanner{})
	srv := certServer(t, Options{Metrics: m, Limits: Limits{ConnsPerIdentity: 3}})
	var bob []*certTransport
	for i := range 3 {
		c := newCertTransport("viewer/bob")
		defer c.tr.CloseIdleConnections()
		if err := c.health(t, srv.URL); err != nil {
			t.Fatalf("viewer:bob's connection %d: %v", i+1, err)
		}
		bob = append(bob, c)
	}
	fourth := newCertTransport("viewer/bob")
	defer fourth.tr.CloseIdleConnections()
	err := fourth.health(t, srv.URL)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "identity viewer:bob has 3 connections open already: at most 3 per identity (--identity-max-conns)") {
		t.Fatalf("viewer:bob's connection 4 = %v, want resource_exhausted naming the identity, the bound and its flag", err)
	}
	for i := range 4 {
		if err := newCertTransport("").health(t, srv.URL); err != nil {
			t.Fatalf("a caller without TLS, connection %d: %v", i+1, err)
		}
	}
	carol := newCertTransport("viewer/carol")
	defer carol.tr.CloseIdleConnections()
	if err := carol.health(t, srv.URL); err != nil {
		t.Fatalf("viewer:carol: %v", err)
	}
	got := collect(limitCollector{m})
	if got["pinfold_planner_identity_limited_total{connections}{Health}{viewer}"] != 1 || got["pinfold_planner_identity_connections_open"] != 4 {
		t.Errorf("limit metrics = %v, want 1 connection refused, 4 open", got)
	}
	// One of bob's closes: its place is free once the server saw it close.
	bob[0].tr.CloseIdleConnections()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := newCertTransport("viewer/bob").health(t, srv.URL)
		if err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("viewer:bob after closing a connection: %v", err)
		}
	}
}

// TestRatePerIdentity: one identity makes at most BurstPerIdentity calls
// at once; one more is refused with resource_exhausted naming the
// identity, the rate and the flags, counted by role and method; another
// identity and callers without TLS are served.
func TestRatePerIdentity(t *testing.T) {
	m := NewMetrics(healthPlanner{})
	srv := certServer(t, Options{Metrics: m, Limits: Limits{RatePerIdentity: 0.001, BurstPerIdentity: 5}})
	bob := newCertTransport("viewer/bob")
	defer bob.tr.CloseIdleConnections()
	for i := range 5 {
		if err := bob.health(t, srv.URL); err != nil {
			t.Fatalf("viewer:bob's call %d: %v", i+1, err)
		}
	}
	err := bob.health(t, srv.URL)
	if connect.CodeOf(err) != connect.CodeResourceExhausted ||
		!strings.Contains(err.Error(), "identity viewer:bob called more than 0.001 times a second: at most 0.001 a second per identity after a burst of 5 (--identity-rate, --identity-burst)") {
		t.Fatalf("viewer:bob's call 6 = %v, want resource_exhausted naming the identity, the rate and the flags", err)
	}
	// The web view's pages too, with 429.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/ui/", nil)
	resp, err := (&http.Client{Transport: bob}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("viewer:bob's /ui/ = %d, want 429", resp.StatusCode)
	}
	carol := newCertTransport("viewer/carol")
	defer carol.tr.CloseIdleConnections()
	local := newCertTransport("")
	defer local.tr.CloseIdleConnections()
	for i := range 10 {
		if err := carol.health(t, srv.URL); err != nil && i < 5 {
			t.Fatalf("viewer:carol's call %d: %v", i+1, err)
		}
		if err := local.health(t, srv.URL); err != nil {
			t.Fatalf("a caller without TLS, call %d: %v", i+1, err)
		}
	}
	got := collect(limitCollector{m})
	if got["pinfold_planner_identity_limited_total{rate}{Health}{viewer}"] != 6 || got["pinfold_planner_identity_limited_total{rate}{ui}{viewer}"] != 1 {
		t.Errorf("limit metrics = %v, want 6 Health calls (bob's 1, carol's 5) and 1 of the web view refused", got)
	}
}

// TestRateTableBounded: the rate table holds at most MaxTrackedIdentities
// identities; past them, new ones share one bucket, and idle entries (a
// full bucket) are swept out.
func TestRateTableBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := &rateLimits{rate: 1, burst: 2, max: 3, buckets: map[string]*bucket{}, now: func() time.Time { return now }}
	for _, id := range []string{"a", "b", "c"} {
		if !l.allow(id) || !l.allow(id) || l.allow(id) {
			t.Fatalf("identity %s: want 2 calls allowed, the third refused", id)
		}
	}
	// d and e are past the bound: they share (other)'s bucket.
	if !l.allow("d") || !l.allow("e") || l.allow("d") {
		t.Fatalf("d and e past the table's bound: want 2 calls between them, the third refused")
	}
	if n := l.entries(); n != 4 {
		t.Fatalf("%d entries, want 3 and (other)", n)
	}
	// A minute on, every bucket is full again: swept out.
	now = now.Add(time.Minute)
	if !l.allow("f") {
		t.Fatal("f after a minute: refused")
	}
	if n := l.entries(); n != 1 {
		t.Fatalf("%d entries after a minute, want 1 (f): the idle ones swept", n)
	}
}

// blockingHealthPlanner's Health waits until release is closed, saying
// on entered that a call is in.
type blockingHealthPlanner struct {
	unreachedPlanner
	entered chan struct{}
	release chan struct{}
}

func (p blockingHealthPlanner) Health(time.Time) []service.Warning {
	p.entered <- struct{}{}
	<-p.release
	return nil
}

// TestHeavyPerIdentity: one identity has at most MaxHeavyPerIdentity
// fleet-wide calls in flight; one more is refused with resource_exhausted
// naming the identity and the bound, counted; another identity is served
// meanwhile, and the first again once its calls ended. Control: the same
// number of calls one at a time are all served.
func TestHeavyPerIdentity(t *testing.T) {
	p := blockingHealthPlanner{entered: make(chan struct{}, 8), release: make(chan struct{})}
	m := NewMetrics(p)
	srv := certServerOf(t, p, Options{Metrics: m, Limits: Limits{RatePerIdentity: 1000, BurstPerIdentity: 1000}})
	bob := newCertTransport("viewer/bob")
	defer bob.tr.CloseIdleConnections()
	done := make(chan error, 8)
	for range MaxHeavyPerIdentity {
		go func() { done <- bob.health(t, srv.URL) }()
		<-p.entered
	}
	err := bob.health(t, srv.URL)
	if connect.CodeOf(err) != connect.CodeResourceExhausted ||
		!strings.Contains(err.Error(), "identity viewer:bob has 2 fleet-wide calls (Rebalance, Capacity, ExportPlan, Health, ListEvents) running already: at most 2 at once per identity") {
		t.Fatalf("viewer:bob's third Health in flight = %v, want resource_exhausted naming the identity and the bound", err)
	}
	carol := newCertTransport("viewer/carol")
	defer carol.tr.CloseIdleConnections()
	go func() { done <- carol.health(t, srv.URL) }()
	<-p.entered // carol's is served while bob holds his bound
	close(p.release)
	for range MaxHeavyPerIdentity + 1 {
		if err := <-done; err != nil {
			t.Errorf("a call in flight: %v", err)
		}
	}
	// Control: one at a time, more calls than the bound are all served.
	for i := range MaxHeavyPerIdentity + 2 {
		go func() { <-p.entered }()
		if err := bob.health(t, srv.URL); err != nil {
			t.Fatalf("viewer:bob's Health %d after the others ended: %v", i+1, err)
		}
	}
	got := collect(limitCollector{m})
	if got["pinfold_planner_identity_limited_total{heavy}{Health}{viewer}"] != 1 {
		t.Errorf("limit metrics = %v, want 1 Health refused as heavy", got)
	}
}
