package shareplant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

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

// TestSharePlantTable logs the model's whole shares.sh table next to the
// measured one (go test -v -run SharePlantTable): not every cell is
// calibrated (docs/AGENT.md, "The kernel model").
func TestSharePlantTable(t *testing.T) {
	if testing.Short() {
		t.Skip("a report, not a check")
	}
	cols := []struct {
		n    int
		move bool
	}{{2, false}, {2, true}, {4, false}, {4, true}, {8, false}, {16, true}, {16, false}}
	var sb strings.Builder
	for _, s := range []scheme{e1, e2, e3, e4, e5, e6, e7, e8} {
		fmt.Fprintf(&sb, "| %s |", s.name)
		for _, c := range cols {
			a, b := shares(t, s, c.n, c.move, 1)
			a2, b2 := shares(t, s, c.n, c.move, 2)
			fmt.Fprintf(&sb, " %.3f/%.3f ; %.3f/%.3f |", a, b, a2, b2)
		}
		sb.WriteString("\n")
	}
	t.Logf("model, seeds 1 ; 2 (columns: 2 inside, 2 move, 4 inside, 4 move, 8 inside, 16 move, 16 inside)\n%s", sb.String())
}
