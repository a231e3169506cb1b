//go:build hostile

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// heapInUse is this process's heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// etcdDBSize is the size of the embedded etcd's database file under the
// planner's data dir.
func etcdDBSize(t *testing.T, dataDir string) uint64 {
	t.Helper()
	st, err := os.Stat(filepath.Join(dataDir, "etcd", "member", "snap", "db"))
	if err != nil {
		t.Fatal(err)
	}
	return uint64(st.Size())
}

func mb(n uint64) float64 { return float64(n) / (1 << 20) }

// hostile is the tier's planner: in this process, over mutual TLS, with
// the default per-identity bounds and short connection timeouts (2 s).
type hostile struct {
	dir, data, url string
	srv            pki.Files
	admin, viewer  pki.Files
	p              *planner.Planner
	topo           []byte // a dual Xeon Gold 6230's topology, JSON
}

// hostileTimeout is the tier planner's header, body and idle timeout.
const hostileTimeout = 2 * time.Second

// startHostile starts the tier's planner with the PKI in dir (made when
// "") and the rate bound given (the default's when 0).
func startHostile(t *testing.T, dir string, rate float64, burst int) *hostile {
	t.Helper()
	return startHostileWith(t, dir, rate, burst, nil)
}

// startHostileWith is startHostile with the planner's flags set by set
// too (when not nil).
func startHostileWith(t *testing.T, dir string, rate float64, burst int, set func(*plannerFlags)) *hostile {
	t.Helper()
	h := &hostile{dir: dir, data: t.TempDir()}
	var err error
	if dir == "" {
		h.dir = t.TempDir() + "/pki"
		if h.srv, err = pki.Init(h.dir, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	} else {
		h.srv = pki.ServerFiles(dir)
	}
	if rate == 0 {
		rate, burst = api.DefaultRatePerIdentity, api.DefaultBurstPerIdentity
	}
	h.admin, h.viewer = h.issue(t, pki.RoleAdmin, "alice"), h.issue(t, pki.RoleViewer, "bob")
	log, _ := newLogger("error", os.Stderr)
	f := plannerFlags{dataDir: h.data, listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1,
		etcdClient: "http://" + freeAddr(t), etcdPeer: "http://" + freeAddr(t), etcdLogLevel: "fatal",
		tlsCert: h.srv.Cert, tlsKey: h.srv.Key, tlsCA: h.srv.CA,
		headerTimeout: hostileTimeout, bodyTimeout: hostileTimeout, idleTimeout: hostileTimeout,
		identityMaxConns: api.DefaultConnsPerIdentity, identityRate: rate, identityBurst: burst}
	if set != nil {
		set(&f)
	}
	if h.p, err = f.start(context.Background(), log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.p.Close)
	h.url = "https://" + h.p.Addr
	h.topo, _ = json.Marshal(topologytest.DualXeonGold6230().Topology())
	if _, err := h.client(h.admin).RegisterHost(t.Context(), connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: "h1", TopologyJson: h.topo})); err != nil {
		t.Fatalf("admin: register h1: %v", err)
	}
	return h
}

// issue is the certificate of role and name, issued on first use.
func (h *hostile) issue(t *testing.T, role pki.Role, name string) pki.Files {
	t.Helper()
	if f := pki.ClientFiles(h.dir, role, name); fileExists(f.Cert) {
		return f
	}
	f, err := pki.Issue(h.dir, role, name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tlsConfig is a client's TLS with f's certificate.
func (h *hostile) tlsConfig(t *testing.T, f pki.Files) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := loadCA("ca", h.srv.CA)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca, MinVersion: tls.VersionTLS12}
}

// httpClient is an HTTP client as f, on connections of its own (HTTP/1.1,
// as the CLI's; h2: HTTP/2).
func (h *hostile) httpClient(t *testing.T, f pki.Files, h2 bool) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: h.tlsConfig(t, f), ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// client is the CLI's API client as f.
func (h *hostile) client(f pki.Files) pinfoldv1connect.PlannerServiceClient {
	cf := clientFlags{addr: h.url, tlsCA: f.CA, tlsCert: f.Cert, tlsKey: f.Key}
	cl, err := cf.client()
	if err != nil {
		panic(err) // the tier's own files: cannot happen
	}
	return cl
}

// agent registers name as its agent, with topo.
func (h *hostile) agent(t *testing.T, name string, topo []byte) (pki.Files, error) {
	t.Helper()
	f := h.issue(t, pki.RoleAgent, name)
	_, err := h.client(f).RegisterHost(t.Context(), connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: name, TopologyJson: topo,
		Agent: true, AgentVersion: "hostile", Protocol: model.Protocol}))
	return f, err
}

// processCPU is this process's CPU time, user and system.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heldWithin reports whether the server still holds conn after wait:
// false once it closed it.
func heldWithin(conn net.Conn, wait time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, conn)
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// tlsArgs are the CLI's flags for the planner as f.
func (h *hostile) tlsArgs(f pki.Files) []string {
	return []string{"--planner", h.url, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
