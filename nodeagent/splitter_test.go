package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestSplitInAgent: under the split scheme the agent makes the children
// of instances holding a fragment and whole CPUs (after the container's own
// files), sweeps threads into them every window without churn, sweeps in
// new threads, re-asserts children that drifted, and tears them down (threads
// back first) when the instance no longer holds a fragment.
func TestSplitInAgent(t *testing.T) {
	a, _, cg := newSplitAgent(t)
	ctx := context.Background()
	ia := splitInst("a", map[cpuset.CPUID]int{0: 100, 2: 70})
	ib := splitInst("b", map[cpuset.CPUID]int{1: 100, 2: 30})
	ic := splitInst("c", map[cpuset.CPUID]int{3: 50}) // a fragment alone: no children
	a.SetDesired([]model.Instance{ia, ib, ic})
	settle(t, a)
	path := map[string]string{}
	for id, r := range a.records {
		path[id] = r.cgroup.String()
	}
	want := map[string]string{
		path["a"] + "/pinfold-whole": "0 max", path["a"] + "/pinfold-frag": "2 70000",
		path["b"] + "/pinfold-whole": "1 max", path["b"] + "/pinfold-frag": "2 30000",
	}
	got := func() map[string]string {
		cg.tmu.Lock()
		defer cg.tmu.Unlock()
		out := map[string]string{}
		for p, s := range cg.groups {
			q := "max"
			if s.CPUMax.Quota != cgroup.Max {
				q = fmt.Sprint(s.CPUMax.Quota)
			}
			out[p] = s.CPUs.String() + " " + q
		}
		return out
	}
	if diff := cmp.Diff(want, got()); diff != "" {
		t.Fatalf("children after the first passes (-want +got):\n%s", diff)
	}
	// The container's files come before its children's in a pass.
	a.Reconcile(ctx)
	calls := cg.take()
	if i, j := slices.Index(calls, "apply "+path["a"]), slices.Index(calls, "threaded "+path["a"]+"/pinfold-whole"); i < 0 || j < i {
		t.Errorf("a pass's calls %v: want the container's apply before its children", calls)
	}

	// 2 busy threads in a (1 whole CPU): one each; b's 1 thread: whole.
	cg.add(path["a"], 11, 12)
	cg.add(path["b"], 21)
	cg.add(path["c"], 31)
	if err := a.splitTick(ctx); err != nil {
		t.Fatal(err)
	}
	for tid, want := range map[int]string{11: path["a"] + "/pinfold-whole", 12: path["a"] + "/pinfold-frag", 21: path["b"] + "/pinfold-whole", 31: path["c"]} {
		if got := cg.where(tid); got != want {
			t.Errorf("thread %d in %s, want %s", tid, got, want)
		}
	}
	// A `docker exec` lands in the container's cgroup: swept into a child.
	cg.take()
	cg.add(path["a"], 13)
	if err := a.splitTick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cg.where(13); got != path["a"]+"/pinfold-whole" {
		t.Errorf("exec'd thread 13 in %s, want a's pinfold-whole", got)
	}
	// Nothing changed: no thread moves.
	cg.take()
	if err := a.splitTick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range cg.take() {
		if strings.HasPrefix(c, "move ") {
			t.Errorf("a steady window moved a thread: %s", c)
		}
	}

	// A child written behind the agent's back is re-asserted by the next pass.
	cg.tmu.Lock()
	cg.groups[path["a"]+"/pinfold-frag"] = cgroup.Spec{Path: cgroup.MustParsePath(path["a"] + "/pinfold-frag"), CPUs: cgroup.CPUsOf(cpuset.MustParseCPUs("0-3")), CPUMax: &cgroup.CPUMax{Quota: cgroup.Max}}
	cg.tmu.Unlock()
	a.Reconcile(ctx)
	if diff := cmp.Diff(want, got()); diff != "" {
		t.Errorf("children after a drifted one and a pass (-want +got):\n%s", diff)
	}

	// a resized to two whole CPUs: its children go, threads back first.
	ia.CPUs, ia.Generation = map[cpuset.CPUID]int{0: 100, 4: 100}, 2
	a.SetDesired([]model.Instance{ia, ib, ic})
	settle(t, a)
	cg.take()
	if err := a.splitTick(ctx); err != nil {
		t.Fatal(err)
	}
	calls = cg.take()
	for _, tid := range []int{11, 12, 13} {
		if got := cg.where(tid); got != path["a"] {
			t.Errorf("after the resize thread %d in %s, want a's own cgroup", tid, got)
		}
	}
	if _, ok := got()[path["a"]+"/pinfold-frag"]; ok {
		t.Errorf("a's pinfold-frag left after a resize off its fragment; calls %v", calls)
	}
	if _, ok := got()[path["a"]+"/pinfold-whole"]; ok {
		t.Errorf("a's pinfold-whole left after a resize off its fragment; calls %v", calls)
	}
	if i, j := slices.Index(calls, "move 12 "+path["a"]), slices.Index(calls, "remove "+path["a"]+"/pinfold-frag"); i < 0 || j < i {
		t.Errorf("teardown calls %v: want thread 12 moved back before pinfold-frag is removed", calls)
	}
	// b still split.
	if got := cg.where(21); got != path["b"]+"/pinfold-whole" {
		t.Errorf("b's thread in %s after a's resize", got)
	}
	// Torn down once: later windows do not look again.
	if err := a.splitTick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range cg.take() {
		if strings.Contains(c, path["a"]) {
			t.Errorf("a window after the teardown touched a: %s", c)
		}
	}
}

