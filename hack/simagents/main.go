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
// complete within its limit. The steady phase's etcd writes a minute
// (revisions, raft entries, lease grants) are read from etcd's own
// /metrics; -metrics sets what the heartbeats carry (none; as the agent:
// the same figures every 30 s; new ones on every beat).
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
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/api"
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
	flag.StringVar(&cfg.metrics, "metrics", "none", "the host metrics each heartbeat carries: none; agent: the same ones, resent every 30 s (the agent's steady state); moving: new ones on every heartbeat (a host whose load keeps moving)")
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
	if cfg.metrics != "none" && cfg.metrics != "agent" && cfg.metrics != "moving" {
		fmt.Fprintf(os.Stderr, "simagents: -metrics %q: want none, agent or moving\n", cfg.metrics)
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
	metrics             string
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

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
	w0e := etcdWrites(ec)
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
	rep.etcdRates(w0e, etcdWrites(ec), el, s.cfg.metrics)
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
	// gRPC: uncompressed (the planner takes compressed requests in unary
	// Connect calls only, where it counts what they decompress to).
	return pinfoldv1connect.NewPlannerServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC()), tr.CloseIdleConnections
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
