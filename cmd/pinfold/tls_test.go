package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestPlannerTLS: the PKI commands make a CA, the planner's certificate and
// client certificates; the planner serves mutual TLS and authorizes by
// the certificate's identity: an admin does everything, a viewer only
// reads, an agent acts only for its own host. Bad setups are refused.
func TestPlannerTLS(t *testing.T) {
	dir := t.TempDir() + "/pki"
	out, errOut, code := runCLI(t, "", "pki", "init", "--dir", dir, "-o", "json")
	var srv pki.Files
	if code != 0 || json.Unmarshal([]byte(out), &srv) != nil || srv.Cert == "" {
		t.Fatalf("pki init: exit %d, %s %s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "", "pki", "init", "--dir", dir); code != 2 || !strings.Contains(errOut, "has a CA already") {
		t.Errorf("a second pki init: exit %d, %s", code, errOut)
	}
	issue := func(role, name string) pki.Files {
		t.Helper()
		out, errOut, code := runCLI(t, "", "pki", "issue", role, name, "--dir", dir, "-o", "json")
		var f pki.Files
		if code != 0 || json.Unmarshal([]byte(out), &f) != nil {
			t.Fatalf("pki issue %s %s: exit %d, %s %s", role, name, code, out, errOut)
		}
		return f
	}
	admin, viewer, agent := issue("admin", "alice"), issue("viewer", "bob"), issue("agent", "h2")
	if _, errOut, code := runCLI(t, "", "pki", "issue", "root", "x", "--dir", dir); code != 2 || !strings.Contains(errOut, `role "root"`) {
		t.Errorf("pki issue root: exit %d, %s", code, errOut)
	}

	log, _ := newLogger("error", os.Stderr)
	base := plannerFlags{dataDir: t.TempDir(), listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1,
		etcdClient: "http://" + freeAddr(t), etcdPeer: "http://" + freeAddr(t), etcdLogLevel: "fatal"}
	// Refused setups: TLS that authenticates nobody; no TLS off loopback.
	noCA := base
	noCA.tlsCert, noCA.tlsKey = srv.Cert, srv.Key
	if _, err := noCA.start(context.Background(), log); exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "authenticates no client") {
		t.Errorf("TLS without --tls-ca = %v", err)
	}
	open := base
	open.listen = "0.0.0.0:0"
	if _, err := open.start(context.Background(), log); exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "off loopback") {
		t.Errorf("no TLS off loopback = %v", err)
	}
	f := base
	f.tlsCert, f.tlsKey, f.tlsCA = srv.Cert, srv.Key, srv.CA
	p, err := f.start(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "https://" + p.Addr
	as := func(c pki.Files) *cli {
		return newCLI(t, url, "--tls-ca", c.CA, "--tls-cert", c.Cert, "--tls-key", c.Key)
	}
	topo := t.TempDir() + "/h.json"
	tj, _, _ := runCLI(t, "", "topology", "--sysfs-root", "../../numa/testdata/sysfs/dual-xeon-gold-6230", "-o", "json")
	os.WriteFile(topo, []byte(tj), 0o644)
	for _, h := range []string{"h1", "h2"} {
		if out, errOut, code := as(admin).Run("host", "add", h, "--topology", topo); code != 0 {
			t.Fatalf("admin: host add %s: exit %d, %s %s", h, code, out, errOut)
		}
	}
	if out, errOut, code := as(viewer).Run("host", "list"); code != 0 || !strings.Contains(out, "h1") {
		t.Errorf("viewer: host list: exit %d, %s %s", code, out, errOut)
	}
	if _, errOut, code := as(viewer).Run("host", "disable", "h1"); code == 0 || !strings.Contains(errOut, "identity viewer:bob may not call SetHostEnabled") {
		t.Errorf("viewer: host disable: exit %d, %s", code, errOut)
	}
	if _, errOut, code := as(agent).Run("deploy", "x", "--image", "i", "--memory", "1GiB"); code == 0 || !strings.Contains(errOut, "permission denied: identity agent:h2 may not call Deploy") {
		t.Errorf("agent: deploy: exit %d, %s", code, errOut)
	}
	// The agent of h2, through the API as its agent would call it.
	c := clientFlags{addr: url, tlsCA: agent.CA, tlsCert: agent.Cert, tlsKey: agent.Key}
	cl, err := c.client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	beat := func(host string) error {
		_, err := cl.Heartbeat(ctx, connect.NewRequest(&pinfoldv1.HeartbeatRequest{Host: host, AgentVersion: "t", Protocol: 2, TtlSeconds: 10}))
		return err
	}
	if err := beat("h2"); err != nil {
		t.Errorf("agent h2: heartbeat for h2 = %v", err)
	}
	if err := beat("h1"); connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `identity agent:h2 may not call Heartbeat for host "h1"`) {
		t.Errorf("agent h2: heartbeat for h1 = %v, want permission denied naming identity, method and host", err)
	}
	_, err = cl.ReportStatus(ctx, connect.NewRequest(&pinfoldv1.ReportStatusRequest{Host: "h1", Id: "x", State: "running"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("agent h2: report for h1 = %v", err)
	}
	stream, err := cl.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: "h1"}))
	if err == nil {
		stream.Receive()
		err = stream.Err()
		stream.Close()
	}
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("agent h2: watch h1's instances = %v, want permission denied", err)
	}
	// Its link, as `pinfold agent` opens it: over mutual TLS, the
	// connection taken from net/http is a TLS connection. Its own host's
	// link carries a heartbeat and the desired state; h1's is refused.
	hc, err := c.httpClient()
	if err != nil {
		t.Fatal(err)
	}
	lc := agentlink.NewClient(hc, c.baseURL())
	if _, err := lc.Open(ctx, "h1"); connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `identity agent:h2 may not open the agent link of host "h1"`) {
		t.Errorf("agent h2: link of h1 = %v, want permission denied naming identity and host", err)
	}
	if l, err := lc.Open(ctx, "h2"); err != nil {
		t.Errorf("agent h2: link of h2: %v", err)
	} else {
		go func() {
			for {
				if _, err := l.Receive(); err != nil {
					return
				}
			}
		}()
		if _, err := l.Heartbeat(ctx, &pinfoldv1.HeartbeatRequest{Host: "h2", AgentVersion: "t", Protocol: 2, TtlSeconds: 10}); err != nil {
			t.Errorf("agent h2: heartbeat on its link over TLS: %v", err)
		}
		_ = l.Close()
	}
	// The event log names who did what: admin:alice's deploy (and the
	// viewer's refused disable) with their identities.
	if out, errOut, code := as(admin).Run("deploy", "web", "--count", "1", "--cpu", "1", "--memory", "64MiB", "--image", "busybox"); code != 0 {
		t.Fatalf("admin: deploy: %s %s", out, errOut)
	}
	var evs []struct {
		Identity, Kind, Subject, Outcome string
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, errOut, code := as(viewer).Run("events", "-o", "json")
		if code != 0 {
			t.Fatalf("viewer: events: %s", errOut)
		}
		evs = nil
		_ = json.Unmarshal([]byte(out), &evs)
		if slices.ContainsFunc(evs, func(e struct{ Identity, Kind, Subject, Outcome string }) bool {
			return e.Kind == "Deploy" && e.Subject == "web"
		}) ||
			time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := map[string]bool{"admin:alice Deploy web ok": false, "admin:alice RegisterHost h1 ok": false}
	refused := false
	for _, e := range evs {
		if _, ok := want[e.Identity+" "+e.Kind+" "+e.Subject+" "+e.Outcome]; ok {
			want[e.Identity+" "+e.Kind+" "+e.Subject+" "+e.Outcome] = true
		}
		refused = refused || e.Identity == "viewer:bob" && e.Kind == "SetHostEnabled" && strings.HasPrefix(e.Outcome, "permission_denied")
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("events lack %q: %+v", k, evs)
		}
	}
	if !refused {
		t.Errorf("events lack viewer:bob's refused SetHostEnabled: %+v", evs)
	}
	// /ui/ and /metrics take the API's authorization: readers in, an
	// agent's certificate and no certificate out.
	get := func(who *pki.Files, path string) int {
		t.Helper()
		c := clientFlags{addr: url, tlsCA: srv.CA}
		if who != nil {
			c.tlsCert, c.tlsKey = who.Cert, who.Key
		}
		hc, err := c.httpClient()
		if err != nil {
			t.Fatal(err)
		}
		r, err := hc.Get(url + path)
		if err != nil {
			return 0
		}
		r.Body.Close()
		return r.StatusCode
	}
	for _, tc := range []struct {
		who  *pki.Files
		path string
		want int
	}{
		{&viewer, "/ui/", 200}, {&admin, "/metrics", 200}, {&viewer, "/metrics", 200}, {&agent, "/ui/", 403}, {&agent, "/metrics", 403},
	} {
		if got := get(tc.who, tc.path); got != tc.want {
			t.Errorf("GET %s as %s = %d, want %d", tc.path, tc.who.Cert, got, tc.want)
		}
	}
	if got := get(nil, "/metrics"); got == 200 {
		t.Errorf("GET /metrics without a client certificate = %d", got)
	}
	// Without a client certificate, or without the CA, nothing gets in.
	if _, _, code := runCLI(t, "", "host", "list", "--planner", url, "--tls-ca", srv.CA); code == 0 {
		t.Errorf("without a client certificate the planner must refuse")
	}
	if _, errOut, code := runCLI(t, "", "host", "list", "--planner", url, "--tls-cert", admin.Cert, "--tls-key", admin.Key); code == 0 || !strings.Contains(errOut, "certificate") {
		t.Errorf("without --tls-ca: exit %d, %s; want a certificate error", code, errOut)
	}
	if _, errOut, code := runCLI(t, "", "host", "list", "--planner", url, "--tls-cert", admin.Cert); code != 2 || !strings.Contains(errOut, "go together") {
		t.Errorf("--tls-cert without --tls-key: exit %d %s", code, errOut)
	}
}

