package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/test/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
}

// startPlanner runs a planner with embedded etcd in this process.
func startPlanner(t *testing.T) string {
	t.Helper()
	f := plannerFlags{dataDir: t.TempDir(), listen: freeAddr(t), shareBase: 100, maxFragmentCores: -1,
		etcdClient: "http://" + freeAddr(t), etcdPeer: "http://" + freeAddr(t), etcdLogLevel: "fatal"}
	log, _ := newLogger("error", os.Stderr)
	p, err := f.start(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p.Addr
}

func TestPlannerCLI(t *testing.T) {
	addr := startPlanner(t)
	topo := topologyFile(t, "dual-xeon-gold-6230")
	var (
		out, errOut string
		code        int
	)
	pf := newCLI(t, addr)
	pf.Must("host", "add", "h1", "--topology", topo, "--memory-share", "1")
	pf.Must("host", "add", "h2", "--topology", topo, "--reserved-cpus", "0,40", "--reserved-memory", "2GiB")

	// host list -o json has the fields scripts rely on.
	var hosts []struct {
		Name     string `json:"name"`
		State    string `json:"state"`
		Capacity struct {
			CPUs        map[string]int `json:"cpus"`
			MemoryBytes int64          `json:"memory_bytes"`
		} `json:"capacity"`
		Used struct {
			CPUs        map[string]int `json:"cpus"`
			MemoryBytes *int64         `json:"memory_bytes"`
		} `json:"used"`
	}
	if err := json.Unmarshal([]byte(pf.Must("host", "list", "-o", "json")), &hosts); err != nil || len(hosts) != 2 {
		t.Fatalf("host list -o json: %v %+v", err, hosts)
	}
	if hosts[0].Name != "h1" || hosts[0].State != "up" || len(hosts[0].Capacity.CPUs) != 80 || hosts[0].Capacity.CPUs["0"] != 100 ||
		hosts[1].Capacity.CPUs["0"] != 0 || len(hosts[1].Capacity.CPUs) != 78 || hosts[0].Used.MemoryBytes == nil || hosts[0].Used.CPUs == nil {
		t.Errorf("host list = %+v", hosts)
	}
	dep := pf.Must("deploy", "web", "--count", "4", "--cpu", "1.7", "--bind", "--memory", "1GiB", "--image", "busybox", "-o", "json")
	var ins []struct {
		ID       string         `json:"id"`
		Service  string         `json:"service"`
		Host     string         `json:"host"`
		CPUs     map[string]int `json:"cpus"`
		NUMANode *int           `json:"numa_node"`
		Memory   int64          `json:"memory_bytes"`
		State    string         `json:"state"`
		Planned  json.Number    `json:"cpu_planned"`
		Got      *json.Number   `json:"cpu_got"`
	}
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil || len(ins) != 4 {
		t.Fatalf("ps -o json: %v\n%s", err, dep)
	}
	for _, in := range ins {
		sum := 0
		for _, v := range in.CPUs {
			sum += v
		}
		if in.Service != "web" || sum != 170 || in.NUMANode == nil || *in.NUMANode < 0 || in.Memory != 1<<30 || in.State != "pending" || in.Planned != "1.7" || in.Got != nil {
			t.Errorf("instance %+v", in)
		}
	}
	show := pf.Must("host", "show", ins[0].Host)
	if !strings.Contains(show, ins[0].ID) || !strings.Contains(show, "CPU map") {
		t.Errorf("host show lacks the CPU map:\n%s", show)
	}
	// No agent runs these hosts: the resize is recorded, and waiting for it
	// names the instance nothing was applied to (exit 1); --wait 0 does not wait.
	if _, errOut, code := pf.Run("resize", ins[0].ID, "--cpu", "+0.3", "--memory", "+64MiB"); code != 1 ||
		!strings.Contains(errOut, "nothing was applied to") || !strings.Contains(errOut, ins[0].ID+": no agent on host "+ins[0].Host) {
		t.Errorf("resize on a host without an agent: exit %d, %s; want exit 1 naming %s and its host", code, errOut, ins[0].ID)
	} else if !strings.Contains(errOut, "applied on 0/1 instances") {
		t.Errorf("resize on a host without an agent: progress %q, want it to count the instance nothing was applied to (0/1, as the error's 0 of 1)", errOut)
	}
	pf.Must("resize", ins[0].ID, "--memory", "-64MiB", "--wait", "0")
	// A deploy onto a host without an agent warns, saying once that its
	// instances stay pending.
	_, errOut, code = pf.Run("deploy", "one", "--cpu", "0.1", "--bind", "--memory", "64MiB", "--image", "busybox")
	if code != 0 || strings.Count(errOut, "WARNING: host ") != 1 || strings.Count(errOut, "stay pending") != 1 {
		t.Errorf("deploy onto a host without an agent: exit %d, %q; want one warning saying once that its instances stay pending", code, errOut)
	}
	if out := pf.Must("remove", "one"); !strings.HasPrefix(out, "removed 1 instance: one-") {
		t.Errorf("remove of one instance: %q, want \"removed 1 instance: one-…\"", out)
	}
	// The network mode travels with the instance, and a replace keeps it.
	var all []struct {
		Service string `json:"service"`
		Network string `json:"network"`
	}
	pf.Must("deploy", "api", "--count", "1", "--cpu", "0.5", "--memory", "64MiB", "--image", "busybox", "--network", "host")
	if shows := pf.Must("host", "show", "h1") + pf.Must("host", "show", "h2"); !regexp.MustCompile(`Memory-first \(CPU quotas on the shared pool of [0-9.]+ CPUs\): api-[0-9a-f]+ 0\.5`).MatchString(shows) {
		t.Errorf("host show lacks the memory-first instance on the CPU map:\n%s", shows)
	}
	// The memory-first quota shows against its host's shared pool.
	var pools []struct {
		Name  string `json:"name"`
		Pool  int    `json:"shared_pool_pieces"`
		Quota int    `json:"memory_first_quota_pieces"`
	}
	if err := json.Unmarshal([]byte(pf.Must("host", "list", "-o", "json")), &pools); err != nil {
		t.Fatal(err)
	}
	quota := 0
	for _, h := range pools {
		quota += h.Quota
		if h.Pool <= 0 || h.Pool%100 != 0 {
			t.Errorf("host %s: shared pool %d pieces, want whole CPUs", h.Name, h.Pool)
		}
	}
	if list := pf.Must("host", "list"); quota != 50 || !strings.Contains(list, "MEMORY-FIRST QUOTA/POOL") || !strings.Contains(list, "0.5/") {
		t.Errorf("memory-first quota %d pieces (want 50) or host list without it:\n%s", quota, list)
	}
	pf.Must("replace", "api", "--image", "busybox:2", "--wait", "0")
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &all); err != nil {
		t.Fatal(err)
	}
	apis := 0
	for _, in := range all {
		if in.Service == "api" {
			apis++
		}
		if (in.Service == "api") != (in.Network == "host") {
			t.Errorf("after a replace of api: %+v; want network host for api only", in)
		}
	}
	if apis != 1 {
		t.Errorf("ps lists %d api instances, want 1", apis)
	}
	pf.Must("remove", "api")
	pf.Must("capacity", "--cpu", "1", "--bind", "--memory", "1GiB")
	var replaced []struct {
		Image      string `json:"image"`
		Generation int    `json:"generation"`
	}
	if err := json.Unmarshal([]byte(pf.Must("replace", "web", "--image", "busybox:2", "-o", "json", "--wait", "0")), &replaced); err != nil || len(replaced) != 4 || replaced[1].Image != "busybox:2" || replaced[1].Generation != 2 {
		t.Errorf("replace web = %+v, %v", replaced, err)
	}
	// Bad input: exit 2, nothing changed.
	before := pf.Must("ps", "-o", "json")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"deploy", "web", "--image", "i", "--cpu", "1.5.3", "--memory", "1GiB"}, `--cpu "1.5.3"`},
		{[]string{"deploy", "web", "--image", "i", "--cpu", "1", "--memory", "1.5.3GiB"}, `--memory "1.5.3GiB"`},
		{[]string{"deploy", "web", "--image", "i", "--cpu", "1", "--memory", "-1GiB"}, `--memory "-1GiB"`},
		{[]string{"deploy", "bad name", "--image", "i", "--cpu", "1", "--memory", "1GiB"}, `service name "bad name"`},
		{[]string{"deploy", "web", "--image", "i", "--cpu", "1", "--memory", "1GiB", "--network", "container:abc"}, `network = "container:abc"`},
		{[]string{"resize", "nosuch", "--cpu", "+1"}, `no instance or service named "nosuch"`},
		{[]string{"resize", ins[1].ID, "--cpu", "-9"}, "must keep more than 0"},
		{[]string{"host", "set", "nosuch", "--memory", "+1GiB"}, `host "nosuch" is not registered`},
		{[]string{"host", "add", "h1", "--topology", "../../numa/testdata/want/laptop-i7-1185g7.json"}, "host h1 is already registered"},
		{[]string{"replace", "web", "--volume-rm", "/nope"}, "volumes_rm /nope: web has no such setting to remove (nothing was changed)"},
		{[]string{"deploy", "web", "--cpu", "1", "--memory", "1GiB"}, "--image is required"},
		{[]string{"replace", "ghost", "--image", "x"}, `no instance or service named "ghost"`},
		{[]string{"host", "drain", "nosuch"}, `host "nosuch" is not registered`},
		{[]string{"ps", "--host", "nosuch"}, `host "nosuch" is not registered`},
		{[]string{"ps", "--service", "nosuch"}, `service "nosuch" is not deployed`},
		{[]string{"host", "drain", "h1", "--deadline", "-1s"}, "--deadline -1s"},
		{[]string{"scale", "web"}, "--count N is required"},
		{[]string{"scale", "ghost", "--count", "2"}, `service "ghost" is not deployed`},
		{[]string{"rebalance", "--balancing-threshold", "0.5"}, "balancing threshold = 0.5"},
		{[]string{"rebalance", "--apply", "--dry-run"}, "give one"},
		{[]string{"replace", "web", "--image", "x", "--pull", "sometimes"}, `--pull "sometimes"`},
		{[]string{"settings", "--down-grace", "100ms"}, "--down-grace 100ms"},
		{[]string{"remove", "ghost"}, `no instance or service named "ghost"`},
	} {
		_, errOut, code := pf.Run(tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("pinfold %v: exit %d, stderr %q; want exit 2 with %q", tt.args, code, errOut, tt.want)
		}
	}
	if after := pf.Must("ps", "-o", "json"); after != before {
		t.Errorf("bad input changed the instances")
	}
	_, errOut, code = pf.Run("deploy", "huge", "--image", "i", "--cpu", "200", "--bind", "--memory", "1GiB")
	if code != 1 || !strings.Contains(errOut, "h1 takes 0 (cpu)") {
		t.Errorf("unmet deploy: exit %d %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "", "ps", "--planner", freeAddr(t))
	if code != 3 || !strings.Contains(errOut, "unreachable") {
		t.Errorf("unreachable planner: exit %d %s", code, errOut)
	}
	// Scale, rebalance (a dry run), then removing a host places its
	// instances on the other.
	var scaled struct {
		Count   int               `json:"count"`
		Added   []json.RawMessage `json:"added"`
		Removed []string          `json:"removed"`
	}
	if err := json.Unmarshal([]byte(pf.Must("scale", "web", "--count", "6", "-o", "json")), &scaled); err != nil || scaled.Count != 6 || len(scaled.Added) != 2 {
		t.Errorf("scale web --count 6 = %+v, %v", scaled, err)
	}
	if err := json.Unmarshal([]byte(pf.Must("scale", "web", "--count", "4", "-o", "json")), &scaled); err != nil || scaled.Count != 4 || len(scaled.Removed) != 2 {
		t.Errorf("scale web --count 4 = %+v, %v", scaled, err)
	}
	before = pf.Must("ps", "-o", "json")
	if out := pf.Must("rebalance"); !strings.Contains(out, "cpu: most/least used host") {
		t.Errorf("rebalance: %s", out)
	}
	if after := pf.Must("ps", "-o", "json"); after != before {
		t.Errorf("a rebalance dry run changed the instances")
	}
	if out := pf.Must("settings", "--down-grace", "2m"); !regexp.MustCompile(`down grace +2m0s`).MatchString(out) {
		t.Errorf("settings --down-grace 2m: %s", out)
	}
	var removed struct {
		Moved []struct {
			Instance    string `json:"instance"`
			To          string `json:"to"`
			NewInstance string `json:"new_instance"`
		} `json:"moved"`
	}
	onH1 := strings.Count(pf.Must("ps", "-o", "json"), `"host": "h1"`)
	out = pf.Must("host", "remove", "h1", "-o", "json")
	if err := json.Unmarshal([]byte(out), &removed); err != nil {
		t.Fatalf("host remove h1 -o json: %v\n%s", err, out)
	}
	if len(removed.Moved) != onH1 || onH1 == 0 {
		t.Errorf("host remove h1 moved %d instances, h1 had %d", len(removed.Moved), onH1)
	}
	for _, m := range removed.Moved {
		if m.To != "h2" || m.NewInstance == "" || m.Instance == "" {
			t.Errorf("moved %+v, want to h2 as a new instance", m)
		}
	}
	var left []struct {
		Host string `json:"host"`
	}
	_ = json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &left)
	if len(left) != 4 || slices.ContainsFunc(left, func(e struct {
		Host string `json:"host"`
	}) bool {
		return e.Host != "h2"
	}) {
		t.Errorf("after host remove h1 (%s): instances %+v, want 4, all on h2", out, left)
	}
	out = pf.Must("remove", "web", "-o", "json")
	if !strings.Contains(out, "web-") {
		t.Errorf("remove web: %s", out)
	}
}

