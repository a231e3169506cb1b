package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/nodeagent"
	"github.com/pinfold/pinfold/numa"
	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/api"
)

type agentFlags struct {
	client                                                                     clientFlags
	host, sysfsRoot, procRoot, cgroupRoot                                      string
	dockerHost, stateDir, scheme, logLevel, cgroupParent                       string
	metricsListen, resourcesDir                                                string
	ttl, resync, health, healthTimeout, shareEvery, splitEvery, shrinkDeadline time.Duration
	shrinkNotice                                                               time.Duration
	resourcesDirSet                                                            func() bool
	noLink                                                                     bool
}

func (f *agentFlags) register(cmd *cobra.Command, withClient bool) {
	home, _ := os.UserHomeDir()
	if withClient {
		f.client.register(cmd)
	}
	fl := cmd.Flags()
	fl.StringVar(&f.host, "host", "", "name of this host in the planner (default: the hostname)")
	fl.StringVar(&f.sysfsRoot, "sysfs-root", "/sys", "sysfs to discover the topology from")
	fl.StringVar(&f.procRoot, "proc-root", "/proc", "procfs (MemTotal on hosts without NUMA information)")
	fl.StringVar(&f.cgroupRoot, "cgroup-root", cgroup.HostMount, "cgroup v2 mount")
	fl.StringVar(&f.dockerHost, "docker-host", "", "Docker engine (default: DOCKER_HOST or the local socket)")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (per instance: planned and used CPU, throttling, memory, pressure; reconcile and Docker latency); empty: off")
	fl.StringVar(&f.cgroupParent, "cgroup-parent", "", "cgroup parent of the containers this agent makes (default: the engine's); agents of several hosts sharing one engine each take their own (/pinfold-h2, or h2.slice under systemd)")
	fl.StringVar(&f.stateDir, "state-dir", filepath.Join(home, ".local/state/pinfold-agent"), "where the agent keeps its checkpoint")
	fl.StringVar(&f.scheme, "fragment-scheme", string(nodeagent.DefaultScheme), "how a shared CPU is split: capped (cpu.weight ∝ fragment pieces, corrected by the share loop, + cpu.max = the plan, e.g. 170000 100000 for 1.7: the best worst case across the workload matrix), weight (cpu.weight only, as Eru does), quota (cpu.max = pieces) or split (capped, plus threaded child cgroups: whole CPUs, and the shared CPU capped at the fragment; exact for many busy threads, but a Go program sees 1 CPU and docker top fails; docs/AGENT.md \"The workload matrix\")")
	fl.DurationVar(&f.ttl, "heartbeat-ttl", 10*time.Second, "heartbeat lease; the host is down this long after the agent stops")
	fl.DurationVar(&f.resync, "resync", 2*time.Second, "level-triggered pass at least this often (drift is repaired within it)")
	fl.DurationVar(&f.health, "health-wait", 3*time.Second, "a replacement without a health check must keep running this long")
	fl.DurationVar(&f.shareEvery, "share-every", time.Second, "the share loop's window: how often instances sharing a CPU are measured (cpu.stat, cpu.pressure) and their cpu.weight corrected towards the plan (not used under --fragment-scheme split: its caps make the split); 0 turns the loop off")
	fl.DurationVar(&f.splitEvery, "split-every", nodeagent.DefaultSplitEvery, "under --fragment-scheme split: how often each split instance's threads are swept so that both its child cgroups hold a runnable thread (a thread pool's work that wakes on the wrong side costs up to this long of its fragment or of a whole CPU; each sweep reads one /proc file per thread); 100ms to 10s")
	fl.DurationVar(&f.shrinkDeadline, "shrink-deadline", 30*time.Second, "how long a resize below a container's memory use may take to shrink it (memory.high stepped down while memory.pressure stays low) before it is refused and rolled back")
	fl.StringVar(&f.resourcesDir, "resources-dir", "", "where each instance's size file is kept (DIR/<instance>/resources.json: cpus, whole_cpus, fragment, cpus_ceil, cpuset, memory_bytes, and a shrink announced in next), mounted read-only at /run/pinfold in its containers, which also get PINFOLD_CPUS, PINFOLD_CPUS_CEIL, PINFOLD_MEMORY_BYTES and PINFOLD_RESOURCES at create; the directory must be on the Docker engine's host (default: /run/pinfold/instances as root, else instances under --state-dir; \"\" turns it off)")
	fl.DurationVar(&f.shrinkNotice, "shrink-notice", 0, "how long a resize that lowers an instance's CPU or memory waits after announcing it in the instance's resources.json (its next field), so the workload can shed threads or memory first; 0 applies it at once; at most 10m; needs --resources-dir")
	f.resourcesDirSet = func() bool { return fl.Changed("resources-dir") }
	fl.BoolVar(&f.noLink, "no-link", false, "heartbeat and watch with two API calls (two connections to the planner) instead of the agent link (one upgraded HTTP/1.1 connection; for a proxy between agent and planner that does not pass upgrades); an older planner without the link is found and used that way anyway")
	fl.DurationVar(&f.healthTimeout, "health-timeout", 30*time.Second, "how long a replacement's HEALTHCHECK or probe may take to pass, unless the probe sets its own")
	if withClient {
		fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	}
}