// TestSplitSchemeOffLeavesNoChildren: under another scheme (capped) no
// child is made, and a look for leftovers costs nothing once done.
func TestSplitSchemeOffLeavesNoChildren(t *testing.T) {
	eng, cg := newFakeEngine(), newFakeThreaded()
	a := New(Config{Host: "h", Scheme: SchemeCapped}, &fakePlanner{}, eng, cg, topologytest.Laptop().Topology(), nil)
	a.SetDesired([]model.Instance{splitInst("a", map[cpuset.CPUID]int{0: 100, 2: 70})})
	settle(t, a)
	if err := a.splitTick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(cg.groups) != 0 {
		t.Errorf("capped scheme made children: %v", cg.groups)
	}
}

func TestSplitOf(t *testing.T) {
	h := Host{CPUs: cpuset.MustParseCPUs("0-7"), ShareBase: 100}
	tests := []struct {
		name   string
		scheme Scheme
		bind   bool
		cpus   map[cpuset.CPUID]int
		want   string // "" = not split; else "whole/shared/frag"
	}{
		{"1 whole + 0.7", SchemeSplit, true, map[cpuset.CPUID]int{0: 100, 2: 70}, "0/2/70"},
		{"2 whole + 0.3", SchemeSplit, true, map[cpuset.CPUID]int{0: 100, 1: 100, 5: 30}, "0-1/5/30"},
		{"capped scheme", SchemeCapped, true, map[cpuset.CPUID]int{0: 100, 2: 70}, ""},
		{"fragment alone", SchemeSplit, true, map[cpuset.CPUID]int{2: 70}, ""},
		{"whole CPUs only", SchemeSplit, true, map[cpuset.CPUID]int{0: 100, 1: 100}, ""},
		{"not bound", SchemeSplit, false, map[cpuset.CPUID]int{0: 100, 2: 70}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := model.Instance{Allocation: model.Allocation{Bind: tt.bind, CPUs: tt.cpus}}
			sp, ok := SplitOf(h, in, tt.scheme)
			got := ""
			if ok {
				got = fmt.Sprintf("%s/%s/%d", sp.Whole, sp.Shared, sp.Frag)
			}
			if got != tt.want {
				t.Errorf("SplitOf(%v, %s) = %q, want %q", tt.cpus, tt.scheme, got, tt.want)
			}
		})
	}
	// The children's specs: whole uncapped, frag capped at its pieces; a
	// fine fragment on the long period.
	specs, err := Split{Whole: cpuset.MustParseCPUs("0"), Shared: cpuset.MustParseCPUs("2"), Frag: 5}.Specs(cgroup.MustParsePath("docker/c1"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if s := specs[0]; s.Path.String() != "docker/c1/pinfold-whole" || s.CPUs.String() != "0" || s.CPUMax.Quota != cgroup.Max {
		t.Errorf("whole spec = %+v", s)
	}
	if s := specs[1]; s.Path.String() != "docker/c1/pinfold-frag" || s.CPUs.String() != "2" || s.CPUMax.Quota != 5000 || s.CPUMax.Period != 1000000 {
		t.Errorf("frag spec = %+v %+v", s, *s.CPUMax)
	}
	// Map under split is capped's: cpuset whole ∪ shared, cpu.max the plan.
	w := Map(h, model.Instance{Allocation: model.Allocation{Bind: true, NUMANode: -1, CPUs: map[cpuset.CPUID]int{0: 100, 2: 70}}}, SchemeSplit, h.CPUs)
	if w.Resources.CPUs.String() != "0,2" || w.Resources.CPUQuota != 170000 || w.CPUWeight != 70 {
		t.Errorf("Map(split) = %+v", w)
	}
}

func TestStatThread(t *testing.T) {
	tests := []struct {
		stat string
		want threadStat
		ok   bool
	}{
		{"1234 (spin) R 1 1234 1234 0", threadStat{Runnable: true}, true},
		{"1234 (a b) c) S 1 1234", threadStat{}, true},
		{"1234 (worker)) R 1", threadStat{Runnable: true}, true},
		{"garbage", threadStat{}, false},
		{"1 (x)", threadStat{}, false},
		// A real line (Linux 6.1): utime 1713, stime 3.
		{"987 (pinfold x) S 1 987 987 0 -1 4194368 250 0 0 0 1713 3 0 0 20 0 7 0 1234 0 0", threadStat{Ticks: 1716}, true},
		{"987 (p) R 1 987 987 0 -1 4194368 250 0 0 0 x 3 0 0", threadStat{Runnable: true}, true},
		{"987 (p) R 1 987 987 0 -1 4194368 250 0 0 0 99999999999999999999 3 0", threadStat{Runnable: true}, true},
		{"987 (p) RS 1 987 987 0 -1 4194368 250 0 0 0 5 3 0\n", threadStat{Ticks: 8}, true},
		{"987 (p)\tR\t1 987 987 0 -1 4194368 250 0 0 0 5 3\n", threadStat{Runnable: true, Ticks: 8}, true},
	}
	for _, tt := range tests {
		if got, ok := statThread(tt.stat); got != tt.want || ok != tt.ok {
			t.Errorf("statThread(%q) = %+v, %v, want %+v, %v", tt.stat, got, ok, tt.want, tt.ok)
		}
		if got, ok := statThread([]byte(tt.stat)); got != tt.want || ok != tt.ok {
			t.Errorf("statThread([]byte(%q)) = %+v, %v, want %+v, %v", tt.stat, got, ok, tt.want, tt.ok)
		}
	}
}

// TestProcThreadState: a thread's state is read from its own entry,
// <tid>/task/<tid>/stat, not from <tid>/stat (for a thread that is not its
// process's leader, the whole process's, summed over every thread by the
// kernel: O(threads) a read). Here the two disagree, as they do for a
// sleeping thread of a busy process.
func TestProcThreadState(t *testing.T) {
	root := t.TempDir()
	write := func(path, stat string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "41", "stat"), "41 (java) R 1 40 40 0")
	write(filepath.Join(root, "41", "task", "41", "stat"), "41 (java) S 1 40 40 0")
	write(filepath.Join(root, "42", "stat"), "42 (java) S 1 40 40 0")
	write(filepath.Join(root, "42", "task", "42", "stat"), "42 (java) R 1 40 40 0")
	state := procThreadState(root)
	for _, tc := range []struct {
		tid          int
		runnable, ok bool
	}{{41, false, true}, {42, true, true}, {43, false, false}} {
		if st, ok := state(tc.tid); st.Runnable != tc.runnable || ok != tc.ok {
			t.Errorf("thread %d: runnable %v, ok %v; want %v, %v (read from %s/%d/task/%d/stat)", tc.tid, st.Runnable, ok, tc.runnable, tc.ok, root, tc.tid, tc.tid)
		}
	}
}