// TestWatchInstances: the agent's stream sends the host's set at once and
// again after each change to that host only.
func TestWatchInstances(t *testing.T) {
	addr := startPlanner(t)
	c := clientFlags{addr: addr}
	cl, _ := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := os.ReadFile("../../numa/testdata/want/laptop-i7-1185g7.json")
	for _, h := range []string{"a", "b"} {
		if _, err := cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: h, TopologyJson: b})); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := cl.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || len(stream.Msg().Instances) != 0 {
		t.Fatalf("first message: %v %v", stream.Msg(), stream.Err())
	}
	if _, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: "w", Count: 2, Cpu: "1", Bind: true, MemoryBytes: 1 << 30})); err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	got := stream.Msg().Instances
	if len(got) != 1 || got[0].Host != "a" {
		t.Fatalf("host a's stream after deploying 2 over a and b: %v", got)
	}
	// The shared pool comes with it: the host's CPUs less the instance's.
	cpus, pool := cpuset.MustParseCPUs(stream.Msg().Cpus), cpuset.MustParseCPUs(stream.Msg().SharedPool)
	var held []cpuset.CPUID
	for id := range got[0].Cpus {
		held = append(held, cpuset.CPUID(id))
	}
	if want := cpus.Difference(cpuset.Of(held...)); pool.IsEmpty() || !pool.Equal(want) {
		t.Errorf("shared pool sent %q, want %s (CPUs %s less the instance's)", stream.Msg().SharedPool, want, cpus)
	}
}

