//go:build linux && kernel

package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/test/testenv"
)

func TestMain(m *testing.M) {
	testenv.HelperMain()
	os.Exit(m.Run())
}

// kernelManager checks for a real kernel and opens the host's cgroup tree
// owning pinfold-NAME-PID, which is removed at cleanup.
func kernelManager(t *testing.T, name string) *cgroup.Manager {
	t.Helper()
	testenv.RequireKernel(t)
	parent := fmt.Sprintf("pinfold-%s-%d", name, os.Getpid())
	m, err := cgroup.OpenHost(parent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		os.Remove(filepath.Join(cgroup.HostMount, parent))
	})
	return m
}

// sweepCase is a set of instances sharing a CPU, as the planner places
// them; busy says which instances run busy threads (the others idle).
type sweepCase struct {
	name      string
	shareBase int
	cpus      []map[cpuset.CPUID]int
	idle      map[int]bool
}

var sweepCases = []sweepCase{
	{"pair 1.7/1.3", 100, []map[cpuset.CPUID]int{{0: 100, 2: 70}, {1: 100, 2: 30}}, nil},
	{"triple 1.5/1.25/1.25", 100, []map[cpuset.CPUID]int{{0: 100, 3: 50}, {1: 100, 3: 25}, {2: 100, 3: 25}}, nil},
	{"fine 1.995/1.005", 1000, []map[cpuset.CPUID]int{{0: 1000, 2: 995}, {1: 1000, 2: 5}}, nil},
	{"fragments 0.5/0.5", 100, []map[cpuset.CPUID]int{{0: 50}, {0: 50}}, nil},
	// b idle: a is capped at its plan, it does not burst into b's time.
	{"idle neighbour 1.7/(1.3)", 100, []map[cpuset.CPUID]int{{0: 100, 2: 70}, {1: 100, 2: 30}}, map[int]bool{1: true}},
}

// sweepModes are how the busy threads come to their cgroups.
var sweepModes = []string{"inside", "moved", "2s apart"}

// TestKernelShareSweep runs every case with 1, 2, 4, 8 and 16 busy threads
// per instance, started inside the cgroup, moved in after start, or started
// 2 s apart, with the cgroup files the agent writes (Map, DefaultScheme)
// and the share loop running (ShareEnforcer, 1 s windows). After 2 s it
// measures 2 s windows until every instance is within bounds, the last
// ending by 14 s: every busy instance must get at least 95 % of min(plan,
// threads) CPUs on a real kernel (80 % in the TCG guest: sweepTolerance)
// and none more than its plan + 0.05; in the guest a run outside that is
// run once more, and the second decides. It prints one table (plan vs
// got per instance, the worst deviation last). PINFOLD_SWEEP=quick runs
// only 2 and 16 threads, inside.
func TestKernelShareSweep(t *testing.T) {
	m := kernelManager(t, "sweep")
	if m.HostCPUs().Len() < 5 {
		t.Fatalf("the share sweep uses CPUs 0-3 and leaves at least one to the rest of the system (as a host's reserved CPUs): it needs 5; this host has %s", m.HostCPUs())
	}
	threads, modes := []int{1, 2, 4, 8, 16}, sweepModes
	if os.Getenv("PINFOLD_SWEEP") == "quick" {
		threads, modes = []int{2, 16}, sweepModes[:1]
	}
	var rows []string
	worst, worstAt := 0.0, ""
	failed := 0
	for _, c := range sweepCases {
		for _, n := range threads {
			for _, mode := range modes {
				r := sweepRun(t, m, c, n, mode)
				if !r.ok && os.Getenv("PINFOLD_VM") != "" {
					// The guest's vCPUs are host threads: under host load
					// one can lose most of its time for seconds (a loaded
					// run saw 0.358 of 1.25 once). A run outside the bound
					// runs again once there; both rows are in the table.
					rows = append(rows, strings.Replace(r.row, "| "+mode+" |", "| "+mode+" (1st, run again) |", 1))
					r = sweepRun(t, m, c, n, mode)
				}
				rows = append(rows, r.row)
				if r.worst > worst {
					worst, worstAt = r.worst, fmt.Sprintf("%s, %d threads, %s", c.name, n, mode)
				}
				if !r.ok {
					failed++
					t.Errorf("%s, %d threads, %s: out of bounds: %s", c.name, n, mode, r.row)
				}
			}
		}
	}
	t.Logf("share sweep on %s (%d CPUs, %s), scheme %s, share loop on, bound %.0f %% of min(plan, threads); got = CPUs in the last 2 s window\n"+
		"| case | threads | start | plan → got per instance | worst deviation | settled after |\n|---|---|---|---|---|---|\n%s\n"+
		"worst deviation below the bound: %.1f %% (%s); %d of %d runs out of bounds",
		hostDesc(), m.HostCPUs().Len(), runtime.GOARCH, DefaultScheme, 100*(1-sweepTolerance()), strings.Join(rows, "\n"), worst*100, worstAt, failed, len(rows))
}

