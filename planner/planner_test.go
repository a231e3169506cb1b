package planner_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner"
)

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// TestStartClose: a planner starts with embedded etcd and serves; a second
// start over the same store with another share base is a StoreError and
// leaves nothing running.
func TestStartClose(t *testing.T) {
	dir := t.TempDir()
	cfg := planner.Config{Listen: "127.0.0.1:0", DataDir: dir, EtcdClientURL: freeURL(t), EtcdPeerURL: freeURL(t),
		EtcdLogLevel: "fatal", ShareBase: 100, MaxFragmentCores: -1}
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
