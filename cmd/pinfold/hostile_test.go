//go:build hostile

// The hostile tier (hack/test.sh): issue 26's findings N1–N12 and the
// per-identity bounds replayed against a real planner over mutual TLS,
// each asserting its bound. go test -tags hostile -run '^TestHostile$' ./cmd/pinfold/

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// Bounds of TestHostile/N1, with margin over what it measured
// (the 2-core development machine, 2026-11-26: heap in use after GC
// 8.5 → 12–14 MB, the embedded etcd's database file 16 → 16 MB, in 6–8 s;
// docs/BENCHMARKS.md). Before
// issue 26, 60 such calls took the planner to 2.1 GB and etcd's data to
// 149 MB, and 1,000 would have filled etcd's quota.
const (
	floodHeapGrowthBound = 64 << 20 // heap in use after GC, growth over the flood
	floodEtcdGrowthBound = 32 << 20 // the embedded etcd's database file, growth over the flood
)

// hostileN1 replays issue 26 N1: 1,000 viewer deploys with a 4 MB
// service name, all refused, interleaved with 12 admin host
// disable/enable calls. The planner's heap (this process: the planner
// runs in it) and the embedded etcd's database stay within the bounds
// above, and every admin call has its event.
func hostileN1(t *testing.T, h *hostile) {
	adm, view := h.client(h.admin), h.client(h.viewer)
	ctx := t.Context()
	data := h.data

	heapBefore, dbBefore := heapInUse(), etcdDBSize(t, data)
	start := time.Now()
	const flood, every = 1000, 84 // 12 admin calls: at 0, 84, …, 924
	big := strings.Repeat("x", 4_000_000)
	var adminCalls []bool // the enabled flag of each admin call, in order
	overConns, resets := 0, 0
	for i := range flood {
		if i%every == 0 {
			enabled := len(adminCalls)%2 == 1
			if _, err := adm.SetHostEnabled(ctx, connect.NewRequest(&pinfoldv1.SetHostEnabledRequest{Name: "h1", Enabled: enabled})); err != nil {
				t.Fatalf("admin call %d: %v", len(adminCalls), err)
			}
			adminCalls = append(adminCalls, enabled)
		}
		req := &pinfoldv1.DeployRequest{Service: big, Image: "busybox", Count: 1, Cpu: "1", MemoryBytes: 64 << 20}
		// Refused for its permission, before its body is read; or, once
		// the viewer holds its bound of connections, for that (each
		// refused 4 MB body's connection takes about 0.5 s to close).
		_, err := view.Deploy(ctx, connect.NewRequest(req))
		switch {
		case connect.CodeOf(err) == connect.CodePermissionDenied:
		case connect.CodeOf(err) == connect.CodeResourceExhausted:
			overConns++
		case err != nil && strings.Contains(err.Error(), "connection reset by peer"):
			// The planner answered without reading the 4 MB body and
			// closed the connection (net/http, after its 0.5 s
			// lingering): the client, still writing, got the reset,
			// which drops the answer it had not read yet. A refusal all
			// the same; most calls get theirs (checked below).
			resets++
		default:
			t.Fatalf("viewer deploy %d = %.300v, want permission denied (or resource exhausted: its connections)", i, err)
		}
		// Checked along the way too, so that a planner without the bounds
		// fails here and does not take gigabytes from the machine.
		if i%10 == 9 || i == flood-1 {
			checkFloodBounds(t, i+1, heapBefore, dbBefore, heapInUse(), etcdDBSize(t, data))
		}
	}
	wall := time.Since(start)
	t.Logf("%d refused viewer deploys of 4 MB (%d of them over the viewer's connections, %d reset before their answer was read) with %d admin calls: %s; heap in use after GC %.1f → %.1f MB; etcd database %.1f → %.1f MB",
		flood, overConns, resets, len(adminCalls), wall.Round(time.Millisecond), mb(heapBefore), mb(heapInUse()), mb(dbBefore), mb(etcdDBSize(t, data)))
	if resets > flood/10 {
		t.Errorf("%d of %d refused deploys lost their answer to a reset, want at most a tenth", resets, flood)
	}

	// Every admin call has its event, in order, read by the admin.
	var got []string
	after := ""
	for {
		r, err := adm.ListEvents(ctx, connect.NewRequest(&pinfoldv1.ListEventsRequest{After: after}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Msg.Events {
			if ev.Identity == "admin:alice" && ev.Kind == "SetHostEnabled" && ev.Subject == "h1" && ev.Outcome == "ok" {
				got = append(got, ev.Request)
			}
		}
		if len(r.Msg.Events) == 0 {
			break
		}
		after = r.Msg.Events[len(r.Msg.Events)-1].Id
	}
	checkFloodBounds(t, flood, heapBefore, dbBefore, heapInUse(), etcdDBSize(t, data))
	if len(got) != len(adminCalls) {
		t.Fatalf("%d events of the admin's %d host disable/enable calls, want all: %q", len(got), len(adminCalls), got)
	}
	for i, enabled := range adminCalls {
		var req struct{ Enabled bool }
		if err := json.Unmarshal([]byte(got[i]), &req); err != nil || req.Enabled != enabled {
			t.Errorf("event %d of the admin's calls: request %q, want enabled=%v", i, got[i], enabled)
		}
	}
}

// checkFloodBounds fails the test when the heap in use or the etcd
// database grew past the bounds after n refused calls.
func checkFloodBounds(t *testing.T, n int, heapBefore, dbBefore, heap, db uint64) {
	t.Helper()
	if heap > heapBefore+floodHeapGrowthBound {
		t.Fatalf("after %d refused calls the heap in use after GC grew %.1f → %.1f MB, want at most %.0f MB more",
			n, mb(heapBefore), mb(heap), mb(floodHeapGrowthBound))
	}
	if db > dbBefore+floodEtcdGrowthBound {
		t.Fatalf("after %d refused calls the etcd database grew %.1f → %.1f MB, want at most %.0f MB more",
			n, mb(dbBefore), mb(db), mb(floodEtcdGrowthBound))
	}
}

// TestHostile replays issue 26's findings (there is no N5), the
// per-identity bounds and issue 36's findings against one planner over
// mutual TLS (some on planners of their own), in order (N1 measures the
// heap first). hack/test.sh checks that every subtest ran.
func TestHostile(t *testing.T) {
	h := startHostile(t, "", 0, 0)
	for _, st := range []struct {
		name string
		fn   func(*testing.T, *hostile)
	}{
		{"N1_audit_log_flood", hostileN1}, {"N2_wide_registration", hostileN2}, {"N3_stalled_and_idle", hostileN3},
		{"N4_scale_count", hostileN4}, {"N6_agent_version", hostileN6}, {"N7_env_values", hostileN7},
		{"N8_no_role", hostileN8}, {"N9_streams", hostileN9}, {"N10_event_with_its_change", hostileN10},
		{"N11_refused_before_read", hostileN11}, {"N12_error_echo", hostileN12},
		{"conns_per_identity", hostileConns}, {"idle_conns_per_identity", hostileIdleConns}, {"rate_per_identity", hostileRate},
		// Issue 36's findings (hostile36_test.go).
		{"R1_heavy_dry_runs", hostileR1}, {"A1_version_churn", hostileA1}, {"E1_reads_keep_the_audit", hostileE1},
		{"AG1_agent_capacity", hostileAG1}, {"N7_viewer_secrets", hostileN7Secrets}, {"names_like_instances", hostileNames},
		{"CRL_deleted", hostileCRL},
	} {
		if !t.Run(st.name, func(t *testing.T) { st.fn(t, h) }) {
			return // a later finding on a planner left broken tells nothing
		}
	}
}

// wideCPUBound bounds the CPU of one 8,192-CPU registration: the planner's,
// etcd's and the client's together (this process). It took 54–67 s
// before issue 26 (N2), 89–138 ms of CPU since (BenchmarkRegisterHost8192).
const wideCPUBound = 5 * time.Second

// hostileN2: an agent registers a valid 8,192-CPU topology (every CPU's
// L3 group all 8,192) within wideCPUBound of CPU.
func hostileN2(t *testing.T, h *hostile) {
	tp := topologytest.Wide()
	tj, err := json.Marshal(tp)
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := processCPU(t)
	if _, err := h.agent(t, "wide", tj); err != nil {
		t.Fatalf("agent wide: register 8,192 CPUs (%d bytes): %v", len(tj), err)
	}
	cpu := processCPU(t) - cpu0
	t.Logf("8,192-CPU registration (%d bytes): %s of CPU", len(tj), cpu.Round(time.Millisecond))
	if cpu > wideCPUBound {
		t.Fatalf("8,192-CPU registration took %s of CPU, want at most %s", cpu, wideCPUBound)
	}
}

// hostileN3: a body stalled after its headers (HTTP/1.1: the connection
// closed; HTTP/2: the call ended) and an idle keep-alive connection are
// dropped once the planner's timeouts (2 s here) pass; held forever before.
func hostileN3(t *testing.T, h *hostile) {
	const wait = 15 * time.Second
	dial := func() *tls.Conn {
		c := h.tlsConfig(t, h.viewer)
		c.NextProtos = []string{"http/1.1"}
		conn, err := tls.Dial("tcp", h.p.Addr, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	conn := dial()
	if _, err := io.WriteString(conn, "POST /pinfold.v1.PlannerService/Capacity HTTP/1.1\r\nHost: planner\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100000\r\n\r\n{\"service\": \""); err != nil {
		t.Fatal(err)
	}
	if heldWithin(conn, wait) {
		t.Errorf("HTTP/1.1: a body stalled after its headers still holds its connection after %s", wait)
	}

	// HTTP/2: the stalled stream ends; its connection may serve others.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", h.url+"/pinfold.v1.PlannerService/Capacity", pr)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := h.httpClient(t, h.viewer, true).Do(req)
		if err == nil {
			if resp.ProtoMajor != 2 {
				err = fmt.Errorf("served over %s, want HTTP/2", resp.Proto)
			}
			resp.Body.Close()
		}
		done <- err
	}()
	if _, err := io.WriteString(pw, `{"service": "`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil && strings.Contains(err.Error(), "want HTTP/2") {
			t.Error(err)
		}
	case <-time.After(wait):
		t.Errorf("HTTP/2: a body stalled after its headers still holds its call after %s", wait)
	}

	// An idle keep-alive connection.
	conn = dial()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: planner\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("/healthz = %d (close %v), %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.Copy(io.Discard, br); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("an idle keep-alive connection is still open after %s", wait)
	}
}

// hostileN4: scale --count past 32 bits is bad input (exit 2), as for
// deploy; it added an instance and exited 0.
func hostileN4(t *testing.T, h *hostile) {
	adm := h.client(h.admin)
	if _, err := adm.Deploy(t.Context(), connect.NewRequest(&pinfoldv1.DeployRequest{Service: "n4", Image: "busybox", Count: 1, Cpu: "0.1", MemoryBytes: 16 << 20})); err != nil {
		t.Fatalf("admin: deploy n4: %v", err)
	}
	out, errOut, code := runCLI(t, "", append([]string{"scale", "n4", "--count", "4294967298"}, h.tlsArgs(h.admin)...)...)
	if code != exitBadInput || !strings.Contains(errOut, "4294967298") {
		t.Errorf("scale n4 --count 4294967298: exit %d, %s %s; want %d naming the value", code, out, errOut, exitBadInput)
	}
	r, err := adm.GetService(t.Context(), connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: "n4"}))
	if err != nil || r.Msg.Service.Count != 1 {
		t.Errorf("n4 after the refused scale: %v %v, want 1 instance", r, err)
	}
}

// hostileN6: an agent's 3 MB version is refused at registration and in a
// heartbeat, its error clipped; no host lists it.
func hostileN6(t *testing.T, h *hostile) {
	big := strings.Repeat("v", 3<<20)
	ag, err := h.agent(t, "h6", h.topo)
	if err != nil {
		t.Fatal(err)
	}
	cl := h.client(ag)
	_, err = cl.Heartbeat(t.Context(), connect.NewRequest(&pinfoldv1.HeartbeatRequest{Host: "h6", AgentVersion: big, Protocol: model.Protocol, TtlSeconds: 30}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(err.Error()) > 4096 {
		t.Errorf("a heartbeat with a 3 MB version = %.300v (%d bytes), want invalid_argument, at most 4 KiB", err, len(fmt.Sprint(err)))
	}
	_, err = cl.RegisterHost(t.Context(), connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: "h6", TopologyJson: h.topo, Agent: true, AgentVersion: big, Protocol: model.Protocol}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(err.Error()) > 4096 {
		t.Errorf("a registration with a 3 MB version = %.300v, want invalid_argument, at most 4 KiB", err)
	}
	r, err := h.client(h.viewer).ListHosts(t.Context(), connect.NewRequest(&pinfoldv1.ListHostsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range r.Msg.Hosts {
		if len(host.AgentVersion) > 256 {
			t.Errorf("host %s lists a %d-byte agent version", host.Name, len(host.AgentVersion))
		}
	}
}

// hostileN7: an environment value is in no event, not even a failed
// deploy's, and no viewer reads it.
func hostileN7(t *testing.T, h *hostile) {
	adm, view := h.client(h.admin), h.client(h.viewer)
	env := []string{"SECRET=hunter2"}
	if _, err := adm.Deploy(t.Context(), connect.NewRequest(&pinfoldv1.DeployRequest{Service: "n7", Image: "busybox", Count: 1, Cpu: "0.1", MemoryBytes: 16 << 20, Env: env})); err != nil {
		t.Fatalf("admin: deploy n7: %v", err)
	}
	if _, err := adm.Deploy(t.Context(), connect.NewRequest(&pinfoldv1.DeployRequest{Service: "n7b", Image: "busybox", Count: 100000, Cpu: "8", Bind: true, MemoryBytes: 16 << 20, Env: env})); err == nil {
		t.Fatal("admin: deploy of 100,000 × 8 CPUs placed")
	}
	seen := func(who string, m proto.Message) {
		b, _ := protojson.Marshal(m)
		if strings.Contains(string(b), "hunter2") {
			t.Errorf("%s reads an environment value: %.500s", who, b)
		}
	}
	for who, cl := range map[string]pinfoldv1connect.PlannerServiceClient{"admin": adm, "viewer": view} {
		after := ""
		for {
			r, err := cl.ListEvents(t.Context(), connect.NewRequest(&pinfoldv1.ListEventsRequest{After: after}))
			if err != nil {
				t.Fatal(err)
			}
			seen(who+"'s events", r.Msg)
			if len(r.Msg.Events) == 0 {
				break
			}
			after = r.Msg.Events[len(r.Msg.Events)-1].Id
		}
	}
	r1, err := view.GetService(t.Context(), connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: "n7"}))
	if err != nil {
		t.Fatal(err)
	}
	seen("a viewer's GetService", r1.Msg)
	r2, err := view.ListInstances(t.Context(), connect.NewRequest(&pinfoldv1.ListInstancesRequest{Service: "n7"}))
	if err != nil || len(r2.Msg.Instances) != 1 {
		t.Fatalf("viewer: ListInstances n7 = %v, %v; want 1 instance", r2, err)
	}
	seen("a viewer's ListInstances", r2.Msg)
}

// hostileN8: a CA-signed certificate with no valid role is refused, and
// no call is recorded as "local" (the identity of no TLS).
func hostileN8(t *testing.T, h *hostile) {
	cb, _ := os.ReadFile(filepath.Join(h.dir, pki.CACert))
	kb, _ := os.ReadFile(filepath.Join(h.dir, pki.CAKey))
	caPair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caPair.Certificate[0])
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(77), Subject: pkix.Name{CommonName: "mallory", OrganizationalUnit: []string{"pinfold:root"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	f := pki.Files{CA: h.srv.CA, Cert: filepath.Join(h.dir, "mallory.pem"), Key: filepath.Join(h.dir, "mallory-key.pem")}
	if err := os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client(f).SetHostEnabled(t.Context(), connect.NewRequest(&pinfoldv1.SetHostEnabledRequest{Name: "h1", Enabled: false})); err == nil {
		t.Fatal("a certificate with no valid role disabled h1")
	}
	r, err := h.client(h.admin).ListEvents(t.Context(), connect.NewRequest(&pinfoldv1.ListEventsRequest{Limit: 50}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range r.Msg.Events {
		if ev.Identity == "local" {
			t.Errorf("an event of %s recorded as local, on a planner with TLS: %v", ev.Kind, ev)
		}
	}
}

// hostileN9: an agent holds at most api.MaxWatchesPerHost watches of its
// host, a viewer at most api.MaxViewsPerIdentity live views; past them
// refused naming the bound, another identity served.
func hostileN9(t *testing.T, h *hostile) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ag := h.issue(t, pki.RoleAgent, "h6") // registered in N6
	cl := h.client(ag)
	watch := func() error {
		st, err := cl.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: "h6"}))
		if err != nil {
			return err
		}
		if !st.Receive() {
			return st.Err()
		}
		return nil
	}
	for i := range api.MaxWatchesPerHost {
		if err := watch(); err != nil {
			t.Fatalf("watch %d of h6: %v", i+1, err)
		}
	}
	if err := watch(); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "per host") {
		t.Errorf("watch %d of h6 = %v, want resource_exhausted naming the bound", api.MaxWatchesPerHost+1, err)
	}
	view := func(hc *http.Client) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/ui/events", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: ") {
				t.Fatalf("/ui/events: no first event: %q %v", line, err)
			}
		}
		return resp.StatusCode
	}
	bob := h.httpClient(t, h.viewer, false)
	for i := range api.MaxViewsPerIdentity {
		if code := view(bob); code != http.StatusOK {
			t.Fatalf("viewer:bob's view %d = %d", i+1, code)
		}
	}
	if code := view(bob); code != http.StatusTooManyRequests {
		t.Errorf("viewer:bob's view %d = %d, want 429", api.MaxViewsPerIdentity+1, code)
	}
	if code := view(h.httpClient(t, h.issue(t, pki.RoleViewer, "carol"), false)); code != http.StatusOK {
		t.Errorf("viewer:carol's view = %d, want 200", code)
	}
}

