package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/pki"
)

// tlsPlanner runs a planner with embedded etcd and mutual TLS in this
// process, each identity bounded to rate calls a second after burst (0:
// the defaults), and returns a CLI runner for a certificate of the given
// role and name, the planner's host:port and its CA file.
func tlsPlanner(t *testing.T, rate float64, burst int) (as func(role, name string) *cli, addr, ca string) {
	t.Helper()
	dir := t.TempDir() + "/pki"
	out, errOut, code := runCLI(t, "", "pki", "init", "--dir", dir, "-o", "json")
	var srv pki.Files
	if code != 0 || json.Unmarshal([]byte(out), &srv) != nil {
		t.Fatalf("pki init: exit %d, %s%s", code, out, errOut)
	}
	log, _ := newLogger("error", os.Stderr)
	f := plannerFlags{dataDir: t.TempDir(), listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1,
		etcdClient: "http://" + freeAddr(t), etcdPeer: "http://" + freeAddr(t), etcdLogLevel: "fatal",
		tlsCert: srv.Cert, tlsKey: srv.Key, tlsCA: srv.CA, identityMaxConns: 64, identityRate: rate, identityBurst: burst}
	p, err := f.start(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	as = func(role, name string) *cli {
		out, errOut, code := runCLI(t, "", "pki", "issue", role, name, "--dir", dir, "-o", "json")
		var c pki.Files
		if code != 0 || json.Unmarshal([]byte(out), &c) != nil {
			t.Fatalf("pki issue %s %s: exit %d, %s %s", role, name, code, out, errOut)
		}
		return newCLI(t, "https://"+p.Addr, "--tls-ca", c.CA, "--tls-cert", c.Cert, "--tls-key", c.Key)
	}
	return as, p.Addr, srv.CA
}

// TestApplyManyServicesUnderTheRateLimit: an admin's `apply -f` of more
// services than its identity may call for in a second completes (issue 36
// item 8: an apply of 2,300 services was refused part-way by the
// identity's rate). Here 120 services against 20 calls a second after a
// burst of 20: the CLI waits out each refusal of its rate and sends the
// call again. Control: without the waits the apply stops at a refusal.
func TestApplyManyServicesUnderTheRateLimit(t *testing.T) {
	const services = 120
	var src strings.Builder
	src.WriteString("services:\n")
	for i := range services {
		fmt.Fprintf(&src, "  s%03d:\n    image: busybox\n    cpu: 0.01\n    memory: 16MiB\n", i)
	}
	file := filepath.Join(t.TempDir(), "many.yaml")
	if err := os.WriteFile(file, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		waits  bool
		wantOK bool
	}{
		{"the CLI waits out its rate", true, true},
		{"control: no waits", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.waits {
				saved := rateWaits
				rateWaits = nil
				t.Cleanup(func() { rateWaits = saved })
			}
			as, _, _ := tlsPlanner(t, 20, 20)
			alice := as("admin", "alice")
			if out, errOut, code := alice.Run("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230")); code != 0 {
				t.Fatalf("host add: exit %d, %s%s", code, out, errOut)
			}
			out, errOut, code := alice.Run("apply", "-f", file)
			if (code == 0) != tc.wantOK {
				t.Fatalf("apply of %d services: exit %d, want success %v\n%s%s", services, code, tc.wantOK, tail(out), tail(errOut))
			}
			if !tc.wantOK {
				if !strings.Contains(errOut, "times a second") {
					t.Errorf("apply failed, but not on its rate: %s", tail(errOut))
				}
				return
			}
			var ps []struct {
				Service string `json:"service"`
			}
			out, errOut, code = alice.Run("ps", "-o", "json")
			if code != 0 || json.Unmarshal([]byte(out), &ps) != nil {
				t.Fatalf("ps: exit %d, %s%s", code, tail(out), errOut)
			}
			if len(ps) != services {
				t.Errorf("%d instances after the apply, want %d", len(ps), services)
			}
		})
	}
}

// tail is the last 600 bytes of s.
func tail(s string) string {
	if len(s) > 600 {
		return "…" + s[len(s)-600:]
	}
	return s
}
