package nodeagent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/nodeagent/checkpoint"
	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
)

// Protocol is the planner protocol version this agent speaks.
const Protocol = 1

// plannerClient is the agent's side of the planner API.
type plannerClient interface {
	RegisterHost(context.Context, *connect.Request[pinfoldv1.RegisterHostRequest]) (*connect.Response[pinfoldv1.RegisterHostResponse], error)
	Heartbeat(context.Context, *connect.Request[pinfoldv1.HeartbeatRequest]) (*connect.Response[pinfoldv1.HeartbeatResponse], error)
	ReportStatus(context.Context, *connect.Request[pinfoldv1.ReportStatusRequest]) (*connect.Response[pinfoldv1.ReportStatusResponse], error)
	WatchInstances(context.Context, *connect.Request[pinfoldv1.WatchInstancesRequest]) (*connect.ServerStreamForClient[pinfoldv1.WatchInstancesResponse], error)
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
	Remove(ctx context.Context, id string) error
	Exec(ctx context.Context, id string, cmd []string) (int, error)
}

// cgroupWriter writes the files Docker cannot express (Apply is
// idempotent) and reads what the kernel reports (memory.current).
type cgroupWriter interface {
	Apply(ctx context.Context, s cgroup.Spec) error
	Read(p cgroup.Path, name string) (string, error)
}

// Config configures an Agent.
type Config struct {
	Host         string
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
}

// Agent is the node agent of one host.
type Agent struct {
	cfg     Config
	planner plannerClient
	eng     engine
	cg      cgroupWriter
	topo    *topology.Topology
	host    Host
	log     *slog.Logger

	mu       sync.Mutex
	desired  []Instance
	haveDes  bool
	errs     map[string]string // instance → last apply error
	failed   map[string]int64  // instance → generation whose replace was rolled back
	failMsg  map[string]string // instance → why that replace was rolled back
	refused  map[string]int64  // instance → generation the host refused to apply
	reported map[string]string // instance → last status sent
	memSent  map[string]int64  // instance → memory.current last sent
	kick     chan struct{}
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
	if cfg.Metrics == nil {
		cfg.Metrics = HostMetrics
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
	return &Agent{cfg: cfg, planner: planner, eng: eng, cg: cg, topo: topo, log: log,
		host: Host{CPUs: topo.Online, Mems: cpuset.Of(mems...), ShareBase: 100},
		errs: map[string]string{}, failed: map[string]int64{}, failMsg: map[string]string{}, refused: map[string]int64{}, reported: map[string]string{}, memSent: map[string]int64{}, kick: make(chan struct{}, 1)}
}

// Run registers the host, then heartbeats, watches and reconciles until ctx
// ends. With the planner unreachable it keeps enforcing the last desired
// state it knew (from the checkpointed watch) and reconnects with backoff.
func (a *Agent) Run(ctx context.Context) error {
	if cp, err := checkpoint.Load(a.cfg.StateDir); err == nil {
		a.log.Info("checkpoint loaded", "host", cp.Host, "instances", len(cp.Applied))
	} else if !errors.Is(err, checkpoint.ErrNone) {
		a.log.Warn("checkpoint unusable; rebuilding from Docker and the planner", "err", err)
	}
	if err := a.register(ctx); err != nil {
		return err
	}
	go a.heartbeats(ctx)
	go a.watch(ctx)
	tick := time.NewTicker(a.cfg.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.kick:
		case <-tick.C:
		}
		if a.ready() {
			a.Reconcile(ctx)
		}
	}
}

func (a *Agent) ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.haveDes
}

func backoff(ctx context.Context, attempt int) {
	d := min(time.Duration(1<<min(attempt, 5))*200*time.Millisecond, 5*time.Second)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (a *Agent) register(ctx context.Context) error {
	tj, _ := json.Marshal(a.topo)
	for i := 0; ; i++ {
		resp, err := a.planner.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: a.cfg.Host, TopologyJson: tj,
			Agent: true, AgentVersion: a.cfg.Version, Protocol: Protocol}))
		if err == nil {
			if sb := int(resp.Msg.Host.ShareBase); sb > 0 {
				a.host.ShareBase = sb
			}
			a.log.Info("host registered", "host", a.cfg.Host, "cpus", a.topo.Online, "numa_nodes", len(a.topo.NUMANodes))
			return nil
		}
		var ce *connect.Error
		if errors.As(err, &ce) && (ce.Code() == connect.CodeInvalidArgument || ce.Code() == connect.CodeAlreadyExists || ce.Code() == connect.CodeFailedPrecondition) {
			return fmt.Errorf("register host %s: %w", a.cfg.Host, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.log.Warn("planner unreachable; retrying registration", "err", err)
		backoff(ctx, i)
	}
}

