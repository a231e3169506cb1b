package nodeagent

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/nodeagent/shareplant"
	"github.com/pinfold/pinfold/test/workload"
)

// nativeMatrix is what each instance got on a real kernel, per matrix
// case (workload.Matrix) and mechanism: a 16-vCPU KVM guest, Linux 6.18,
// cgroup v2, idle, 2026-11-28; plan a 1.7 = CPU 0 + 0.7 of CPU 2, b 1.3 =
// CPU 1 + 0.3 of CPU 2; threads started inside, the kernel's own
// placement; 3 s settle, 5 s window; the split scheme with the agent's
// sweep every 250 ms, the capped scheme's files alone. Where a cell was
// measured twice, the mean. (Issue 35's table, from the project's review
// of 12481af.)
var nativeMatrix = map[string]map[string][2]float64{
	"busy 2/2":       {"split": {1.6955, 1.295}, "capped": {1.696, 1.296}},
	"busy 2/16":      {"split": {1.698, 1.292}, "capped": {1.700, 1.248}},
	"busy 64/64":     {"split": {1.693, 1.296}, "capped": {1.700, 1.161}},
	"bursty 4x5/20":  {"split": {0.763, 0.731}, "capped": {0.783, 0.773}},
	"bursty 8x5/20":  {"split": {1.168, 1.158}, "capped": {1.425, 1.226}},
	"bursty 16x5/20": {"split": {1.195, 1.193}, "capped": {1.706, 1.157}},
	"bursty 4x10/10": {"split": {1.314, 1.186}, "capped": {1.600, 1.176}},
}

// modelMisses are the cells (case/mechanism/instance) where the model is
// known to be more than matrixModelTol off the native figure, with why
// we think so. TestSharePlantMatrix fails when one of them comes within
// the bound (the list must stay true) as when any other cell leaves it.
var modelMisses = map[string]string{
	"busy 2/16/capped/b":      "the model stacks b's 16 threads a little harder than the kernel (1.17 against 1.25); timed idle balancing, newidle in proportion to its success (NI_RANDOM) and wake-ups that stay on a busy previous CPU left it at 1.172, the 5 ms bandwidth slices took it to 1.150 (2026-11-29)",
	"bursty 4x10/10/split/a":  "the model gives a 1.44 against 1.31: pinfold-whole 0.96 of CPU 0 (b's, with the same three threads, 0.88; native b's whole at most 0.89), pinfold-frag 0.47 of CPU 2 (1.41 before idle balancing was timed, 2026-11-29); EEVDF's 3 ms slices in place of fluid sharing (tried 2026-11-29, not kept) gave a 1.30 but pushed b and bursty 4x5/20 out; NI_RANDOM 1.43, wake-ups staying on a busy previous CPU 1.44, the workload's start stagger (thread i first sleeps i ms; before idle balancing was timed) 1.41; the balancer never taking the running thread (task_on_cpu) 1.39 over seeds 0-7 but 1.43 over 8-15",
	"bursty 16x5/20/capped/b": "capped bursty b: the kernel gives the larger group more of the shared CPU than weights say, or leaves more idle (its three CPUs idle 0.14, the model's 0.06; the model's b: 0.96 of CPU 1 and 0.32 of CPU 2, throttled 2.7 % of the time, near its cap); PELT group weights, timed idle balancing, NI_RANDOM (1.273), wake-ups staying on a busy previous CPU (1.280) and the balancer never taking the running thread (1.281) do not change that; nor do the 5 ms bandwidth slices (per-CPU runtime drawn from the pool, 1 ms kept and the rest returned when idle, the slack timer, no balancing into a throttled run queue: 1.284)",
	"bursty 4x10/10/capped/b": "capped bursty b: the kernel gives the larger group more of the shared CPU than weights say, or leaves more idle (its three CPUs idle 0.22, the model's 0.13; the model's b: 0.92 of CPU 1 and 0.37 of CPU 2); PELT group weights, timed idle balancing, NI_RANDOM (1.268), wake-ups staying on a busy previous CPU (1.283) and the balancer never taking the running thread (1.274), the 5 ms bandwidth slices (1.289) do not change that",
}

const (
	matrixModelTol   = 0.05
	matrixModelSeeds = 8
)

