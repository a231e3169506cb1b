package nodeagent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/nodeagent/checkpoint"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// plannerClient is the agent's side of the planner API.
type plannerClient interface {
	RegisterHost(context.Context, *connect.Request[pinfoldv1.RegisterHostRequest]) (*connect.Response[pinfoldv1.RegisterHostResponse], error)
	Heartbeat(context.Context, *connect.Request[pinfoldv1.HeartbeatRequest]) (*connect.Response[pinfoldv1.HeartbeatResponse], error)
	ReportStatus(context.Context, *connect.Request[pinfoldv1.ReportStatusRequest]) (*connect.Response[pinfoldv1.ReportStatusResponse], error)
	WatchInstances(context.Context, *connect.Request[pinfoldv1.WatchInstancesRequest]) (*connect.ServerStreamForClient[pinfoldv1.WatchInstancesResponse], error)
}

// PlannerLink is the agent's link to the planner (agentlink.Link): its
// heartbeats one way, its host's desired state the other, on one
// connection.
type PlannerLink interface {
	Heartbeat(context.Context, *pinfoldv1.HeartbeatRequest) (*pinfoldv1.HeartbeatResponse, error)
	// Receive returns the next desired state; an error ends the link.
	Receive() (*pinfoldv1.WatchInstancesResponse, error)
	Close() error
}

// engine is what the agent needs from Docker (docker.Adapter). Every method
// that changes a container is idempotent or fails cleanly on a repeat.
type engine interface {
	List(ctx context.Context) ([]docker.Container, error)
	Create(ctx context.Context, s docker.CreateSpec) (string, error)
	Start(ctx context.Context, id string) error
	Inspect(ctx context.Context, id string) (docker.Container, error)
	Update(ctx context.Context, id string, r docker.Resources) (docker.Container, error)
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	Remove(ctx context.Context, id string) error
	Exec(ctx context.Context, id string, cmd []string) (int, error)
	Pull(ctx context.Context, image string) error
}

// cgroupWriter writes the files Docker cannot express (Apply is
// idempotent) and reads what the kernel reports (memory.current).
type cgroupWriter interface {
	Apply(ctx context.Context, s cgroup.Spec) error
	Read(p cgroup.Path, name string) (string, error)
}

// Config configures an Agent.
type Config struct {
	Host string
	// CgroupParent is the cgroup parent of the containers the agent makes
	// ("": the engine's default): agents of several hosts sharing one
	// engine keep their containers apart with it.
	CgroupParent string
	Version      string
	StateDir     string
	Scheme       Scheme
	HeartbeatTTL time.Duration // default 10s
	Resync       time.Duration // level-triggered pass at least this often; default 2s
	HealthWait   time.Duration // a replacement without a check must keep running this long; default 3s
	// HealthTimeout bounds a HEALTHCHECK or probe that sets no timeout;
	// default 30s.
	HealthTimeout time.Duration
	// Metrics measures the host (load, memory); nil = gopsutil.
	Metrics func(context.Context) (*pinfoldv1.HostMetrics, error)
	// ReportTimeout bounds one status report; default 5s.
	ReportTimeout time.Duration
	// ShareEvery is the share loop's window (ShareEnforcer): how often it
	// measures the instances sharing a CPU and corrects their weights.
	// Default 1s; negative turns the loop off (the static mapping only).
	ShareEvery time.Duration
	// SplitEvery is how often the split scheme's sweep keeps a runnable
	// thread in each child of a split instance (docs/AGENT.md, "Threaded
	// split"): a thread pool's work that wakes on the wrong side costs up
	// to this long of a fragment or whole CPU. Default 250ms; the
	// children's files are re-asserted at most once a second.
	SplitEvery time.Duration
	// Shrink tunes the pressure-guided memory shrink of a resize below what
	// a container uses.
	Shrink ShrinkOptions
	// ResourcesDir holds each instance's size file (<dir>/<instance
	// ID>/resources.json, Size), mounted read-only at /run/pinfold in its
	// containers, which are also created with PINFOLD_CPUS,
	// PINFOLD_CPUS_CEIL, PINFOLD_MEMORY_BYTES and PINFOLD_RESOURCES. "":
	// neither.
	ResourcesDir string
	// ShrinkNotice is how long a resize that lowers an instance's CPU or
	// memory waits after its size file announced it (Size.Next); 0 applies
	// it at once. Needs ResourcesDir.
	ShrinkNotice time.Duration
	// OpenLink opens the host's link to the planner
	// (agentlink.Client.Open). Nil, or one that answers
	// agentlink.ErrUnsupported (an older planner), makes the agent
	// heartbeat and watch with the API's calls.
	OpenLink func(ctx context.Context, host string) (PlannerLink, error)
}

