//go:build hostile

package main

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// hostileConns: one identity holds at most api.DefaultConnsPerIdentity
// connections (the default); a call on one more is refused with
// resource_exhausted naming the identity, the bound and its flag; another
// identity is served meanwhile, and the first again once its connections
// closed.
func hostileConns(t *testing.T, h *hostile) {
	flood := h.issue(t, pki.RoleViewer, "flood")
	health := func(hc *http.Client) error {
		_, err := pinfoldv1connect.NewPlannerServiceClient(hc, h.url).Health(t.Context(), connect.NewRequest(&pinfoldv1.HealthRequest{}))
		return err
	}
	var held []*http.Client
	for i := range api.DefaultConnsPerIdentity {
		hc := h.httpClient(t, flood, false)
		if err := health(hc); err != nil {
			t.Fatalf("viewer:flood's connection %d: %v", i+1, err)
		}
		held = append(held, hc)
	}
	for _, h2 := range []bool{false, true} {
		err := health(h.httpClient(t, flood, h2))
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "identity viewer:flood has 64 connections open already") ||
			!strings.Contains(err.Error(), "--identity-max-conns") {
			t.Errorf("viewer:flood's connection %d (HTTP/2 %v) = %v, want resource_exhausted naming the identity, the bound and its flag", api.DefaultConnsPerIdentity+1, h2, err)
		}
	}
	if err := health(h.httpClient(t, h.viewer, false)); err != nil {
		t.Errorf("viewer:bob while viewer:flood holds its bound: %v", err)
	}
	for _, hc := range held {
		hc.CloseIdleConnections()
	}
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := health(h.httpClient(t, flood, false))
		if err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("viewer:flood after closing its connections: %v", err)
		}
	}
}

// hostileIdleConns: connections that complete their TLS handshake and
// HTTP/2 preface and then send nothing (each holds the planner's
// goroutines, buffers and a file until --idle-timeout) count against
// their identity's --identity-max-conns from the handshake: twice the
// bound are admitted (the second half to be refused at a first request,
// with a message), the rest fail their handshake; another viewer is
// served meanwhile, and the identity again once its connections close.
// Before, a connection took its place only at its first request: one
// viewer held 5,000 idle connections (RSS 60 → 316 MB, 5,018 files).
func hostileIdleConns(t *testing.T, h *hostile) {
	cfg := h.tlsConfig(t, h.issue(t, pki.RoleViewer, "idle"))
	cfg.NextProtos = []string{"h2"}
	addr := strings.TrimPrefix(h.url, "https://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	admitted := 0
	for range 3 * api.DefaultConnsPerIdentity {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			continue
		}
		conns = append(conns, c)
		// TLS 1.3: the client's handshake ends before the server checked
		// its certificate; a refusal comes as an alert on the first read.
		// An admitted connection gets the server's SETTINGS frame.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
			continue
		}
		var b [9]byte
		if _, err := io.ReadFull(c, b[:]); err == nil && b[3] == 0x4 {
			admitted++
		}
	}
	if want := 2 * api.DefaultConnsPerIdentity; admitted != want {
		t.Errorf("viewer:idle's idle HTTP/2 connections: %d of %d admitted, want %d (twice --identity-max-conns)", admitted, 3*api.DefaultConnsPerIdentity, want)
	}
	health := func(f pki.Files) error {
		_, err := pinfoldv1connect.NewPlannerServiceClient(h.httpClient(t, f, false), h.url).Health(t.Context(), connect.NewRequest(&pinfoldv1.HealthRequest{}))
		return err
	}
	if err := health(h.viewer); err != nil {
		t.Errorf("viewer:bob while viewer:idle holds its idle connections: %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := health(h.issue(t, pki.RoleViewer, "idle"))
		if err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("viewer:idle after closing its connections: %v", err)
		}
	}
}

// Rate bound of hostileRate's own planner: low, so that the tier's client
// outruns it on a loaded 2-core machine (it made about 300 calls a second
// there, so the default's burst took 20 s to pass). The tier's planner
// runs the defaults, which none of the findings' callers reached.
const (
	hammerRate  = 5
	hammerBurst = 50
)

// hostileRate: one identity calling as fast as it can is refused with
// resource_exhausted naming the identity, the rate and the flags once past
// its burst; another identity and an agent are served; the refusals are in
// the planner's metrics.
func hostileRate(t *testing.T, tier *hostile) {
	h := startHostile(t, tier.dir, hammerRate, hammerBurst)
	if _, err := h.agent(t, "h6", h.topo); err != nil {
		t.Fatal(err)
	}
	cl := h.client(h.issue(t, pki.RoleViewer, "hammer"))
	var refused atomic.Pointer[error]
	var calls atomic.Int64
	var wg sync.WaitGroup
	const most = 100 * hammerBurst
	for range 8 {
		wg.Go(func() {
			for refused.Load() == nil && calls.Add(1) <= most {
				// ListHosts: not one of the fleet-wide calls, of which an
				// identity has at most api.MaxHeavyPerIdentity in flight
				// (8 callers of Health met that bound first).
				if _, err := cl.ListHosts(t.Context(), connect.NewRequest(&pinfoldv1.ListHostsRequest{})); err != nil {
					refused.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	errp := refused.Load()
	if errp == nil {
		t.Fatalf("viewer:hammer made %d calls, none refused", most)
	}
	if err := *errp; connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "identity viewer:hammer called more than 5 times a second") ||
		!strings.Contains(err.Error(), "--identity-rate") {
		t.Fatalf("viewer:hammer's refusal = %v, want resource_exhausted naming the identity, the rate and the flags", err)
	}
	t.Logf("viewer:hammer refused after about %d calls", calls.Load())
	if _, err := h.client(h.viewer).Health(t.Context(), connect.NewRequest(&pinfoldv1.HealthRequest{})); err != nil {
		t.Errorf("viewer:bob while viewer:hammer is refused: %v", err)
	}
	ag := h.issue(t, pki.RoleAgent, "h6")
	if _, err := h.client(ag).Heartbeat(t.Context(), connect.NewRequest(&pinfoldv1.HeartbeatRequest{Host: "h6", AgentVersion: "hostile", Protocol: model.Protocol, TtlSeconds: 30})); err != nil {
		t.Errorf("agent h6's heartbeat while viewer:hammer is refused: %v", err)
	}
	resp, err := h.httpClient(t, h.admin, false).Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `pinfold_planner_identity_limited_total{limit="rate",method="ListHosts",role="viewer"}`) {
		t.Errorf("/metrics has no count of viewer:hammer's refusals:\n%s", grepLines(string(b), "identity_"))
	}
}
