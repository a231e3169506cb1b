// Command simagents measures one planner against thousands of simulated
// node agents speaking the real API: each registers its host (a 128-CPU,
// two-NUMA-node topology), heartbeats every 10 s and holds its host's
// desired state, over its agent link (one upgraded HTTP/1.1 connection of
// its own, package agentlink), as agents on separate machines do
// (-protocol h2c or http1: the Heartbeat and WatchInstances calls). It runs etcd and the planner as child processes so
// that their CPU time and memory are measured apart:
//
//	go build -o /tmp/pinfold ./cmd/pinfold
//	go run ./hack/simagents -pinfold /tmp/pinfold -agents 10000
//
// Phases: registration of every agent (with its stream and first
// heartbeat), a steady minute with one-instance deploys at a steady rate
// (deploy sent → the host's agent sees the instance on its stream), then a
// planner restart (killed, started again) and the time until every agent
// has its stream back and a heartbeat accepted. It prints a table and, with
// -json, writes the figures. It fails (exit 1) when a phase does not
// complete within its limit.
//
// Memory: the planner's resident memory (RSS) per host at the end of the
// steady phase, and, read from its profiler (--pprof-listen, loopback,
// after a collection): its live heap and goroutine stacks per host, the
// goroutines per host, and the live heap the steady phase added per
// deploy (the heap after its deploys less the heap before them, over
// their number: the instance, and the host views and capacity memos its
// placement built, and any other growth of the phase; a few hundred
// deploys over 10,000 hosts measure the memos more than the instances,
// whose own heap BenchmarkPlannerMemory33kInstances measures; -phases registration skips the deploys and the
// restart, for a quick look at the memory of a registered fleet).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

func main() {
	if os.Getenv("SIMAGENTS_ETCD") != "" {
		runEtcd()
		return
	}
	var cfg config
	flag.StringVar(&cfg.pinfold, "pinfold", "", "the pinfold binary to run the planner with (required)")
	flag.IntVar(&cfg.agents, "agents", 10000, "simulated agents (hosts)")
	flag.DurationVar(&cfg.heartbeat, "heartbeat", 10*time.Second, "heartbeat interval (the lease TTL is 3 times it)")
	flag.DurationVar(&cfg.steady, "steady", time.Minute, "length of the steady phase")
	flag.IntVar(&cfg.deploys, "deploys", 300, "one-instance deploys during the steady phase")
	flag.IntVar(&cfg.registerConcurrency, "register-concurrency", 200, "registrations in flight at once")
	flag.StringVar(&cfg.dir, "dir", "", "working directory (default: a new temporary one)")
	flag.StringVar(&cfg.jsonOut, "json", "", "also write the figures as JSON to this file")
	flag.StringVar(&cfg.phases, "phases", "all", "all, or registration: stop after the registration and the memory figures (no deploys, no restart)")
	flag.BoolVar(&cfg.profile, "profile", false, "save the planner's heap (with its runtime statistics) and a 10 s CPU profile of the steady phase in -dir (planner-heap.pprof, planner-heap.txt, planner-cpu.pprof)")
	flag.StringVar(&protocol, "protocol", protocol, "link: each agent its agent link (one upgraded HTTP/1.1 connection: heartbeats and desired state), as the agent speaks by default; h2c: one HTTP/2 connection carrying gRPC calls; http1: the Connect protocol over HTTP/1.1, a connection per call in flight (the agent's --no-link)")
	flag.Parse()
	if protocol != "link" && protocol != "h2c" && protocol != "http1" {
		fmt.Fprintf(os.Stderr, "simagents: -protocol %q: want link, h2c or http1\n", protocol)
		os.Exit(2)
	}
	if cfg.pinfold == "" || cfg.agents < 1 || cfg.deploys < 1 {
		fmt.Fprintln(os.Stderr, "simagents: -pinfold is required; -agents and -deploys must be at least 1")
		os.Exit(2)
	}
	if cfg.phases != "all" && cfg.phases != "registration" {
		fmt.Fprintf(os.Stderr, "simagents: -phases %q: want all or registration\n", cfg.phases)
		os.Exit(2)
	}
	rep, err := run(cfg)
	rep.print(os.Stdout)
	if cfg.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if werr := os.WriteFile(cfg.jsonOut, b, 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "simagents:", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents:", err)
		os.Exit(1)
	}
}

