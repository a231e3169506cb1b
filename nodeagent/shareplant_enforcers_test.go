package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/nodeagent/shareplant"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// plantEnforcer is a scheme's enforcement as the model sees it: setup
// makes each instance's groups and returns the container's; pass is the
// agent's pass, once a second.
type plantEnforcer interface {
	setup(p *shareplant.Plant) ([]shareplant.GroupID, error)
	pass(p *shareplant.Plant) error
}

// splitEnforcer is the split scheme: the container's cgroup as capped
// (cpuset whole + shared, cpu.weight ∝ fragment, cpu.max = plan), threaded
// children "pinfold-whole" (the whole CPU) and "pinfold-frag" (the shared
// CPU, cpu.max = the fragment), the threads swept by SplitSweep.
type splitEnforcer struct {
	parts [][3]shareplant.GroupID // per instance: root, whole, frag (SplitPart order)
	// keepSleepingFrag is the sweep before 2026-11-26 (a control): sleeping
	// threads in pinfold-frag stayed there.
	keepSleepingFrag bool
	// every is how often the sweep runs in pool runs (startPool); 0: the
	// agent's DefaultSplitEvery. Other starts sweep once a window (1 s).
	every time.Duration
}

func (e *splitEnforcer) setup(p *shareplant.Plant) ([]shareplant.GroupID, error) {
	var out []shareplant.GroupID
	for _, in := range plantInstances {
		c, err := cappedGroup(p, in)
		if err != nil {
			return nil, err
		}
		w, err := p.NewGroup(c, SplitWholeName)
		if err != nil {
			return nil, err
		}
		f, err := p.NewGroup(c, SplitFragName)
		if err != nil {
			return nil, err
		}
		if err := p.SetCPUs(w, cpuset.Of(in.whole)); err != nil {
			return nil, err
		}
		if err := p.SetCPUs(f, cpuset.Of[cpuset.CPUID](plantShared)); err != nil {
			return nil, err
		}
		if err := p.SetMax(f, time.Duration(in.frag)*time.Millisecond, 100*time.Millisecond); err != nil {
			return nil, err
		}
		e.parts = append(e.parts, [3]shareplant.GroupID{c, w, f})
		out = append(out, c)
	}
	return out, nil
}

func (e *splitEnforcer) pass(p *shareplant.Plant) error {
	for _, parts := range e.parts {
		var ts []SplitThread
		for part, g := range parts {
			infos, err := p.Threads(g)
			if err != nil {
				return err
			}
			for _, t := range infos {
				ts = append(ts, SplitThread{TID: int(t.ID), Runnable: t.Runnable, In: SplitPart(part)})
			}
		}
		for tid, to := range SplitSweep(1, ts) {
			if e.keepSleepingFrag && slices.Contains(ts, SplitThread{TID: tid, In: SplitFrag}) {
				continue
			}
			if err := p.Move(shareplant.ThreadID(tid), parts[to]); err != nil {
				return err
			}
		}
	}
	return nil
}

// agentSplitEnforcer is the split scheme as the agent runs it: the
// children as splitEnforcer makes them, swept by the agent's own
// splitSweep (its cpu.stat and cpu.pressure gates, its clock-tick rule
// for threads found asleep) through a plantWriter, on the model's clock.
type agentSplitEnforcer struct {
	a     *Agent
	w     *plantWriter
	paths map[string]cgroup.Path
}

func (e *agentSplitEnforcer) setup(p *shareplant.Plant) ([]shareplant.GroupID, error) {
	var se splitEnforcer
	out, err := se.setup(p)
	if err != nil {
		return nil, err
	}
	e.w = &plantWriter{p: p, groups: map[string]shareplant.GroupID{}}
	e.paths = map[string]cgroup.Path{}
	e.a = &Agent{cfg: Config{Scheme: SchemeSplit, SplitEvery: DefaultSplitEvery}, cg: e.w, records: map[string]*record{},
		log: slog.New(slog.DiscardHandler), now: func() time.Time { return time.Unix(0, 0).Add(p.Now()) },
		threadState: func(tid int) (threadStat, bool) {
			t, err := p.Thread(shareplant.ThreadID(tid))
			if err != nil {
				return threadStat{}, false
			}
			return threadStat{Runnable: t.Runnable, Ticks: uint64(t.CPU / (10 * time.Millisecond))}, true
		}}
	for i, in := range plantInstances {
		path := cgroup.MustParsePath("pinfold/" + in.id)
		e.paths[in.id] = path
		e.a.records[in.id] = &record{cgroup: &path}
		for part, g := range se.parts[i] {
			name := path.String()
			if part != int(SplitRoot) {
				name += "/" + SplitPart(part).String()
			}
			e.w.groups[name] = g
		}
	}
	return out, nil
}

