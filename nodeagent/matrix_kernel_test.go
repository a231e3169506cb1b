//go:build linux && kernel

package nodeagent

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/test/testenv"
	"github.com/pinfold/pinfold/test/workload"
)

// The workload matrix (package workload) measured under each candidate
// mechanism for a shared CPU, side by side: two instances a (CPU w0 + 0.7
// of CPU s) and b (CPU w1 + 0.3 of CPU s) per slot of 3 CPUs, up to 4
// slots at once on a host with 16 CPUs. Each cell reports, per instance,
// the CPU it got, its throttled periods, what it saw (GOMAXPROCS, a new
// thread's affinity, a process started in it as `docker exec` would),
// whether its cgroup tree can be listed as `docker top` lists it, and
// whether a load that makes its own cgroup could.
//
// PINFOLD_MATRIX=1 runs it (the kernel tier's default run is the gated
// subset in TestKernelMatrixBound); PINFOLD_MATRIX_CANDIDATES,
// _CASES (substrings, comma-separated), _REPS, _SETTLE, _WINDOW, _BUDGET
// (seconds: no cell starts after it) narrow it.

// matrixCandidate is one mechanism: how an instance's cgroup is set up and
// which of the agent's loops run.
type matrixCandidate struct {
	name   string
	scheme Scheme // the agent's mapping it starts from
	loop   string // "split", "share" or ""
	burst  bool   // cpu.max.burst = the quota
	pool   bool   // cpuset = the slot's CPUs, weight ∝ the plan
	// mid: cpu.weight ∝ √(fragment × plan), between the capped mapping's
	// ∝ fragment (the smaller instance's threads flee the shared CPU) and
	// ∝ plan (the larger one loses its share of it).
	mid   bool
	nocap bool // cpu.max = max (a control)
	// every is the share loop's window (0: matrixShareEvery).
	every time.Duration
}

const matrixShareEvery = 500 * time.Millisecond

var matrixCandidates = []matrixCandidate{
	{name: "split", scheme: SchemeSplit, loop: "split"},
	{name: "capped", scheme: SchemeCapped},
	{name: "capped+loop", scheme: SchemeCapped, loop: "share"},
	{name: "capped+burst", scheme: SchemeCapped, burst: true},
	{name: "pool", scheme: SchemeCapped, pool: true},
	{name: "pool+burst", scheme: SchemeCapped, pool: true, burst: true},
	{name: "capped+loop1s", scheme: SchemeCapped, loop: "share", every: time.Second},
	{name: "capped+burst+loop1s", scheme: SchemeCapped, loop: "share", burst: true, every: time.Second},
	{name: "capped-mid", scheme: SchemeCapped, mid: true},
	{name: "capped-mid+burst", scheme: SchemeCapped, mid: true, burst: true},
	// A control, not a candidate: capped with every cpu.max lifted.
	{name: "capped-nocap", scheme: SchemeCapped, nocap: true},
}

// matrixInstance is one instance's figures in one cell.
type matrixInstance struct {
	Got, Throttled float64
	Children       map[string]float64
	Seen           workload.Seen
	SeenErr        string
	Probe          string // "gomaxprocs=N aff=N" of a process started in it
	Top            string // "ok" or the error listing its processes
}

type matrixCell struct {
	Case      workload.Case
	Candidate string
	Slot, Rep int
	A, B      matrixInstance
	Warns     []string
}

func envList(name string) []string {
	if v := os.Getenv(name); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

func envDur(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || !(s > 0 && s <= 3600) {
			t.Fatalf("%s = %q: want seconds, more than 0 and at most 3600", name, v)
		}
		return time.Duration(s * float64(time.Second))
	}
	return def
}