type config struct {
	pinfold             string
	agents              int
	heartbeat           time.Duration
	steady              time.Duration
	deploys             int
	registerConcurrency int
	dir                 string
	jsonOut             string
	phases              string
	profile             bool
}

// runEtcd is the etcd child: embedded etcd (fsync on) until killed.
func runEtcd() {
	e, err := state.StartEmbedded(state.EmbedConfig{Name: "sim", Dir: os.Getenv("SIMAGENTS_DIR"),
		ClientURL: os.Getenv("SIMAGENTS_CLIENT"), PeerURL: os.Getenv("SIMAGENTS_PEER"), LogLevel: "error"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents etcd:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	e.Close()
}

// usage is a process's CPU time and resident memory.
type usage struct {
	CPU time.Duration
	RSS int64
}

// procUsage reads /proc/PID/stat (utime, stime) and /proc/PID/status (VmRSS).
func procUsage(pid int) usage {
	var u usage
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+2:])
			if len(f) > 12 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				u.CPU = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				u.RSS = kb << 10
			}
		}
	}
	return u
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// report is what the run measured.
type report struct {
	// Phases is -phases: "registration" measured only the registration
	// and the memory after it.
	Phases              string  `json:"phases"`
	Agents              int     `json:"agents"`
	RegisterSeconds     float64 `json:"register_seconds"`
	RegisterPerSecond   float64 `json:"registrations_per_second"`
	SteadySeconds       float64 `json:"steady_seconds"`
	HeartbeatsPerSecond float64 `json:"heartbeats_per_second"`
	HeartbeatErrors     int64   `json:"heartbeat_errors"`
	Deploys             int     `json:"deploys"`
	NotifyP50Ms         float64 `json:"notify_p50_ms"`
	NotifyP99Ms         float64 `json:"notify_p99_ms"`
	NotifyMaxMs         float64 `json:"notify_max_ms"`
	NotifyMissed        int     `json:"notify_missed"`
	FirstDeployMs       float64 `json:"first_deploy_ms"`      // after registration, before the measured ones
	DeployP50Ms         float64 `json:"deploy_answer_p50_ms"` // the deploy call's own answer
	DeployP99Ms         float64 `json:"deploy_answer_p99_ms"`
	// SlowDeploys are the deploys answered after more than 200 ms: when
	// each was sent (seconds into the steady phase) and how long it took.
	SlowDeploys         []string `json:"slow_deploys,omitempty"`
	PlannerCPUPercent   float64  `json:"planner_cpu_percent"` // of one core, steady phase
	EtcdCPUPercent      float64  `json:"etcd_cpu_percent"`
	SimCPUPercent       float64  `json:"simulator_cpu_percent"`
	PlannerRSSMiB       float64  `json:"planner_rss_mib"`
	EtcdRSSMiB          float64  `json:"etcd_rss_mib"`
	SimRSSMiB           float64  `json:"simulator_rss_mib"`
	PlannerRSSPerHostKB float64  `json:"planner_rss_per_host_kib"`
	// From the planner's profiler, after a collection, at the end of the
	// steady phase (of the registration with -phases registration).
	PlannerHeapMiB        float64 `json:"planner_heap_mib"`
	PlannerHeapPerHostKB  float64 `json:"planner_heap_per_host_kib"`
	PlannerStackPerHostKB float64 `json:"planner_stack_per_host_kib"`
	PlannerGoroutines     int     `json:"planner_goroutines"`
	PlannerHeapPerDeploy  float64 `json:"planner_heap_per_deploy_bytes"`
	RestartSeconds        float64 `json:"restart_seconds"` // planner start → every agent streaming and heartbeating again
	RestartPlannerStart   float64 `json:"restart_planner_start_seconds"`
	AfterRestartCPU       float64 `json:"planner_cpu_percent_after_restart"`
}

