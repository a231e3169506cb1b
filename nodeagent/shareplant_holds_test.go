package nodeagent

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/nodeagent/shareplant"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// The share enforcement against the kernel model (nodeagent/shareplant):
// two instances share CPU 2 of a 4-CPU model host, a = CPU 0 + 0.7 of
// CPU 2 (plan 1.7), b = CPU 1 + 0.3 of CPU 2 (plan 1.3), each running n
// busy threads, started inside its container's cgroup, started outside
// and moved in after 0.3 s, or b's started 2 s after a's. Every second
// the enforcement under test runs once against the model, as the agent's
// pass would; the CPU each instance got is read from the model's cpu.stat
// over the same 1 s windows.

const (
	plantCPUs    = 4
	plantShared  = 2
	plantWindows = 20 // 1 s windows; checked from holdsFrom on
	holdsFrom    = 10
	holdsSeeds   = 100
)

type plantInstance struct {
	id    string
	whole cpuset.CPUID
	frag  int // pieces of CPU 2 (ShareBase 100)
}

func (i plantInstance) plan() int { return 100 + i.frag }

var plantInstances = []plantInstance{{"a", 0, 70}, {"b", 1, 30}}

type plantStart int

const (
	startInside plantStart = iota
	startMoved
	startApart
	// startPool: each instance is a thread pool, as a Go program's runtime
	// is: n busy threads and poolSpare parked ones, started inside; at
	// seeded times (poolHopMean apart on average, per instance) a busy
	// thread hands its work on: the most recently parked thread wakes and
	// the busy one parks (last in, first out).
	startPool
)

const poolSpare = 2

const poolHopMean = 1500 * time.Millisecond

func (s plantStart) String() string { return [...]string{"inside", "moved", "2s-apart", "pool"}[s] }