// TestSharePlantMatrix runs the workload matrix's cases the model can
// express (busy and bursty threads, idle) through the production
// mechanisms against the kernel model (the split scheme's children and
// the agent's own splitSweep every DefaultSplitEvery, on the model's
// clock: agentSplitEnforcer; the capped scheme's files) on a
// 16-CPU model host, as the native runs measured them, and holds each
// instance's mean over matrixModelSeeds seeds within matrixModelTol of
// the native figure, except the cells modelMisses names. Go programs,
// thread pools, forks and sub-cgroups are not in the model (no runtime,
// no process tree): the kernel tier measures them. Control: the capped
// scheme with its cpu.max lifted must leave the bound somewhere.
func TestSharePlantMatrix(t *testing.T) {
	skipUnderRace(t)
	var rows []string
	checked := 0
	for _, c := range workload.Matrix {
		native, ok := nativeMatrix[c.Name]
		if !ok {
			continue
		}
		for _, mech := range []string{"split", "capped"} {
			got := matrixModelMean(t, mech, c)
			row := fmt.Sprintf("| %s | %s |", c.Name, mech)
			for i, id := range []string{"a", "b"} {
				cell := c.Name + "/" + mech + "/" + id
				dev := got[i]/native[mech][i] - 1
				within := math.Abs(dev) <= matrixModelTol
				_, known := modelMisses[cell]
				switch {
				case !within && !known:
					t.Errorf("%s: model %.3f, native %.3f (%+.1f %%): outside %.0f %%", cell, got[i], native[mech][i], 100*dev, 100*matrixModelTol)
				case within && known:
					t.Errorf("%s: model %.3f, native %.3f (%+.1f %%): within %.0f %% but listed in modelMisses; remove it", cell, got[i], native[mech][i], 100*dev, 100*matrixModelTol)
				}
				if within {
					checked++
				}
				mark := ""
				if known {
					mark = " (known miss)"
				}
				row += fmt.Sprintf(" %.3f / %.3f (%+.1f %%)%s |", got[i], native[mech][i], 100*dev, mark)
			}
			rows = append(rows, row)
		}
	}
	if checked < 20 {
		t.Errorf("only %d cells within the bound: the test checks too little", checked)
	}
	t.Logf("case | mechanism | a model / native | b model / native (mean of %d seeds):\n%s", matrixModelSeeds, strings.Join(rows, "\n"))

	// Control: capped without its cpu.max must miss some calibrated cell.
	missed := 0
	for _, c := range workload.Matrix {
		native, ok := nativeMatrix[c.Name]
		if !ok {
			continue
		}
		got := matrixModelMean(t, "capped-nocap", c)
		for i, id := range []string{"a", "b"} {
			if _, known := modelMisses[c.Name+"/capped/"+id]; !known && math.Abs(got[i]/native["capped"][i]-1) > matrixModelTol {
				missed++
			}
		}
	}
	if missed == 0 {
		t.Errorf("capped with no cpu.max matched every native capped cell: the test cannot tell the caps")
	}
}

// matrixModelMean is each instance's CPU over the window, mean of the
// seeds, for one case under mech ("split", "capped", or the control
// "capped-nocap").
func matrixModelMean(t *testing.T, mech string, c workload.Case) [2]float64 {
	t.Helper()
	var mean [2]float64
	for seed := range uint64(matrixModelSeeds) {
		got := matrixModelRun(t, mech, c, seed)
		for i := range mean {
			mean[i] += got[i] / matrixModelSeeds
		}
	}
	return mean
}

func matrixModelRun(t *testing.T, mech string, c workload.Case, seed uint64) [2]float64 {
	t.Helper()
	p, err := shareplant.New(16, rand.New(rand.NewPCG(seed, 77)))
	if err != nil {
		t.Fatal(err)
	}
	var e plantEnforcer = &cappedEnforcer{nocap: mech == "capped-nocap"}
	if mech == "split" {
		e = &agentSplitEnforcer{}
	}
	cs, err := e.setup(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range []workload.Load{c.A, c.B} {
		d, ok := plantDuty(l)
		if !ok {
			t.Fatalf("%s: load %s is not in the model", c.Name, l)
		}
		for range d.n {
			if _, err := p.Spawn(cs[i], d.duty); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(d time.Duration) {
		for end := p.Now() + d; p.Now() < end; {
			p.Advance(DefaultSplitEvery)
			if err := e.pass(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(3 * time.Second)
	var before, after [2]time.Duration
	for i, g := range cs {
		before[i], _ = p.Usage(g)
	}
	const window = 5 * time.Second
	run(window)
	var got [2]float64
	for i, g := range cs {
		after[i], _ = p.Usage(g)
		got[i] = (after[i] - before[i]).Seconds() / window.Seconds()
	}
	return got
}

// plantDuty is a matrix load as the model's threads: how many, and their
// duty cycle. ok is false for loads the model cannot express.
func plantDuty(l workload.Load) (d struct {
	n    int
	duty shareplant.Duty
}, ok bool) {
	switch l.Kind {
	case workload.Spin:
		d.n, d.duty = l.N, shareplant.Busy
	case workload.Bursty:
		d.n, d.duty = l.N, shareplant.Duty{Run: time.Duration(l.On) * time.Millisecond, Sleep: time.Duration(l.Off) * time.Millisecond}
	case workload.Idle:
	default:
		return d, false
	}
	return d, true
}

// cappedEnforcer is the capped scheme's files alone (no loop); nocap
// lifts cpu.max (a control).
type cappedEnforcer struct{ nocap bool }

func (e *cappedEnforcer) setup(p *shareplant.Plant) ([]shareplant.GroupID, error) {
	var out []shareplant.GroupID
	for _, in := range plantInstances {
		c, err := cappedGroup(p, in)
		if err != nil {
			return nil, err
		}
		if e.nocap {
			if err := p.SetMax(c, 0, 100*time.Millisecond); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func (*cappedEnforcer) pass(*shareplant.Plant) error { return nil }
