package pki_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/pki"
)

func TestInitIssueVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/pki"
	now := time.Now()
	srv, err := pki.Init(dir, []string{"planner.example", "10.1.2.3"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(dir, nil, now); err == nil || !strings.Contains(err.Error(), "has a CA already") {
		t.Errorf("a second init = %v, want a refusal", err)
	}
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(srv.CA)
	pool.AppendCertsFromPEM(b)
	leaf := func(f pki.Files) *x509.Certificate {
		t.Helper()
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(kp.Certificate[0])
		if st, _ := os.Stat(f.Key); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f.Key, st.Mode().Perm())
		}
		return c
	}
	s := leaf(srv)
	for _, name := range []string{"localhost", "planner.example", "127.0.0.1", "10.1.2.3"} {
		if _, err := s.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	for _, tc := range []struct {
		role pki.Role
		name string
	}{{pki.RoleAgent, "h1"}, {pki.RoleAdmin, "alice"}, {pki.RoleViewer, "bob"}} {
		f, err := pki.Issue(dir, tc.role, tc.name, now)
		if err != nil {
			t.Fatal(err)
		}
		c := leaf(f)
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s certificate does not verify as a client: %v", tc.role, err)
		}
		id, err := pki.IdentityOf(c)
		if err != nil || id != (pki.Identity{Name: tc.name, Role: tc.role}) {
			t.Errorf("IdentityOf(%s %s) = %+v, %v", tc.role, tc.name, id, err)
		}
	}
	if _, err := pki.IdentityOf(s); err == nil {
		t.Errorf("the server certificate reads as a client identity")
	}
	if _, err := pki.Issue(dir, "root", "x", now); err == nil {
		t.Errorf("role root accepted")
	}
	if _, err := pki.Issue(dir, pki.RoleAgent, "../h", now); err == nil {
		t.Errorf("name ../h accepted")
	}
	// A second issue of a name says it was issued before and what to do
	// (it said "open …-key.pem: file exists"), and leaves the pair as it was.
	before, _ := os.ReadFile(pki.ClientFiles(dir, pki.RoleAdmin, "alice").Key)
	if _, err := pki.Issue(dir, pki.RoleAdmin, "alice", now); err == nil || !errors.Is(err, fs.ErrExist) ||
		!strings.Contains(err.Error(), `"alice" was issued before`) || !strings.Contains(err.Error(), "pki revoke") {
		t.Errorf("issuing admin alice again = %v, want it named as issued before, with the way out", err)
	}
	if after, _ := os.ReadFile(pki.ClientFiles(dir, pki.RoleAdmin, "alice").Key); !bytes.Equal(before, after) {
		t.Errorf("issuing admin alice again changed its key file")
	}
	if _, err := pki.Issue(t.TempDir(), pki.RoleAgent, "h1", now); err == nil || !strings.Contains(err.Error(), "pki init") {
		t.Errorf("issue without a CA = %v", err)
	}
}