func TestKernelWorkloadMatrix(t *testing.T) {
	if os.Getenv("PINFOLD_MATRIX") == "" {
		t.Skip("PINFOLD_MATRIX unset: the whole matrix runs from hack/native-kernel.sh --matrix")
	}
	testenv.RequireKernel(t)
	// The controls run only when named.
	cands := slices.DeleteFunc(slices.Clone(matrixCandidates), func(c matrixCandidate) bool { return c.nocap })
	if want := envList("PINFOLD_MATRIX_CANDIDATES"); want != nil {
		var names []string
		for _, c := range matrixCandidates {
			names = append(names, c.name)
		}
		for _, w := range want {
			if !slices.Contains(names, w) {
				t.Fatalf("PINFOLD_MATRIX_CANDIDATES: %q is no candidate (want some of %s)", w, strings.Join(names, ","))
			}
		}
		cands = slices.DeleteFunc(slices.Clone(matrixCandidates), func(c matrixCandidate) bool { return !slices.Contains(want, c.name) })
	}
	cases := slices.Clone(workload.Matrix)
	if want := envList("PINFOLD_MATRIX_CASES"); want != nil {
		cases = slices.DeleteFunc(cases, func(c workload.Case) bool {
			return !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(c.Name, w) })
		})
	}
	reps := 1
	if v := os.Getenv("PINFOLD_MATRIX_REPS"); v != "" {
		var err error
		if reps, err = strconv.Atoi(v); err != nil || reps < 1 || reps > 100 {
			t.Fatalf("PINFOLD_MATRIX_REPS = %q: want a whole number 1..100", v)
		}
	}
	settle := envDur(t, "PINFOLD_MATRIX_SETTLE", 2500*time.Millisecond)
	window := envDur(t, "PINFOLD_MATRIX_WINDOW", 4*time.Second)
	budget := envDur(t, "PINFOLD_MATRIX_BUDGET", time.Hour)
	if len(cases) == 0 {
		t.Fatalf("PINFOLD_MATRIX_CASES = %q matches no case of the matrix", os.Getenv("PINFOLD_MATRIX_CASES"))
	}
	cells := runMatrix(t, cases, cands, reps, settle, window, budget)
	fmt.Print(matrixTable(cells, cases, cands))
}

// matrixSlots are the CPU triples (w0, w1, shared) cells run on at once:
// one per 4 CPUs (the fourth left to the system and the agent), at most 4.
func matrixSlots(host cpuset.CPUs) [][3]cpuset.CPUID {
	var out [][3]cpuset.CPUID
	for base := 0; len(out) < 4; base += 4 {
		c := [3]cpuset.CPUID{cpuset.CPUID(base), cpuset.CPUID(base + 1), cpuset.CPUID(base + 2)}
		if !host.Contains(c[0]) || !host.Contains(c[1]) || !host.Contains(c[2]) || !host.Contains(cpuset.CPUID(base+3)) {
			break
		}
		out = append(out, c)
	}
	if len(out) == 0 && host.Contains(0) && host.Contains(1) && host.Contains(2) {
		out = append(out, [3]cpuset.CPUID{0, 1, 2})
	}
	return out
}