// hostileN10: a deploy acknowledged just before the planner is killed
// with SIGKILL has its event after the restart (events were written in the
// background and such a deploy had none). The planner runs in a child
// process here, over mutual TLS.
func hostileN10(t *testing.T, h *hostile) {
	data := t.TempDir()
	addr, cu, pu := freeAddr(t), "https://"+freeAddr(t), "https://"+freeAddr(t)
	var cmd *exec.Cmd
	t.Cleanup(func() {
		if cmd != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	hc := *h
	hc.url = "https://" + addr
	adm := hc.client(h.admin)
	start := func() {
		args, _ := json.Marshal([]string{"planner", "--data-dir", data, "--listen", addr, "--etcd-listen-client", cu, "--etcd-listen-peer", pu,
			"--log-level", "error", "--tls-cert", h.srv.Cert, "--tls-key", h.srv.Key, "--tls-ca", h.srv.CA})
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(exe)
		cmd.Env = append(os.Environ(), "PINFOLD_TEST_MAIN="+string(args))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if _, err := adm.Health(t.Context(), connect.NewRequest(&pinfoldv1.HealthRequest{})); err == nil {
				return
			}
		}
		t.Fatalf("the planner did not answer within 30 s:\n%s", out.String())
	}
	start()
	if _, err := adm.RegisterHost(t.Context(), connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: "h1", TopologyJson: h.topo})); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Deploy(t.Context(), connect.NewRequest(&pinfoldv1.DeployRequest{Service: "n10", Image: "busybox", Count: 1, Cpu: "0.1", MemoryBytes: 16 << 20})); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	start()
	r, err := adm.ListEvents(t.Context(), connect.NewRequest(&pinfoldv1.ListEventsRequest{Service: "n10"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range r.Msg.Events {
		if ev.Kind == "Deploy" && ev.Outcome == "ok" && ev.Identity == "admin:alice" {
			return
		}
	}
	t.Errorf("the deploy acknowledged before SIGKILL has no event after the restart: %v", r.Msg.Events)
}

// hostileN11: a viewer's malformed admin-only call is refused for its
// permission (403), not parsed (400).
func hostileN11(t *testing.T, h *hostile) {
	req, _ := http.NewRequestWithContext(t.Context(), "POST", h.url+"/pinfold.v1.PlannerService/SetPlacementSettings", strings.NewReader("{not json"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.httpClient(t, h.viewer, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "permission_denied") {
		t.Errorf("a viewer's malformed SetPlacementSettings = %d %s, want 403 permission_denied", resp.StatusCode, body)
	}
}

// hostileN12: a registration whose topology has a 3 MB field is refused
// with an error that clips it (it echoed all 3 MB).
func hostileN12(t *testing.T, h *hostile) {
	tp := topologytest.DualXeonGold6230().Topology()
	tp.NUMASource = strings.Repeat("x", 3<<20)
	tj, _ := json.Marshal(tp)
	_, err := h.agent(t, "h12", tj)
	if err == nil || len(err.Error()) > 4096 {
		t.Errorf("a topology with a 3 MB numa_source = %.300v (%d bytes), want an error of at most 4 KiB", err, len(fmt.Sprint(err)))
	}
}