// Agent is the node agent of one host.
type Agent struct {
	cfg     Config
	planner plannerClient
	eng     engine
	cg      cgroupWriter
	topo    *topology.Topology
	log     *slog.Logger

	mu      sync.Mutex
	host    Host
	desired []model.Instance
	haveDes bool
	// fenced: desired came from the checkpoint, not from the planner: the
	// agent keeps what runs in shape but starts nothing (an instance the
	// planner placed elsewhere meanwhile must not come back here).
	fenced  bool
	rev     int64              // the planner's revision desired was read at
	records map[string]*record // by instance ID
	kick    chan struct{}
	shares  *ShareEnforcer
	prom    *promMetrics
	// looped is when the main loop last finished a turn (unix ns): Alive.
	looped atomic.Int64
	// threadState says whether a thread is runnable (the split sweep).
	threadState threadRunnable
	// now is the split sweep's clock (nil: time.Now): a kernel model's
	// in the tests that drive the sweep against one.
	now func() time.Time
	// sizes keeps the size files (nil without Config.ResourcesDir); only
	// Reconcile's goroutine uses it.
	sizes *sizeFiles
}

// Alive reports whether the agent's loop turned recently (within 3
// --resync periods plus a minute for a slow pass): systemd's watchdog.
func (a *Agent) Alive() bool {
	last := a.looped.Load()
	return last == 0 || time.Since(time.Unix(0, last)) < 3*a.cfg.Resync+time.Minute
}

// record is what the agent remembers of one instance between passes.
type record struct {
	err     string // the last apply error ("" after a clean pass)
	refused int64  // the generation the host refused to apply
	failed  int64  // the generation whose replace was rolled back
	failMsg string // why that replace was rolled back
	retry   retry  // a failing action's backoff (retry.go)
	sent    *model.Status
	cpu     cpuSample    // the running container's usage at the last pass
	cpuGot  int          // pieces per second between the last two passes
	cgroup  *cgroup.Path // the running container's cgroup (nil: none)
	// splitChecked is the cgroup looked at for split children left behind
	// (where the scheme does not split the instance); "": not yet. It
	// counts only while splitMade is still splitCheckedMade: children made
	// since (the instance split again, or a pass with an older desired
	// state re-asserting them) are looked for again.
	splitChecked     string
	splitCheckedMade uint64
	// splitMade counts the splitEnsure calls that finished (made or
	// re-asserted children) for this instance.
	splitMade uint64
	// splitEnsured is the cgroup whose split children were made or
	// re-asserted (splitEnsure, by a pass or the sweep) at least once.
	splitEnsured string
	// splitTicks: each thread's CPU ticks at the last split sweep
	// (splitBusyTicks), read at splitTicksAt.
	splitTicks   map[int]uint64
	splitTicksAt time.Time
	// splitUse: the children's CPU use at the last split sweep
	// (splitQuiet).
	splitUse splitUse
}