// validate checks the agent's flags, touching nothing: `pinfold agent` and
// `pinfold up` (before it starts a planner) refuse bad ones the same way.
func (f *agentFlags) validate() error {
	if !slices.Contains(nodeagent.Schemes, nodeagent.Scheme(f.scheme)) {
		return badInput("--fragment-scheme %q: want weight, capped, quota or split", f.scheme)
	}
	for name, d := range map[string]time.Duration{"--heartbeat-ttl": f.ttl, "--resync": f.resync, "--health-wait": f.health, "--health-timeout": f.healthTimeout, "--shrink-deadline": f.shrinkDeadline} {
		if d <= 0 {
			return badInput("%s %s: want more than 0", name, d)
		}
	}
	if f.shareEvery < 0 || f.shareEvery > 0 && f.shareEvery < 100*time.Millisecond {
		return badInput("--share-every %s: want 0 (off) or at least 100ms", f.shareEvery)
	}
	if f.splitEvery < 100*time.Millisecond || f.splitEvery > 10*time.Second {
		return badInput("--split-every %s: want 100ms to 10s", f.splitEvery)
	}
	if f.shrinkNotice < 0 || f.shrinkNotice > 10*time.Minute {
		return badInput("--shrink-notice %s: want 0 (off) to 10m", f.shrinkNotice)
	}
	if f.resourcesDir != "" && (!filepath.IsAbs(f.resourcesDir) || strings.ContainsAny(f.resourcesDir, ":,\n\x00") || filepath.Clean(f.resourcesDir) == "/") {
		return badInput("--resources-dir %q: want an absolute path other than / without ':' or ',' (the Docker engine mounts each instance's directory in it, SOURCE:TARGET:ro)", f.resourcesDir)
	}
	if f.shrinkNotice > 0 && f.resourcesDir == "" && f.resourcesDirSet != nil && f.resourcesDirSet() {
		return badInput("--shrink-notice %s: needs --resources-dir (the notice is written there); it was turned off", f.shrinkNotice)
	}
	if len(f.cgroupParent) > 255 || strings.ContainsAny(f.cgroupParent, " \t\n\x00") || strings.Contains(f.cgroupParent, "..") {
		return badInput("--cgroup-parent %q: want a cgroup path (/pinfold-h2) or a systemd slice (h2.slice) without blanks or '..'", f.cgroupParent)
	}
	return nil
}