// print writes the table; after -phases registration only the rows that
// phase measured (the others were zeros that read as measured: a planner
// restart "after 0.0 s", etcd "0 MiB").
func (r report) print(w io.Writer) {
	fmt.Fprintf(w, `
simulated agents          %d
registration              %.1f s (%.0f/s, each with its stream and first heartbeat)
`, r.Agents, r.RegisterSeconds, r.RegisterPerSecond)
	if r.Phases != "registration" {
		fmt.Fprintf(w, `steady phase              %.0f s: %.0f heartbeats/s, %d heartbeat errors
first deploy              %.0f ms (builds the planner's views of the registered hosts)
deploy → agent notified   %d deploys: p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d never seen (the deploy's answer: p50 %.1f ms, p99 %.1f ms)
CPU (of one core)         planner %.1f %%, etcd %.1f %%, simulator %.1f %% (steady phase)
`, r.SteadySeconds, r.HeartbeatsPerSecond, r.HeartbeatErrors,
			r.FirstDeployMs, r.Deploys, r.NotifyP50Ms, r.NotifyP99Ms, r.NotifyMaxMs, r.NotifyMissed, r.DeployP50Ms, r.DeployP99Ms,
			r.PlannerCPUPercent, r.EtcdCPUPercent, r.SimCPUPercent)
	}
	fmt.Fprintf(w, `memory (RSS)              planner %.0f MiB (%.1f KiB per host), etcd %.0f MiB, simulator %.0f MiB
planner heap (live)       %.0f MiB (%.1f KiB per host); stacks %.1f KiB per host; %d goroutines`,
		r.PlannerRSSMiB, r.PlannerRSSPerHostKB, r.EtcdRSSMiB, r.SimRSSMiB,
		r.PlannerHeapMiB, r.PlannerHeapPerHostKB, r.PlannerStackPerHostKB, r.PlannerGoroutines)
	if r.Phases == "registration" {
		fmt.Fprintln(w, "\n(-phases registration: no steady phase, deploys or restart)")
		return
	}
	fmt.Fprintf(w, `; steady phase: %.0f B more per deploy
planner restart           API up after %.1f s; every agent streaming and heartbeating %.1f s after the restart; planner CPU then %.1f %%
deploys over 200 ms       %v (sent at : took)
`, r.PlannerHeapPerDeploy, r.RestartPlannerStart, r.RestartSeconds, r.AfterRestartCPU, r.SlowDeploys)
}

// agent is one simulated node agent.
type agent struct {
	name string
	cl   pinfoldv1connect.PlannerServiceClient
	link *agentlink.Client // -protocol link
	// closeIdle closes the idle connections of cl (-protocol link).
	closeIdle func()
	// streamAt and beatAt are the last time (UnixNano) its stream
	// delivered its first message and a heartbeat was accepted.
	streamAt, beatAt atomic.Int64
}

// sim is the running fleet.
type sim struct {
	cfg     config
	topo    []byte
	agents  []*agent
	beats   atomic.Int64
	beatErr atomic.Int64
	// seen is, per instance ID, when an agent's stream first carried it.
	seen sync.Map
	slow []string // slow deploys (see report.SlowDeploys)
}

