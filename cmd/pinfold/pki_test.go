package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/pki"
)

// TestPKIRevokeRenew: pki revoke shuts a certificate out of a running
// planner (another keeps working), pki list shows it, and pki renew's new
// planner certificate is served without a restart.
func TestPKIRevokeRenew(t *testing.T) {
	dir := t.TempDir() + "/pki"
	if _, errOut, code := runCLI(t, "", "pki", "revoke", "bob", "--dir", dir); code != 2 || !strings.Contains(errOut, "no CA") {
		t.Errorf("revoke without a CA: exit %d, %s", code, errOut)
	}
	var srv pki.Files
	out, errOut, code := runCLI(t, "", "pki", "init", "--dir", dir, "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &srv) != nil {
		t.Fatalf("pki init: exit %d, %s %s", code, out, errOut)
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
	admin, viewer := issue("admin", "alice"), issue("viewer", "bob")
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := plannerFlags{dataDir: t.TempDir(), listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1,
		etcdClient: "http://" + freeAddr(t), etcdPeer: "http://" + freeAddr(t), etcdLogLevel: "fatal",
		tlsCert: srv.Cert, tlsKey: srv.Key, tlsCA: srv.CA}
	// A revocation list that is not one, or without a CA, refuses a start.
	bad := f
	bad.tlsCRL = t.TempDir() + "/bad.crl"
	os.WriteFile(bad.tlsCRL, []byte("garbage\n"), 0o644)
	if _, err := bad.start(context.Background(), log); exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "revocation list") {
		t.Errorf("a start with a malformed --tls-crl = %v", err)
	}
	bad.tlsCA = ""
	bad.tlsNoClientAuth = true
	if _, err := bad.start(context.Background(), log); exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "without --tls-ca") {
		t.Errorf("--tls-crl without --tls-ca = %v", err)
	}
	p, err := f.start(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "https://" + p.Addr
	as := func(c pki.Files) *cli {
		return newCLI(t, url, "--tls-ca", c.CA, "--tls-cert", c.Cert, "--tls-key", c.Key)
	}
	if out, errOut, code := as(viewer).Run("host", "list"); code != 0 {
		t.Fatalf("viewer before revoke: exit %d, %s %s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"carol"}, `name "carol": no certificate for it`},
		{[]string{"--serial", "zz"}, `serial "zz"`},
		{nil, "give a NAME or --serial"},
	} {
		if _, errOut, code := runCLI(t, "", append([]string{"pki", "revoke", "--dir", dir}, tc.args...)...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("pki revoke %q: exit %d, %s; want %q", tc.args, code, errOut, tc.want)
		}
	}
	// bob's connection, open before his revoke: the planner closes it.
	pool := x509.NewCertPool()
	cab, _ := os.ReadFile(srv.CA)
	pool.AppendCertsFromPEM(cab)
	bkp, _ := tls.LoadX509KeyPair(viewer.Cert, viewer.Key)
	bc, err := tls.Dial("tcp", p.Addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{bkp}, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	bc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(bc)
	bc.Write([]byte("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"))
	if r, err := http.ReadResponse(br, nil); err != nil {
		t.Fatalf("bob's open connection, before his revoke: %v", err)
	} else {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	if out, errOut, code := runCLI(t, "", "pki", "revoke", "bob", "--dir", dir); code != 0 || !strings.Contains(out, "viewer:bob") || !strings.Contains(out, ": revoked") {
		t.Fatalf("pki revoke bob: exit %d, %s %s", code, out, errOut)
	}
	if out, _, code := runCLI(t, "", "pki", "revoke", "bob", "--dir", dir); code != 0 || !strings.Contains(out, "already revoked") {
		t.Errorf("pki revoke bob again: exit %d, %s", code, out)
	}
	if _, _, code := as(viewer).Run("host", "list"); code == 0 {
		t.Errorf("a revoked certificate still works")
	}
	if out, errOut, code := as(admin).Run("host", "list"); code != 0 {
		t.Errorf("admin after bob's revoke: exit %d, %s %s", code, out, errOut)
	}
	if l := logs.String(); !strings.Contains(l, "viewer:bob") || !strings.Contains(l, "is revoked") {
		t.Errorf("the planner's log does not name the refused certificate:\n%s", l)
	}
	// The planner sweeps every second: the read ends when it closes the
	// connection (a timeout here means it never did).
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("bob's connection opened before his revoke: read = %v, want it closed", err)
	}
	var cs []pki.Cert
	out, _, _ = runCLI(t, "", "pki", "list", "--dir", dir, "-o", "json")
	if json.Unmarshal([]byte(out), &cs) != nil || len(cs) != 2 || cs[0].Name != "alice" || cs[0].Revoked || cs[1].Name != "bob" || !cs[1].Revoked {
		t.Errorf("pki list: %s", out)
	}
	// The planner's certificate, renewed: new connections see the new one.
	served := func() string {
		t.Helper()
		pool := x509.NewCertPool()
		b, _ := os.ReadFile(srv.CA)
		pool.AppendCertsFromPEM(b)
		kp, _ := tls.LoadX509KeyPair(admin.Cert, admin.Key)
		c, err := tls.Dial("tcp", p.Addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return pki.SerialHex(c.ConnectionState().PeerCertificates[0].SerialNumber)
	}
	before := served()
	var r pki.Renewal
	out, errOut, code = runCLI(t, "", "pki", "renew", "--dir", dir, "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("pki renew: exit %d, %s %s", code, out, errOut)
	}
	if got := served(); got != r.Serial || got == before {
		t.Errorf("after renew the planner serves serial %s; want the new %s (the old was %s)", got, r.Serial, before)
	}
	if out, errOut, code := as(admin).Run("host", "list"); code != 0 {
		t.Errorf("admin after renew: exit %d, %s %s", code, out, errOut)
	}
}

// lockedBuffer is a log's destination that goroutines share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