// plantRun runs one case and returns the CPUs each instance got in each
// 1 s window (index 0: window 1).
func plantRun(t *testing.T, e plantEnforcer, n int, start plantStart, seed uint64) [][]float64 {
	t.Helper()
	p, err := shareplant.New(plantCPUs, rand.New(rand.NewPCG(seed, 251)))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := e.setup(p)
	if err != nil {
		t.Fatal(err)
	}
	spawn := func(g shareplant.GroupID) []shareplant.ThreadID {
		var ids []shareplant.ThreadID
		for range n {
			id, err := p.Spawn(g, shareplant.Busy)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	var pending func() // what happens at 2 s (startApart)
	var pool *plantPool
	switch start {
	case startInside:
		spawn(cs[0])
		spawn(cs[1])
	case startMoved:
		ids := [][]shareplant.ThreadID{spawn(shareplant.Root), spawn(shareplant.Root)}
		p.Advance(300 * time.Millisecond)
		for i, c := range cs {
			for _, id := range ids[i] {
				if err := p.Move(id, c); err != nil {
					t.Fatal(err)
				}
			}
		}
	case startApart:
		spawn(cs[0])
		pending = func() { spawn(cs[1]) }
	case startPool:
		pool = newPlantPool(t, p, cs, n, seed)
	}
	got := make([][]float64, len(cs))
	prev := make([]time.Duration, len(cs))
	for i, c := range cs {
		prev[i], _ = p.Usage(c)
	}
	for w := 1; w <= plantWindows; w++ {
		if pool != nil {
			// The sweeps between two windows' passes.
			every := time.Second
			if se, ok := e.(*splitEnforcer); ok {
				every = cmp.Or(se.every, DefaultSplitEvery)
			}
			for i := range time.Second / every {
				pool.advance(t, every)
				if i < time.Second/every-1 {
					if err := e.pass(p); err != nil {
						t.Fatal(err)
					}
				}
			}
		} else {
			p.Advance(time.Second)
		}
		for i, c := range cs {
			u, _ := p.Usage(c)
			got[i] = append(got[i], (u - prev[i]).Seconds())
			prev[i] = u
		}
		if err := e.pass(p); err != nil {
			t.Fatal(err)
		}
		if w == 2 && pending != nil {
			pending()
		}
	}
	return got
}

// plantPool drives startPool's hand-offs.
type plantPool struct {
	p      *shareplant.Plant
	rng    *rand.Rand
	busy   [][]shareplant.ThreadID // per instance
	parked [][]shareplant.ThreadID // per instance, a stack: the last parked on top
	next   []time.Duration         // per instance: the next hand-off
}

func newPlantPool(t *testing.T, p *shareplant.Plant, cs []shareplant.GroupID, n int, seed uint64) *plantPool {
	t.Helper()
	pl := &plantPool{p: p, rng: rand.New(rand.NewPCG(seed, 997))}
	for _, c := range cs {
		var busy, parked []shareplant.ThreadID
		for i := range n + poolSpare {
			id, err := p.Spawn(c, shareplant.Busy)
			if err != nil {
				t.Fatal(err)
			}
			if i < n {
				busy = append(busy, id)
				continue
			}
			if err := p.Park(id); err != nil {
				t.Fatal(err)
			}
			parked = append(parked, id)
		}
		pl.busy, pl.parked = append(pl.busy, busy), append(pl.parked, parked)
		pl.next = append(pl.next, pl.hop())
	}
	return pl
}

func (pl *plantPool) hop() time.Duration {
	return time.Duration(pl.rng.ExpFloat64() * float64(poolHopMean))
}

// advance runs the model for d, handing work on at each instance's times.
func (pl *plantPool) advance(t *testing.T, d time.Duration) {
	t.Helper()
	end := pl.p.Now() + d
	for {
		i := slices.Index(pl.next, slices.Min(pl.next))
		if pl.next[i] >= end {
			pl.p.Advance(end - pl.p.Now())
			return
		}
		pl.p.Advance(pl.next[i] - pl.p.Now())
		// A busy thread (seeded) hands its work to the last parked one.
		k := pl.rng.IntN(len(pl.busy[i]))
		from, to := pl.busy[i][k], pl.parked[i][len(pl.parked[i])-1]
		if err := pl.p.Unpark(to); err != nil {
			t.Fatal(err)
		}
		if err := pl.p.Park(from); err != nil {
			t.Fatal(err)
		}
		pl.busy[i][k] = to
		pl.parked[i][len(pl.parked[i])-1] = from
		pl.next[i] += pl.hop()
	}
}

// plantMeanMiss says how a run missed the bounds on average over windows
// holdsFrom on ("": it held): every instance's mean at least 95 % of
// min(plan, threads) and at most plan + 0.05 CPU. For pools: a hand-off
// between two passes costs up to a pass's worth of the fragment, so a
// single window may dip; the mean may not.
func plantMeanMiss(got [][]float64, n int) string {
	var miss []string
	for i, in := range plantInstances {
		plan := float64(in.plan()) / 100
		lo, hi := 0.95*min(plan, float64(n)), plan+0.05
		mean := 0.0
		for w := holdsFrom; w <= plantWindows; w++ {
			mean += got[i][w-1] / float64(plantWindows-holdsFrom+1)
		}
		if mean < lo || mean > hi {
			miss = append(miss, fmt.Sprintf("%s %.3f over windows %d-%d (want %.3f..%.3f)", in.id, mean, holdsFrom, plantWindows, lo, hi))
		}
	}
	return strings.Join(miss, ", ")
}

// plantMiss says how a run missed the bounds from window holdsFrom on
// ("": it held): every instance at least 95 % of min(plan, threads) and at
// most plan + 0.05 CPU in every window.
func plantMiss(got [][]float64, n int) string {
	var miss []string
	for i, in := range plantInstances {
		plan := float64(in.plan()) / 100
		lo, hi := 0.95*min(plan, float64(n)), plan+0.05
		for w := holdsFrom; w <= plantWindows; w++ {
			if g := got[i][w-1]; g < lo || g > hi {
				miss = append(miss, fmt.Sprintf("%s %.3f in window %d (want %.3f..%.3f)", in.id, g, w, lo, hi))
				break
			}
		}
	}
	return strings.Join(miss, ", ")
}

// plantSummary runs every seed of one case and returns how many missed,
// the first miss, and each instance's mean over the checked windows.
func plantSummary(t *testing.T, mk func() plantEnforcer, n int, start plantStart, seeds int) (int, string, []float64) {
	t.Helper()
	failed, first := 0, ""
	mean := make([]float64, len(plantInstances))
	for seed := range uint64(seeds) {
		got := plantRun(t, mk(), n, start, seed)
		miss := plantMiss
		if start == startPool {
			miss = plantMeanMiss
		}
		if m := miss(got, n); m != "" {
			if failed == 0 {
				first = fmt.Sprintf("seed %d: %s", seed, m)
			}
			failed++
		}
		for i := range mean {
			for w := holdsFrom; w <= plantWindows; w++ {
				mean[i] += got[i][w-1] / float64(seeds*(plantWindows-holdsFrom+1))
			}
		}
	}
	return failed, first, mean
}

var (
	plantThreads = []int{1, 2, 4, 8, 16, 32, 64}
	plantStarts  = []plantStart{startInside, startMoved, startApart}
)

// TestSharePlantHolds drives the split scheme's real sweep against the
// kernel model — the agent's splitSweep with its cpu.stat and
// cpu.pressure gates and its clock-tick rule (agentSplitEnforcer) — for
// every thread count, start and seed: both instances within bounds from
// window 10 on.
func TestSharePlantHolds(t *testing.T) {
	skipUnderRace(t)
	for _, n := range plantThreads {
		for _, start := range plantStarts {
			t.Run(fmt.Sprintf("%d threads %s", n, start), func(t *testing.T) {
				failed, first, mean := plantSummary(t, func() plantEnforcer { return &agentSplitEnforcer{} }, n, start, holdsSeeds)
				t.Logf("split: a %.3f b %.3f (mean of windows %d-%d, %d seeds)", mean[0], mean[1], holdsFrom, plantWindows, holdsSeeds)
				if failed > 0 {
					t.Errorf("%d of %d seeds out of bounds; first: %s", failed, holdsSeeds, first)
				}
			})
		}
	}
}

// TestSharePlantHoldsControl runs the same harness with today's default,
// the capped scheme and the weight loop, and asserts that it misses the
// bounds somewhere: the harness can fail. The table it logs (-v) is in
// docs/AGENT.md, "The kernel model".
func TestSharePlantHoldsControl(t *testing.T) {
	skipUnderRace(t)
	seeds := 20
	var rows []string
	missed := 0
	for _, n := range plantThreads {
		for _, start := range plantStarts {
			failed, first, mean := plantSummary(t, func() plantEnforcer { return &loopEnforcer{} }, n, start, seeds)
			rows = append(rows, fmt.Sprintf("| %d | %s | %d/%d | %.3f | %.3f | %s |", n, start, failed, seeds, mean[0], mean[1], first))
			if failed > 0 {
				missed++
			}
		}
	}
	t.Logf("capped + loop (n, start, seeds out of bounds, mean a, mean b, first miss):\n%s", strings.Join(rows, "\n"))
	if missed == 0 {
		t.Errorf("capped + loop held every case: the harness cannot tell a scheme that fails")
	}
}

// TestSharePlantPool: thread pools (startPool: a busy thread hands its
// work to the thread parked last, 1.5 s apart on average per instance)
// under the split scheme's sweep every DefaultSplitEvery hold their plan on
// average for every thread count and seed. Two controls must each miss
// some case: the sweep before 2026-11-26 (sleeping threads left in
// pinfold-frag, where a hand-off from pinfold-whole woke work under the
// fragment's cap and left pinfold-whole empty: the guest's b 1.098 of 1.3
// with 2 Go threads, docs/AGENT.md), and today's rule swept once a second
// (a hand-off costs up to a second of the fragment).
func TestSharePlantPool(t *testing.T) {
	skipUnderRace(t)
	controls := []struct {
		name string
		mk   func() plantEnforcer
	}{
		{"old rule, every 250ms", func() plantEnforcer { return &splitEnforcer{keepSleepingFrag: true} }},
		{"every 1s", func() plantEnforcer { return &splitEnforcer{every: time.Second} }},
	}
	var rows []string
	missed := make([]int, len(controls))
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("%d threads", n), func(t *testing.T) {
			failed, first, mean := plantSummary(t, func() plantEnforcer { return &splitEnforcer{} }, n, startPool, holdsSeeds)
			row := fmt.Sprintf("| %d | %d/%d | %.3f / %.3f |", n, failed, holdsSeeds, mean[0], mean[1])
			for i, c := range controls {
				cf, _, cmean := plantSummary(t, c.mk, n, startPool, holdsSeeds)
				row += fmt.Sprintf(" %d/%d | %.3f / %.3f |", cf, holdsSeeds, cmean[0], cmean[1])
				if cf > 0 {
					missed[i]++
				}
			}
			rows = append(rows, row)
			if failed > 0 {
				t.Errorf("split sweep every %s: %d of %d seeds out of bounds; first: %s", DefaultSplitEvery, failed, holdsSeeds, first)
			}
		})
	}
	t.Logf("pools (threads | split: seeds out of bounds | mean a / b | %s: out | a / b | %s: out | a / b):\n%s", controls[0].name, controls[1].name, strings.Join(rows, "\n"))
	for i, c := range controls {
		if missed[i] == 0 {
			t.Errorf("control %q held every pool case: the harness cannot tell it from the sweep", c.name)
		}
	}
}

// skipUnderRace skips a test of the kernel model under the race detector:
// the model is pure computation in one goroutine, where -race finds
// nothing and slows it past the unit tier's 10 minutes (TestSharePlantPool
// alone ran for minutes). hack/test.sh runs these tests without -race
// right after the race run (go test -run 'SharePlant' ./nodeagent/).
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("the kernel model runs without -race (hack/test.sh: go test -run SharePlant ./nodeagent/)")
	}
}