func run(cfg config) (report, error) {
	rep := report{Agents: cfg.agents, Phases: cfg.phases}
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "simagents-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(d)
		cfg.dir = d
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// etcd, as a child process of this binary.
	ec, ep := fmt.Sprintf("http://127.0.0.1:%d", freePort()), fmt.Sprintf("http://127.0.0.1:%d", freePort())
	self, _ := os.Executable()
	etcd := exec.Command(self)
	etcd.Env = append(os.Environ(), "SIMAGENTS_ETCD=1", "SIMAGENTS_DIR="+filepath.Join(cfg.dir, "etcd"), "SIMAGENTS_CLIENT="+ec, "SIMAGENTS_PEER="+ep)
	etcdLog, err := os.Create(filepath.Join(cfg.dir, "etcd.log"))
	if err != nil {
		return rep, err
	}
	defer etcdLog.Close()
	etcd.Stdout, etcd.Stderr = etcdLog, etcdLog
	if err := etcd.Start(); err != nil {
		return rep, fmt.Errorf("start etcd: %w", err)
	}
	defer func() { _ = etcd.Process.Signal(syscall.SIGTERM); _ = etcd.Wait() }()
	if err := waitEtcd(ctx, ec); err != nil {
		return rep, err
	}
	api := fmt.Sprintf("127.0.0.1:%d", freePort())
	pprofAt := fmt.Sprintf("127.0.0.1:%d", freePort())
	startPlanner := func() (*exec.Cmd, error) {
		args := []string{"planner", "--etcd-endpoints", ec, "--listen", api, "--log-level", "warn", "--data-dir", filepath.Join(cfg.dir, "planner"),
			"--pprof-listen", pprofAt}
		cmd := exec.Command(cfg.pinfold, args...)
		logf, err := os.OpenFile(filepath.Join(cfg.dir, "planner.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		return cmd, cmd.Start()
	}
	planner, err := startPlanner()
	if err != nil {
		return rep, fmt.Errorf("start the planner: %w", err)
	}
	defer func() { _ = planner.Process.Kill(); _ = planner.Wait() }()
	admin, _ := newClient("http://" + api)
	if err := waitAPI(ctx, admin, 30*time.Second); err != nil {
		return rep, fmt.Errorf("planner did not come up (log: %s): %w", filepath.Join(cfg.dir, "planner.log"), err)
	}

	s := &sim{cfg: cfg}
	s.topo, _ = json.Marshal(topologytest.BenchHost().Topology())
	for i := range cfg.agents {
		a := &agent{name: fmt.Sprintf("sim-%05d", i)}
		a.cl, a.closeIdle = newClient("http://" + api)
		if protocol == "link" {
			a.link = agentlink.NewClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}, "http://"+api)
		}
		s.agents = append(s.agents, a)
	}

	// Phase 1: registration, stream and first heartbeat of every agent.
	start := time.Now()
	sem := make(chan struct{}, cfg.registerConcurrency)
	var wg sync.WaitGroup
	var regErr atomic.Value
	for _, a := range s.agents {
		wg.Go(func() {
			sem <- struct{}{}
			err := s.register(ctx, a)
			<-sem
			if err != nil {
				regErr.Store(err)
				return
			}
			if a.link != nil {
				// The registration's connection: a real agent's is
				// closed by the planner after --idle-timeout (60 s);
				// closed now, the figures are those of the fleet after
				// that minute.
				a.closeIdle()
				go s.linked(ctx, a)
				return
			}
			go s.heartbeats(ctx, a)
			go s.watch(ctx, a)
		})
	}
	wg.Wait()
	if e, ok := regErr.Load().(error); ok {
		return rep, fmt.Errorf("registration: %w", e)
	}
	if err := s.waitAll(start, 5*time.Minute); err != nil {
		return rep, fmt.Errorf("registration: %w", err)
	}
	rep.RegisterSeconds = time.Since(start).Seconds()
	rep.RegisterPerSecond = float64(cfg.agents) / rep.RegisterSeconds

	time.Sleep(cfg.heartbeat) // let the registration burst's heartbeats spread out
	if cfg.phases == "registration" {
		rep.memory(planner.Process.Pid, pprofAt)
		e, sim := procUsage(etcd.Process.Pid), procUsage(os.Getpid())
		rep.EtcdRSSMiB, rep.SimRSSMiB = float64(e.RSS)/(1<<20), float64(sim.RSS)/(1<<20)
		if cfg.profile {
			fetch("http://"+pprofAt+"/debug/pprof/heap", filepath.Join(cfg.dir, "planner-heap.pprof"))
			fetch("http://"+pprofAt+"/debug/pprof/heap?debug=1", filepath.Join(cfg.dir, "planner-heap.txt"))
			fetch("http://"+pprofAt+"/debug/pprof/goroutine?debug=1", filepath.Join(cfg.dir, "planner-goroutines.txt"))
		}
		return rep, nil
	}

	// Phase 2: steady, with deploys at a steady rate. One deploy first,
	// timed apart: it builds the planner's views of the new hosts.
	w0 := time.Now()
	if _, err := admin.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: "warm", Count: 1, Cpu: "0.5", Bind: true, MemoryBytes: 64 << 20})); err != nil {
		return rep, fmt.Errorf("first deploy: %w", err)
	}
	rep.FirstDeployMs = float64(time.Since(w0).Microseconds()) / 1e3
	heap0, _ := plannerMem(pprofAt)
	p0, e0, s0 := procUsage(planner.Process.Pid), procUsage(etcd.Process.Pid), procUsage(os.Getpid())
	b0, be0 := s.beats.Load(), s.beatErr.Load()
	t0 := time.Now()
	if cfg.profile {
		go fetch("http://"+pprofAt+"/debug/pprof/profile?seconds=10", filepath.Join(cfg.dir, "planner-cpu.pprof"))
	}
	sent, answers := s.deploy(ctx, admin, cfg.deploys, cfg.steady)
	if len(answers) > 0 {
		slices.Sort(answers)
		rep.DeployP50Ms, rep.DeployP99Ms = answers[len(answers)/2], answers[min(len(answers)-1, len(answers)*99/100)]
	}
	slices.Sort(s.slow)
	rep.SlowDeploys = s.slow
	if rest := cfg.steady - time.Since(t0); rest > 0 {
		time.Sleep(rest)
	}
	el := time.Since(t0)
	p1, e1, s1 := procUsage(planner.Process.Pid), procUsage(etcd.Process.Pid), procUsage(os.Getpid())
	if heap1 := rep.memory(planner.Process.Pid, pprofAt); len(sent) > 0 && heap0.heap > 0 && heap1.heap > 0 {
		rep.PlannerHeapPerDeploy = float64(heap1.heap-heap0.heap) / float64(len(sent))
	}
	if cfg.profile {
		fetch("http://"+pprofAt+"/debug/pprof/heap", filepath.Join(cfg.dir, "planner-heap.pprof"))
		fetch("http://"+pprofAt+"/debug/pprof/heap?debug=1", filepath.Join(cfg.dir, "planner-heap.txt"))
	}
	rep.SteadySeconds = el.Seconds()
	rep.HeartbeatsPerSecond = float64(s.beats.Load()-b0) / el.Seconds()
	rep.HeartbeatErrors = s.beatErr.Load() - be0
	pct := func(a, b usage) float64 { return 100 * (b.CPU - a.CPU).Seconds() / el.Seconds() }
	rep.PlannerCPUPercent, rep.EtcdCPUPercent, rep.SimCPUPercent = pct(p0, p1), pct(e0, e1), pct(s0, s1)
	rep.EtcdRSSMiB, rep.SimRSSMiB = float64(e1.RSS)/(1<<20), float64(s1.RSS)/(1<<20)
	var lat []float64
	for id, at := range sent {
		if v, ok := s.seen.Load(id); ok {
			lat = append(lat, float64(v.(int64)-at.UnixNano())/1e6)
		} else {
			rep.NotifyMissed++
		}
	}
	rep.Deploys = len(sent)
	if len(lat) > 0 {
		slices.Sort(lat)
		rep.NotifyP50Ms, rep.NotifyP99Ms, rep.NotifyMaxMs = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}

	// Phase 3: the planner is killed and started again.
	_ = planner.Process.Kill()
	_ = planner.Wait()
	restart := time.Now()
	planner, err = startPlanner()
	if err != nil {
		return rep, fmt.Errorf("restart the planner: %w", err)
	}
	if err := waitAPI(ctx, admin, 60*time.Second); err != nil {
		return rep, fmt.Errorf("planner did not come back: %w", err)
	}
	rep.RestartPlannerStart = time.Since(restart).Seconds()
	if err := s.waitAll(restart, 5*time.Minute); err != nil {
		return rep, fmt.Errorf("after the restart: %w", err)
	}
	rep.RestartSeconds = time.Since(restart).Seconds()
	q0 := procUsage(planner.Process.Pid)
	time.Sleep(cfg.heartbeat * 2)
	q1 := procUsage(planner.Process.Pid)
	rep.AfterRestartCPU = 100 * (q1.CPU - q0.CPU).Seconds() / (cfg.heartbeat * 2).Seconds()
	if rep.NotifyMissed > 0 {
		return rep, fmt.Errorf("%d of %d deployed instances never reached their agent's stream", rep.NotifyMissed, rep.Deploys)
	}
	return rep, nil
}