// heartbeats keeps the lease alive and sends the host's metrics when they
// changed enough to matter (or every metricsEvery), so a large fleet does
// not write to etcd on every beat.
func (a *Agent) heartbeats(ctx context.Context) {
	every := a.cfg.HeartbeatTTL / 3
	var sent *pinfoldv1.HostMetrics
	var sentAt time.Time
	for i := 0; ctx.Err() == nil; {
		req := &pinfoldv1.HeartbeatRequest{Host: a.cfg.Host, AgentVersion: a.cfg.Version,
			Protocol: Protocol, TtlSeconds: int32(a.cfg.HeartbeatTTL / time.Second)}
		m, err := a.cfg.Metrics(ctx)
		if err != nil {
			a.log.Debug("host metrics unavailable", "err", err)
		} else if MetricsChanged(sent, m) || time.Since(sentAt) > metricsEvery {
			req.Metrics = m
		}
		_, err = a.planner.Heartbeat(ctx, connect.NewRequest(req))
		if err != nil {
			a.log.Warn("heartbeat failed", "err", err)
			i++
			backoff(ctx, i)
			continue
		}
		if req.Metrics != nil {
			sent, sentAt = req.Metrics, time.Now()
		}
		i = 0
		select {
		case <-time.After(every):
		case <-ctx.Done():
		}
	}
}

// watch keeps the desired set current from the planner's stream.
func (a *Agent) watch(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		stream, err := a.planner.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: a.cfg.Host}))
		if err != nil {
			a.log.Warn("watch failed; keeping the last desired state", "err", err)
			backoff(ctx, i)
			continue
		}
		for stream.Receive() {
			i = 0
			a.setDesired(stream.Msg().Instances)
		}
		if err := stream.Err(); err != nil && ctx.Err() == nil {
			a.log.Warn("watch interrupted; keeping the last desired state", "err", err)
		}
		stream.Close()
		backoff(ctx, i)
	}
}

