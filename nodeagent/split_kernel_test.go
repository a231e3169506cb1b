//go:build linux && kernel

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/test/testenv"
)

// Fixed times of the split measurement: the threads settle (and the sweep
// acts) for splitSettle, then CPU use is the mean over splitWindow. Never
// "the first window within bounds".
const (
	splitSettle = 4 * time.Second
	splitWindow = 8 * time.Second
)

// TestKernelSplit: two instances a (CPU 0 + 0.7 of CPU 2) and b (CPU 1 +
// 0.3 of CPU 2) with busy OS threads (splitRun), b's threads FORCED TO
// STACK on its whole CPU (each thread's affinity set to CPU 1 after it
// started: the state the real kernel's load balancer settles in,
// docs/AGENT.md). With the split scheme (threaded children, swept by the
// agent's own split loop) each instance is within 5 % of its plan, in
// the guest as natively. The control, the capped scheme (the default
// again) in the same stacked state, must miss it: it proves the
// measurement can fail. Both figures are logged, and with -v what each
// sweep in the window saw and moved. "split+go-preempt" (the first thread
// count only) runs the same goroutines with the Go runtime's preemption
// on, and is reported, not asserted.
func TestKernelSplit(t *testing.T) {
	testenv.RequireKernel(t)
	if n := cpuset.MustParseCPUs(readTrim(t, "/sys/fs/cgroup/cpuset.cpus.effective")).Len(); n < 3 {
		t.Fatalf("TestKernelSplit needs CPUs 0-2; the host has %d", n)
	}
	counts := []int{2, 4}
	if v := os.Getenv("PINFOLD_SPLIT_THREADS"); v != "" {
		// e.g. "2,8,16" for a longer native run
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 || n > 256 {
				t.Fatalf("PINFOLD_SPLIT_THREADS = %q: want thread counts 1..256, comma-separated", v)
			}
			counts = append(counts, n)
		}
	}
	for i, threads := range counts {
		variants := []string{string(SchemeSplit), "split+burst", string(SchemeCapped)}
		if i == 0 {
			variants = append(variants, "split+go-preempt")
		}
		for _, variant := range variants {
			scheme, burst, preempt := Scheme(variant), false, false
			switch variant {
			case "split+burst":
				// An experiment, not the agent's mapping: pinfold-frag's
				// cpu.max.burst = its quota, so time a throttle gap or a
				// neighbour's turn cost it can come back later.
				scheme, burst = SchemeSplit, true
			case "split+go-preempt":
				// The same busy goroutines with the Go runtime's
				// preemption on: reported, not asserted (see splitRun).
				scheme, preempt = SchemeSplit, true
			}
			t.Run(fmt.Sprintf("%s/%d-threads", variant, threads), func(t *testing.T) {
				plan := map[string]float64{"a": 1.7, "b": 1.3}
				var got map[string]float64
				var missed []string
				for try := 1; ; try++ {
					got = splitRun(t, scheme, threads, burst, preempt)
					missed = nil
					for _, id := range []string{"a", "b"} {
						if d := (got[id] - plan[id]) / plan[id]; d < -0.05 || d > 0.05 {
							missed = append(missed, fmt.Sprintf("%s %.3f (plan %.1f, %+.1f %%)", id, got[id], plan[id], 100*d))
						}
					}
					t.Logf("%s, %d busy threads each, b stacked on CPU 1: a %.3f, b %.3f (plan 1.7 / 1.3; %s settle, %s window; try %d)",
						variant, threads, got["a"], got["b"], splitSettle, splitWindow, try)
					// In the TCG guest a split case that missed is measured
					// once more from scratch, both logged: a runtime helper
					// thread (sysmon) seen runnable in pinfold-frag at a
					// sweep's instant holds that child while the busy
					// threads wait in pinfold-whole (CI 2026-11-28: a/frag
					// 0.214 of 0.7 over 8 s, the next run 0.707). Natively
					// the first try is the result.
					if scheme != SchemeSplit || burst || preempt || len(missed) == 0 || try == 2 || os.Getenv("PINFOLD_VM") == "" {
						break
					}
					t.Logf("guest: %v missed; measuring once more", missed)
				}
				if burst && os.Getenv("PINFOLD_VM") != "" {
					// An experiment, not the agent's mapping: reported in
					// the guest, asserted natively.
					return
				}
				if preempt {
					return // a workload's own hand-offs, reported (docs/AGENT.md)
				}
				switch {
				case scheme == SchemeSplit && len(missed) > 0 && os.Getenv("PINFOLD_VM") != "":
					// Reported, not asserted, in the TCG guest: two CI
					// runs of 2026-11-28 missed in both tries, once with
					// sysmon standing in pinfold-frag (a 1.102, its frag
					// 0.100), once with both whole CPUs starved by the
					// host (a/whole 0.613, b/whole 0.548): the guest
					// cannot tell the scheme's misses from its own. The
					// split scheme is not the default; natively it is
					// asserted (hack/native-kernel.sh), and its known
					// weakness is in docs/AGENT.md.
					t.Logf("guest: split scheme not within 5 %% of plan: %v (reported, not asserted in the guest)", missed)
				case scheme == SchemeSplit && len(missed) > 0:
					t.Errorf("split scheme: not within 5 %% of plan: %v", missed)
				case scheme != SchemeSplit && len(missed) == 0:
					t.Errorf("control (%s, stacked) within 5 %% of plan: the stacking was not forced, the test proves nothing", scheme)
				}
			})
		}
	}
}