func runMatrix(t *testing.T, cases []workload.Case, cands []matrixCandidate, reps int, settle, window, budget time.Duration) []matrixCell {
	root, err := cgroup.OpenHost("")
	if err != nil {
		t.Fatal(err)
	}
	slots := matrixSlots(root.HostCPUs())
	root.Close()
	if len(slots) == 0 {
		t.Fatalf("the matrix needs CPUs 0-2")
	}
	type job struct {
		c    workload.Case
		cand matrixCandidate
		rep  int
	}
	var jobs []job
	for rep := range reps {
		for _, c := range cases {
			for _, cand := range cands {
				jobs = append(jobs, job{c, cand, rep})
			}
		}
	}
	fmt.Printf("matrix: %d cells (%d cases x %d candidates x %d reps) on %d slots, settle %s, window %s, %s, %d CPUs\n",
		len(jobs), len(cases), len(cands), reps, len(slots), settle, window, unameR(), root.HostCPUs().Len())
	deadline := time.Now().Add(budget)
	ch := make(chan job)
	var mu sync.Mutex
	var cells []matrixCell
	var wg sync.WaitGroup
	for si, slot := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				cell := matrixRun(t, j.c, j.cand, si, slot, settle, window)
				cell.Rep = j.rep
				mu.Lock()
				cells = append(cells, cell)
				fmt.Println(cellLine(cell))
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		if time.Now().After(deadline) {
			fmt.Println("matrix: budget spent, the cells left are not run")
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
	return cells
}

func unameR() string {
	var u syscall.Utsname
	syscall.Uname(&u)
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return "Linux " + string(b)
}

func cellLine(c matrixCell) string {
	f := func(m matrixInstance) string {
		var ch []string
		for _, k := range slices.Sorted(maps.Keys(m.Children)) {
			ch = append(ch, fmt.Sprintf("%s=%.3f", k, m.Children[k]))
		}
		return fmt.Sprintf("got=%.3f thr=%.2f %s seen[%s%s] probe[%s] top=%s", m.Got, m.Throttled, strings.Join(ch, " "),
			m.Seen, m.SeenErr, m.Probe, strings.ReplaceAll(m.Top, " ", "_"))
	}
	return fmt.Sprintf("cell case=%q cand=%s slot=%d rep=%d | a %s | b %s | warns=%d %s", c.Case.Name, c.Candidate, c.Slot, c.Rep,
		f(c.A), f(c.B), len(c.Warns), strings.Join(c.Warns, "; "))
}

// matrixRun runs one cell on slot and returns its figures.
func matrixRun(t *testing.T, c workload.Case, cand matrixCandidate, si int, slot [3]cpuset.CPUID, settle, window time.Duration) matrixCell {
	cell := matrixCell{Case: c, Candidate: cand.name, Slot: si}
	parent := fmt.Sprintf("pinfold-matrix-%d-%d-%d", os.Getpid(), si, time.Now().UnixNano()%1e9)
	m, err := cgroup.OpenHost(parent)
	if err != nil {
		t.Error(err)
		return cell
	}
	defer func() {
		m.Close()
		removeTree(filepath.Join(cgroup.HostMount, parent))
	}()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	h := Host{CPUs: m.HostCPUs(), Mems: m.HostMems(), ShareBase: 100}
	ins := []model.Instance{
		{ID: "a", Allocation: model.Allocation{Bind: true, NUMANode: -1, Memory: 512 << 20, CPUs: map[cpuset.CPUID]int{slot[0]: 100, slot[2]: 70}}},
		{ID: "b", Allocation: model.Allocation{Bind: true, NUMANode: -1, Memory: 512 << 20, CPUs: map[cpuset.CPUID]int{slot[1]: 100, slot[2]: 30}}},
	}
	loads := map[string]workload.Load{"a": c.A, "b": c.B}
	warns := &sweepCounter{}
	every := cand.every
	if every == 0 {
		every = matrixShareEvery
	}
	a := &Agent{cfg: Config{Scheme: cand.scheme, SplitEvery: DefaultSplitEvery, ShareEvery: every}, cg: m,
		log: slog.New(warns), host: h, desired: ins, records: map[string]*record{}, threadState: procThreadState("/proc"),
		shares: NewShareEnforcer(m, nil)}
	paths := map[string]cgroup.Path{}
	var procs []*exec.Cmd
	reports := map[string]string{}
	tmp, err := os.MkdirTemp("", "pinfold-matrix-")
	if err != nil {
		t.Error(err)
		return cell
	}
	defer os.RemoveAll(tmp)
	// Registered before any load starts: whatever fails below, every load
	// started is killed and waited for.
	defer func() {
		stop()
		for _, p := range paths {
			os.WriteFile(filepath.Join(cgroup.HostMount, p.String(), "cgroup.kill"), []byte("1"), 0o644)
		}
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
		deadline := time.Now().Add(5 * time.Second)
		for _, p := range paths {
			for time.Now().Before(deadline) && !cgroupEmpty(filepath.Join(cgroup.HostMount, p.String())) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	for _, in := range ins {
		p := cgroup.MustParsePath(parent + "/" + in.ID)
		paths[in.ID] = p
		want := Map(h, in, cand.scheme, h.CPUs)
		spec := reassertSpec(p, want, nil)
		if cand.pool {
			all := cpuset.Of(slot[:]...)
			spec.CPUs = &all
			spec.CPUWeight = weightOf(in.Pieces(), h.ShareBase)
		}
		if cand.mid {
			frag := 0
			for _, p := range in.CPUs {
				if p < h.ShareBase {
					frag = p
				}
			}
			spec.CPUWeight = uint64(math.Round(math.Sqrt(float64(frag * in.Pieces()))))
		}
		if cand.nocap {
			spec.CPUMax = &cgroup.CPUMax{Quota: cgroup.Max}
		}
		if cand.burst && spec.CPUMax != nil && spec.CPUMax.Quota > 0 {
			spec.CPUMaxBurst = cgroup.Uint64(uint64(spec.CPUMax.Quota))
		}
		if err := m.Apply(ctx, spec); err != nil {
			t.Errorf("%s %s: %v", cand.name, in.ID, err)
			return cell
		}
		a.records[in.ID] = &record{cgroup: &p}
		reports[in.ID] = filepath.Join(tmp, in.ID+".seen")
		cmd, err := startLoad(p, loads[in.ID], reports[in.ID])
		if err != nil {
			t.Errorf("%s %s: %v", cand.name, in.ID, err)
			return cell
		}
		procs = append(procs, cmd)
	}
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }() // before the loads are killed: the loops end first
	switch cand.loop {
	case "split":
		wg.Add(1)
		go func() { defer wg.Done(); a.splitLoop(ctx) }()
	case "share":
		wg.Add(1)
		go func() { defer wg.Done(); a.shareLoop(ctx) }()
	}
	// A process started in each instance as `docker exec` starts one, in
	// the settle time: it reports what it saw 1.5 s later.
	time.Sleep(max(settle-2*time.Second, 0))
	probes := map[string]chan string{}
	for _, in := range ins {
		probes[in.ID] = startProbe(paths[in.ID])
	}
	time.Sleep(min(settle, 2*time.Second))
	groups := map[string]cgroup.Path{}
	for _, in := range ins {
		p := paths[in.ID]
		groups[in.ID] = p
		for _, child := range []string{SplitWholeName, SplitFragName, "inner"} {
			cp := cgroup.MustParsePath(p.String() + "/" + child)
			if m.Exists(cp) {
				groups[in.ID+"/"+child] = cp
			}
		}
	}
	stats := func() map[string]cgroup.Stats {
		out := map[string]cgroup.Stats{}
		for k, p := range groups {
			if st, err := m.Stats(p); err == nil {
				out[k] = st
			}
		}
		return out
	}
	before, t0 := stats(), time.Now()
	time.Sleep(window)
	after, wall := stats(), float64(time.Since(t0).Microseconds())
	res := map[string]*matrixInstance{"a": &cell.A, "b": &cell.B}
	for id, r := range res {
		r.Children = map[string]float64{}
		for k := range groups {
			got := float64(after[k].CPUUsageUsec-before[k].CPUUsageUsec) / wall
			switch {
			case k == id:
				r.Got = got
				if per := after[k].CPUPeriods - before[k].CPUPeriods; per > 0 {
					r.Throttled = float64(after[k].CPUThrottled-before[k].CPUThrottled) / float64(per)
				}
			case strings.HasPrefix(k, id+"/"):
				r.Children[strings.TrimPrefix(k, id+"/")] = got
			}
		}
		b, err := os.ReadFile(reports[id])
		if err != nil {
			r.SeenErr = "no report"
		} else if r.Seen, err = workload.ParseSeen(string(b)); err != nil {
			r.SeenErr = "bad report " + strings.TrimSpace(string(b))
		}
		select {
		case r.Probe = <-probes[id]:
		case <-time.After(3 * time.Second):
			r.Probe = "no answer"
		}
		r.Top = listProcs(filepath.Join(cgroup.HostMount, paths[id].String()))
	}
	warns.mu.Lock()
	cell.Warns = slices.Clone(warns.warns)
	warns.mu.Unlock()
	return cell
}

// startLoad starts l in cgroup p, as a container's first process: spin and
// bursty loads are OS threads (GOMAXPROCS = N, no async preemption), the
// Go loads have GOMAXPROCS left to the runtime.
func startLoad(p cgroup.Path, l workload.Load, report string) (*exec.Cmd, error) {
	dir, err := os.Open(filepath.Join(cgroup.HostMount, p.String()))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(cleanEnv(), "PINFOLD_HELPER=load:"+l.String(), "PINFOLD_REPORT="+report)
	if l.Kind == workload.Spin || l.Kind == workload.Bursty || l.Kind == workload.SubCG {
		// One P more than the threads: the load's reporter runs beside
		// threads that never yield.
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(l.N+1), "GODEBUG=asyncpreemptoff=1")
	}
	// Pdeathsig: a test killed (a timeout, kill -9) takes its loads along
	// instead of leaving them spinning in a leaked cgroup.
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in %s: %w", l, p, err)
	}
	return cmd, nil
}