// clock is the split sweep's time: a.now, or time.Now.
func (a *Agent) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// New returns an agent.
func New(cfg Config, planner plannerClient, eng engine, cg cgroupWriter, topo *topology.Topology, log *slog.Logger) *Agent {
	if cfg.HeartbeatTTL == 0 {
		cfg.HeartbeatTTL = 10 * time.Second
	}
	if cfg.Resync == 0 {
		cfg.Resync = 2 * time.Second
	}
	if cfg.HealthWait == 0 {
		cfg.HealthWait = 3 * time.Second
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = 30 * time.Second
	}
	if cfg.ReportTimeout == 0 {
		cfg.ReportTimeout = 5 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = HostMetrics
	}
	if cfg.ShareEvery == 0 {
		cfg.ShareEvery = time.Second
	}
	if cfg.SplitEvery <= 0 {
		cfg.SplitEvery = DefaultSplitEvery
	}
	if cfg.Scheme == "" {
		cfg.Scheme = DefaultScheme
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var mems []cpuset.NUMANodeID
	for _, n := range topo.NUMANodes {
		if n.MemoryBytes > 0 {
			mems = append(mems, n.ID)
		}
	}
	prom := newPromMetrics()
	var sizes *sizeFiles
	if cfg.ResourcesDir != "" {
		sizes = newSizeFiles(cfg.ResourcesDir)
	}
	return &Agent{sizes: sizes, cfg: cfg, planner: planner, eng: timedEngine{eng, prom.docker}, cg: cg, topo: topo, log: log, prom: prom,
		host:    Host{CPUs: topo.Online, Isolated: topo.Isolated, Mems: cpuset.Of(mems...), ShareBase: 100},
		records: map[string]*record{}, kick: make(chan struct{}, 1), shares: NewShareEnforcer(cg, log),
		threadState: procThreadState("/proc")}
}

// Run restores the last desired state from the checkpoint and enforces it
// at once, registers the host, then heartbeats, watches and reconciles until
// ctx ends. With the planner unreachable it keeps enforcing the last desired
// state it knew and reconnects with backoff.
func (a *Agent) Run(ctx context.Context) error {
	a.restore()
	registered := make(chan error, 1)
	go func() {
		err := a.register(ctx)
		if err == nil && a.cfg.OpenLink != nil {
			go a.linked(ctx)
		} else if err == nil {
			go a.heartbeats(ctx, a.callBeat)
			go a.watch(ctx)
		}
		registered <- err
	}()
	if a.cfg.ShareEvery > 0 && a.cfg.Scheme != SchemeSplit {
		// Under the split scheme each fragment is capped on its own CPU
		// and the caps sum to at most one: no weight to correct.
		go a.shareLoop(ctx)
	}
	go a.splitLoop(ctx)
	tick := time.NewTicker(a.cfg.Resync)
	defer tick.Stop()
	followUp := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-registered:
			if err != nil {
				return err
			}
			continue
		case <-a.kick:
		case <-tick.C:
		}
		// A pass that acted is followed at once by one more, to report the
		// result; not by a chain of them: an action that keeps failing
		// backs off (retry.go), not in a tight loop against Docker.
		acted := a.ready() && a.Reconcile(ctx)
		a.looped.Store(time.Now().UnixNano())
		if acted && !followUp {
			a.wake()
		}
		followUp = acted && !followUp
	}
}

// DefaultSplitEvery is Config.SplitEvery's default.
const DefaultSplitEvery = 250 * time.Millisecond

// shareLoop runs the share enforcer every ShareEvery over the instances
// that share a CPU and run.
func (a *Agent) shareLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.ShareEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := a.shareTick(ctx, time.Now()); err != nil {
			a.log.Warn("share loop", "err", err)
		}
	}
}