// TestSplitWait: the wait after a sweep is SplitEvery, or splitCostFactor
// times what the sweep took when that is longer: a sweep over thousands
// of threads stays under 1 % of one CPU (issue 35 item 6).
func TestSplitWait(t *testing.T) {
	for _, tc := range []struct{ every, took, want time.Duration }{
		{250 * time.Millisecond, time.Millisecond, 250 * time.Millisecond},
		{250 * time.Millisecond, 2500 * time.Microsecond, 250 * time.Millisecond},
		{250 * time.Millisecond, 2600 * time.Microsecond, 257400 * time.Microsecond},
		{250 * time.Millisecond, 22 * time.Millisecond, 2178 * time.Millisecond},
		{250 * time.Millisecond, 220 * time.Millisecond, 21780 * time.Millisecond},
		{time.Second, 10 * time.Millisecond, time.Second},
	} {
		if got := splitWait(tc.every, tc.took); got != tc.want {
			t.Errorf("splitWait(%s, %s) = %s, want %s", tc.every, tc.took, got, tc.want)
		}
		if got := splitWait(tc.every, tc.took); float64(tc.took)/float64(tc.took+got) > 0.01 {
			t.Errorf("splitWait(%s, %s) = %s: the sweep would use more than 1 %% of a CPU", tc.every, tc.took, got)
		}
	}
}