func cleanEnv() []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GOMAXPROCS=") && !strings.HasPrefix(e, "GODEBUG=") && !strings.HasPrefix(e, "PINFOLD_") {
			out = append(out, e)
		}
	}
	return out
}

// startProbe starts a process in p's cgroup as `docker exec` does and
// returns what it printed.
func startProbe(p cgroup.Path) chan string {
	out := make(chan string, 1)
	go func() {
		dir, err := os.Open(filepath.Join(cgroup.HostMount, p.String()))
		if err != nil {
			out <- "open: " + err.Error()
			return
		}
		defer dir.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(cleanEnv(), "PINFOLD_HELPER=probe")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: syscall.SIGKILL}
		b, err := cmd.Output()
		if err != nil {
			out <- strings.ReplaceAll("probe_failed: "+err.Error(), " ", "_")
			return
		}
		out <- strings.TrimSpace(string(b))
	}()
	return out
}

// listProcs lists every process of a cgroup tree as runc does for `docker
// top`: each cgroup's cgroup.procs. "ok" or the first error.
func listProcs(dir string) string {
	res := "ok"
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return err.Error()
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if res == "ok" {
				res = err.Error()
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		f, err := os.Open(filepath.Join(path, "cgroup.procs"))
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
			}
			err = sc.Err()
			f.Close()
		}
		if err != nil && res == "ok" {
			rel, _ := filepath.Rel(dir, path)
			res = rel + ": " + err.Error()
		}
		return nil
	})
	return res
}

func cgroupEmpty(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err != nil || strings.Contains(string(b), "populated 0")
}

// removeTree removes a cgroup tree, children first.
func removeTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	for range 50 {
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