// splitLoop runs the split scheme's sweep every SplitEvery, re-asserting
// the children's files at most once a second; under the other schemes it
// looks once per container for children an earlier split run left, and
// wakes once a second (splitEvery).
//
// A sweep may read one file per thread: a host whose split containers
// hold thousands of threads could spend a CPU on it. So the wait after a
// sweep is splitWait: at least SplitEvery, and at least splitCostFactor
// times what the sweep took, which holds the sweep under 1 % of one CPU
// (issue 35 item 6): where many instances need their threads read at
// once, the sweep comes less often rather than costing more.
func (a *Agent) splitLoop(ctx context.Context) {
	every := splitEvery(a.cfg.Scheme, a.cfg.SplitEvery)
	timer := time.NewTimer(every)
	defer timer.Stop()
	var ensured time.Time
	slow := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		ensure := start.Sub(ensured) >= time.Second
		if ensure {
			ensured = start
		}
		if err := a.splitPass(ctx, ensure); err != nil && ctx.Err() == nil { // not the stop cutting an apply short
			a.log.Warn("split sweep", "err", err)
		}
		took := time.Since(start)
		wait := splitWait(every, took)
		if wait > every != slow {
			slow = !slow
			a.log.Info("split sweep period", "took", took, "next_in", wait, "split_every", every)
		}
		timer.Reset(wait)
	}
}

// splitEvery is splitLoop's period: every under the split scheme; under
// the others, which only look once per container for children a split
// left, no more often than once a second.
func splitEvery(scheme Scheme, every time.Duration) time.Duration {
	if scheme == SchemeSplit {
		return every
	}
	return max(every, time.Second)
}

// splitCostFactor: the wait after a sweep is at least this many times
// what it took (99: the sweep takes at most 1 % of the time). Quiet
// instances cost a few cgroup reads a sweep, so only a host where many
// instances' threads must be read at once slows down: natively about
// 12 instances of 40 threads (2.6 ms) before the period passes 250 ms.
const splitCostFactor = 99

// splitWait is how long splitLoop waits after a sweep that took took.
func splitWait(every, took time.Duration) time.Duration {
	return max(every, splitCostFactor*took)
}

// shareTick is one window of the share loop over the desired instances
// that share a CPU and whose containers ran at the last pass.
func (a *Agent) shareTick(ctx context.Context, now time.Time) error {
	a.mu.Lock()
	h := a.host
	members := ShareMembers(h, a.desired, a.cfg.Scheme)
	paths := map[string]cgroup.Path{}
	for _, m := range members {
		if r := a.records[m.ID]; r != nil && r.cgroup != nil {
			paths[m.ID] = *r.cgroup
		}
	}
	a.mu.Unlock()
	return a.shares.Tick(ctx, members, paths, h.ShareBase, now)
}

func (a *Agent) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Agent) ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.haveDes
}

// restore takes the desired state from the checkpoint, if there is a good
// one for this host.
func (a *Agent) restore() {
	if a.cfg.StateDir == "" {
		return
	}
	cp, err := checkpoint.Load(a.cfg.StateDir)
	switch {
	case errors.Is(err, checkpoint.ErrNone):
		return
	case err != nil:
		a.log.Warn("checkpoint unusable; waiting for the planner's desired state", "err", err)
		return
	case cp.Host != a.cfg.Host:
		a.log.Warn("checkpoint is another host's; waiting for the planner's desired state", "checkpoint_host", cp.Host, "host", a.cfg.Host)
		return
	}
	a.mu.Lock()
	a.desired, a.haveDes, a.rev, a.fenced = cp.Desired, true, cp.Revision, true
	if !cp.CPUs.IsEmpty() && cp.ShareBase > 0 {
		a.host.CPUs, a.host.ShareBase, a.host.Pool = cp.CPUs, cp.ShareBase, cp.Pool
	}
	a.mu.Unlock()
	a.log.Info("enforcing the checkpointed desired state until the planner answers (resources and drift only: nothing is started before it answers)", "instances", len(cp.Desired), "revision", cp.Revision)
	a.wake()
}

// SetDesired replaces the desired set as the watch would (without a
// checkpoint); for tests.
func (a *Agent) SetDesired(ds []model.Instance) {
	a.mu.Lock()
	a.desired, a.haveDes, a.fenced = ds, true, false
	a.mu.Unlock()
}
