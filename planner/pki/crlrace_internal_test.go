package pki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCRLRemovedBetweenStatAndRead: a revocation list rewritten and then
// deleted between loadCRL's stat and its read keeps the revocations in
// force (the attack review found the read's "no file" taken for an empty
// list). The gap is held open with the server's lock, as a slow reader
// would be. Control: before the race, the revoked certificate is refused.
func TestCRLRemovedBetweenStatAndRead(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	if _, err := Init(dir, nil, now); err != nil {
		t.Fatal(err)
	}
	bob, err := Issue(dir, RoleViewer, "bob", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Revoke(dir, "bob", nil, now); err != nil {
		t.Fatal(err)
	}
	srv := ServerFiles(dir)
	crl := filepath.Join(dir, CRLFile)
	s, err := NewServerTLS(ServerConfig{CertFile: srv.Cert, KeyFile: srv.Key, CAFile: srv.CA, CRLFile: crl})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(bob.Cert, bob.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(kp.Certificate[0])
	if s.Check(cert) == nil {
		t.Fatal("control: bob's revoked certificate passes")
	}
	// The list changes (a later mtime), then goes while loadCRL waits.
	later := time.Now().Add(2 * time.Second)
	os.Chtimes(crl, later, later)
	s.mu.Lock()
	done := make(chan error, 1)
	go func() { done <- s.loadCRL() }()
	time.Sleep(100 * time.Millisecond) // loadCRL has stat'ed the changed file and waits for the lock
	os.Remove(crl)
	s.mu.Unlock()
	<-done
	if s.Check(cert) == nil {
		t.Error("bob's revoked certificate passes once the list went between the stat and the read")
	}
}