func (a *Agent) setDesired(msgs []*pinfoldv1.Instance) {
	var ds []Instance
	for _, m := range msgs {
		in := Instance{ID: m.Id, Service: m.Service, Bind: m.Bind, CPUs: map[cpuset.CPUID]int{}, NUMANode: cpuset.NUMANodeID(m.NumaNode),
			Memory: m.MemoryBytes, MemorySoft: m.MemorySoftBytes, Image: m.Image, Command: m.Command, Env: m.Env, Network: m.Network, Generation: m.Generation,
			Health: probeOf(m.Health)}
		for id, p := range m.Cpus {
			in.CPUs[cpuset.CPUID(id)] = int(p)
		}
		if !m.Bind && m.CpuQuota != "" {
			if f, err := strconv.ParseFloat(m.CpuQuota, 64); err == nil {
				in.CPUQuota = int(f*float64(a.host.ShareBase) + 0.5)
			}
		}
		ds = append(ds, in)
	}
	a.mu.Lock()
	a.desired, a.haveDes = ds, true
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// SetDesired is for tests: it replaces the desired set as the watch would.
func (a *Agent) SetDesired(ds []Instance) {
	a.mu.Lock()
	a.desired, a.haveDes = ds, true
	a.mu.Unlock()
}

// Reconcile runs one observe → diff → apply → checkpoint → report pass.
// Errors are per instance: one failing container does not stop the others.
func (a *Agent) Reconcile(ctx context.Context) {
	a.mu.Lock()
	desired := slices.Clone(a.desired)
	a.mu.Unlock()
	cs, err := a.eng.List(ctx)
	if err != nil {
		a.log.Warn("docker list failed", "err", err)
		return
	}
	a.mu.Lock()
	failed := maps.Clone(a.failed)
	a.mu.Unlock()
	actions := Diff(a.host, desired, observe(cs), a.cfg.Scheme, failed)
	// An instance with nothing left to do has converged: an error from an
	// earlier pass (say, a size that was since rolled back) no longer holds.
	pending := map[string]bool{}
	for _, act := range actions {
		if act.Instance != nil && act.Kind != Reassert {
			pending[act.Instance.ID] = true
		}
	}
	a.mu.Lock()
	for _, in := range desired {
		if !pending[in.ID] {
			delete(a.errs, in.ID)
			delete(a.refused, in.ID)
		}
	}
	a.mu.Unlock()
	for _, act := range actions {
		id := ""
		if act.Instance != nil {
			id = act.Instance.ID
		}
		t0 := time.Now()
		err := a.apply(ctx, act)
		if act.Kind != Reassert {
			a.log.Info("applied", "action", act.Kind, "instance", id, "container_id", short(act.Container), "reason", act.Reason, "took", time.Since(t0).Round(time.Millisecond), "err", err)
		}
		if id != "" {
			a.mu.Lock()
			switch {
			case err != nil && (act.Kind == Replace || act.Kind == FinishReplace):
				a.failed[id], a.failMsg[id] = act.Instance.Generation, err.Error()
			case err != nil:
				a.errs[id] = err.Error()
				if act.Kind == Update && refusal(err) {
					a.refused[id] = act.Instance.Generation
				}
			case act.Kind != Reassert:
				delete(a.errs, id)
				delete(a.refused, id)
			}
			a.mu.Unlock()
		}
	}
	a.checkpointAndReport(ctx, desired)
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func (a *Agent) spec(in *Instance, gen int64, r docker.Resources) docker.CreateSpec {
	return docker.CreateSpec{Name: fmt.Sprintf("pinfold-%s-g%d", in.ID, gen), Image: in.Image, Cmd: in.Command, Env: in.Env, Network: in.Network,
		Service: in.Service, Instance: in.ID, Labels: map[string]string{LabelGeneration: strconv.FormatInt(gen, 10)}, Resources: r}
}

func (a *Agent) apply(ctx context.Context, act Action) error {
	in := act.Instance
	switch act.Kind {
	case Create:
		id, err := a.eng.Create(ctx, a.spec(in, in.Generation, act.Want.Resources))
		if err != nil {
			return err
		}
		if err := a.eng.Start(ctx, id); err != nil {
			return err
		}
		return a.reassert(ctx, id, act.Want)
	case Update:
		if _, err := a.eng.Update(ctx, act.Container, act.Want.Resources); err != nil {
			return err
		}
		return a.reassert(ctx, act.Container, act.Want)
	case Start:
		return a.eng.Start(ctx, act.Container)
	case Unpause:
		return a.eng.Unpause(ctx, act.Container)
	case Remove:
		return a.eng.Remove(ctx, act.Container)
	case Reassert:
		return a.reassert(ctx, act.Container, act.Want)
	case Replace:
		return a.replace(ctx, in, act.Container, act.Want)
	case FinishReplace:
		if err := a.healthy(ctx, act.New, in.Health); err != nil {
			_ = a.eng.Remove(ctx, act.New)
			_ = a.eng.Unpause(ctx, act.Container)
			return fmt.Errorf("replace rolled back: %w", err)
		}
		return a.eng.Remove(ctx, act.Container)
	}
	return nil
}

// replace is blue-green on the same allocation: pause the old container (so
// two running containers never hold the same CPUs), start the new one, keep
// it only if it stays healthy, else remove it and resume the old one.
func (a *Agent) replace(ctx context.Context, in *Instance, old string, want Want) error {
	if err := a.eng.Pause(ctx, old); err != nil {
		return fmt.Errorf("replace: pause the old container: %w", err)
	}
	rollback := func(newID string, cause error) error {
		if newID != "" {
			_ = a.eng.Remove(ctx, newID)
		}
		if err := a.eng.Unpause(ctx, old); err != nil {
			return fmt.Errorf("replace failed (%v) and the old container did not resume: %w", cause, err)
		}
		return fmt.Errorf("replace rolled back, the old container runs on: %w", cause)
	}
	id, err := a.eng.Create(ctx, a.spec(in, in.Generation, want.Resources))
	if err != nil {
		return rollback("", err)
	}
	if err := a.eng.Start(ctx, id); err != nil {
		return rollback(id, err)
	}
	if err := a.healthy(ctx, id, in.Health); err != nil {
		return rollback(id, err)
	}
	if err := a.reassert(ctx, id, want); err != nil {
		a.log.Warn("replace: cgroup files of the new container", "err", err)
	}
	return a.eng.Remove(ctx, old)
}

// healthy decides whether a new container may replace the old one: the
// image's HEALTHCHECK must report healthy, or the instance's probe must pass,
// within the timeout; without either, it must keep running HealthWait.
func (a *Agent) healthy(ctx context.Context, id string, p *Probe) error {
	timeout := a.cfg.HealthTimeout
	if p != nil && p.Timeout > 0 {
		timeout = p.Timeout
	}
	start := time.Now()
	probeCtx, cancel := context.WithDeadline(ctx, start.Add(timeout))
	defer cancel()
	last := "" // the last answer; an attempt cut by the deadline does not replace one
	for {
		c, err := a.eng.Inspect(ctx, id)
		if err != nil {
			return err
		}
		if !c.Running {
			return fmt.Errorf("the new container is %s (exit code %d)", c.Status, c.ExitCode)
		}
		switch {
		case p != nil:
			err := p.check(probeCtx, a.eng, c)
			if err == nil {
				return nil
			}
			if probeCtx.Err() == nil || last == "" {
				last = err.Error()
			}
		case c.Health == "healthy":
			return nil
		case c.Health == "unhealthy":
			return fmt.Errorf("the new container's HEALTHCHECK reports unhealthy")
		case c.Health != "":
			last = "HEALTHCHECK " + c.Health
		case time.Since(start) >= a.cfg.HealthWait:
			return nil
		}
		if time.Since(start) >= timeout {
			return fmt.Errorf("health check did not pass within %s (last: %s)", timeout, cmp.Or(last, "no answer yet"))
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reassert writes the cgroup files Docker cannot express exactly.
func (a *Agent) reassert(ctx context.Context, id string, want Want) error {
	c, err := a.eng.Inspect(ctx, id)
	if err != nil || !c.Running {
		return err
	}
	p, err := cgroup.ParsePath(c.CgroupPath)
	if err != nil {
		return err
	}
	return a.cg.Apply(ctx, cgroup.Spec{Path: p, CPUWeight: want.CPUWeight, CPUMaxBurst: cgroup.Uint64(0)})
}

// checkpointAndReport records what runs and tells the planner what changed.
func (a *Agent) checkpointAndReport(ctx context.Context, desired []Instance) {
	cs, err := a.eng.List(ctx)
	if err != nil {
		return
	}
	cp := checkpoint.State{Host: a.cfg.Host, Applied: map[string]checkpoint.Applied{}}
	byInst := map[string]docker.Container{}
	for _, c := range cs {
		if prev, ok := byInst[c.Instance]; !ok || c.Running && !prev.Running {
			byInst[c.Instance] = c
		}
	}
	for _, in := range desired {
		c, ok := byInst[in.ID]
		st := &pinfoldv1.ReportStatusRequest{Host: a.cfg.Host, Id: in.ID, State: "pending"}
		if ok {
			gen, _ := strconv.ParseInt(c.Labels[LabelGeneration], 10, 64)
			want := Map(a.host, in, a.cfg.Scheme, pool(a.host, desired))
			st.ContainerId, st.Pid = c.ID, int32(c.PID)
			switch {
			case c.OOMKilled:
				st.State = "oom_killed"
			case c.Running && !c.Paused:
				st.State = "running"
			case c.Paused:
				st.State = "paused"
			default:
				st.State = "exited"
			}
			if sameResources(c.Applied, want.Resources) && c.Image == in.Image {
				st.Generation = in.Generation
			} else {
				st.Generation = gen
			}
			var weight uint64
			if c.Running {
				st.MemoryCurrentBytes, weight = a.observed(c)
			}
			st.Applied = &pinfoldv1.Applied{Cpus: c.Applied.CPUs.String(), Mems: c.Applied.Mems.String(), CpuQuota: c.Applied.CPUQuota,
				CpuWeight: weight, MemoryBytes: c.Applied.MemoryBytes}
			cp.Applied[in.ID] = checkpoint.Applied{ContainerID: c.ID, Generation: st.Generation, CPUs: c.Applied.CPUs.String(),
				Mems: c.Applied.Mems.String(), CPUQuota: c.Applied.CPUQuota, CPUWeight: want.CPUWeight, Memory: c.Applied.MemoryBytes}
		}
		a.mu.Lock()
		st.Error = a.errs[in.ID]
		if a.refused[in.ID] == in.Generation || a.failed[in.ID] == in.Generation {
			st.RefusedGeneration = in.Generation
		}
		if st.Error == "" && a.failed[in.ID] == in.Generation {
			st.Error = a.failMsg[in.ID]
		}
		key := fmt.Sprintf("%s|%s|%d|%d|%s|%d|%v", st.State, st.ContainerId, st.Pid, st.Generation, st.Error, st.RefusedGeneration, st.Applied.String())
		changed := a.reported[in.ID] != key || memoryMoved(a.memSent[in.ID], st.MemoryCurrentBytes)
		a.mu.Unlock()
		if !changed {
			continue
		}
		if _, err := a.planner.ReportStatus(ctx, connect.NewRequest(st)); err != nil {
			a.log.Warn("status report failed", "instance", in.ID, "err", err)
			continue
		}
		a.mu.Lock()
		a.reported[in.ID], a.memSent[in.ID] = key, st.MemoryCurrentBytes
		a.mu.Unlock()
	}
	a.mu.Lock()
	for id := range maps.Clone(a.reported) {
		if !slices.ContainsFunc(desired, func(in Instance) bool { return in.ID == id }) {
			delete(a.reported, id)
			delete(a.memSent, id)
			delete(a.refused, id)
		}
	}
	a.mu.Unlock()
	if a.cfg.StateDir != "" {
		if err := checkpoint.Save(a.cfg.StateDir, cp); err != nil {
			a.log.Warn("checkpoint not saved", "err", err)
		}
	}
}