// plannerStats are the planner's memory figures from its profiler.
type plannerStats struct {
	heap, stack int64 // live heap after a collection; goroutine stacks in use
	goroutines  int
}

// plannerMem reads the planner's live heap (after a collection it asks
// for) and stacks from the runtime statistics its heap profile ends with,
// and its goroutines.
func plannerMem(pprofAt string) (plannerStats, error) {
	var st plannerStats
	get := func(path string) (string, error) {
		resp, err := http.Get("http://" + pprofAt + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	heap, err := get("/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		return st, fmt.Errorf("the planner's heap profile: %w", err)
	}
	for _, l := range strings.Split(heap, "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			st.heap, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "# Stack = "); ok { // "inuse / sys"
			st.stack, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	g, err := get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return st, fmt.Errorf("the planner's goroutines: %w", err)
	}
	first, _, _ := strings.Cut(g, "\n")
	if v, ok := strings.CutPrefix(first, "goroutine profile: total "); ok {
		st.goroutines, _ = strconv.Atoi(v)
	}
	return st, nil
}

// memory fills the planner's memory figures: its RSS first (the
// profiler's collection does not shrink it at once, but reading the
// profiles allocates), then its heap, stacks and goroutines.
func (r *report) memory(pid int, pprofAt string) plannerStats {
	u := procUsage(pid)
	r.PlannerRSSMiB = float64(u.RSS) / (1 << 20)
	r.PlannerRSSPerHostKB = float64(u.RSS) / 1024 / float64(r.Agents)
	st, err := plannerMem(pprofAt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents:", err)
		return st
	}
	r.PlannerHeapMiB = float64(st.heap) / (1 << 20)
	r.PlannerHeapPerHostKB = float64(st.heap) / 1024 / float64(r.Agents)
	r.PlannerStackPerHostKB = float64(st.stack) / 1024 / float64(r.Agents)
	r.PlannerGoroutines = st.goroutines
	return st
}

// fetch saves a profile from the planner's profiler.
func fetch(url, file string) {
	resp, err := http.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents: profile:", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents: profile:", err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// protocol is how the simulated agents speak to the planner (-protocol).
var protocol = "link"

// newClient is one agent's client, with the agent's options, on
// connections of its own, as an agent on its own machine has: with
// -protocol h2c one HTTP/2 (h2c) connection carrying gRPC; with http1 the
// Connect protocol over HTTP/1.1, a connection per call in flight (the
// watch's and the heartbeat's); with link, as http1, for the
// registration (the planner closes its connection after --idle-timeout).
func newClient(base string) (pinfoldv1connect.PlannerServiceClient, func()) {
	if protocol == "http1" || protocol == "link" { // link: the registration's call
		tr := &http.Transport{MaxIdleConnsPerHost: 2}
		return pinfoldv1connect.NewPlannerServiceClient(&http.Client{Transport: tr}, base, api.AgentClientOptions()...), tr.CloseIdleConnections
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return pinfoldv1connect.NewPlannerServiceClient(&http.Client{Transport: tr}, base, append(api.AgentClientOptions(), connect.WithGRPC())...), tr.CloseIdleConnections
}

// waitEtcd polls etcd's /health endpoint (this tool speaks to etcd only
// through the planner; the state package is the only etcd client).
func waitEtcd(ctx context.Context, endpoint string) error {
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`) {
			return nil
		}
		last = fmt.Errorf("HTTP %d %s", resp.StatusCode, b)
	}
	return fmt.Errorf("etcd at %s did not answer: %w", endpoint, last)
}

func waitAPI(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, limit time.Duration) error {
	var err error
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, err = cl.GetPlacementSettings(c, connect.NewRequest(&pinfoldv1.GetPlacementSettingsRequest{}))
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// backoff is the real agent's: 200 ms doubling to 5 s, with jitter.
func backoff(ctx context.Context, attempt int) {
	d := min(time.Duration(1<<min(attempt, 5))*200*time.Millisecond, 5*time.Second)
	d = d/2 + rand.N(d/2+1)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (s *sim) register(ctx context.Context, a *agent) error {
	for i := 0; ; i++ {
		_, err := a.cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: a.name, TopologyJson: s.topo,
			Agent: true, AgentVersion: "sim", Protocol: model.Protocol, MemoryShare: 1}))
		if err == nil {
			return nil
		}
		if ce := new(connect.Error); errors.As(err, &ce) && ce.Code() == connect.CodeInvalidArgument || i > 20 {
			return fmt.Errorf("host %s: %w", a.name, err)
		}
		backoff(ctx, i)
	}
}

// linked is the agent's link, as the agent holds it (nodeagent's
// linked): heartbeats beside the desired states, opened again with
// backoff after an interruption.
func (s *sim) linked(ctx context.Context, a *agent) {
	for i := 0; ctx.Err() == nil; i++ {
		l, err := a.link.Open(ctx, a.name)
		if err != nil {
			backoff(ctx, i)
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		go s.beat(lctx, a, func(c context.Context, req *pinfoldv1.HeartbeatRequest) error {
			_, err := l.Heartbeat(c, req)
			return err
		})
		go func() {
			<-lctx.Done()
			_ = l.Close()
		}()
		first := true
		for {
			m, err := l.Receive()
			if err != nil {
				break
			}
			now := time.Now().UnixNano()
			if first {
				a.streamAt.Store(now)
				first, i = false, 0
			}
			for _, in := range m.Instances {
				s.seen.LoadOrStore(in.Id, now)
			}
		}
		cancel()
		backoff(ctx, i)
	}
}

func (s *sim) heartbeats(ctx context.Context, a *agent) {
	s.beat(ctx, a, func(c context.Context, req *pinfoldv1.HeartbeatRequest) error {
		_, err := a.cl.Heartbeat(c, connect.NewRequest(req))
		return err
	})
}

func (s *sim) beat(ctx context.Context, a *agent, send func(context.Context, *pinfoldv1.HeartbeatRequest) error) {
	ttl := int32(3 * s.cfg.heartbeat / time.Second)
	for i := 0; ctx.Err() == nil; {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := send(c, &pinfoldv1.HeartbeatRequest{Host: a.name, AgentVersion: "sim", Protocol: model.Protocol, TtlSeconds: ttl})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.beatErr.Add(1)
			i++
			backoff(ctx, i)
			continue
		}
		i = 0
		s.beats.Add(1)
		a.beatAt.Store(time.Now().UnixNano())
		select {
		case <-time.After(s.cfg.heartbeat - s.cfg.heartbeat/10 + rand.N(s.cfg.heartbeat/5)):
		case <-ctx.Done():
		}
	}
}

func (s *sim) watch(ctx context.Context, a *agent) {
	for i := 0; ctx.Err() == nil; i++ {
		stream, err := a.cl.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: a.name}))
		if err != nil {
			backoff(ctx, i)
			continue
		}
		first := true
		for stream.Receive() {
			now := time.Now().UnixNano()
			if first {
				a.streamAt.Store(now)
				first, i = false, 0
			}
			for _, in := range stream.Msg().Instances {
				s.seen.LoadOrStore(in.Id, now)
			}
		}
		stream.Close()
		backoff(ctx, i)
	}
}

// waitAll waits until every agent's stream delivered and a heartbeat was
// accepted after since.
func (s *sim) waitAll(since time.Time, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		behind := 0
		for _, a := range s.agents {
			if a.streamAt.Load() < since.UnixNano() || a.beatAt.Load() < since.UnixNano() {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d agents not back after %s", behind, len(s.agents), limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deploy sends n one-instance deploys spread evenly over d and returns,
// per instance ID, when its deploy was sent, and each deploy's answer time
// in milliseconds.
func (s *sim) deploy(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, n int, d time.Duration) (map[string]time.Time, []float64) {
	out := map[string]time.Time{}
	var answers []float64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(d * time.Duration(i) / time.Duration(n) * 9 / 10)))
		wg.Go(func() {
			at := time.Now()
			resp, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: fmt.Sprintf("svc%d", i%20), Count: 1, Cpu: "0.5", Bind: true, MemoryBytes: 64 << 20}))
			if err != nil {
				fmt.Fprintln(os.Stderr, "simagents: deploy:", err)
				return
			}
			took := float64(time.Since(at).Microseconds()) / 1e3
			mu.Lock()
			if took > 200 {
				s.slow = append(s.slow, fmt.Sprintf("%.1fs:%.0fms", at.Sub(start).Seconds(), took))
			}
			for _, in := range resp.Msg.Instances {
				out[in.Id] = at
			}
			answers = append(answers, took)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, answers
}