func (f *agentFlags) run(ctx context.Context, log *slog.Logger) error {
	if err := f.validate(); err != nil {
		return err
	}
	resourcesDir := filepath.Clean(f.resourcesDir)
	if f.resourcesDir == "" {
		resourcesDir = ""
	}
	if resourcesDir == "" && (f.resourcesDirSet == nil || !f.resourcesDirSet()) {
		resourcesDir, _ = filepath.Abs(filepath.Join(f.stateDir, "instances"))
		if os.Geteuid() == 0 {
			resourcesDir = "/run/pinfold/instances"
		}
	}
	shareEvery := f.shareEvery
	if shareEvery == 0 {
		shareEvery = -1
	}
	if f.host == "" {
		f.host, _ = os.Hostname()
	}
	topo, err := numa.Discover(os.DirFS(f.sysfsRoot), os.DirFS(f.procRoot))
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	cg, eng, err := f.prerequisites(ctx, log)
	if err != nil {
		return err
	}
	defer cg.Close()
	cl, err := f.client.client(api.AgentClientOptions()...)
	if err != nil {
		return err
	}
	var openLink func(context.Context, string) (nodeagent.PlannerLink, error)
	if !f.noLink {
		hc, err := f.client.httpClient()
		if err != nil {
			return err
		}
		lc := agentlink.NewClient(hc, f.client.baseURL())
		openLink = func(ctx context.Context, host string) (nodeagent.PlannerLink, error) {
			l, err := lc.Open(ctx, host)
			if err != nil {
				return nil, err // not a nil *Link in an interface
			}
			return l, nil
		}
	}
	a := nodeagent.New(nodeagent.Config{OpenLink: openLink, Host: f.host, CgroupParent: f.cgroupParent, Version: version, StateDir: f.stateDir, Scheme: nodeagent.Scheme(f.scheme),
		HeartbeatTTL: f.ttl, Resync: f.resync, HealthWait: f.health, HealthTimeout: f.healthTimeout, ShareEvery: shareEvery, SplitEvery: f.splitEvery, Shrink: nodeagent.ShrinkOptions{Deadline: f.shrinkDeadline},
		ResourcesDir: resourcesDir, ShrinkNotice: f.shrinkNotice}, cl, eng, cg, topo, log)
	if f.metricsListen != "" {
		stop, addr, err := serveAgentMetrics(a, f.metricsListen)
		if err != nil {
			return badInput("--metrics-listen %s: %v", f.metricsListen, err)
		}
		defer stop()
		log.Info("agent metrics", "url", "http://"+addr+"/metrics")
	}
	stopping := notifySystemd(ctx, log, a.Alive)
	defer stopping()
	err = a.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func newAgentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: register this host and enforce its instances",
		Long: `The node agent discovers this host's topology, registers it with the planner,
holds its heartbeat, watches the host's desired instances and converges
Docker containers and their cgroup v2 files to them: creates, resizes live,
removes, repairs drift (a hand-made docker update is reverted within
--resync), and replaces containers blue-green. It only touches containers
labelled as pinfold's.`,
		Example: `  pinfold agent --planner 10.0.0.5:7878
  pinfold agent --planner 127.0.0.1:7878 --host vm1 --state-dir /var/lib/pinfold-agent`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, log, err := daemon(cmd, f.logLevel)
			if err != nil {
				return err
			}
			defer stop()
			return f.run(ctx, log)
		},
	}
	f.register(cmd, true)
	return cmd
}

// startAgentInBackground runs an agent for `pinfold up`; failures are logged
// (a host without Docker still gets a planner).
func startAgentInBackground(ctx context.Context, f *agentFlags, log *slog.Logger) {
	go func() {
		for ctx.Err() == nil {
			err := f.run(ctx, log)
			if ctx.Err() != nil {
				return
			}
			log.Warn("agent stopped; retrying in 10 s (instances stay pending without one)", "err", err)
			select {
			case <-time.After(10 * time.Second):
			case <-ctx.Done():
			}
		}
	}()
}

