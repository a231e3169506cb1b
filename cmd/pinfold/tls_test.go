package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a certificate signed by parent (self-signed when nil)
// and its key as PEM files; it returns the paths and the certificate.
func writeCert(t *testing.T, dir, name string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (string, string, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	cp, kp := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	os.WriteFile(cp, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(kp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cp, kp, cert, key
}

// TestPlannerTLS: the planner serves TLS with client certificates required;
// the CLI connects with the CA and a client certificate, and fails without.
func TestPlannerTLS(t *testing.T) {
	dir := t.TempDir()
	caPath, _, ca, caKey := writeCert(t, dir, "ca", true, nil, nil)
	srvCert, srvKey, _, _ := writeCert(t, dir, "server", false, ca, caKey)
	cliCert, cliKey, _, _ := writeCert(t, dir, "client", false, ca, caKey)
	f := plannerFlags{dataDir: t.TempDir(), listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1,
		etcdClient: "http://" + freeAddr(t), etcdPeer: "http://" + freeAddr(t), etcdLogLevel: "fatal",
		tlsCert: srvCert, tlsKey: srvKey, tlsCA: caPath}
	log, _ := newLogger("error", os.Stderr)
	p, err := f.start(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "https://" + p.Addr
	if out, errOut, code := runCLI(t, "", "host", "list", "--planner", url, "--tls-ca", caPath, "--tls-cert", cliCert, "--tls-key", cliKey); code != 0 || !strings.Contains(out, "NAME") {
		t.Fatalf("over mutual TLS: exit %d, %s %s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "", "host", "list", "--planner", url, "--tls-cert", cliCert, "--tls-key", cliKey); code == 0 || !strings.Contains(errOut, "certificate") {
		t.Errorf("without --tls-ca: exit %d, %s; want a certificate error", code, errOut)
	}
	if _, _, code := runCLI(t, "", "host", "list", "--planner", url, "--tls-ca", caPath); code == 0 {
		t.Errorf("without a client certificate the planner must refuse")
	}
	if _, errOut, code := runCLI(t, "", "host", "list", "--planner", url, "--tls-cert", cliCert); code != 2 || !strings.Contains(errOut, "go together") {
		t.Errorf("--tls-cert without --tls-key: exit %d %s", code, errOut)
	}
}