// TestUp runs the main job's command in-process: the planner with embedded
// etcd comes up, this host (here a fixture sysfs) is registered with its
// NUMA nodes, the agent keeps retrying an unreachable Docker engine without
// taking up down, and cancelling (Ctrl-C) stops it cleanly.
func TestUp(t *testing.T) {
	addr := freeAddr(t)
	root := newRootCmd()
	root.SetArgs([]string{"up", "--data-dir", t.TempDir(), "--listen", addr,
		"--etcd-listen-client", "http://" + freeAddr(t), "--etcd-listen-peer", "http://" + freeAddr(t),
		"--host", "fixture", "--sysfs-root", "../../numa/testdata/sysfs/dual-xeon-gold-6230",
		"--docker-host", "unix:///nonexistent/docker.sock", "--state-dir", t.TempDir(), "--log-level", "error",
		"--cgroup-root", t.TempDir()}) // no cgroup2 there: the agent cannot start, and the host says why
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	var h struct {
		Name      string `json:"name"`
		State     string `json:"state"`
		NoAgent   string `json:"no_agent"`
		NUMANodes []any  `json:"numa_nodes"`
		Capacity  struct {
			CPUs map[string]int `json:"cpus"`
		} `json:"capacity"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		stdout, _, code := runCLI(t, "", "host", "show", "fixture", "-o", "json", "--planner", addr)
		if code == 0 && json.Unmarshal([]byte(stdout), &h) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host fixture not registered within 60 s (last exit %d): %s", code, stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if h.Name != "fixture" || h.State != "up" || len(h.Capacity.CPUs) != 80 || len(h.NUMANodes) != 2 {
		t.Errorf("host show fixture = %+v; want up with the fixture's 80 CPUs and 2 NUMA nodes", h)
	}
	// Why no agent runs there, wherever the host and its instances show.
	const why = "cgroup v2 is not mounted at"
	if !strings.Contains(h.NoAgent, why) || !strings.Contains(h.NoAgent, "systemd.unified_cgroup_hierarchy=1") {
		t.Errorf("host show -o json no_agent = %q; want the failed prerequisite and its fix", h.NoAgent)
	}
	if stdout, _, _ := runCLI(t, "", "host", "show", "fixture", "--planner", addr); !strings.Contains(stdout, "no agent: "+why) {
		t.Errorf("host show says no reason for the missing agent:\n%s", stdout)
	}
	if _, errOut, code := runCLI(t, "", "deploy", "web", "--cpu", "0.5", "--memory", "64MiB", "--image", "busybox", "--planner", addr); code != 0 ||
		!strings.Contains(errOut, "WARNING: host fixture: no agent: "+why) || !strings.Contains(errOut, "its instances stay pending") {
		t.Errorf("deploy onto the host without an agent: exit %d, stderr %q; want a warning naming the reason", code, errOut)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("up after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("up did not stop within 30 s of the cancel")
	}
	if !strings.Contains(out.String(), "pinfold is up: planner on "+addr+", host fixture registered (80 CPUs, 2 NUMA nodes)") {
		t.Errorf("up printed %q", out.String())
	}
}

// TestUpTLS: `up --tls` makes a PKI in its data dir, serves mutual TLS, and
// registers this host through it: a plain client is turned away, the admin
// certificate it made reads the host, and a second start reuses the PKI.
func TestUpTLS(t *testing.T) {
	addr, data := freeAddr(t), t.TempDir()
	start := func() (context.CancelFunc, chan error) {
		root := newRootCmd()
		root.SetArgs([]string{"up", "--tls", "--no-agent", "--data-dir", data, "--listen", addr,
			"--etcd-listen-client", "http://" + freeAddr(t), "--etcd-listen-peer", "http://" + freeAddr(t),
			"--host", "fixture", "--sysfs-root", "../../numa/testdata/sysfs/dual-xeon-gold-6230", "--log-level", "error"})
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- root.ExecuteContext(ctx) }()
		return cancel, done
	}
	dir := filepath.Join(data, "pki")
	tlsArgs := []string{"--planner", "https://" + addr, "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--tls-cert", filepath.Join(dir, "admin-admin.pem"), "--tls-key", filepath.Join(dir, "admin-admin-key.pem")}
	for round := range 2 {
		cancel, done := start()
		deadline := time.Now().Add(60 * time.Second)
		for {
			stdout, _, code := runCLI(t, "", append([]string{"host", "show", "fixture", "-o", "json"}, tlsArgs...)...)
			if code == 0 && strings.Contains(stdout, `"name": "fixture"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: host fixture not readable with the admin certificate within 60 s (exit %d): %s", round, code, stdout)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, _, code := runCLI(t, "", "host", "list", "--planner", addr); code == 0 {
			t.Errorf("round %d: a plain client was served by up --tls", round)
		}
		if _, err := os.Stat(filepath.Join(dir, "agent-fixture-key.pem")); err != nil {
			t.Errorf("round %d: no agent certificate for this host: %v", round, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("round %d: up --tls after cancel: %v", round, err)
		}
	}
}
