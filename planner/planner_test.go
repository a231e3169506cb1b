package planner_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/test/testenv"
)

func freeURL(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
}

// embedded is the configuration of a test planner with embedded etcd on
// data dir dir and free loopback ports.
func embedded(t *testing.T, dir string) planner.Config {
	t.Helper()
	return planner.Config{Listen: "127.0.0.1:0", DataDir: dir, EtcdClientURL: freeURL(t), EtcdPeerURL: freeURL(t),
		EtcdLogLevel: "fatal", ShareBase: 100, MaxFragmentCores: -1}
}

// TestStartClose: a planner starts with embedded etcd and serves; a second
// start over the same store with another share base is a StoreError and
// leaves nothing running.
func TestStartClose(t *testing.T) {
	dir := t.TempDir()
	cfg := embedded(t, dir)
	p, err := planner.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.Get(fmt.Sprintf("http://%s/healthz", p.Addr))
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", r, err)
	}
	r.Body.Close()
	p.Close()
	if _, err := http.Get(fmt.Sprintf("http://%s/healthz", p.Addr)); err == nil {
		t.Errorf("the API still answers after Close")
	}
	cfg.ShareBase = 1000
	_, err = planner.Start(context.Background(), cfg)
	var se *planner.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("restart with share base 1000 over a store made with 100 = %v, want a StoreError", err)
	}
	// Everything was stopped: the same ports serve a planner again.
	cfg.ShareBase = 100
	p, err = planner.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start after a failed start: %v", err)
	}
	p.Close()
	// The embedded etcd, plaintext and unauthenticated, stays on loopback.
	cfg.EtcdClientURL = "http://0.0.0.0:2379"
	if _, err := planner.Start(context.Background(), cfg); !errors.As(err, &se) || !strings.Contains(err.Error(), "loopback only") {
		t.Errorf("embedded etcd on 0.0.0.0 = %v, want a StoreError", err)
	}
}

// TestEmbeddedEtcdLockedDown: the embedded etcd serves TLS and only to a
// client certificate from the CA the planner made at start: a plaintext
// client and a TLS client without a certificate get nothing (before, a
// local plaintext deleterange could remove instances behind the API).
func TestEmbeddedEtcdLockedDown(t *testing.T) {
	dir := t.TempDir()
	cfg := embedded(t, dir)
	client := cfg.EtcdClientURL
	p, err := planner.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	host := strings.TrimPrefix(client, "http://")
	get := func(c *http.Client, url string) (int, error) {
		c.Timeout = 5 * time.Second
		r, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		r.Body.Close()
		return r.StatusCode, nil
	}
	if code, err := get(&http.Client{}, "http://"+host+"/version"); err == nil && code == 200 {
		t.Errorf("a plaintext client read the embedded etcd's /version")
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(dir, "etcd-tls", pki.CACert))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("the embedded etcd's CA: %v", err)
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, err := get(noCert, "https://"+host+"/version"); err == nil {
		t.Errorf("a TLS client without a certificate got %d from the embedded etcd", code)
	} else {
		t.Logf("without a client certificate: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd-tls", pki.CAKey)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the embedded etcd's CA key is kept after start: %v", err)
	}
	for _, f := range []string{pki.ServerKey, "admin-planner-key.pem"} {
		if st, err := os.Stat(filepath.Join(dir, "etcd-tls", f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "etcd-tls", "admin-planner.pem"), filepath.Join(dir, "etcd-tls", "admin-planner-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	if code, err := get(withCert, "https://"+host+"/version"); err != nil || code != 200 {
		t.Errorf("the planner's own client certificate: %d %v, want 200", code, err)
	}
}

// TestCleanShutdownLogs: etcd's logs go through the planner's logger
// (component=etcd), and a planner that starts, serves and stops cleanly
// logs no ERROR line and no stack trace, etcd's included.
func TestCleanShutdownLogs(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p, err := planner.Start(context.Background(), planner.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), EtcdClientURL: "https" + strings.TrimPrefix(freeURL(t), "http"),
		EtcdPeerURL: "https" + strings.TrimPrefix(freeURL(t), "http"), EtcdLogLevel: "info", ShareBase: 100, MaxFragmentCores: -1, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.Get(fmt.Sprintf("http://%s/healthz", p.Addr))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	time.Sleep(200 * time.Millisecond)
	p.Close()
	out := buf.String()
	if !strings.Contains(out, `"component":"etcd"`) {
		t.Errorf("no etcd log line went through the planner's logger:\n%s", tailLines(out, 20))
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, "goroutine ") || strings.Contains(line, "stacktrace") {
			t.Errorf("a clean start and stop logged: %s", line)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
