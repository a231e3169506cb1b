package pki_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/pki"
)

// served is a real TLS server over loopback with a ServerTLS's config, and
// a way to call it as one certificate or another.
type served struct {
	t    *testing.T
	url  string
	pool *x509.CertPool
	mu   sync.Mutex
	errs []error
}

func serve(t *testing.T, dir string) (*served, *pki.ServerTLS) {
	t.Helper()
	srv := pki.ServerFiles(dir)
	s := &served{t: t, pool: x509.NewCertPool()}
	st, err := pki.NewServerTLS(pki.ServerConfig{CertFile: srv.Cert, KeyFile: srv.Key, CAFile: srv.CA, CRLFile: filepath.Join(dir, pki.CRLFile),
		OnError: func(err error) { s.mu.Lock(); s.errs = append(s.errs, err); s.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := st.Listener(raw)
	h := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ErrorLog: log.New(io.Discard, "", 0)}
	go h.Serve(ln)
	t.Cleanup(func() { h.Close() })
	s.url = "https://" + ln.Addr().String()
	b, _ := os.ReadFile(srv.CA)
	s.pool.AppendCertsFromPEM(b)
	return s, st
}

// call makes one request on a new connection as f; it returns the
// server's certificate's serial, or the error.
func (s *served) call(f pki.Files) (string, error) {
	s.t.Helper()
	kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		s.t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.pool, Certificates: []tls.Certificate{kp}}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	r, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(s.url)
	if err != nil {
		return "", err
	}
	r.Body.Close()
	return pki.SerialHex(r.TLS.PeerCertificates[0].SerialNumber), nil
}

// TestRevokeWithoutRestart: a certificate that worked fails the handshake
// once pki revoke lists it, with the server still running; others keep
// working; revoking again changes nothing.
func TestRevokeWithoutRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := pki.Init(dir, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	bob, _ := pki.Issue(dir, pki.RoleViewer, "bob", time.Now())
	alice, _ := pki.Issue(dir, pki.RoleAdmin, "alice", time.Now())
	s, _ := serve(t, dir)
	for _, f := range []pki.Files{bob, alice} {
		if _, err := s.call(f); err != nil {
			t.Fatalf("before revoke, %s: %v", f.Cert, err)
		}
	}
	rs, err := pki.Revoke(dir, "bob", nil, time.Now())
	if err != nil || len(rs) != 1 || rs[0].Already || rs[0].Name != "bob" {
		t.Fatalf("revoke bob = %+v, %v", rs, err)
	}
	if _, err := s.call(bob); err == nil {
		t.Errorf("a revoked certificate still works")
	} else {
		t.Logf("revoked: %v", err)
	}
	if _, err := s.call(alice); err != nil {
		t.Errorf("another certificate stopped working: %v", err)
	}
	if rs, err := pki.Revoke(dir, "bob", nil, time.Now()); err != nil || len(rs) != 1 || !rs[0].Already {
		t.Errorf("revoke bob again = %+v, %v; want already revoked", rs, err)
	}
	certs, _ := pki.List(dir)
	for _, c := range certs {
		if c.Revoked != (c.Name == "bob") {
			t.Errorf("list: %s revoked %v", c.Identity, c.Revoked)
		}
	}
	// By serial: alice's, as the list shows it.
	var serial string
	for _, c := range certs {
		if c.Name == "alice" {
			serial = c.Serial
		}
	}
	if _, err := pki.Revoke(dir, "", []string{serial}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.call(alice); err == nil {
		t.Errorf("a certificate revoked by serial still works")
	}
}

// TestRevokeFailsClosed: a revocation list deleted while the server runs
// keeps its revocations in force, reported (issue 36: deleting it served a
// revoked viewer again); a list written again is read. Control: a list
// missing at start revokes nothing.
func TestRevokeFailsClosed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := pki.Init(dir, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	bob, _ := pki.Issue(dir, pki.RoleViewer, "bob", time.Now())
	carol, _ := pki.Issue(dir, pki.RoleViewer, "carol", time.Now())
	s, _ := serve(t, dir)
	if _, err := s.call(bob); err != nil {
		t.Fatalf("control: bob with no list: %v", err)
	}
	if _, err := pki.Revoke(dir, "bob", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.call(bob); err == nil {
		t.Fatal("a revoked certificate works")
	}
	if err := os.Remove(filepath.Join(dir, pki.CRLFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.call(bob); err == nil {
		t.Error("bob's certificate works again after the list was deleted")
	}
	s.mu.Lock()
	errs := fmt.Sprint(s.errs)
	s.mu.Unlock()
	if !strings.Contains(errs, "was removed: its 1 revoked certificates stay revoked") {
		t.Errorf("reported: %s; want the removal named", errs)
	}
	if _, err := pki.Revoke(dir, "carol", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.call(carol); err == nil {
		t.Error("a list written again after the removal is not read")
	}
}

// TestRevokeBadInput: what matches nothing, or is no serial, is an error
// that changes nothing.
func TestRevokeBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := pki.Revoke(dir, "bob", nil, time.Now()); err == nil || !strings.Contains(err.Error(), "no CA") {
		t.Errorf("revoke without a CA = %v", err)
	}
	pki.Init(dir, nil, time.Now())
	pki.Issue(dir, pki.RoleViewer, "bob", time.Now())
	for _, tc := range []struct {
		name    string
		serials []string
		want    string
	}{
		{"carol", nil, `name "carol": no certificate for it`},
		{"", []string{"xyz"}, `serial "xyz"`},
		{"", []string{"-5"}, `serial "-5"`},
		{"", nil, "revoke what?"},
	} {
		t.Run(tc.name+strings.Join(tc.serials, ","), func(t *testing.T) {
			if _, err := pki.Revoke(dir, tc.name, tc.serials, time.Now()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("= %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, pki.CRLFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused revoke wrote the list: %v", err)
	}
}

// TestBadRevocationList: a revocation list that is not a CRL signed by the
// CA refuses a start, and one that turns bad while serving keeps the last
// good list in force (a revoked certificate stays out) and is reported.
func TestBadRevocationList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki.Init(dir, nil, time.Now())
	bob, _ := pki.Issue(dir, pki.RoleViewer, "bob", time.Now())
	alice, _ := pki.Issue(dir, pki.RoleAdmin, "alice", time.Now())
	s, _ := serve(t, dir)
	if _, err := pki.Revoke(dir, "bob", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.call(bob); err == nil {
		t.Fatal("a revoked certificate still works")
	}
	crl := filepath.Join(dir, pki.CRLFile)
	// Another CA's list, then garbage: neither opens the gates.
	other := t.TempDir()
	pki.Init(other, nil, time.Now())
	pki.Issue(other, pki.RoleViewer, "x", time.Now())
	pki.Revoke(other, "x", nil, time.Now())
	foreign, _ := os.ReadFile(filepath.Join(other, pki.CRLFile))
	for _, bad := range [][]byte{foreign, []byte("not a list\n")} {
		if err := os.WriteFile(crl, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.call(bob); err == nil {
			t.Errorf("a bad list (%.20q) let a revoked certificate in", bad)
		}
		if _, err := s.call(alice); err != nil {
			t.Errorf("a bad list (%.20q) shut out a good certificate: %v", bad, err)
		}
		srv := pki.ServerFiles(dir)
		if _, err := pki.NewServerTLS(pki.ServerConfig{CertFile: srv.Cert, KeyFile: srv.Key, CAFile: srv.CA, CRLFile: crl}); err == nil || !strings.Contains(err.Error(), "revocation list") {
			t.Errorf("a start with a bad list (%.20q) = %v, want an error", bad, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) == 0 || !strings.Contains(s.errs[0].Error(), "stays in force") {
		t.Errorf("a bad list was not reported: %v", s.errs)
	}
}

// TestServerCertificateReload: a replaced server certificate and key are
// served to new connections without a restart; a half-replaced pair (a
// key that does not match) keeps the old one served.
func TestServerCertificateReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki.Init(dir, nil, time.Now())
	alice, _ := pki.Issue(dir, pki.RoleAdmin, "alice", time.Now())
	s, _ := serve(t, dir)
	before, err := s.call(alice)
	if err != nil {
		t.Fatal(err)
	}
	// A new server certificate from the same CA, moved over planner.pem.
	srv := pki.ServerFiles(dir)
	next, err := pki.IssueServer(dir, "next", []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next.Cert, srv.Cert); err != nil {
		t.Fatal(err)
	}
	// Only the certificate so far: it does not match the old key.
	if got, err := s.call(alice); err != nil || got != before {
		t.Errorf("half-replaced: serial %s, %v; want the old %s still served", got, err, before)
	}
	if err := os.Rename(next.Key, srv.Key); err != nil {
		t.Fatal(err)
	}
	after, err := s.call(alice)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Errorf("still serving serial %s after the files were replaced", before)
	}
	// Renew does the same in one step, and keeps the old pair.
	r, err := pki.Renew(dir, []string{"planner.example"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.call(alice); err != nil || got != r.Serial || got == after {
		t.Errorf("after renew: serial %s, %v; want the new %s (the old was %s)", got, err, r.Serial, after)
	}
	if _, err := tls.LoadX509KeyPair(r.Old, r.OldKey); err != nil {
		t.Errorf("the old pair was not kept: %v", err)
	}
	kp, _ := tls.LoadX509KeyPair(srv.Cert, srv.Key)
	c, _ := x509.ParseCertificate(kp.Certificate[0])
	if c.VerifyHostname("planner.example") != nil || c.VerifyHostname("localhost") != nil {
		t.Errorf("the renewed certificate's names: %v %v", c.DNSNames, c.IPAddresses)
	}
}

// TestNoRoleRefused: a certificate the CA signed that carries no pinfold
// role fails the handshake, with an error naming it.
func TestNoRoleRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki.Init(dir, nil, time.Now())
	s, st := serve(t, dir)
	cb, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	kb, _ := os.ReadFile(filepath.Join(dir, pki.CAKey))
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
	f := pki.Files{Cert: filepath.Join(dir, "mallory.pem"), Key: filepath.Join(dir, "mallory-key.pem")}
	os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	if _, err := s.call(f); err == nil {
		t.Errorf("a certificate with no valid role was served")
	}
	leaf, _ := x509.ParseCertificate(der)
	if err := st.Check(leaf); err == nil || !strings.Contains(err.Error(), `"mallory"`) {
		t.Errorf("Check = %v, want an error naming mallory", err)
	}
}

// TestRevokeClosesOpenConnections: Sweep closes a connection whose
// certificate was revoked after its handshake, and leaves the others open.
func TestRevokeClosesOpenConnections(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki.Init(dir, nil, time.Now())
	bob, _ := pki.Issue(dir, pki.RoleViewer, "bob", time.Now())
	alice, _ := pki.Issue(dir, pki.RoleAdmin, "alice", time.Now())
	s, st := serve(t, dir)
	open := func(f pki.Files) (*tls.Conn, *bufio.Reader) {
		t.Helper()
		kp, _ := tls.LoadX509KeyPair(f.Cert, f.Key)
		c, err := tls.Dial("tcp", strings.TrimPrefix(s.url, "https://"), &tls.Config{RootCAs: s.pool, Certificates: []tls.Certificate{kp}, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		return c, bufio.NewReader(c)
	}
	get := func(c *tls.Conn, br *bufio.Reader) error {
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
			return err
		}
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		return r.Body.Close()
	}
	bc, bbr := open(bob)
	ac, abr := open(alice)
	for _, c := range []struct {
		c  *tls.Conn
		br *bufio.Reader
	}{{bc, bbr}, {ac, abr}} {
		if err := get(c.c, c.br); err != nil {
			t.Fatalf("before revoke: %v", err)
		}
	}
	if n := st.Sweep(); n != 0 {
		t.Errorf("a sweep with nothing revoked closed %d connections", n)
	}
	if _, err := pki.Revoke(dir, "bob", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := st.Sweep(); n != 1 {
		t.Errorf("the sweep after revoking bob closed %d connections, want 1", n)
	}
	if err := get(bc, bbr); err == nil {
		t.Errorf("bob's open connection still serves after his revoke")
	}
	if err := get(ac, abr); err != nil {
		t.Errorf("alice's open connection: %v", err)
	}
}
