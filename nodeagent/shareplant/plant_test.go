package shareplant

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// scheme is one row of shares.sh: cpusets, weights and caps (0: max) of
// the groups a and b.
type scheme struct {
	name         string
	cpusA, cpusB string
	wA, wB       uint64
	maxA, maxB   time.Duration
}

var (
	e1 = scheme{"E1 exact, weight 70/30", "0,2", "1,2", 70, 30, 0, 0}
	e2 = scheme{"E2 exact, 70/30, cap a", "0,2", "1,2", 70, 30, 170 * time.Millisecond, 0}
	e3 = scheme{"E3 exact, 70/30, cap both", "0,2", "1,2", 70, 30, 170 * time.Millisecond, 130 * time.Millisecond}
	e4 = scheme{"E4 exact, 170/130, cap both", "0,2", "1,2", 170, 130, 170 * time.Millisecond, 130 * time.Millisecond}
	e5 = scheme{"E5 exact, 100/100, cap both", "0,2", "1,2", 100, 100, 170 * time.Millisecond, 130 * time.Millisecond}
	e6 = scheme{"E6 union 0-2, 170/130, cap both", "0-2", "0-2", 170, 130, 170 * time.Millisecond, 130 * time.Millisecond}
	e7 = scheme{"E7 union 0-2, 170/130, no cap", "0-2", "0-2", 170, 130, 0, 0}
	e8 = scheme{"E8 union 0-2, 100/100, cap both", "0-2", "0-2", 100, 100, 170 * time.Millisecond, 130 * time.Millisecond}
)

// shares runs one shares.sh experiment on a 16-CPU host, as the script
// does: n busy threads each in a and b, started inside (each writes itself
// into its group first) or started outside and moved in after 0.3 s; then
// 1 s to settle and a 5 s window. It returns the CPUs a and b used.
func shares(t *testing.T, s scheme, n int, move bool, seed uint64) (float64, float64) {
	t.Helper()
	p, err := New(16, rand.New(rand.NewPCG(seed, 25)))
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var gs [2]GroupID
	for i, c := range []struct {
		name string
		cpus string
		w    uint64
		max  time.Duration
	}{{"a", s.cpusA, s.wA, s.maxA}, {"b", s.cpusB, s.wB, s.maxB}} {
		g, err := p.NewGroup(Root, c.name)
		must(err)
		must(p.SetCPUs(g, cpuset.MustParseCPUs(c.cpus)))
		must(p.SetWeight(g, c.w))
		if c.max > 0 {
			must(p.SetMax(g, c.max, 100*time.Millisecond))
		}
		gs[i] = g
	}
	if move {
		var ids []ThreadID
		for range 2 * n {
			id, err := p.Spawn(Root, Busy)
			must(err)
			ids = append(ids, id)
		}
		p.Advance(300 * time.Millisecond)
		for i, id := range ids {
			must(p.Move(id, gs[i/n]))
		}
	} else {
		for _, g := range gs {
			for range n {
				_, err := p.Spawn(g, Busy)
				must(err)
			}
		}
	}
	p.Advance(time.Second)
	a0, _ := p.Usage(gs[0])
	b0, _ := p.Usage(gs[1])
	const window = 5 * time.Second
	p.Advance(window)
	a1, _ := p.Usage(gs[0])
	b1, _ := p.Usage(gs[1])
	return float64(a1-a0) / float64(window), float64(b1-b0) / float64(window)
}

// within reports whether got is within frac of one of want.
func within(got, frac float64, want ...float64) bool {
	for _, w := range want {
		if math.Abs(got-w) <= frac*w {
			return true
		}
	}
	return false
}