// sweepTolerance is how far below min(plan, threads) a busy instance may
// be: the agent's bound (5 %) on a real kernel; 20 % in the TCG guest,
// whose scheduler does not schedule like real SMP hardware (vCPUs are
// host threads on 2 cores: the same code measured 4.9–13.5 % worst over
// four runs there). The guest still catches what breaks the mapping or
// the loop (a stacked instance loses 23 %; a missing cap overshoots).
func sweepTolerance() float64 {
	if os.Getenv("PINFOLD_VM") != "" {
		return 0.20
	}
	return shareTolerance
}

// sweepResult is one run's table row, its worst relative shortfall (or
// excess over plan + 0.05, relative to the plan) and whether it held.
type sweepResult struct {
	row   string
	worst float64
	ok    bool
}

func sweepRun(t *testing.T, m *cgroup.Manager, c sweepCase, n int, mode string) sweepResult {
	t.Helper()
	h := Host{CPUs: m.HostCPUs(), Mems: m.HostMems(), ShareBase: c.shareBase}
	var ins []model.Instance
	paths := map[string]cgroup.Path{}
	for i, cpus := range c.cpus {
		id := string(rune('a' + i))
		in := model.Instance{ID: id, Allocation: model.Allocation{Bind: true, CPUs: cpus, NUMANode: -1, Memory: 64 << 20}}
		ins = append(ins, in)
		w := Map(h, in, DefaultScheme, h.CPUs)
		p, _ := m.Parent().Child(fmt.Sprintf("s-%s", id))
		spec := cgroup.Spec{Path: p, CPUs: &w.Resources.CPUs, Mems: &w.Resources.Mems, CPUWeight: w.CPUWeight, CPUMax: &cgroup.CPUMax{Quota: cgroup.Max}}
		if w.Resources.CPUQuota > 0 {
			spec.CPUMax = &cgroup.CPUMax{Quota: w.Resources.CPUQuota, Period: uint64(w.Resources.PeriodUsec())}
		}
		if err := m.Apply(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
		paths[id] = p
	}
	defer func() {
		for _, p := range paths {
			if err := m.Remove(context.Background(), p); err != nil {
				t.Errorf("remove %s: %v", p, err)
			}
		}
	}()
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}()
	env := fmt.Sprintf("GOMAXPROCS=%d", n)
	for i, in := range ins {
		if c.idle[i] {
			continue
		}
		if mode == "2s apart" && i > 0 {
			time.Sleep(2 * time.Second)
		}
		if mode == "moved" {
			cmd := testenv.StartHelperWith(t, fmt.Sprintf("spin:%d", n), nil, env)
			procs = append(procs, cmd)
			time.Sleep(100 * time.Millisecond) // its threads run outside first
			if err := m.AddProc(paths[in.ID], cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			continue
		}
		dir, err := os.Open(filepath.Join(cgroup.HostMount, paths[in.ID].String()))
		if err != nil {
			t.Fatal(err)
		}
		cmd := testenv.StartHelperWith(t, fmt.Sprintf("spin:%d", n), &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}, env)
		dir.Close()
		procs = append(procs, cmd)
	}
	// The share loop, as the agent runs it.
	e := NewShareEnforcer(m, nil)
	members := ShareMembers(h, ins, DefaultScheme)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if err := e.Tick(ctx, members, paths, c.shareBase, time.Now()); err != nil && ctx.Err() == nil {
				t.Errorf("share loop: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { cancel(); <-done }()

	start := time.Now()
	time.Sleep(2 * time.Second)
	// Measure until the agent's own bound holds (or 14 s); judge the last
	// window against this machine's bound.
	for {
		got := measure(t, m, ins, paths, 2*time.Second)
		strict := judge(c, ins, n, got, e.Weights(), shareTolerance)
		if strict.ok || time.Since(start) >= 12*time.Second { // the last window ends by 14 s
			res := judge(c, ins, n, got, e.Weights(), sweepTolerance())
			res.row = fmt.Sprintf("| %s | %d | %s | %s %s |", c.name, n, mode, res.row, time.Since(start).Round(time.Second))
			return res
		}
	}
}

// measure is each instance's CPUs over one window, from cpu.stat.
func measure(t *testing.T, m *cgroup.Manager, ins []model.Instance, paths map[string]cgroup.Path, d time.Duration) map[string]float64 {
	before := map[string]uint64{}
	for _, in := range ins {
		st, err := m.Stats(paths[in.ID])
		if err != nil {
			t.Fatal(err)
		}
		before[in.ID] = st.CPUUsageUsec
	}
	t0 := time.Now()
	time.Sleep(d)
	wall := float64(time.Since(t0).Microseconds())
	got := map[string]float64{}
	for _, in := range ins {
		st, err := m.Stats(paths[in.ID])
		if err != nil {
			t.Fatal(err)
		}
		got[in.ID] = float64(st.CPUUsageUsec-before[in.ID]) / wall
	}
	return got
}

// judge holds got against the bounds: a busy instance at least (1 − tol)
// of min(plan, threads), none above plan + 0.05.
func judge(c sweepCase, ins []model.Instance, n int, got map[string]float64, weights map[string]uint64, tol float64) sweepResult {
	res := sweepResult{ok: true}
	var cells []string
	for i, in := range ins {
		plan := float64(in.Pieces()) / float64(c.shareBase)
		cell := fmt.Sprintf("%s %.3f → %.3f", in.ID, plan, got[in.ID])
		if w, ok := weights[in.ID]; ok {
			cell += fmt.Sprintf(" (w %d)", w)
		}
		if c.idle[i] {
			cell += " idle"
		} else {
			want := min(plan, float64(n))
			if short := (want - got[in.ID]) / want; short > res.worst {
				res.worst = short
			}
			if got[in.ID] < want*(1-tol) {
				res.ok = false
			}
		}
		if over := got[in.ID] - plan - 0.05; over > 0 {
			res.ok = false
			res.worst = max(res.worst, over/plan)
		}
		cells = append(cells, cell)
	}
	res.row = fmt.Sprintf("%s | %.1f %% |", strings.Join(cells, "; "), res.worst*100)
	return res
}

// hostDesc names the machine: the guest, or the host's kernel release.
func hostDesc() string {
	if os.Getenv("PINFOLD_VM") != "" {
		return "the QEMU test guest (TCG)"
	}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "this host"
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return "Linux " + string(b) + " (native)"
}

// TestKernelFinePieces: with a share base of 1000 the smallest pieces the
// planner hands out are enforced as planned, not rounded up: a bound
// instance holding only 0.005 of a CPU and a memory-first instance with a
// 0.005 CPU quota, each running two busy threads, get 0.005 CPU (cpu.max
// "5000 1000000", written from Map as the agent does), between half and
// one and a half times the plan over a 6 s window. Before, the quota was
// raised to 1 ms per 100 ms: 0.01 CPU, twice the plan.
func TestKernelFinePieces(t *testing.T) {
	m := kernelManager(t, "fine")
	h := Host{CPUs: m.HostCPUs(), Mems: m.HostMems(), ShareBase: 1000}
	last := slices.Max(h.CPUs.Slice())
	ins := []model.Instance{
		{ID: "bound", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{last: 5}, NUMANode: -1, Memory: 64 << 20}},
		{ID: "memfirst", Allocation: model.Allocation{CPUQuota: 5, NUMANode: -1, Memory: 64 << 20}},
	}
	paths := map[string]cgroup.Path{}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
		for _, p := range paths {
			if err := m.Remove(context.Background(), p); err != nil {
				t.Errorf("remove %s: %v", p, err)
			}
		}
	}()
	for _, in := range ins {
		w := Map(h, in, DefaultScheme, h.CPUs)
		p, _ := m.Parent().Child("f-" + in.ID)
		spec := cgroup.Spec{Path: p, CPUs: &w.Resources.CPUs, Mems: &w.Resources.Mems, CPUWeight: w.CPUWeight,
			CPUMax: &cgroup.CPUMax{Quota: w.Resources.CPUQuota, Period: uint64(w.Resources.PeriodUsec())}}
		if err := m.Apply(context.Background(), spec); err != nil {
			t.Fatalf("%s: %v", in.ID, err)
		}
		paths[in.ID] = p
		got, err := m.Read(p, "cpu.max")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(got) != "5000 1000000" {
			t.Errorf("%s: cpu.max = %q, want \"5000 1000000\" (0.005 CPU)", in.ID, strings.TrimSpace(got))
		}
		dir, err := os.Open(filepath.Join(cgroup.HostMount, p.String()))
		if err != nil {
			t.Fatal(err)
		}
		cmd := testenv.StartHelperWith(t, "spin:2", &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}, "GOMAXPROCS=2")
		dir.Close()
		procs = append(procs, cmd)
	}
	time.Sleep(time.Second)
	got := measure(t, m, ins, paths, 6*time.Second)
	for _, in := range ins {
		g := got[in.ID]
		t.Logf("%s on %s: plan 0.005 CPU, got %.4f", in.ID, hostDesc(), g)
		if g < 0.0025 || g > 0.0075 {
			t.Errorf("%s: got %.4f CPU with two busy threads, want 0.005 (0.0025..0.0075)", in.ID, g)
		}
	}
}
