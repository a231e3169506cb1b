package nodeagent

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// Reconcile runs one pass: observe (one Docker listing, and the kernel's
// figures of running containers) → diff → report what changed → apply.
// Errors are per instance: one failing container does not stop the others.
// It reports whether it acted (then another pass should follow soon, to
// report the result).
func (a *Agent) Reconcile(ctx context.Context) bool {
	defer func(start time.Time) { a.prom.reconcile.Observe(time.Since(start).Seconds()) }(time.Now())
	a.mu.Lock()
	desired, h, fenced := slices.Clone(a.desired), a.host, a.fenced
	failed := map[string]int64{}  // replaces rolled back, by generation
	refused := map[string]int64{} // resizes refused, by generation
	for id, r := range a.records {
		if r.failed != 0 {
			failed[id] = r.failed
		}
		if r.refused != 0 {
			refused[id] = r.refused
		}
	}
	a.mu.Unlock()
	cs, err := a.eng.List(ctx)
	if err != nil {
		a.log.Warn("docker list failed", "err", err)
		return false
	}
	obs := a.observe(own(cs, a.cfg.Host))
	a.measure(desired, obs, h.ShareBase, time.Now())
	actions := Diff(h, desired, obs, a.cfg.Scheme, Known{Failed: failed, Refused: refused, Weights: a.shares.Weights()})
	if fenced {
		actions = Fence(actions)
	}
	// An instance with nothing left to do has converged: an error from an
	// earlier pass (say, a size that was since rolled back) no longer holds.
	// A refused generation is not retried, and stays reported until the
	// planner moves the instance on.
	pending := map[string]bool{}
	for _, in := range desired {
		if refused[in.ID] == in.Generation {
			pending[in.ID] = true
		}
	}
	for _, act := range actions {
		if act.Instance != nil && act.Kind != Reassert {
			pending[act.Instance.ID] = true
		}
	}
	a.mu.Lock()
	for _, in := range desired {
		if r := a.records[in.ID]; r != nil && !pending[in.ID] {
			r.err, r.refused = "", 0
		}
	}
	a.mu.Unlock()
	a.report(ctx, h, desired, obs, pool(h, desired))
	acted := false
	failedOn := map[string]bool{}   // containers an action failed on (or waits) in this pass
	notApplied := map[string]bool{} // instances whose size the containers do not have yet
	for _, in := range desired {
		if refused[in.ID] == in.Generation {
			notApplied[in.ID] = true
		}
	}
	for _, act := range actions {
		if act.Kind == Reassert && failedOn[act.Container] {
			// The plan was not applied (say, a shrink the host refused):
			// writing its values into the files now would do it behind
			// the refusal. The next pass re-asserts what Docker holds.
			continue
		}
		if act.Kind == Update && a.sizes != nil && a.cfg.ShrinkNotice > 0 {
			left, announced, err := a.sizes.hold(*act.Instance, h.ShareBase, a.cfg.ShrinkNotice, time.Now())
			switch {
			case err != nil:
				a.log.Warn("shrink notice not written: the shrink goes ahead", "instance", act.Instance.ID, "err", err)
			case left > 0:
				// Announced in the size file; applied once the notice
				// has passed (a pass is kicked then).
				failedOn[act.Container], notApplied[act.Instance.ID] = true, true
				if announced {
					a.log.Info("shrink announced", "instance", act.Instance.ID, "generation", act.Instance.Generation, "in", left)
					time.AfterFunc(left, a.wake)
				}
				continue
			}
		}
		if a.waiting(act, time.Now()) {
			// It failed before: tried again once its backoff has passed.
			if act.Container != "" {
				failedOn[act.Container] = true
			}
			notApplied[act.Instance.ID] = true
			continue
		}
		t0 := time.Now()
		err := a.apply(ctx, act)
		if err != nil && act.Container != "" {
			failedOn[act.Container] = true
		}
		if err != nil && act.Instance != nil {
			notApplied[act.Instance.ID] = true
		}
		a.prom.action(act.Kind, err)
		if act.Kind != Reassert || act.Reason != "" {
			acted = true
			a.outcome(act, err, time.Since(t0), time.Now())
		}
		if act.Instance != nil {
			a.remember(act, err)
		}
	}
	if a.sizes != nil {
		seen := map[string]bool{}
		for _, o := range obs {
			seen[o.Instance] = true
		}
		if err := a.sizes.refresh(desired, seen, notApplied, h.ShareBase); err != nil {
			a.log.Warn("resources files", "err", err)
		}
	}
	return acted
}