// TestSharePlantCalibrated holds the model to the real-kernel tables
// (../shared/real-kernel/README.md, shares.sh on a 16-CPU KVM guest,
// Linux 6.18): each case's measured figures within 3 %.
func TestSharePlantCalibrated(t *testing.T) {
	seeds := 20
	for _, c := range []struct {
		name   string
		s      scheme
		n      int
		move   bool
		a, b   []float64 // measured figures (any one, where a run landed in several); nil: not checked
		tol    float64
		anyOfB float64 // some seed must land within tol of this b
	}{
		// E1, 2 threads inside: run 1 1.300, run 2 0.995 (two equilibria; the issue calibrates to 0.995).
		{name: "E1 2 inside", s: e1, n: 2, b: []float64{0.995, 1.300}, tol: 0.03, anyOfB: 0.995},
		{name: "E3 16 inside", s: e3, n: 16, b: []float64{1.17, 1.20}, tol: 0.03},
		{name: "E3 16 moved", s: e3, n: 16, move: true, b: []float64{1.29, 1.30}, tol: 0.03},
		{name: "E6 2 inside", s: e6, n: 2, a: []float64{1.578}, b: []float64{1.300}, tol: 0.03},
		{name: "E6 4 inside", s: e6, n: 4, a: []float64{1.7}, b: []float64{1.3}, tol: 0.003},
		{name: "E6 4 moved", s: e6, n: 4, move: true, a: []float64{1.7}, b: []float64{1.3}, tol: 0.003},
		{name: "E6 8 inside", s: e6, n: 8, a: []float64{1.7}, b: []float64{1.3}, tol: 0.003},
		{name: "E6 16 inside", s: e6, n: 16, a: []float64{1.7}, b: []float64{1.3}, tol: 0.003},
		{name: "E6 16 moved", s: e6, n: 16, move: true, a: []float64{1.7}, b: []float64{1.3}, tol: 0.003},
	} {
		t.Run(c.name, func(t *testing.T) {
			hit := false
			for seed := range uint64(seeds) {
				a, b := shares(t, c.s, c.n, c.move, seed)
				if c.a != nil && !within(a, c.tol, c.a...) {
					t.Errorf("seed %d: a %.3f, want within %.1f %% of %v", seed, a, 100*c.tol, c.a)
				}
				if c.b != nil && !within(b, c.tol, c.b...) {
					t.Errorf("seed %d: b %.3f, want within %.1f %% of %v", seed, b, 100*c.tol, c.b)
				}
				if c.anyOfB > 0 && within(b, c.tol, c.anyOfB) {
					hit = true
				}
			}
			if c.anyOfB > 0 && !hit {
				t.Errorf("no seed of %d landed within %.1f %% of b %.3f", seeds, 100*c.tol, c.anyOfB)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite testdata/shares-table.golden from the model")

// TestSharePlantTable holds the model's whole shares.sh table (E1–E8 ×
// the script's columns, seeds 1 and 2) to testdata/shares-table.golden,
// the table docs/AGENT.md quotes ("The kernel model"): a change to the
// model that moves any cell fails here until the golden file (and the
// doc) are renewed with -update. Not every cell is calibrated against
// the kernel (TestSharePlantCalibrated holds those that are).
func TestSharePlantTable(t *testing.T) {
	cols := []struct {
		n    int
		move bool
	}{{2, false}, {2, true}, {4, false}, {4, true}, {8, false}, {16, true}, {16, false}}
	var sb strings.Builder
	sb.WriteString("model, seeds 1 ; 2 (columns: 2 inside, 2 move, 4 inside, 4 move, 8 inside, 16 move, 16 inside)\n")
	for _, s := range []scheme{e1, e2, e3, e4, e5, e6, e7, e8} {
		fmt.Fprintf(&sb, "| %s |", s.name)
		for _, c := range cols {
			a, b := shares(t, s, c.n, c.move, 1)
			a2, b2 := shares(t, s, c.n, c.move, 2)
			fmt.Fprintf(&sb, " %.3f/%.3f ; %.3f/%.3f |", a, b, a2, b2)
		}
		sb.WriteString("\n")
	}
	golden := filepath.Join("testdata", "shares-table.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run SharePlantTable -update writes it)", err)
	}
	if d := cmp.Diff(string(want), sb.String()); d != "" {
		t.Errorf("the model's table moved from %s (-golden +model); renew it with -update and the table in docs/AGENT.md:\n%s", golden, d)
	}
}

// plant builds a host of cpus CPUs on seed 1, failing the test on error.
func plant(t *testing.T, cpus int) *Plant {
	t.Helper()
	p, err := New(cpus, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// cpuOver is g's use over d, in CPUs, and the fraction of d some of its
// threads waited.
func cpuOver(t *testing.T, p *Plant, g GroupID, d time.Duration) (float64, float64) {
	t.Helper()
	u0, err := p.Usage(g)
	check(t, err)
	s0, err := p.PressureSome(g)
	check(t, err)
	p.Advance(d)
	u1, _ := p.Usage(g)
	s1, _ := p.PressureSome(g)
	return float64(u1-u0) / float64(d), float64(s1-s0) / float64(d)
}

func near(got, want float64) bool { return math.Abs(got-want) < 0.002 }

func TestPlantBasics(t *testing.T) {
	type group struct {
		cpus   string
		weight uint64
		max    time.Duration
		parent int // index into the case's groups, -1: root
		busy   int // busy threads started inside
	}
	for _, c := range []struct {
		name       string
		cpus       int
		packed     bool
		groups     []group
		want, wait []float64 // per group: CPUs used, fraction of time some thread waited
	}{
		{name: "weights split one CPU", cpus: 1, groups: []group{{"0", 70, 0, -1, 1}, {"0", 30, 0, -1, 1}},
			want: []float64{0.7, 0.3}, wait: []float64{0.3, 0.7}},
		{name: "cpu.max caps over every CPU", cpus: 2, groups: []group{{"0-1", 100, 50 * time.Millisecond, -1, 4}},
			want: []float64{0.5}, wait: []float64{1}},
		{name: "an idle CPU pulls a queued thread", cpus: 2, groups: []group{{"0-1", 100, 0, -1, 2}},
			want: []float64{2}, wait: []float64{0}},
		{name: "packed host: a nice-0 thread on each CPU", cpus: 2, packed: true, groups: []group{{"0", 100, 0, -1, 3}},
			want: []float64{0.5}, wait: []float64{1}},
		{name: "threaded children share their parent's entity", cpus: 1,
			groups: []group{{"0", 50, 0, -1, 0}, {"0", 50, 0, -1, 1}, {"", 300, 0, 0, 1}, {"", 100, 0, 0, 1}},
			want:   []float64{0.5, 0.5, 0.375, 0.125}, wait: []float64{1, 0.5, 0.625, 0.875}},
		{name: "a child's cap within its parent", cpus: 2,
			groups: []group{{"0-1", 100, 0, -1, 0}, {"1", 100, 20 * time.Millisecond, 0, 2}, {"0", 100, 0, 0, 1}},
			want:   []float64{1.2, 0.2, 1}, wait: []float64{0.5, 1, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := plant(t, c.cpus)
			p.SetPacked(c.packed)
			var gs []GroupID
			for i, gr := range c.groups {
				parent := Root
				if gr.parent >= 0 {
					parent = gs[gr.parent]
				}
				g, err := p.NewGroup(parent, fmt.Sprint("g", i))
				check(t, err)
				if gr.cpus != "" {
					check(t, p.SetCPUs(g, cpuset.MustParseCPUs(gr.cpus)))
				}
				check(t, p.SetWeight(g, gr.weight))
				if gr.max > 0 {
					check(t, p.SetMax(g, gr.max, 100*time.Millisecond))
				}
				gs = append(gs, g)
			}
			for i, gr := range c.groups {
				for range gr.busy {
					_, err := p.Spawn(gs[i], Busy)
					check(t, err)
				}
			}
			p.Advance(time.Second)
			for i, g := range gs {
				got, wait := cpuOver(t, p, g, 2*time.Second)
				if !near(got, c.want[i]) || !near(wait, c.wait[i]) {
					t.Errorf("group %d: %.3f CPUs, waited %.3f; want %.3f, %.3f", i, got, wait, c.want[i], c.wait[i])
				}
			}
		})
	}
}

func TestPlantDuty(t *testing.T) {
	p := plant(t, 2)
	g, err := p.NewGroup(Root, "g")
	check(t, err)
	id, err := p.Spawn(g, Duty{Run: 10 * time.Millisecond, Sleep: 30 * time.Millisecond})
	check(t, err)
	got, _ := cpuOver(t, p, g, 4*time.Second)
	if !near(got, 0.25) {
		t.Errorf("10 ms run / 30 ms sleep: %.3f CPUs, want 0.250", got)
	}
	seen := map[bool]bool{}
	for range 8 {
		p.Advance(7 * time.Millisecond)
		ts, err := p.Threads(g)
		check(t, err)
		if len(ts) != 1 || ts[0].ID != id {
			t.Fatalf("threads %v, want thread %d alone", ts, id)
		}
		seen[ts[0].Runnable] = true
	}
	if !seen[true] || !seen[false] {
		t.Errorf("a 10/30 ms thread sampled every 7 ms: runnable states seen %v, want both", seen)
	}
}

func TestPlantSeeded(t *testing.T) {
	for _, seed := range []uint64{3, 4} {
		a1, b1 := shares(t, e3, 16, false, seed)
		a2, b2 := shares(t, e3, 16, false, seed)
		if a1 != a2 || b1 != b2 {
			t.Errorf("seed %d: %v/%v then %v/%v: the same seed must give the same run", seed, a1, b1, a2, b2)
		}
	}
}

func TestPlantBadInput(t *testing.T) {
	p := plant(t, 3)
	g, err := p.NewGroup(Root, "g")
	check(t, err)
	id, err := p.Spawn(g, Busy)
	check(t, err)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"cpus", func() error { _, err := New(0, rand.New(rand.NewPCG(1, 1))); return err }(), "cpus 0"},
		{"rng", func() error { _, err := New(2, nil); return err }(), "rng: nil"},
		{"parent", func() error { _, err := p.NewGroup(9, "x"); return err }(), "group 9"},
		{"cpuset", p.SetCPUs(g, cpuset.MustParseCPUs("0-5")), `cpuset.cpus "0-5"`},
		{"root cpuset", p.SetCPUs(Root, cpuset.MustParseCPUs("0")), "root group"},
		{"weight", p.SetWeight(g, 0), "cpu.weight 0"},
		{"period", p.SetMax(g, 10*time.Millisecond, 2*time.Second), "period 2s"},
		{"quota", p.SetMax(g, time.Microsecond, 100*time.Millisecond), "quota 1µs"},
		{"duty", func() error { _, err := p.Spawn(g, Duty{Sleep: time.Millisecond}); return err }(), "duty 0s run"},
		{"move thread", p.Move(7, g), "thread 7"},
		{"move group", p.Move(id, 5), "group 5"},
		{"usage", func() error { _, err := p.Usage(4); return err }(), "cpu.stat"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
				t.Errorf("error %v, want one naming %q", c.err, c.want)
			}
		})
	}
	// Nothing changed: the one thread still has the whole host's CPU 1..3 to itself.
	got, _ := cpuOver(t, p, g, time.Second)
	if !near(got, 1) {
		t.Errorf("after refused writes: %.3f CPUs, want 1 (nothing changed)", got)
	}
}

func TestPlantTimeNeverGoesBack(t *testing.T) {
	p := plant(t, 1)
	g, err := p.NewGroup(Root, "g")
	check(t, err)
	check(t, p.SetMax(g, 20*time.Millisecond, 100*time.Millisecond))
	_, err = p.Spawn(g, Busy)
	check(t, err)
	p.Advance(time.Second)
	p.Advance(-time.Second)
	if p.Now() != time.Second {
		t.Errorf("Advance(-1s) after 1 s: now %v, want 1s", p.Now())
	}
	if got, _ := cpuOver(t, p, g, time.Second); !near(got, 0.2) {
		t.Errorf("after Advance(-1s): %.3f CPUs, want 0.200", got)
	}
}

// TestPlantThreadCPU: each thread's CPU (what /proc's utime + stime
// count) sums to its group's usage, a busy thread's grows at its rate and
// a sleeping one's does not.
func TestPlantThreadCPU(t *testing.T) {
	p := plant(t, 4)
	g, err := p.NewGroup(Root, "g")
	check(t, err)
	check(t, p.SetCPUs(g, cpuset.MustParseCPUs("0-1")))
	for range 3 {
		_, err := p.Spawn(g, Busy)
		check(t, err)
	}
	lazy, err := p.Spawn(g, Duty{Run: 10 * time.Millisecond, Sleep: 30 * time.Millisecond})
	check(t, err)
	p.Advance(2 * time.Second)
	ts, err := p.Threads(g)
	check(t, err)
	var sum time.Duration
	for _, th := range ts {
		sum += th.CPU
		if th.ID == lazy && (th.CPU < 400*time.Millisecond || th.CPU > 520*time.Millisecond) {
			t.Errorf("thread %d (10 ms on, 30 ms asleep) used %s of 2 s, want about 500ms", th.ID, th.CPU)
		}
	}
	u, err := p.Usage(g)
	check(t, err)
	if d := sum - u; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("threads used %s, the group %s", sum, u)
	}
	if !near(u.Seconds(), 4) {
		t.Errorf("group used %s of 2 CPUs over 2 s, want 4s", u)
	}
}

// TestPlantBlockedLoad: a group's threads that go to sleep on one CPU
// keep weighing the group there while their PELT average decays (half
// every 32 ms), so its weight on another CPU grows back gradually, not at
// once. Group a has a busy thread on CPU 0 and one on CPU 1, b a busy
// thread on CPU 0 (weights 100 each): a's entity on CPU 0 weighs 50, its
// thread there gets 1/3 of CPU 0. When a's thread on CPU 1 parks, a's
// weight on CPU 0 is 100 / (1 + 2^(-t/32 ms)), its thread's share
// 1 / (2 + 2^(-t/32 ms)): 0.369 over the first 32 ms, 1/2 in the end.
// Control: with instantaneous loads (the model before PELT) the share is
// 1/2 from the moment the thread parks.
func TestPlantBlockedLoad(t *testing.T) {
	for _, instant := range []bool{false, true} {
		p := plant(t, 2)
		p.instantLoads = instant
		a, err := p.NewGroup(Root, "a")
		check(t, err)
		b, err := p.NewGroup(Root, "b")
		check(t, err)
		check(t, p.SetCPUs(b, cpuset.MustParseCPUs("0")))
		x, err := p.Spawn(a, Busy)
		check(t, err)
		check(t, p.SetAffinity(x, cpuset.MustParseCPUs("0")))
		y, err := p.Spawn(a, Busy)
		check(t, err)
		check(t, p.SetAffinity(y, cpuset.MustParseCPUs("1")))
		_, err = p.Spawn(b, Busy)
		check(t, err)
		share := func(d time.Duration) float64 {
			x0, err := p.Thread(x)
			check(t, err)
			p.Advance(d)
			x1, _ := p.Thread(x)
			return float64(x1.CPU-x0.CPU) / float64(d)
		}
		p.Advance(time.Second)
		before := share(100 * time.Millisecond)
		check(t, p.Park(y))
		first := share(32 * time.Millisecond)
		p.Advance(time.Second)
		after := share(100 * time.Millisecond)
		wantFirst := 0.369
		if instant {
			wantFirst = 0.5
		}
		if !near(before, 1.0/3) || math.Abs(first-wantFirst) > 0.005 || !near(after, 0.5) {
			t.Errorf("instantaneous loads %v: a's thread on CPU 0 got %.3f before the park, %.3f over the 32 ms after it, %.3f a second later; want 0.333, %.3f, 0.500",
				instant, before, first, after, wantFirst)
		}
	}
}

// TestPlantIdleBalance: an idle CPU pulls a queued thread when it goes
// idle (sched_balance_newidle) or at its periodic idle balance, on a tick
// (4 ms, CONFIG_HZ=250) at least ncpu ms after its last one
// (sd->balance_interval starts at the domain's weight in ms), not the
// moment a queue forms elsewhere. On 2 CPUs: two busy threads of a group
// pinned to CPU 0 for 1 ms (CPU 1 idle since the start: it balanced at 0,
// finding nothing it may take), then one unpinned: CPU 1 pulls it at its
// next balance, 4 ms, so each thread gets 0.5 ms + 1.5 ms shared, then
// 6 ms alone: 16 ms of CPU by 10 ms. A third thread, bursty on CPU 1, going
// to sleep with the two stacked on CPU 0 again: CPU 1 pulls at once, not
// at its next tick. Control: with every idle CPU pulling at every event (the model before)
// the first case gives 0.5 ms + 9 ms each, 19 ms.
func TestPlantIdleBalance(t *testing.T) {
	for _, eager := range []bool{false, true} {
		p := plant(t, 2)
		p.eagerPull = eager
		g, err := p.NewGroup(Root, "g")
		check(t, err)
		var ids []ThreadID
		for range 2 {
			id, err := p.Spawn(g, Busy)
			check(t, err)
			check(t, p.SetAffinity(id, cpuset.MustParseCPUs("0")))
			ids = append(ids, id)
		}
		p.Advance(time.Millisecond)
		check(t, p.SetAffinity(ids[1], cpuset.CPUs{}))
		p.Advance(9 * time.Millisecond)
		got, err := p.Usage(g)
		check(t, err)
		want := 16 * time.Millisecond
		if eager {
			want = 19 * time.Millisecond
		}
		if d := got - want; d < -10*time.Microsecond || d > 10*time.Microsecond {
			t.Errorf("eager pulls %v: the group used %v by 10 ms, want %v", eager, got, want)
		}
		// Newly idle: both on CPU 0 again, the bursty one alone on CPU 1
		// for its 2 ms; it sleeps at 13 ms and CPU 1 pulls then, not at
		// its next tick (16 ms): 4 + 2 + 2 ms of CPU over 11..15 ms.
		check(t, p.SetAffinity(ids[1], cpuset.MustParseCPUs("0")))
		p.Advance(time.Millisecond)
		check(t, p.SetAffinity(ids[1], cpuset.CPUs{}))
		_, err = p.Spawn(g, Duty{Run: 2 * time.Millisecond, Sleep: 50 * time.Millisecond})
		check(t, err)
		u0, err := p.Usage(g)
		check(t, err)
		p.Advance(4 * time.Millisecond)
		u1, err := p.Usage(g)
		check(t, err)
		if d := u1 - u0 - 8*time.Millisecond; d < -10*time.Microsecond || d > 10*time.Microsecond {
			t.Errorf("eager pulls %v: the group used %v over 11..15 ms, want 8ms (CPU 1 pulls as it goes idle)", eager, u1-u0)
		}
	}
}