// TestSplitEvery: the sweep runs every --split-every under the split
// scheme; under the others, which have only leftovers to look for, once a
// second at most (it woke four times a second under every scheme).
func TestSplitEvery(t *testing.T) {
	for _, tc := range []struct {
		scheme      Scheme
		every, want time.Duration
	}{
		{SchemeSplit, 250 * time.Millisecond, 250 * time.Millisecond},
		{SchemeSplit, 5 * time.Second, 5 * time.Second},
		{SchemeCapped, 250 * time.Millisecond, time.Second},
		{SchemeCapped, 5 * time.Second, 5 * time.Second},
		{SchemeWeight, 100 * time.Millisecond, time.Second},
	} {
		if got := splitEvery(tc.scheme, tc.every); got != tc.want {
			t.Errorf("splitEvery(%s, %s) = %s, want %s", tc.scheme, tc.every, got, tc.want)
		}
	}
}

// TestSplitChildrenGoneAfterRestart: a container restarted at the same
// cgroup path has lost its children; the sweeps before the next second's
// re-assertion report nothing (they logged "split sweep … no group" four
// times a second) and that re-assertion makes the children again and
// sweeps the threads into them.
func TestSplitChildrenGoneAfterRestart(t *testing.T) {
	a, cg, p := splitTwoThreads(t)
	ctx := context.Background()
	// The restart: the kernel's cgroup is new, its children gone, the new
	// process's threads in the container's cgroup itself.
	cg.tmu.Lock()
	for _, c := range []string{p + "/pinfold-whole", p + "/pinfold-frag"} {
		delete(cg.groups, c)
		delete(cg.threads, c)
	}
	cg.tmu.Unlock()
	cg.add(p, 21, 22)
	for i := range 3 {
		if err := a.splitPass(ctx, false); err != nil {
			t.Errorf("sweep %d after the restart: %v, want nothing to report", i+1, err)
		}
	}
	if err := a.splitPass(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, tid := range []int{21, 22} {
		if got := cg.where(tid); got != p+"/pinfold-whole" && got != p+"/pinfold-frag" {
			t.Errorf("thread %d in %q after the re-assertion, want one of a's children", tid, got)
		}
	}
}

// TestSplitResizeSequence: an instance resized on and off its fragment
// more than once (1.7 → 2.5 → 2.0 → 0.3 → 1.7 → 2.0) has exactly the
// children its current size needs after each pass and sweep: the look for
// leftovers is made again once the instance was split again (before, it
// was made once per cgroup, so the second resize to 2.0 kept 1.7's
// children: pinfold-whole on CPU 0 alone and pinfold-frag capped at 0.7).
func TestSplitResizeSequence(t *testing.T) {
	a, _, cg := newSplitAgent(t)
	ctx := context.Background()
	in := splitInst("a", map[cpuset.CPUID]int{0: 100, 2: 70})
	a.SetDesired([]model.Instance{in})
	settle(t, a)
	p := a.records["a"].cgroup.String()
	cg.add(p, 11, 12, 13)
	children := func() []string {
		cg.tmu.Lock()
		defer cg.tmu.Unlock()
		var out []string
		for g, s := range cg.groups {
			q := "max"
			if s.CPUMax != nil && s.CPUMax.Quota != cgroup.Max {
				q = fmt.Sprint(s.CPUMax.Quota)
			}
			out = append(out, strings.TrimPrefix(g, p+"/")+" "+s.CPUs.String()+" "+q)
		}
		slices.Sort(out)
		return out
	}
	for gen, step := range []struct {
		name string
		cpus map[cpuset.CPUID]int
		want []string
	}{
		{"1.7", map[cpuset.CPUID]int{0: 100, 2: 70}, []string{"pinfold-frag 2 70000", "pinfold-whole 0 max"}},
		{"2.5", map[cpuset.CPUID]int{0: 100, 1: 100, 2: 50}, []string{"pinfold-frag 2 50000", "pinfold-whole 0-1 max"}},
		{"2.0", map[cpuset.CPUID]int{0: 100, 1: 100}, nil},
		{"0.3", map[cpuset.CPUID]int{2: 30}, nil},
		{"1.7 again", map[cpuset.CPUID]int{0: 100, 2: 70}, []string{"pinfold-frag 2 70000", "pinfold-whole 0 max"}},
		{"2.0 again", map[cpuset.CPUID]int{0: 100, 1: 100}, nil},
	} {
		in.CPUs, in.Generation = step.cpus, int64(gen+2)
		a.SetDesired([]model.Instance{in})
		settle(t, a)
		for range 2 {
			if err := a.splitTick(ctx); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		if diff := cmp.Diff(step.want, children()); diff != "" {
			t.Errorf("after the resize to %s, children (-want +got):\n%s", step.name, diff)
		}
		if step.want == nil {
			for _, tid := range []int{11, 12, 13} {
				if got := cg.where(tid); got != p {
					t.Errorf("after the resize to %s thread %d in %s, want the container's cgroup", step.name, tid, got)
				}
			}
		}
	}
	// A pass holding an older desired state (still 1.7) re-asserts the
	// children after the sweep looked: the next sweep looks again.
	old := in
	old.CPUs = map[cpuset.CPUID]int{0: 100, 2: 70}
	a.mu.Lock()
	h := a.host
	a.mu.Unlock()
	if err := a.splitEnsure(ctx, h, old, cgroup.MustParsePath(p)); err != nil {
		t.Fatal(err)
	}
	if err := a.splitTick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := children(); len(got) != 0 {
		t.Errorf("children re-made by a pass with an older desired state were left: %v", got)
	}
}

// TestSplitRefusedNotRetriedEverySweep: children the kernel refuses (a
// container whose cgroup holds domain children of its own, e.g. systemd
// inside) are tried again by the pass and by the sweep once a second, not
// every SplitEvery: before, each 250-ms sweep made and undid them again and
// logged a warning, four times a second per such container.
func TestSplitRefusedNotRetriedEverySweep(t *testing.T) {
	a, _, cg := newSplitAgent(t)
	ctx := context.Background()
	cg.refuse = fmt.Errorf("write cgroup.type: %w", syscall.EOPNOTSUPP)
	a.SetDesired([]model.Instance{splitInst("a", map[cpuset.CPUID]int{0: 100, 2: 70})})
	for range 2 {
		a.Reconcile(ctx)
	}
	tries := func() int {
		n := 0
		for _, c := range cg.take() {
			if strings.HasPrefix(c, "threaded ") {
				n++
			}
		}
		return n
	}
	tries()
	for range 3 { // the sweeps between two re-assertions
		_ = a.splitPass(ctx, false)
	}
	if n := tries(); n != 0 {
		t.Errorf("3 sweeps between re-assertions tried the refused children %d times, want 0", n)
	}
	if err := a.splitPass(ctx, true); err == nil {
		t.Error("the once-a-second sweep did not report the refusal")
	}
	if n := tries(); n == 0 {
		t.Error("the once-a-second sweep did not try the refused children again")
	}
	// Once the kernel takes them, the sweeps between re-assertions sweep.
	cg.refuse = nil
	if err := a.splitPass(ctx, true); err != nil {
		t.Fatal(err)
	}
	p := a.records["a"].cgroup.String()
	cg.add(p, 11, 12)
	if err := a.splitPass(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := cg.where(12); got != p+"/pinfold-frag" {
		t.Errorf("thread 12 in %s after a sweep, want a's pinfold-frag", got)
	}
}

// TestSplitSweepCountsBusyThreads: a thread found asleep that used CPU
// since the last sweep (splitBusyTicks) counts as runnable: a Go
// runtime's busy thread caught in the instant it hands its P over is not
// moved out of pinfold-frag for the helper thread that runs meanwhile (in
// the guest, without this, 4-19 sweeps a window moved threads so with 2
// busy goroutines each; with it, none). A thread that used less stays
// asleep to the sweep.
func TestSplitSweepCountsBusyThreads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ran   uint64        // ticks thread 12 used between the two sweeps
		gap   time.Duration // between the two sweeps (0: at once)
		moved bool
	}{
		{"busy since the last sweep: stays", splitBusyTicks + 3, 0, false},
		{"just enough: stays", splitBusyTicks, 0, false},
		{"next to nothing: treated as asleep", splitBusyTicks - 1, 0, true},
		// The sweep paced to a second (splitWait): as many ticks per
		// SplitEvery are needed (the guest's helper thread with 44 ms of a
		// second stood in for a busy one).
		{"a paced second, a helper's few ticks: asleep", splitBusyTicks + 2, time.Second, true},
		{"a paced second, busy: stays", 4 * splitBusyTicks, time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, cg, p := splitTwoThreads(t)
			if tc.gap > 0 {
				at := time.Now().Add(tc.gap)
				a.now = func() time.Time { return at }
			}
			ctx := context.Background()
			if got := cg.where(12); got != p+"/pinfold-frag" {
				t.Fatalf("thread 12 in %s after the first sweep, want pinfold-frag", got)
			}
			// The dance: 12 asleep for an instant, a helper (13) running.
			cg.tmu.Lock()
			cg.runnable[12] = false
			cg.ticks[12] += tc.ran
			cg.tmu.Unlock()
			cg.add(p+"/pinfold-whole", 13)
			cg.take()
			if err := a.splitPass(ctx, false); err != nil {
				t.Fatal(err)
			}
			var moves []string
			for _, c := range cg.take() {
				if strings.HasPrefix(c, "move ") {
					moves = append(moves, c)
				}
			}
			if tc.moved != (len(moves) > 0) {
				t.Errorf("thread 12 used %d ticks since the last sweep: moves %v, want moved %t", tc.ran, moves, tc.moved)
			}
		})
	}
}