// measure updates each desired instance's CPU got from its running
// container's usage since the previous pass.
func (a *Agent) measure(desired []model.Instance, obs []Observed, shareBase int, now time.Time) {
	running := map[string]Observed{}
	for _, o := range obs {
		if o.Running {
			running[o.Instance] = o
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, in := range desired {
		r := a.recordLocked(in.ID)
		o, ok := running[in.ID]
		if !ok {
			r.cpu, r.cpuGot, r.cgroup = cpuSample{}, 0, nil
			continue
		}
		if p, err := cgroup.ParsePath(o.CgroupPath); err == nil {
			r.cgroup = &p
		}
		at := now
		if !o.UsageAt.IsZero() {
			at = o.UsageAt // the read's own time: later reads in the pass do not skew the rate
		}
		s := cpuSample{container: o.ID, usageUsec: o.CPUUsageUsec, at: at}
		if dt := s.at.Sub(r.cpu.at); r.cpu.container == s.container && dt >= 0 && dt < cpuWindow && s.usageUsec >= r.cpu.usageUsec {
			continue // too short to tell: the rate runs over at least cpuWindow (a counter gone back starts afresh)
		}
		if got, ok := piecesPerSecond(r.cpu, s, shareBase); ok {
			r.cpuGot = got
		}
		r.cpu = s
	}
}

// remember records an action's outcome in its instance's record.
func (a *Agent) remember(act Action, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.recordLocked(act.Instance.ID)
	switch {
	case err != nil && (act.Kind == Replace || act.Kind == FinishReplace || act.Kind == Create && act.Instance.Replaces != ""):
		r.failed, r.failMsg = act.Instance.Generation, err.Error()
	case err != nil:
		r.err = err.Error()
		if act.Kind == Update && refusal(err) {
			r.refused = act.Instance.Generation
		}
	case act.Kind != Reassert:
		r.err, r.refused = "", 0
	}
}

func (a *Agent) recordLocked(id string) *record {
	r := a.records[id]
	if r == nil {
		r = &record{}
		a.records[id] = r
	}
	return r
}

// observe annotates containers with their generation label and, when they
// run, the kernel's memory.current and cpu.weight.
func (a *Agent) observe(cs []docker.Container) []Observed {
	out := make([]Observed, 0, len(cs))
	for _, c := range cs {
		o := Observed{Container: c}
		o.Generation, _ = strconv.ParseInt(c.Labels[LabelGeneration], 10, 64)
		if c.Running {
			o.MemoryCurrent, o.CPUWeight, o.CPUUsageUsec = a.observed(c)
			o.UsageAt = time.Now() // cpu.stat is observed's last read: the rate's clock
			o.Kernel = a.kernelResources(c)
		}
		out = append(out, o)
	}
	return out
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func (a *Agent) spec(in *model.Instance, gen int64, r docker.Resources) docker.CreateSpec {
	labels := maps.Clone(in.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelGeneration] = strconv.FormatInt(gen, 10)
	// The planner validated the policy; one it did not (an older planner)
	// goes to the engine as it is, and the engine's refusal is the error.
	restart, retries, err := model.ParseRestart(in.Restart)
	if err != nil {
		restart = in.Restart
	}
	if restart == model.RestartNo {
		restart = ""
	}
	env := slices.Clone(in.Env)
	binds := in.Volumes
	if a.sizes != nil {
		// What the instance is told about its size: PINFOLD_CPUS and the
		// rest at create, the file (kept current) in a read-only mount
		// (unless the service mounts a volume there itself).
		env = append(env, SizeOf(*in, a.shareBase()).Env()...)
		if !slices.ContainsFunc(in.Volumes, mountsSizeDir) {
			binds = append(slices.Clone(in.Volumes), a.sizes.bind(in.ID))
		}
	}
	var ports []docker.PortMapping
	if len(in.HostPorts) > 0 {
		// Each port reaches the container as PINFOLD_PORT_<NAME>=<host
		// port>, and is published (under network host the container
		// listens on the host port itself).
		env = append(env, model.PortsEnv(in.HostPorts)...)
		for _, p := range in.HostPorts {
			ports = append(ports, docker.PortMapping{Host: p.Host, Container: p.Container})
		}
	}
	return docker.CreateSpec{Name: fmt.Sprintf("pinfold-%s-g%d", in.ID, gen), Image: in.Image, Cmd: in.Command, Env: env, Network: in.Network, Ports: ports,
		Service: in.Service, Instance: in.ID, Labels: labels, Resources: r,
		Host: a.cfg.Host, CgroupParent: a.cfg.CgroupParent,
		Binds: binds, Restart: restart, RestartRetries: retries, User: in.User, Workdir: in.Workdir, ReadOnly: in.ReadOnly,
		CapAdd: in.CapAdd, CapDrop: in.CapDrop, LogDriver: in.LogDriver, LogOpts: in.LogOpts}
}

// own keeps the containers of host's agent: those labelled with host, and
// those made before agents labelled them (no host label).
func own(cs []docker.Container, host string) []docker.Container {
	return slices.DeleteFunc(cs, func(c docker.Container) bool { return c.Host != "" && c.Host != host })
}

// create makes in's container under the pull policy: PullAlways pulls
// first; otherwise an image the engine lacks is pulled once.
func (a *Agent) create(ctx context.Context, in *model.Instance, r docker.Resources) (string, error) {
	if in.Pull == model.PullAlways {
		if err := a.eng.Pull(ctx, in.Image); err != nil {
			return "", err
		}
	}
	if a.sizes != nil {
		// The file is there before the container starts; one written
		// already (the size applied, or a shrink's notice) stays.
		if err := a.sizes.ensure(in.ID, SizeOf(*in, a.shareBase())); err != nil {
			return "", err
		}
	}
	spec := a.spec(in, in.Generation, r)
	id, err := a.eng.Create(ctx, spec)
	if docker.IsNoImage(err) && in.Pull != model.PullAlways {
		if perr := a.eng.Pull(ctx, in.Image); perr != nil {
			return "", fmt.Errorf("%w (and the pull failed: %v)", err, perr)
		}
		id, err = a.eng.Create(ctx, spec)
	}
	return id, err
}

func (a *Agent) apply(ctx context.Context, act Action) error {
	in := act.Instance
	switch act.Kind {
	case Create:
		id, err := a.create(ctx, in, act.Want.Resources)
		if err != nil {
			return err
		}
		if err := a.eng.Start(ctx, id); err != nil {
			return err
		}
		if err := a.reassert(ctx, in, id, act.Want); err != nil {
			return err
		}
		if in.Replaces != "" {
			// A move: the old instance goes only once this one is healthy.
			if err := a.healthy(ctx, id, probeOf(in)); err != nil {
				_ = a.eng.Remove(ctx, id)
				return fmt.Errorf("moved instance failed its health gate (the move is given up, %s runs on): %w", in.Replaces, err)
			}
		}
		return nil
	case Update:
		return a.update(ctx, act)
	case Start:
		return a.eng.Start(ctx, act.Container)
	case Unpause:
		return a.eng.Unpause(ctx, act.Container)
	case Remove:
		return a.eng.Remove(ctx, act.Container)
	case Reassert:
		if act.Seen != nil {
			return a.reassertSeen(ctx, in, act.Seen, act.Want)
		}
		return a.reassert(ctx, in, act.Container, act.Want)
	case Replace:
		return a.replace(ctx, in, act.Container, act.Want)
	case FinishReplace:
		if err := a.healthy(ctx, act.New, probeOf(in)); err != nil {
			_ = a.eng.Remove(ctx, act.New)
			_ = a.eng.Unpause(ctx, act.Container)
			return fmt.Errorf("replace rolled back: %w", err)
		}
		return a.eng.Remove(ctx, act.Container)
	}
	return nil
}

// update resizes a container live. Memory lowered below what the container
// uses is first shrunk guided by pressure (ShrinkMemory); a shrink that
// gives up is a refusal, and the container keeps its limits.
func (a *Agent) update(ctx context.Context, act Action) error {
	r := act.Want.Resources
	var shrunk *cgroup.Path
	if act.MemoryCurrent > r.MemoryBytes {
		if err := r.Validate(); err != nil {
			return err
		}
		c, err := a.eng.Inspect(ctx, act.Container)
		if err != nil {
			return err
		}
		p, err := cgroup.ParsePath(c.CgroupPath)
		if err != nil {
			return err
		}
		a.log.Info("shrinking memory guided by pressure", "instance", act.Instance.ID, "from", act.MemoryCurrent, "to", r.MemoryBytes)
		if err := ShrinkMemory(ctx, a.cg, p, r.MemoryBytes, a.cfg.Shrink); err != nil {
			return err
		}
		shrunk = &p
	}
	_, err := a.eng.Update(ctx, act.Container, r)
	if shrunk != nil {
		// memory.max holds the container now (or the update failed): lift
		// the shrink's memory.high either way.
		if herr := a.cg.Apply(context.WithoutCancel(ctx), cgroup.Spec{Path: *shrunk, MemoryHigh: cgroup.Int64(cgroup.Max)}); herr != nil && err == nil {
			err = herr
		}
	}
	if err != nil {
		return err
	}
	return a.reassert(ctx, act.Instance, act.Container, act.Want)
}

// replaceStopGrace is how long the old container of a stop-first replace
// has to exit on SIGTERM before it is killed (Docker's default).
const replaceStopGrace = 10 * time.Second

// replace is blue-green on the same allocation: pause the old container (so
// two running containers never hold the same CPUs), start the new one, keep
// it only if it stays healthy, else remove it and resume the old one. An
// instance with a static host port is replaced stop-first: the old
// container is stopped (a paused one still holds its published port, and
// the new one could not bind it) and started again on a rollback; dynamic
// ports need no such care, the planner gave the new container its own.
func (a *Agent) replace(ctx context.Context, in *model.Instance, old string, want Want) error {
	stopFirst := len(model.StaticPorts(in.Ports)) > 0
	if stopFirst {
		if err := a.eng.Stop(ctx, old, replaceStopGrace); err != nil {
			return fmt.Errorf("replace: stop the old container (it holds static port %d): %w", model.StaticPorts(in.Ports)[0], err)
		}
	} else if err := a.eng.Pause(ctx, old); err != nil {
		return fmt.Errorf("replace: pause the old container: %w", err)
	}
	rollback := func(newID string, cause error) error {
		if newID != "" {
			_ = a.eng.Remove(ctx, newID)
		}
		resume := a.eng.Unpause
		if stopFirst {
			resume = a.eng.Start
		}
		if err := resume(ctx, old); err != nil {
			return fmt.Errorf("replace failed (%v) and the old container did not resume: %w", cause, err)
		}
		return fmt.Errorf("replace rolled back, the old container runs on: %w", cause)
	}
	id, err := a.create(ctx, in, want.Resources)
	if err != nil {
		return rollback("", err)
	}
	if err := a.eng.Start(ctx, id); err != nil {
		return rollback(id, err)
	}
	if err := a.healthy(ctx, id, probeOf(in)); err != nil {
		return rollback(id, err)
	}
	if err := a.reassert(ctx, in, id, want); err != nil {
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

// reassert writes the cgroup files the plan decides (reassertSpec) for a
// container the pass acted on, asking the engine where its cgroup is now,
// then the split scheme's children of in (splitEnsure), if any.
func (a *Agent) reassert(ctx context.Context, in *model.Instance, id string, want Want) error {
	c, err := a.eng.Inspect(ctx, id)
	if err != nil || !c.Running {
		return err
	}
	p, err := cgroup.ParsePath(c.CgroupPath)
	if err != nil {
		return err
	}
	if err := a.cg.Apply(ctx, reassertSpec(p, want, nil)); err != nil {
		return err
	}
	return a.reassertSplit(ctx, in, p)
}

// reassertSplit re-asserts in's split children after its container's own
// files, within the pass's host.
func (a *Agent) reassertSplit(ctx context.Context, in *model.Instance, p cgroup.Path) error {
	if in == nil || a.cfg.Scheme != SchemeSplit {
		return nil
	}
	a.mu.Lock()
	h := a.host
	a.mu.Unlock()
	return a.splitEnsure(ctx, h, *in, p)
}

// reassertSeen is reassert for a container the pass observed and did
// nothing else to: without asking the engine where the cgroup is, and with
// only the files that differ from what the pass saw (and cpu.max.burst,
// which it did not read). A steady pass reads one file per container here
// instead of six, and makes no Docker call.
func (a *Agent) reassertSeen(ctx context.Context, in *model.Instance, seen *Observed, want Want) error {
	p, err := cgroup.ParsePath(seen.CgroupPath)
	if err != nil {
		return err
	}
	if err := a.cg.Apply(ctx, reassertSpec(p, want, seen)); err != nil {
		return err
	}
	return a.reassertSplit(ctx, in, p)
}

// reassertSpec is every cgroup file the plan decides, not only those
// Docker cannot express: a write straight into the cgroup (behind Docker's
// back) is reverted, since Docker's stored config still says all is well.
// Apply writes only the files that differ; with seen (what the pass read of
// the files), those that do not differ are left out of the spec too.
func reassertSpec(p cgroup.Path, want Want, seen *Observed) cgroup.Spec {
	r := want.Resources
	all := fileDiff{cpus: true, mems: true, cpuMax: true, memoryMax: true}
	weight := want.CPUWeight
	if seen != nil && seen.Kernel != nil {
		all = diffFiles(*seen.Kernel, r)
		if weight == seen.CPUWeight {
			weight = 0
		}
	}
	s := cgroup.Spec{Path: p, CPUWeight: weight, CPUMaxBurst: cgroup.Uint64(0)}
	if all.cpuMax {
		quota := cgroup.Max
		if r.CPUQuota > 0 {
			quota = r.CPUQuota
		}
		s.CPUMax = &cgroup.CPUMax{Quota: quota, Period: uint64(r.PeriodUsec())}
	}
	if all.cpus && !r.CPUs.IsEmpty() {
		s.CPUs = &r.CPUs
	}
	if all.mems && !r.Mems.IsEmpty() {
		s.Mems = &r.Mems
	}
	if all.memoryMax && r.MemoryBytes > 0 {
		s.MemoryMax = cgroup.Int64(r.MemoryBytes)
	}
	return s
}

// kernelResources reads what a running container's cgroup files hold of
// what the plan decides; nil when they cannot be read.
func (a *Agent) kernelResources(c docker.Container) *docker.Resources {
	p, err := cgroup.ParsePath(c.CgroupPath)
	if err != nil {
		return nil
	}
	read := func(f string) (string, bool) {
		v, err := a.cg.Read(p, f)
		return strings.TrimSpace(v), err == nil
	}
	var r docker.Resources
	cpus, ok1 := read("cpuset.cpus")
	mems, ok2 := read("cpuset.mems")
	max, ok3 := read("cpu.max")
	mem, ok4 := read("memory.max")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil
	}
	var err1, err2 error
	r.CPUs, err1 = cpuset.ParseCPUs(cpus)
	r.Mems, err2 = cpuset.ParseMems(mems)
	if err1 != nil || err2 != nil {
		return nil
	}
	if q, per, _ := strings.Cut(max, " "); q != "max" {
		r.CPUQuota, _ = strconv.ParseInt(q, 10, 64)
		if p, err := strconv.ParseInt(per, 10, 64); err == nil && p != docker.Period {
			r.CPUPeriod = p
		}
	}
	if mem != "max" {
		r.MemoryBytes, _ = strconv.ParseInt(mem, 10, 64)
	}
	return &r
}
