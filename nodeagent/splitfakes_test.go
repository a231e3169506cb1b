package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// fakeThreaded is fakeCgroup with threaded children: the groups made, the
// threads in each group (as cgroup.threads lists them), which are
// runnable, and the calls in order.
type fakeThreaded struct {
	*fakeCgroup
	tmu      sync.Mutex
	groups   map[string]cgroup.Spec // threaded groups made, as last applied
	threads  map[string][]int       // group → TIDs
	runnable map[int]bool
	ticks    map[int]uint64 // CPU ticks used so far (utime + stime)
	calls    []string
	refuse   error // ApplyThreaded's answer when set (a kernel refusing threaded mode)
	// waited: µs some thread of a group waited for a CPU (cpu.pressure's
	// "some" total); nil: no pressure files (a kernel booted psi=0).
	waited map[string]uint64
}

func newFakeThreaded() *fakeThreaded {
	return &fakeThreaded{fakeCgroup: &fakeCgroup{mem: map[string]int64{}}, groups: map[string]cgroup.Spec{},
		threads: map[string][]int{}, runnable: map[int]bool{}, ticks: map[int]uint64{}}
}

func (f *fakeThreaded) Apply(ctx context.Context, s cgroup.Spec) error {
	f.tmu.Lock()
	f.calls = append(f.calls, "apply "+s.Path.String())
	f.tmu.Unlock()
	return f.fakeCgroup.Apply(ctx, s)
}

func (f *fakeThreaded) ApplyThreaded(_ context.Context, s cgroup.Spec) error {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	f.calls = append(f.calls, "threaded "+s.Path.String())
	if f.refuse != nil {
		return f.refuse
	}
	f.groups[s.Path.String()] = s
	return nil
}

func (f *fakeThreaded) RemoveThreaded(_ context.Context, p cgroup.Path) error {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	if len(f.threads[p.String()]) > 0 {
		return fmt.Errorf("remove %s: %w", p, syscall.EBUSY)
	}
	f.calls = append(f.calls, "remove "+p.String())
	delete(f.groups, p.String())
	return nil
}

func (f *fakeThreaded) MoveThread(p cgroup.Path, tid int) error {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	for g, ts := range f.threads {
		f.threads[g] = slices.DeleteFunc(ts, func(t int) bool { return t == tid })
	}
	f.threads[p.String()] = append(f.threads[p.String()], tid)
	f.calls = append(f.calls, fmt.Sprintf("move %d %s", tid, p))
	return nil
}

// Read is fakeCgroup's, but a group's cpu.stat counts its threads' CPU
// ticks (10 ms each) besides what the test set, as the kernel's does.
func (f *fakeThreaded) Read(p cgroup.Path, name string) (string, error) {
	if name == "cpu.pressure" {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.waited == nil {
			return "", fmt.Errorf("cgroup: read %s/cpu.pressure: %w", p, fs.ErrNotExist)
		}
		return fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0", f.waited[p.String()]), nil
	}
	if name != "cpu.stat" {
		return f.fakeCgroup.Read(p, name)
	}
	f.tmu.Lock()
	var ticks uint64
	for _, tid := range f.threads[p.String()] {
		ticks += f.ticks[tid]
	}
	f.tmu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return fmt.Sprintf("usage_usec %d\nuser_usec 0\nsystem_usec 0\nnr_periods 10\nnr_throttled %d\n", f.usage[p.String()]+10000*ticks, f.throttled[p.String()]), nil
}

func (f *fakeThreaded) Threads(p cgroup.Path) ([]int, error) {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	if _, ok := f.groups[p.String()]; !ok && strings.Contains(p.String(), "/pinfold-") {
		return nil, fmt.Errorf("cgroup: %s: %w", p, cgroup.ErrNoGroup)
	}
	return slices.Clone(f.threads[p.String()]), nil
}

// take returns the calls since the last take.
func (f *fakeThreaded) take() []string {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// add puts runnable threads into group p (a new thread, a `docker exec`).
func (f *fakeThreaded) add(p string, tids ...int) {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	f.threads[p] = append(f.threads[p], tids...)
	for _, t := range tids {
		f.runnable[t] = true
	}
}

func (f *fakeThreaded) where(tid int) string {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	for g, ts := range f.threads {
		if slices.Contains(ts, tid) {
			return g
		}
	}
	return ""
}

func newSplitAgent(t *testing.T) (*Agent, *fakeEngine, *fakeThreaded) {
	t.Helper()
	eng, cg := newFakeEngine(), newFakeThreaded()
	a := New(Config{Host: "h", Scheme: SchemeSplit, HealthWait: 50 * time.Millisecond, HealthTimeout: 600 * time.Millisecond}, &fakePlanner{}, eng, cg,
		topologytest.Laptop().Topology(), nil)
	a.threadState = func(tid int) (threadStat, bool) {
		cg.tmu.Lock()
		defer cg.tmu.Unlock()
		r, ok := cg.runnable[tid]
		return threadStat{Runnable: r, Ticks: cg.ticks[tid]}, ok
	}
	return a, eng, cg
}

// splitTwoThreads is a split agent with one instance a (CPU 0 + 0.7 of
// CPU 2) whose two runnable threads 11 and 12 a first sweep has placed
// (11 in pinfold-whole, 12 in pinfold-frag); p is a's cgroup.
func splitTwoThreads(t *testing.T) (a *Agent, cg *fakeThreaded, p string) {
	t.Helper()
	a, _, cg = newSplitAgent(t)
	a.SetDesired([]model.Instance{splitInst("a", map[cpuset.CPUID]int{0: 100, 2: 70})})
	settle(t, a)
	p = a.records["a"].cgroup.String()
	cg.add(p, 11, 12)
	if err := a.splitPass(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return a, cg, p
}

func splitInst(id string, cpus map[cpuset.CPUID]int) model.Instance {
	in := memInst(1, 64<<20)
	in.ID, in.CPUs = id, cpus
	return in
}
