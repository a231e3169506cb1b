package nodeagent

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// pairPlant is a model of how a real kernel splits a shared CPU between
// a (1.7: CPU 0 + 70 pieces of CPU 2) and b (1.3: CPU 1 + 30 pieces), both
// saturated with threads and capped at their plans (cpu.max), drawn from
// the real-kernel measurements in docs/AGENT.md:
//   - when b's weight is light next to a's, the load balancer stacks b's
//     threads on CPU 1 and b gets 1.17 (a 1.70); it unstacks only when b's
//     weight rises clearly past the point where it stacked (hysteresis);
//   - when a's weight is light next to b's, a stacks on CPU 0: a 1.55, b 1.30;
//   - otherwise CPU 2 is split by weight, and an instance whose rate passes
//     its cap is throttled as a whole (cpu.max is one quota for all its
//     CPUs), which hands CPU 2 to the other for that time.
type pairPlant struct {
	stackB, unstackB float64 // b stacks below this wb/wa, unstacks above the other
	stackA, unstackA float64 // a stacks below this wa/wb, unstacks above the other
	bStacked, aStack bool
}

func (p *pairPlant) window(wa, wb uint64) map[string]ShareWindow {
	ra := float64(wb) / float64(wa)
	switch {
	case !p.bStacked && ra < p.stackB:
		p.bStacked = true
	case p.bStacked && ra > p.unstackB:
		p.bStacked = false
	}
	switch {
	case !p.aStack && 1/ra < p.stackA:
		p.aStack = true
	case p.aStack && 1/ra > p.unstackA:
		p.aStack = false
	}
	var a, b float64
	switch {
	case p.bStacked:
		a, b = 1.70, 1.17
	case p.aStack:
		a, b = 1.55, 1.30
	default:
		fa := float64(wa) / float64(wa+wb)
		fb := 1 - fa
		a, b = 1+fa, 1+fb
		if b > 1.3 { // b throttled τ of the time: CPU 2 is a's then
			tau := 1 - 1.3/b
			a, b = 1+fa*(1-tau)+tau, 1.3
		} else if a > 1.7 {
			tau := 1 - 1.7/a
			a, b = 1.7, 1+fb*(1-tau)+tau
		}
		a, b = min(a, 1.7), min(b, 1.3)
	}
	return map[string]ShareWindow{
		"a": {Got: int(a*100 + 0.5), Waiting: 0.4},
		"b": {Got: int(b*100 + 0.5), Waiting: 0.4},
	}
}

var pairMembers = []ShareMember{
	{ID: "a", CPU: 2, Plan: 170, Frag: 70, Weight: 70},
	{ID: "b", CPU: 2, Plan: 130, Frag: 30, Weight: 30},
}

func within(w map[string]ShareWindow) bool {
	for _, m := range pairMembers {
		if float64(w[m.ID].Got) < float64(m.Plan)*(1-shareTolerance) {
			return false
		}
	}
	return true
}

// run drives the loop against plant for n windows and returns the window
// at which every member was first within bounds (-1: never) and how many
// windows changed a weight in the last `tail` windows.
func run(l *ShareLoop, plant *pairPlant, n, tail int) (first, late int, w map[string]ShareWindow) {
	first = -1
	l.Step(pairMembers, nil)
	for i := range n {
		ws := l.Weights()
		w = plant.window(ws["a"], ws["b"])
		if first < 0 && within(w) {
			first = i
		}
		if ch := l.Step(pairMembers, w); len(ch) > 0 && i >= n-tail {
			late++
		}
	}
	return first, late, w
}