func (e *agentSplitEnforcer) pass(*shareplant.Plant) error {
	for _, in := range plantInstances {
		if err := e.a.splitSweep(e.w, in.id, e.paths[in.id], 1, float64(in.frag)/100); err != nil {
			return err
		}
	}
	return nil
}

// cappedGroup makes an instance's container cgroup as the capped scheme
// maps it: cpuset = its whole CPU and the shared one, cpu.weight ∝ its
// fragment, cpu.max = its plan.
func cappedGroup(p *shareplant.Plant, in plantInstance) (shareplant.GroupID, error) {
	c, err := p.NewGroup(shareplant.Root, in.id)
	if err != nil {
		return 0, err
	}
	if err := p.SetCPUs(c, cpuset.Of[cpuset.CPUID](in.whole, plantShared)); err != nil {
		return 0, err
	}
	if err := p.SetWeight(c, uint64(in.frag)); err != nil {
		return 0, err
	}
	return c, p.SetMax(c, time.Duration(in.plan())*time.Millisecond, 100*time.Millisecond)
}

// loopEnforcer is today's default: the capped scheme and the weight loop
// (ShareEnforcer: cpu.stat and cpu.pressure in, cpu.weight out), reading
// and writing the model through a cgroupWriter.
type loopEnforcer struct {
	enf     *ShareEnforcer
	members []ShareMember
	paths   map[string]cgroup.Path
	w       *plantWriter
}

func (e *loopEnforcer) setup(p *shareplant.Plant) ([]shareplant.GroupID, error) {
	e.w = &plantWriter{p: p, groups: map[string]shareplant.GroupID{}}
	e.enf = NewShareEnforcer(e.w, nil)
	e.paths = map[string]cgroup.Path{}
	var out []shareplant.GroupID
	for _, in := range plantInstances {
		c, err := cappedGroup(p, in)
		if err != nil {
			return nil, err
		}
		path := cgroup.MustParsePath("pinfold/" + in.id)
		e.w.groups[path.String()] = c
		e.paths[in.id] = path
		e.members = append(e.members, ShareMember{ID: in.id, CPU: plantShared, Plan: in.plan(), Frag: in.frag, Weight: uint64(in.frag)})
		out = append(out, c)
	}
	return out, nil
}

func (e *loopEnforcer) pass(p *shareplant.Plant) error {
	return e.enf.Tick(context.Background(), e.members, e.paths, 100, time.Unix(0, 0).Add(p.Now()))
}

// plantWriter is the cgroup files of the model's groups: cpu.stat and
// cpu.pressure to read, cpu.weight to write.
type plantWriter struct {
	p      *shareplant.Plant
	groups map[string]shareplant.GroupID
}

func (w *plantWriter) Apply(_ context.Context, s cgroup.Spec) error {
	g, ok := w.groups[s.Path.String()]
	if !ok {
		return fmt.Errorf("plant: %s: no such group", s.Path)
	}
	if s.CPUs != nil || s.Mems != nil || s.CPUMax != nil || s.CPUMaxBurst != nil {
		return fmt.Errorf("plant: %s: only cpu.weight is modelled for writing", s.Path)
	}
	if s.CPUWeight != 0 {
		return w.p.SetWeight(g, s.CPUWeight)
	}
	return nil
}

// Threads is a group's cgroup.threads.
func (w *plantWriter) Threads(path cgroup.Path) ([]int, error) {
	g, ok := w.groups[path.String()]
	if !ok {
		return nil, fmt.Errorf("plant: %s: %w", path, cgroup.ErrNoGroup)
	}
	ts, err := w.p.Threads(g)
	var out []int
	for _, t := range ts {
		out = append(out, int(t.ID))
	}
	return out, err
}

// MoveThread writes tid into a group's cgroup.threads.
func (w *plantWriter) MoveThread(path cgroup.Path, tid int) error {
	g, ok := w.groups[path.String()]
	if !ok {
		return fmt.Errorf("plant: %s: %w", path, cgroup.ErrNoGroup)
	}
	return w.p.Move(shareplant.ThreadID(tid), g)
}

func (w *plantWriter) ApplyThreaded(_ context.Context, s cgroup.Spec) error {
	return fmt.Errorf("plant: %s: threaded groups are made by the harness", s.Path)
}

func (w *plantWriter) RemoveThreaded(_ context.Context, p cgroup.Path) error {
	return fmt.Errorf("plant: %s: threaded groups are removed by the harness", p)
}

func (w *plantWriter) Read(path cgroup.Path, name string) (string, error) {
	g, ok := w.groups[path.String()]
	if !ok {
		return "", fmt.Errorf("plant: %s: no such group", path)
	}
	switch name {
	case "cpu.stat":
		u, err := w.p.Usage(g)
		return fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec 0\n", u.Microseconds(), u.Microseconds()), err
	case "cpu.pressure":
		s, err := w.p.PressureSome(g)
		return fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", s.Microseconds()), err
	}
	return "", fmt.Errorf("plant: %s: file %s not modelled", path, name)
}