// TestSplitSweepSkipsBusyInstances: a sweep whose instance's children
// both used their share since the last one (and whose container's own
// cgroup holds no thread) reads no thread's state (issue 35 item 6: the
// sweep read 2,000 /proc files a round at 50 × 40 threads); nor does one
// whose fragment's child idles while no thread of the whole child waited
// for a CPU (one busy thread of a 1.7 plan). Controls: the fragment's
// child idle with a thread waiting, or with no pressure file to say, or
// a thread in the container's own cgroup, and the threads are read.
func TestSplitSweepSkipsBusyInstances(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wholeTick uint64 // ticks threads 11 (whole) and 12 (frag) use between sweeps
		fragTick  uint64
		waitUsec  uint64 // µs a thread of the whole child waits between sweeps
		noPSI     bool   // the kernel has no cpu.pressure files
		newThread bool   // a thread appears in the container's own cgroup
		wantReads bool
	}{
		{"both busy", 25, 18, 0, false, false, false},
		{"the fragment's child idle, nothing waits", 25, 0, 0, false, false, false},
		{"control: the fragment's child idle, a thread waits", 25, 0, 200_000, false, false, true},
		{"control: the fragment's child idle, no pressure files", 25, 0, 0, true, false, true},
		{"control: a new thread in the container", 25, 18, 0, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, cg, p := splitTwoThreads(t)
			if !tc.noPSI {
				cg.mu.Lock()
				cg.waited = map[string]uint64{}
				cg.mu.Unlock()
			}
			reads := 0
			state := a.threadState
			a.threadState = func(tid int) (threadStat, bool) { reads++; return state(tid) }
			// sweep is one interval: the threads use their ticks, then a
			// sweep (without the children's re-assertion).
			sweep := func() {
				cg.tmu.Lock()
				cg.ticks[11] += tc.wholeTick
				cg.ticks[12] += tc.fragTick
				cg.tmu.Unlock()
				if !tc.noPSI {
					cg.mu.Lock()
					cg.waited[p+"/"+SplitWholeName] += tc.waitUsec
					cg.mu.Unlock()
				}
				if err := a.splitPass(context.Background(), false); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				sweep()
			}
			reads = 0
			if tc.newThread {
				cg.add(p, 13)
			}
			sweep()
			if (reads > 0) != tc.wantReads {
				t.Errorf("%d thread states read in a sweep, want reads %v", reads, tc.wantReads)
			}
		})
	}
}