func TestShareLoop(t *testing.T) {
	tests := []struct {
		name  string
		plant pairPlant
		// converge: must be within bounds by this window (-1: not asked) and
		// stay put for the last 200 of 300 windows (no waking up again).
		converge int
		steady   bool
	}{
		// The kernel splits by weight and never stacks: the mapped weights
		// are right and the loop changes nothing.
		{"ideal kernel", pairPlant{stackB: 0, unstackB: 0, stackA: 0, unstackA: 0}, 0, true},
		// The real kernel's stacking of the lighter instance (b 1.17 at
		// 70/30), with a band of weights that delivers the plan.
		{"lighter instance stacked", pairPlant{stackB: 0.45, unstackB: 0.55, stackA: 0.9, unstackA: 1.1}, 10, true},
		// A narrow band only.
		{"narrow band", pairPlant{stackB: 0.45, unstackB: 0.60, stackA: 1.45, unstackA: 1.5}, 10, true},
		// No weights deliver the plan: one or the other is always stacked.
		// The loop must not oscillate for ever: its gain halves at every
		// reversal until it stops.
		{"knife edge", pairPlant{stackB: 0.5, unstackB: 0.5, stackA: 2.0, unstackA: 2.0}, -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewShareLoop()
			p := tt.plant
			first, late, w := run(l, &p, 300, 200)
			t.Logf("within bounds from window %d; weights %v; last window a %d b %d; changes in the last 200: %d",
				first, l.Weights(), w["a"].Got, w["b"].Got, late)
			if tt.converge >= 0 && (first < 0 || first > tt.converge) {
				t.Errorf("within bounds from window %d, want by window %d", first, tt.converge)
			}
			if tt.converge >= 0 && !within(w) {
				t.Errorf("the last window is out of bounds: a %d b %d", w["a"].Got, w["b"].Got)
			}
			if tt.steady && late > 0 {
				t.Errorf("the loop still changed weights in %d of the last 200 windows (oscillates)", late)
			}
		})
	}
}

// Without the loop, the stacking plant leaves b at 1.17: the test above
// can fail.
func TestShareLoopIsNeeded(t *testing.T) {
	p := pairPlant{stackB: 0.45, unstackB: 0.55, stackA: 0.9, unstackA: 1.1}
	if w := p.window(70, 30); within(w) {
		t.Fatalf("the plant delivers the plan at the mapped weights (a %d b %d): it does not model stacking", w["a"].Got, w["b"].Got)
	}
}

func TestShareLoopBounds(t *testing.T) {
	l := NewShareLoop()
	l.Step(pairMembers, nil)
	// b starves whatever its weight: its weight rises to 4× and stops; a
	// yields down to ¼×.
	for range 40 {
		l.Step(pairMembers, map[string]ShareWindow{"a": {Got: 170, Waiting: 0.3}, "b": {Got: 100, Waiting: 0.9}})
	}
	if w := l.Weights(); w["b"] != 120 || w["a"] != 18 {
		t.Errorf("weights %v, want b at 4×30 = 120 and a at 70/4 ≈ 18", w)
	}
	// Not waiting is not starving: b got less than its plan because it
	// wanted no more; nothing changes.
	l2 := NewShareLoop()
	l2.Step(pairMembers, nil)
	for range 5 {
		if ch := l2.Step(pairMembers, map[string]ShareWindow{"a": {Got: 170}, "b": {Got: 20, Waiting: 0}}); len(ch) > 0 {
			t.Fatalf("an idle instance changed weights: %v", ch)
		}
	}
	// Missing windows (container not running) change nothing either.
	if ch := l2.Step(pairMembers, map[string]ShareWindow{}); len(ch) > 0 {
		t.Fatalf("no windows changed weights: %v", ch)
	}
}

func TestShareLoopResetsChangedMembers(t *testing.T) {
	l := NewShareLoop()
	l.Step(pairMembers, nil)
	starve := map[string]ShareWindow{"a": {Got: 170, Waiting: 0.3}, "b": {Got: 110, Waiting: 0.9}}
	for range 4 {
		l.Step(pairMembers, starve)
	}
	if l.Weights()["b"] == 30 {
		t.Fatalf("b's weight did not move while it starved")
	}
	// b is resized (a new fragment): it starts again from its mapped weight.
	resized := []ShareMember{pairMembers[0], {ID: "b", CPU: 2, Plan: 140, Frag: 40, Weight: 40}}
	ch := l.Step(resized, nil)
	if ch["b"] != 40 || l.Weights()["b"] != 40 {
		t.Errorf("after a resize b's weight is %d (changed %v), want the mapped 40", l.Weights()["b"], ch)
	}
	// b leaves: the loop forgets it.
	l.Step(resized[:1], nil)
	if _, ok := l.Weights()["b"]; ok {
		t.Errorf("a removed member keeps a weight: %v", l.Weights())
	}
}