// serveAgentMetrics serves the agent's series (and the Go runtime's and the
// process's) at http://addr/metrics until stop.
func serveAgentMetrics(a *nodeagent.Agent, addr string) (stop func(), bound string, err error) {
	reg := prometheus.NewRegistry()
	if err := a.Register(reg); err != nil {
		return nil, "", err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, ln.Addr().String(), nil
}

// prerequisites opens what the agent needs, saying exactly what is missing
// and how to fix it: cgroup v2 (unified) at --cgroup-root with the
// controllers it writes, and a reachable Docker engine.
func (f *agentFlags) prerequisites(ctx context.Context, log *slog.Logger) (*cgroup.Manager, *docker.Adapter, error) {
	if _, err := os.Stat(filepath.Join(f.cgroupRoot, "cgroup.controllers")); err != nil {
		return nil, nil, &exitError{code: exitUnmet, err: fmt.Errorf("agent prerequisite: cgroup v2 is not mounted at %s (%v): this host runs cgroup v1 or the hybrid layout; "+
			"boot with systemd.unified_cgroup_hierarchy=1 (and without cgroup_no_v1 overrides) on the kernel command line, or give --cgroup-root the cgroup2 mount", f.cgroupRoot, err)}
	}
	cg, err := cgroup.Open(f.cgroupRoot, "", cgroup.WithLogger(log)) // owns no subtree: writes containers' groups
	if err != nil {
		if mounts, rerr := os.ReadFile("/proc/self/mounts"); rerr == nil {
			if bound := v1Bound(string(mounts), f.cgroupRoot, cgroup.Controllers); len(bound) > 0 {
				// The hybrid layout: enabling them on the v2 mount cannot work.
				return nil, nil, &exitError{code: exitUnmet, err: fmt.Errorf("agent prerequisite: %w (controllers bound to cgroup v1 hierarchies: %s, the hybrid layout: "+
					"they cannot be enabled at %s while v1 holds them; boot with systemd.unified_cgroup_hierarchy=1 on the kernel command line)", err, strings.Join(bound, ", "), f.cgroupRoot)}
			}
		}
		return nil, nil, &exitError{code: exitUnmet, err: fmt.Errorf("agent prerequisite: %w (the agent needs the %s controllers enabled at %s: "+
			"echo '+cpu +cpuset +memory +pids' > %s/cgroup.subtree_control, or let systemd delegate them)", err, strings.Join(cgroup.Controllers, ", "), f.cgroupRoot, f.cgroupRoot)}
	}
	eng, err := docker.Connect(ctx, f.dockerHost, log)
	if err != nil {
		cg.Close()
		return nil, nil, &exitError{code: exitUnmet, err: fmt.Errorf("agent prerequisite: %w (is dockerd running? systemctl start docker; or give --docker-host)", err)}
	}
	return cg, eng, nil
}

// v1Bound is, when root is a cgroup2 mount in mounts (/proc/self/mounts),
// each of controllers that a cgroup v1 hierarchy holds, with its mount
// point ("cpu at /sys/fs/cgroup/cpu,cpuacct"), in controllers' order: the
// hybrid layout, where they cannot be enabled at root.
func v1Bound(mounts, root string, controllers []string) []string {
	if !slices.ContainsFunc(strings.Split(mounts, "\n"), func(l string) bool {
		f := strings.Fields(l)
		return len(f) >= 3 && f[1] == filepath.Clean(root) && f[2] == "cgroup2"
	}) {
		return nil
	}
	var out []string
	for _, c := range controllers {
		for _, l := range strings.Split(mounts, "\n") {
			f := strings.Fields(l)
			if len(f) < 4 || f[2] != "cgroup" {
				continue
			}
			if slices.Contains(strings.Split(f[3], ","), c) {
				out = append(out, c+" at "+f[1])
				break
			}
		}
	}
	return out
}