// splitRun sets a and b up under scheme in a fresh subtree, starts threads
// busy threads in each, stacks b's on CPU 1, runs the agent's split loop
// (it does nothing under other schemes) and returns each instance's CPUs
// used over splitWindow after splitSettle.
//
// The busy threads are goroutines each locked to its own OS thread, with
// the runtime's asynchronous preemption off (GODEBUG=asyncpreemptoff=1):
// busy OS threads, as a C program's, which is what the scheme is built
// for. With preemption on (preempt), every 10 ms of running each locked
// thread is preempted, hands its P to another thread of the runtime and
// sleeps until that one wakes it again: in the TCG guest that costs a
// split instance with 2 threads up to 8.6 % (its pinfold-frag thread
// asleep, or the sweep catching it asleep and moving it out); reported,
// not asserted (docs/AGENT.md, "A Go program's own hand-offs").
func splitRun(t *testing.T, scheme Scheme, threads int, burst, preempt bool) map[string]float64 {
	parent := fmt.Sprintf("pinfold-split-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	m, err := cgroup.OpenHost(parent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		os.Remove(filepath.Join(cgroup.HostMount, parent))
	})
	ctx := context.Background()
	h := Host{CPUs: m.HostCPUs(), Mems: m.HostMems(), ShareBase: 100}
	ins := []model.Instance{
		{ID: "a", Allocation: model.Allocation{Bind: true, NUMANode: -1, Memory: 256 << 20, CPUs: map[cpuset.CPUID]int{0: 100, 2: 70}}},
		{ID: "b", Allocation: model.Allocation{Bind: true, NUMANode: -1, Memory: 256 << 20, CPUs: map[cpuset.CPUID]int{1: 100, 2: 30}}},
	}
	moves := &sweepCounter{}
	a := &Agent{cfg: Config{Scheme: scheme, SplitEvery: DefaultSplitEvery}, cg: m, log: slog.New(moves), host: h, desired: ins,
		records: map[string]*record{}, threadState: procThreadState("/proc")}
	procs := map[string]*os.Process{}
	godebug := "GODEBUG=asyncpreemptoff=1"
	if preempt {
		godebug = "GODEBUG=asyncpreemptoff=0"
	}
	for _, in := range ins {
		p := cgroup.MustParsePath(parent + "/" + in.ID)
		// The container's own files, as the agent writes them (reassert).
		if err := m.Apply(ctx, reassertSpec(p, Map(h, in, scheme, h.CPUs), nil)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // after the helpers are killed (cleanups run last first)
			tw := threadedWriter(m)
			if err := a.splitTeardown(ctx, tw, p); err != nil {
				t.Logf("teardown %s: %v", p, err)
			}
			if err := m.Remove(ctx, p); err != nil {
				t.Logf("remove %s: %v", p, err)
			}
		})
		a.records[in.ID] = &record{cgroup: &p}
		dir, err := os.Open(filepath.Join(cgroup.HostMount, p.String()))
		if err != nil {
			t.Fatal(err)
		}
		procs[in.ID] = testenv.StartHelperWith(t, "spin:"+strconv.Itoa(threads),
			&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}, "GOMAXPROCS="+strconv.Itoa(threads), godebug).Process
		dir.Close()
	}
	// Stack b: every thread it has once its busy threads run, on CPU 1.
	time.Sleep(500 * time.Millisecond)
	var one unix.CPUSet
	one.Set(1)
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", procs["b"].Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tids {
		tid, _ := strconv.Atoi(e.Name())
		if err := unix.SchedSetaffinity(tid, &one); err != nil && !errors.Is(err, unix.ESRCH) {
			t.Fatalf("sched_setaffinity(%d, CPU 1): %v", tid, err)
		}
	}
	// The agent's own split loop: a sweep every DefaultSplitEvery (the
	// children's files re-asserted once a second), a watch of each
	// pinfold-frag between two sweeps.
	tickCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.splitLoop(tickCtx)
	}()
	defer func() {
		stop()
		wg.Wait()
		moves.mu.Lock()
		defer moves.mu.Unlock()
		for _, w := range moves.warns {
			t.Errorf("split loop: %s", w)
		}
	}()
	if burst {
		time.Sleep(splitSettle / 2) // the first ticks made the children
		for _, in := range ins {
			sp, _ := SplitOf(h, in, scheme)
			specs, _ := sp.Specs(*a.records[in.ID].cgroup, h.ShareBase)
			frag := specs[1]
			if err := m.Apply(ctx, cgroup.Spec{Path: frag.Path, CPUMaxBurst: cgroup.Uint64(uint64(frag.CPUMax.Quota))}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(splitSettle / 2)
	} else {
		time.Sleep(splitSettle)
	}
	// What each instance (and each of its children) used, and what each
	// CPU was busy with, over the window.
	groups := map[string]cgroup.Path{}
	for _, in := range ins {
		p := *a.records[in.ID].cgroup
		groups[in.ID] = p
		if scheme == SchemeSplit {
			groups[in.ID+"/whole"] = cgroup.MustParsePath(p.String() + "/" + SplitWholeName)
			groups[in.ID+"/frag"] = cgroup.MustParsePath(p.String() + "/" + SplitFragName)
		}
	}
	usage := func() map[string]uint64 {
		out := map[string]uint64{}
		for k, p := range groups {
			if st, err := m.Stats(p); err == nil {
				out[k] = st.CPUUsageUsec
			}
		}
		return out
	}
	before, movesBefore, linesBefore := usage(), moves.n.Load(), moves.len()
	t0 := time.Now()
	time.Sleep(splitWindow)
	wall := float64(time.Since(t0).Microseconds())
	after, movesIn := usage(), moves.n.Load()-movesBefore
	got := map[string]float64{}
	var detail []string
	for _, k := range []string{"a", "a/whole", "a/frag", "b", "b/whole", "b/frag"} {
		if _, ok := after[k]; ok {
			got[k] = float64(after[k]-before[k]) / wall
			detail = append(detail, fmt.Sprintf("%s %.3f", k, got[k]))
		}
	}
	detail = append(detail, fmt.Sprintf("sweeps that moved threads in the window: %d", movesIn))
	t.Logf("%s, %d threads: %s", scheme, threads, strings.Join(detail, ", "))
	if _, err := os.Stat("/proc/pressure/cpu"); err == nil && scheme == SchemeSplit {
		// The sweep skips a one-thread instance's threads on the whole
		// child's pressure: a threaded child must have the file.
		for _, in := range ins {
			if pr, err := m.Read(groups[in.ID+"/whole"], "cpu.pressure"); err != nil {
				t.Errorf("%s: %v (the kernel has /proc/pressure/cpu)", in.ID, err)
			} else if _, ok := pressureSome(pr); !ok {
				t.Errorf("%s: cpu.pressure %q has no some total", in.ID, pr)
			}
		}
	}
	for _, l := range moves.since(linesBefore) {
		t.Logf("sweep in the window: %s", l)
	}
	if scheme == SchemeSplit {
		for _, in := range ins {
			p := *a.records[in.ID].cgroup
			typ, _ := m.Type(p)
			var where []string
			for _, c := range []string{"", "/" + SplitWholeName, "/" + SplitFragName} {
				ts, _ := m.Threads(cgroup.MustParsePath(p.String() + c))
				var marked []string
				for _, tid := range ts {
					st, _ := a.threadState(tid)
					mark := ""
					if st.Runnable {
						mark = "R"
					}
					marked = append(marked, strconv.Itoa(tid)+mark)
				}
				where = append(where, fmt.Sprintf("%q %v", c, marked))
			}
			t.Logf("%s: cgroup.type %q, threads %v", in.ID, typ, where)
		}
	}
	return got
}

// sweepCounter counts the agent's "split sweep" log lines: one per
// instance and window in which the sweep moved threads; it keeps each
// line's threads and moves (logged with -v: what the sweep saw and did).
type sweepCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	lines []string
	warns []string // the split loop's warnings (errors of a sweep or watch)
}

func (c *sweepCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *sweepCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var kv []string
		r.Attrs(func(a slog.Attr) bool {
			kv = append(kv, a.String())
			return true
		})
		c.mu.Lock()
		c.warns = append(c.warns, r.Message+" "+strings.Join(kv, " "))
		c.mu.Unlock()
		return nil
	}
	if r.Message == "split sweep" {
		c.n.Add(1)
		var kv []string
		r.Attrs(func(a slog.Attr) bool {
			kv = append(kv, a.String())
			return true
		})
		c.mu.Lock()
		c.lines = append(c.lines, r.Time.Format("15:04:05.000")+" "+strings.Join(kv, " "))
		c.mu.Unlock()
	}
	return nil
}

// since returns the lines kept from the i-th on.
func (c *sweepCounter) since(i int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines[min(i, len(c.lines)):])
}

func (c *sweepCounter) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lines)
}

func (c *sweepCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *sweepCounter) WithGroup(string) slog.Handler      { return c }

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