func TestShareMembers(t *testing.T) {
	h := Host{CPUs: cpuset.MustParseCPUs("0-7"), Mems: cpuset.Of[cpuset.NUMANodeID](0), ShareBase: 100}
	bound := func(id string, cpus map[cpuset.CPUID]int) model.Instance {
		return model.Instance{ID: id, Allocation: model.Allocation{Bind: true, CPUs: cpus, NUMANode: 0, Memory: 64 << 20}}
	}
	desired := []model.Instance{
		bound("b", map[cpuset.CPUID]int{1: 100, 2: 30}),
		bound("a", map[cpuset.CPUID]int{0: 100, 2: 70}),
		bound("whole", map[cpuset.CPUID]int{3: 100}),
		bound("alone", map[cpuset.CPUID]int{4: 100, 5: 50}), // nobody else on CPU 5
		bound("p", map[cpuset.CPUID]int{6: 50}),
		bound("q", map[cpuset.CPUID]int{6: 25}),
		{ID: "pool", Allocation: model.Allocation{CPUQuota: 150, NUMANode: -1, Memory: 64 << 20}},
	}
	got := ShareMembers(h, desired, SchemeCapped)
	want := []ShareMember{
		{ID: "a", CPU: 2, Plan: 170, Frag: 70, Weight: 70},
		{ID: "b", CPU: 2, Plan: 130, Frag: 30, Weight: 30},
		{ID: "p", CPU: 6, Plan: 50, Frag: 50, Weight: 50},
		{ID: "q", CPU: 6, Plan: 25, Frag: 25, Weight: 25},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ShareMembers =\n%v\nwant\n%v", got, want)
	}
}

var starveB = map[string]ShareWindow{"a": {Got: 170, Waiting: 0.3}, "b": {Got: 110, Waiting: 0.9}}

// The first full window after a member appears holds its start-up
// transients (threads being placed, caches cold): the loop lets it pass
// and acts on the window after.
func TestShareLoopIgnoresStartupWindow(t *testing.T) {
	l := NewShareLoop()
	l.Step(pairMembers, nil) // the agent's first tick: no window yet
	if ch := l.Step(pairMembers, starveB); len(ch) > 0 {
		t.Fatalf("the loop acted on the first window after start: %v", ch)
	}
	if ch := l.Step(pairMembers, starveB); ch["b"] <= 30 {
		t.Fatalf("the second full window of a starved b changed %v, want b's weight up", ch)
	}
	// A resize is a new start too.
	resized := []ShareMember{pairMembers[0], {ID: "b", CPU: 2, Plan: 140, Frag: 40, Weight: 40}}
	l.Step(resized, starveB)
	if ch := l.Step(resized, starveB); len(ch) > 0 {
		t.Fatalf("the loop acted on the first window after a resize: %v", ch)
	}
}

// A group whose gain collapsed on a knife edge comes back when what it
// measures changes by more than the bound, or after windows in the dead
// band; it does not wake while the plant it gave up on stays as it was.
func TestShareLoopComesBack(t *testing.T) {
	knife := pairPlant{stackB: 0.5, unstackB: 0.5, stackA: 2.0, unstackA: 2.0}
	collapse := func(t *testing.T) *ShareLoop {
		t.Helper()
		l := NewShareLoop()
		p := knife
		if _, late, _ := run(l, &p, 300, 200); late > 0 {
			t.Fatalf("on a knife edge the loop changed weights in %d of the last 200 of 300 windows (oscillates)", late)
		}
		return l
	}
	t.Run("conditions change", func(t *testing.T) {
		l := collapse(t)
		before := l.Weights()["b"]
		// b's neighbour takes more: b falls to 1.00 of 1.3, waiting.
		for range 6 {
			l.Step(pairMembers, map[string]ShareWindow{"a": {Got: 170, Waiting: 0.3}, "b": {Got: 100, Waiting: 0.9}})
		}
		// At the starting gain three corrections move it by more than ×1.5;
		// a loop left at the gain it ended with moves it by a few per cent.
		if after := l.Weights()["b"]; float64(after) < 1.5*float64(before) {
			t.Errorf("b's weight %d → %d after 6 windows starved by 23 %%: the loop stayed (nearly) off", before, after)
		}
	})
	t.Run("after the dead band", func(t *testing.T) {
		l := collapse(t)
		for range 5 {
			l.Step(pairMembers, map[string]ShareWindow{"a": {Got: 170, Waiting: 0.3}, "b": {Got: 130, Waiting: 0.3}})
		}
		before := l.Weights()["b"]
		// Then b falls short by 4 % (inside the bound's change, outside the
		// dead band): the recovered gain corrects it.
		for range 4 {
			l.Step(pairMembers, map[string]ShareWindow{"a": {Got: 170, Waiting: 0.3}, "b": {Got: 125, Waiting: 0.9}})
		}
		if after := l.Weights()["b"]; after <= before {
			t.Errorf("b's weight %d → %d: after 5 windows in the dead band the loop did not come back", before, after)
		}
	})
}