func exitCode(err error) int {
	if e, ok := err.(*exitError); ok {
		return e.code
	}
	return -1
}

// TestExternalEtcdTLS: the planner's flags for an external etcd refuse a
// plaintext endpoint off loopback, mixed schemes, TLS flags without
// https:// endpoints or for the embedded etcd, and unreadable files; an
// https:// endpoint gets a client TLS config with the CA and certificate.
func TestExternalEtcdTLS(t *testing.T) {
	dir := t.TempDir() + "/pki"
	if _, errOut, code := runCLI(t, "", "pki", "init", "--dir", dir); code != 0 {
		t.Fatal(errOut)
	}
	cl, err := pki.Issue(dir, pki.RoleAdmin, "etcd-client", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    plannerFlags
		want string // "" = accepted
	}{
		{"plaintext off loopback", plannerFlags{etcdEndpoints: "http://10.0.0.1:2379"}, "plaintext etcd off loopback"},
		{"plaintext off loopback, --insecure", plannerFlags{etcdEndpoints: "http://10.0.0.1:2379", insecure: true}, ""},
		{"plaintext on loopback", plannerFlags{etcdEndpoints: "http://127.0.0.1:2379"}, ""},
		{"mixed", plannerFlags{etcdEndpoints: "https://10.0.0.1:2379,http://127.0.0.1:2379"}, "mixes"},
		{"not a URL", plannerFlags{etcdEndpoints: "10.0.0.1:2379"}, "want http(s)://"},
		{"CA without https", plannerFlags{etcdEndpoints: "http://127.0.0.1:2379", etcdCA: cl.CA}, "need https://"},
		{"cert without key", plannerFlags{etcdEndpoints: "https://10.0.0.1:2379", etcdCert: cl.Cert}, "go together"},
		{"unreadable CA", plannerFlags{etcdEndpoints: "https://10.0.0.1:2379", etcdCA: dir + "/nope.pem"}, "no readable PEM"},
		{"https with CA and certificate", plannerFlags{etcdEndpoints: "https://10.0.0.1:2379,https://10.0.0.2:2379", etcdCA: cl.CA, etcdCert: cl.Cert, etcdKey: cl.Key}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f.etcdTLS()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("etcdTLS = %v, want accepted", err)
			case tc.want != "" && (exitCode(err) != exitBadInput || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("etcdTLS = %v, want bad input naming %q", err, tc.want)
			case tc.f.etcdCert != "" && err == nil && (got == nil || len(got.Certificates) != 1 || got.RootCAs == nil):
				t.Fatalf("etcdTLS = %+v, want the client certificate and the CA", got)
			}
		})
	}
	// TLS flags without --etcd-endpoints: the embedded etcd makes its own.
	log, _ := newLogger("error", os.Stderr)
	f := plannerFlags{dataDir: t.TempDir(), listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1, etcdCA: cl.CA}
	if _, err := f.start(context.Background(), log); exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "external etcd") {
		t.Errorf("--etcd-ca with the embedded etcd = %v", err)
	}
}
