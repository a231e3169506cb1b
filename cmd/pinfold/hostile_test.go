package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
	"github.com/pinfold/pinfold/planner/pki"
)

// Bounds of TestRefusedFloodOverTLS, with margin over what it measured
// (the 2-core development machine, 2026-11-26: heap in use after GC
// 8.5 → 12–14 MB, the embedded etcd's database file 16 → 16 MB, in 6–8 s;
// docs/BENCHMARKS.md). Before
// issue 26, 60 such calls took the planner to 2.1 GB and etcd's data to
// 149 MB, and 1,000 would have filled etcd's quota.
const (
	floodHeapGrowthBound = 64 << 20 // heap in use after GC, growth over the flood
	floodEtcdGrowthBound = 32 << 20 // the embedded etcd's database file, growth over the flood
)

// TestRefusedFloodOverTLS replays issue 26 N1 against a real planner over
// mutual TLS: 1,000 viewer deploys with a 4 MB service name, all refused,
// interleaved with 12 admin host disable/enable calls. The planner's heap
// (this process: the planner runs in it) and the embedded etcd's database
// stay within the bounds above, and every admin call has its event.
func TestRefusedFloodOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 4 GB of refused requests")
	}
	dir := t.TempDir() + "/pki"
	if _, errOut, code := runCLI(t, "", "pki", "init", "--dir", dir); code != 0 {
		t.Fatalf("pki init: %s", errOut)
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
	srv := pki.Files{CA: filepath.Join(dir, pki.CACert), Cert: filepath.Join(dir, pki.ServerCert), Key: filepath.Join(dir, pki.ServerKey)}

	log, _ := newLogger("error", os.Stderr)
	data := t.TempDir()
	f := plannerFlags{dataDir: data, listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1,
		etcdClient: "http://" + freeAddr(t), etcdPeer: "http://" + freeAddr(t), etcdLogLevel: "fatal",
		tlsCert: srv.Cert, tlsKey: srv.Key, tlsCA: srv.CA}
	p, err := f.start(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "https://" + p.Addr
	topo := t.TempDir() + "/h.json"
	tj, _, _ := runCLI(t, "", "topology", "--sysfs-root", "../../numa/testdata/sysfs/dual-xeon-gold-6230", "-o", "json")
	if err := os.WriteFile(topo, []byte(tj), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, "", "host", "add", "h1", "--topology", topo, "--planner", url,
		"--tls-ca", admin.CA, "--tls-cert", admin.Cert, "--tls-key", admin.Key); code != 0 {
		t.Fatalf("admin: host add h1: exit %d, %s %s", code, out, errOut)
	}
	client := func(c pki.Files) pinfoldPlanner {
		t.Helper()
		cf := clientFlags{addr: url, tlsCA: c.CA, tlsCert: c.Cert, tlsKey: c.Key}
		cl, err := cf.client()
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	adm, view := client(admin), client(viewer)
	ctx := t.Context()

	heapBefore, dbBefore := heapInUse(), etcdDBSize(t, data)
	start := time.Now()
	const flood, every = 1000, 84 // 12 admin calls: at 0, 84, …, 924
	big := strings.Repeat("x", 4_000_000)
	var adminCalls []bool // the enabled flag of each admin call, in order
	for i := range flood {
		if i%every == 0 {
			enabled := len(adminCalls)%2 == 1
			if _, err := adm.SetHostEnabled(ctx, connect.NewRequest(&pinfoldv1.SetHostEnabledRequest{Name: "h1", Enabled: enabled})); err != nil {
				t.Fatalf("admin call %d: %v", len(adminCalls), err)
			}
			adminCalls = append(adminCalls, enabled)
		}
		req := &pinfoldv1.DeployRequest{Service: big, Image: "busybox", Count: 1, Cpu: "1", MemoryBytes: 64 << 20}
		if _, err := view.Deploy(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("viewer deploy %d = %.300v, want permission denied", i, err)
		}
		// Checked along the way too, so that a planner without the bounds
		// fails here and does not take gigabytes from the machine.
		if i%10 == 9 || i == flood-1 {
			checkFloodBounds(t, i+1, heapBefore, dbBefore, heapInUse(), etcdDBSize(t, data))
		}
	}
	wall := time.Since(start)
	t.Logf("%d refused viewer deploys of 4 MB with %d admin calls: %s; heap in use after GC %.1f → %.1f MB; etcd database %.1f → %.1f MB",
		flood, len(adminCalls), wall.Round(time.Millisecond), mb(heapBefore), mb(heapInUse()), mb(dbBefore), mb(etcdDBSize(t, data)))

	// Every admin call has its event, in order, read by the admin.
	var got []string
	after := ""
	for {
		r, err := adm.ListEvents(ctx, connect.NewRequest(&pinfoldv1.ListEventsRequest{After: after}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Msg.Events {
			if ev.Identity == "admin:alice" && ev.Kind == "SetHostEnabled" && ev.Subject == "h1" && ev.Outcome == "ok" {
				got = append(got, ev.Request)
			}
		}
		if len(r.Msg.Events) == 0 {
			break
		}
		after = r.Msg.Events[len(r.Msg.Events)-1].Id
	}
	checkFloodBounds(t, flood, heapBefore, dbBefore, heapInUse(), etcdDBSize(t, data))
	if len(got) != len(adminCalls) {
		t.Fatalf("%d events of the admin's %d host disable/enable calls, want all: %q", len(got), len(adminCalls), got)
	}
	for i, enabled := range adminCalls {
		var req struct{ Enabled bool }
		if err := json.Unmarshal([]byte(got[i]), &req); err != nil || req.Enabled != enabled {
			t.Errorf("event %d of the admin's calls: request %q, want enabled=%v", i, got[i], enabled)
		}
	}
}

// checkFloodBounds fails the test when the heap in use or the etcd
// database grew past the bounds after n refused calls.
func checkFloodBounds(t *testing.T, n int, heapBefore, dbBefore, heap, db uint64) {
	t.Helper()
	if heap > heapBefore+floodHeapGrowthBound {
		t.Fatalf("after %d refused calls the heap in use after GC grew %.1f → %.1f MB, want at most %.0f MB more",
			n, mb(heapBefore), mb(heap), mb(floodHeapGrowthBound))
	}
	if db > dbBefore+floodEtcdGrowthBound {
		t.Fatalf("after %d refused calls the etcd database grew %.1f → %.1f MB, want at most %.0f MB more",
			n, mb(dbBefore), mb(db), mb(floodEtcdGrowthBound))
	}
}

// pinfoldPlanner is the API client the tests call.
type pinfoldPlanner = interface {
	Deploy(context.Context, *connect.Request[pinfoldv1.DeployRequest]) (*connect.Response[pinfoldv1.DeployResponse], error)
	SetHostEnabled(context.Context, *connect.Request[pinfoldv1.SetHostEnabledRequest]) (*connect.Response[pinfoldv1.SetHostEnabledResponse], error)
	ListEvents(context.Context, *connect.Request[pinfoldv1.ListEventsRequest]) (*connect.Response[pinfoldv1.ListEventsResponse], error)
}

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