// Waiting behind its own quota is not starving: an instance throttled by
// its own cpu.max (many threads, at its cap) that measures a little short
// takes no weight from its neighbour.
func TestShareLoopOwnWaiting(t *testing.T) {
	l := NewShareLoop()
	l.Step(pairMembers, nil)
	for i := range 8 {
		ch := l.Step(pairMembers, map[string]ShareWindow{
			"a": {Got: 164, Waiting: 1, Throttled: 0.9}, // 4 threads at its 1.7 cap
			"b": {Got: 130, Waiting: 0.3},
		})
		if len(ch) > 0 {
			t.Fatalf("window %d: an instance waiting behind its own cap took weight: %v", i, ch)
		}
	}
	// Not throttled, or throttled in only some periods (short in the
	// others), the same shortfall is a neighbour's doing.
	for _, th := range []float64{0, 0.6} {
		l2 := NewShareLoop()
		l2.Step(pairMembers, nil)
		for range 3 {
			l2.Step(pairMembers, map[string]ShareWindow{"a": {Got: 164, Waiting: 1, Throttled: th}, "b": {Got: 130, Waiting: 0.3}})
		}
		if w := l2.Weights()["a"]; w <= 70 {
			t.Errorf("a short by 3.5 %% and throttled in %.0f %% of periods: weight %d, want above 70", th*100, w)
		}
	}
}

// windowOf reads how much of the window an instance was throttled by its
// own cpu.max from cpu.stat's nr_periods and nr_throttled.
func TestShareWindowOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration, usage, periods, throttled, stall uint64) shareSample {
		return shareSample{cpu: cpuSample{container: "c", usageUsec: usage, at: t0.Add(d)}, periods: periods, throttled: throttled, stall: stall, psi: true}
	}
	tests := []struct {
		name      string
		prev, now shareSample
		want      ShareWindow
	}{
		{"at its cap", at(0, 0, 100, 40, 0), at(time.Second, 1_700_000, 110, 49, 1_000_000), ShareWindow{Got: 170, Waiting: 1, Throttled: 0.9}},
		{"no cap: no periods", at(0, 0, 0, 0, 0), at(time.Second, 1_170_000, 0, 0, 500_000), ShareWindow{Got: 117, Waiting: 0.5}},
		{"counters back", at(0, 0, 100, 40, 0), at(time.Second, 1_000_000, 90, 30, 0), ShareWindow{Got: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := windowOf(tt.prev, tt.now, 100)
			if !ok || got != tt.want {
				t.Errorf("windowOf = %+v, %v; want %+v", got, ok, tt.want)
			}
		})
	}
}

// hack/native-kernel.sh runs the share sweep natively: its arguments are
// checked before anything is built (before, any first argument but
// --build built and ran the whole kernel tier), and --check says what it
// found on this host without building.
func TestNativeKernelScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	tests := []struct {
		args []string
		rc   []int // accepted exit codes
		out  []string
	}{
		{[]string{"--help"}, []int{0}, []string{"usage: hack/native-kernel.sh", "--build DIR", "at least 5 CPUs"}},
		{[]string{"-h"}, []int{0}, []string{"usage: hack/native-kernel.sh"}},
		{[]string{"--bogus"}, []int{2}, []string{"unknown argument: --bogus", "usage:"}},
		{[]string{"--build"}, []int{2}, []string{"--build needs exactly one directory", "usage:"}},
		{[]string{"--check", "x"}, []int{2}, []string{"--check takes no argument"}},
		// Passes on a root cgroup v2 host with 5 idle CPUs; elsewhere it
		// names what it found.
		{[]string{"--check"}, []int{0, 1}, []string{"native kernel tier: "}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := exec.Command("bash", append([]string{"../hack/native-kernel.sh"}, tt.args...)...)
			cmd.Env = append(cmd.Environ(), "PINFOLD_NATIVE_IDLE=0")
			out, err := cmd.CombinedOutput()
			rc := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				rc = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(tt.rc, rc) {
				t.Errorf("exit %d, want one of %v; output:\n%s", rc, tt.rc, out)
			}
			for _, w := range tt.out {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if rc == 1 && !strings.Contains(string(out), "found") {
				t.Errorf("a failed check does not say what it found:\n%s", out)
			}
		})
	}
}
