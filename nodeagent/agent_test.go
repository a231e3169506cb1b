package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/nodeagent/checkpoint"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestRefusalAndMemoryReported: a resize Docker refuses is reported with
// the refused generation (so the planner rolls it back); a transient
// failure is not; memory.current is reported and re-sent only when it moved.
func TestRefusalAndMemoryReported(t *testing.T) {
	a, eng, cg, pl := newTestAgent(t)
	ctx := context.Background()
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	r := pl.last("db-1")
	if r == nil || r.State != "running" || r.Generation != 1 {
		t.Fatalf("after create: %+v", r)
	}
	if a := r.Applied; a == nil || a.Cpus != "0" || a.Mems != "0" || a.MemoryBytes != 128<<20 || a.CpuWeight != 100 || a.CpuQuota != 0 {
		t.Errorf("applied reported = %+v, want cpus 0, mems 0, 128 MiB, weight 100, no quota", r.Applied)
	}
	cg.mu.Lock()
	cg.mem["docker/c1"] = 40 << 20
	cg.mu.Unlock()
	settle(t, a)
	if r := pl.last("db-1"); r.MemoryCurrentBytes != 40<<20 {
		t.Errorf("memory.current reported %d, want %d", r.MemoryCurrentBytes, 40<<20)
	}
	n := len(pl.reports)
	cg.mu.Lock()
	cg.mem["docker/c1"] = 40<<20 + 4096
	cg.mu.Unlock()
	settle(t, a)
	if len(pl.reports) != n {
		t.Errorf("a 4 KiB move in memory use was reported again")
	}

	for _, tc := range []struct {
		name        string
		err         error
		wantRefused int64
	}{
		{"transient: engine unreachable", &docker.Error{Reason: "update refused by the engine", Err: &net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}}, 0},
		{"transient: engine unavailable", &docker.Error{Reason: "update refused by the engine", Err: cerrdefs.ErrUnavailable}, 0},
		{"refused: invalid resources", &docker.Error{Field: "memory", Value: "4194304", Reason: "below Docker's minimum of 6 MiB"}, 2},
		{"refused: the kernel", &cgroup.ApplyError{File: "cpu.max", Value: "1 100000", Err: errors.New("invalid argument")}, 2},
	} {
		eng.mu.Lock()
		eng.updateErr = tc.err
		eng.mu.Unlock()
		a.mu.Lock()
		a.records["db-1"].refused = 0
		a.records["db-1"].retry = retry{} // each case from a first try, not the last case's backoff
		a.mu.Unlock()
		a.SetDesired([]model.Instance{memInst(2, 64<<20)}) // above the 40 MiB in use: no shrink, the engine answers
		a.Reconcile(ctx)                                   // acts (and fails)
		a.Reconcile(ctx)                                   // reports the refusal, tries again
		r := pl.last("db-1")
		if r.RefusedGeneration != tc.wantRefused || r.Error == "" || r.Generation != 1 {
			t.Errorf("%s: report %+v, want refused generation %d with the error, observed generation 1", tc.name, r, tc.wantRefused)
		}
	}
	// The planner rolls back (generation 3, the old size): the refusal clears.
	eng.mu.Lock()
	eng.updateErr = nil
	eng.mu.Unlock()
	a.SetDesired([]model.Instance{memInst(3, 128<<20)})
	settle(t, a)
	if r := pl.last("db-1"); r.RefusedGeneration != 0 || r.Error != "" || r.Generation != 3 {
		t.Errorf("after the rollback: %+v", r)
	}
}

// TestShrinkRefusedNotRetried: a resize below what the container uses,
// whose memory cannot be reclaimed (the fake never frees any), is shrunk
// guided by pressure until the deadline, then refused: memory.high is back
// to max, Docker was never asked, the refused generation is reported, and
// the next pass does not try again.
func TestShrinkRefusedNotRetried(t *testing.T) {
	eng, cg, pl := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}, &fakePlanner{}
	a := New(Config{Host: "h", Shrink: ShrinkOptions{Every: 5 * time.Millisecond, Deadline: 100 * time.Millisecond}}, pl, eng, cg,
		topologytest.Laptop().Topology(), nil)
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	cg.mu.Lock()
	cg.mem["docker/c1"] = 40 << 20
	cg.mu.Unlock()
	settle(t, a)
	updates := eng.updates
	a.SetDesired([]model.Instance{memInst(2, 16<<20)})
	a.Reconcile(context.Background()) // shrinks, gives up
	a.Reconcile(context.Background()) // reports; does not shrink again
	a.Reconcile(context.Background())
	r := pl.last("db-1")
	if r.RefusedGeneration != 2 || !strings.Contains(r.Error, "memory shrink to 16.0 MiB stopped") || !strings.Contains(r.Error, "deadline") {
		t.Errorf("report %+v, want generation 2 refused with the shrink's reason", r)
	}
	if eng.updates != updates {
		t.Errorf("docker update called %d times for a shrink that gave up, want 0", eng.updates-updates)
	}
	cg.mu.Lock()
	h, set := cg.high["docker/c1"]
	cg.mu.Unlock()
	if !set || h != cgroup.Max {
		t.Errorf("memory.high = %d (set %v) after giving up, want restored to max", h, set)
	}
	// Page cache: the memory goes, and the resize is applied.
	cg.mu.Lock()
	cg.mem["docker/c1"] = 12 << 20
	cg.mu.Unlock()
	a.SetDesired([]model.Instance{memInst(3, 16<<20)})
	settle(t, a)
	if r := pl.last("db-1"); r.Generation != 3 || r.RefusedGeneration != 0 || r.Applied.MemoryBytes != 16<<20 {
		t.Errorf("after the use dropped: %+v", r)
	}
}

// TestShareLoopInAgent: the agent's share loop finds the instances that
// share a CPU and their containers' cgroups from its passes, raises the
// weight of one that gets less than planned while its threads wait, and a
// later pass re-asserts the corrected weight, not the mapped one.
func TestShareLoopInAgent(t *testing.T) {
	a, _, cg, _ := newTestAgent(t)
	cg.usage, cg.stall = map[string]uint64{}, map[string]uint64{}
	ia, ib := memInst(1, 64<<20), memInst(1, 64<<20)
	ia.ID, ib.ID = "a", "b"
	ia.CPUs = map[cpuset.CPUID]int{0: 100, 2: 70}
	ib.CPUs = map[cpuset.CPUID]int{1: 100, 2: 30}
	a.SetDesired([]model.Instance{ia, ib})
	settle(t, a)
	pathOf := map[string]string{}
	for id, r := range a.records {
		if r.cgroup == nil {
			t.Fatalf("no cgroup recorded for %s after a pass", id)
		}
		pathOf[id] = r.cgroup.String()
	}
	t0 := time.Now()
	for i := range 8 {
		cg.mu.Lock()
		// a gets its 1.7; b only 1.17 of its 1.3, waiting half the time.
		cg.usage[pathOf["a"]] += 1_700_000
		cg.usage[pathOf["b"]] += 1_170_000
		cg.stall[pathOf["b"]] += 500_000
		cg.mu.Unlock()
		if err := a.shareTick(context.Background(), t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	cg.mu.Lock()
	wb := cg.weight[pathOf["b"]]
	cg.mu.Unlock()
	if wb <= 30 {
		t.Fatalf("b's cpu.weight = %d after 8 starved windows, want above the mapped 30", wb)
	}
	a.Reconcile(context.Background())
	cg.mu.Lock()
	after := cg.weight[pathOf["b"]]
	cg.mu.Unlock()
	if after != wb {
		t.Errorf("a pass re-asserted b's cpu.weight to %d, want the loop's %d", after, wb)
	}
}

// downPlanner answers nothing: every call fails as a dead planner would.
type downPlanner struct{ fakePlanner }

func (*downPlanner) RegisterHost(context.Context, *connect.Request[pinfoldv1.RegisterHostRequest]) (*connect.Response[pinfoldv1.RegisterHostResponse], error) {
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
}
func (*downPlanner) ReportStatus(context.Context, *connect.Request[pinfoldv1.ReportStatusRequest]) (*connect.Response[pinfoldv1.ReportStatusResponse], error) {
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
}

// TestCheckpointEnforcedWhilePlannerDown: the desired state the planner
// sent (with the host's CPUs in capacity: reserved 0-1 left out) is
// checkpointed; an agent restarted while the planner is down enforces it
// from the checkpoint: it reverts drift, but it starts nothing (fenced: the
// planner may have placed an instance elsewhere meanwhile); once the
// planner answers, what is missing is created. In a synctest bubble: the
// wait that shows gone-1 is not made again is five resync periods of the
// bubble's clock, exactly.
func TestCheckpointEnforcedWhilePlannerDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		eng, cg := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}
		cfg := Config{Host: "h", StateDir: dir, Resync: 50 * time.Millisecond, HealthWait: 50 * time.Millisecond}
		a := New(cfg, &fakePlanner{}, eng, cg, topologytest.Laptop().Topology(), nil)
		db := memInst(1, 128<<20)
		web := model.Instance{ID: "web-1", Service: "web", Spec: model.Spec{Image: "img"}, Generation: 1,
			Allocation: model.Allocation{CPUQuota: 150, NUMANode: -1, Memory: 64 << 20}}
		gone := model.Instance{ID: "gone-1", Service: "gone", Spec: model.Spec{Image: "img"}, Generation: 1,
			Allocation: model.Allocation{CPUQuota: 50, NUMANode: -1, Memory: 32 << 20}}
		a.received(&pinfoldv1.WatchInstancesResponse{Revision: 7, Cpus: "1-7", Instances: []*pinfoldv1.Instance{
			pinfoldv1.NewInstance(db, nil, "pending", 100), pinfoldv1.NewInstance(web, nil, "pending", 100), pinfoldv1.NewInstance(gone, nil, "pending", 100)}})
		settle(t, a)
		cs, _ := eng.List(context.Background())
		if len(cs) != 3 {
			t.Fatalf("containers after the first pass: %+v", cs)
		}
		for _, c := range cs {
			if c.Instance == "web-1" && c.Applied.CPUs.String() != "1-7" {
				t.Errorf("memory-first container cpuset = %s, want 1-7 (CPU 0 is not in capacity)", c.Applied.CPUs)
			}
			if c.Instance == "db-1" && c.Applied.CPUs.String() != "0" {
				t.Errorf("bound container cpuset = %s, want 0", c.Applied.CPUs)
			}
		}
		// Drift while the agent is away: someone resizes db's container,
		// moves web's onto CPU 0 and removes gone's.
		eng.mu.Lock()
		for id, c := range eng.cs {
			switch c.Instance {
			case "db-1":
				c.Applied.MemoryBytes = 32 << 20
			case "web-1":
				c.Applied.CPUs = cpuset.MustParseCPUs("0")
			case "gone-1":
				delete(eng.cs, id)
			}
		}
		eng.mu.Unlock()
		b := New(cfg, &downPlanner{}, eng, cg, topologytest.Laptop().Topology(), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		deadline := time.Now().Add(5 * time.Second)
		for {
			cs, _ := eng.List(ctx)
			var dbMem int64
			var webCPUs string
			for _, c := range cs {
				switch c.Instance {
				case "db-1":
					dbMem = c.Applied.MemoryBytes
				case "web-1":
					webCPUs = c.Applied.CPUs.String()
				}
			}
			if dbMem == 128<<20 && webCPUs == "1-7" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with the planner down: db memory %d (want %d), web cpuset %q (want 1-7)", dbMem, 128<<20, webCPUs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(5 * cfg.Resync)
		eng.mu.Lock()
		for _, c := range eng.cs {
			if c.Instance == "gone-1" {
				t.Errorf("gone-1 was created again from the checkpoint alone, planner down: %+v", c)
			}
		}
		eng.mu.Unlock()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want it to keep running until cancelled", err)
		}
	})
}

// TestFailingActionBacksOff: a create the engine keeps refusing is tried
// again after the resync period, then after twice that, and so on up to
// MaxRetryBackoff: over 10 minutes of the bubble's clock at --resync 2s,
// 14 tries (t = 0, 2, 6, 14, 30, 62 s, then every minute), not 300. The
// failure is logged at WARN once (the same error), the record keeps it
// for the planner, and a new generation (the planner changed the
// instance) is tried at once. Control: with waiting() always false the
// test counts 598 tries (a pass that acted is followed by another).
func TestFailingActionBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng, cg := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}
		eng.createErr = errors.New("pull access denied")
		var logs lockedBuffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		a := New(Config{Host: "h", Resync: 2 * time.Second}, &downPlanner{}, eng, cg, topologytest.Laptop().Topology(), log)
		a.SetDesired([]model.Instance{memInst(1, 128<<20)})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		creates := func() int {
			eng.mu.Lock()
			defer eng.mu.Unlock()
			return eng.creates
		}
		time.Sleep(10*time.Minute - time.Second)
		synctest.Wait()
		if n := creates(); n != 14 {
			t.Errorf("%d create attempts in 10 minutes at --resync 2s, want 14 (backoff 2 s doubling to %v)", n, MaxRetryBackoff)
		}
		if n := strings.Count(logs.String(), "action failed"); n != 1 {
			t.Errorf("%d WARN lines of the failure, want 1 (the same error each time):\n%s", n, logs.String())
		}
		a.mu.Lock()
		r := a.records["db-1"]
		a.mu.Unlock()
		if r == nil || !strings.Contains(r.err, "pull access denied") {
			t.Errorf("the failure is not recorded: %+v", r)
		}
		before := creates()
		a.SetDesired([]model.Instance{memInst(2, 128<<20)})
		time.Sleep(time.Second)
		synctest.Wait()
		if n := creates() - before; n < 1 {
			t.Errorf("a new generation waited out the old one's backoff (%d tries in 1 s)", n)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want it to keep running until cancelled", err)
		}
	})
}

// lockedBuffer is a bytes.Buffer the agent's goroutines may log to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFence: from the checkpoint alone the agent starts nothing.
func TestFence(t *testing.T) {
	t.Parallel()
	all := []Action{{Kind: Remove}, {Kind: Update}, {Kind: Create}, {Kind: Start}, {Kind: Replace}, {Kind: Unpause}, {Kind: FinishReplace}, {Kind: Reassert}}
	var got []Kind
	for _, a := range Fence(all) {
		got = append(got, a.Kind)
	}
	if want := []Kind{Remove, Update, Unpause, FinishReplace, Reassert}; !slices.Equal(got, want) {
		t.Errorf("Fence kept %v, want %v", got, want)
	}
	if len(all) != 8 {
		t.Errorf("Fence changed its input")
	}
}

// TestRefusedResizeNotWrittenBehind: when the host refuses a resize (the
// engine refuses the update), the pass does not write the refused plan's
// memory.max into the cgroup files anyway, then or later.
func TestRefusedResizeNotWrittenBehind(t *testing.T) {
	a, eng, cg, _ := newTestAgent(t)
	ctx := context.Background()
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	cg.mu.Lock()
	if got := cg.memMax["docker/c1"]; got != 128<<20 {
		t.Fatalf("memory.max after create = %d, want 128 MiB re-asserted", got)
	}
	cg.mu.Unlock()
	eng.mu.Lock()
	eng.updateErr = &docker.Error{Field: "memory", Value: "67108864", Reason: "refused"}
	eng.mu.Unlock()
	a.SetDesired([]model.Instance{memInst(2, 64<<20)})
	for pass := range 3 {
		a.Reconcile(ctx)
		cg.mu.Lock()
		got := cg.memMax["docker/c1"]
		cg.mu.Unlock()
		if got != 128<<20 {
			t.Errorf("pass %d: memory.max after a refused shrink to 64 MiB = %d, want Docker's 128 MiB kept", pass+1, got)
		}
	}
}

// TestPlannerPoolUsed: memory-first containers get the shared pool the
// planner sent (the one it counted quotas against), and the checkpoint
// keeps it for a restart without the planner.
func TestPlannerPoolUsed(t *testing.T) {
	dir := t.TempDir()
	eng, cg := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}
	a := New(Config{Host: "h", StateDir: dir, HealthWait: 50 * time.Millisecond}, &fakePlanner{}, eng, cg, topologytest.Laptop().Topology(), nil)
	web := model.Instance{ID: "web-1", Service: "web", Spec: model.Spec{Image: "img"}, Generation: 1,
		Allocation: model.Allocation{CPUQuota: 150, NUMANode: -1, Memory: 64 << 20}}
	a.received(&pinfoldv1.WatchInstancesResponse{Revision: 3, Cpus: "0-7", SharedPool: "5-7", Instances: []*pinfoldv1.Instance{
		pinfoldv1.NewInstance(web, nil, "pending", 100)}})
	settle(t, a)
	cs, _ := eng.List(context.Background())
	if len(cs) != 1 || cs[0].Applied.CPUs.String() != "5-7" {
		t.Fatalf("memory-first containers %+v, want one on the planner's pool 5-7", cs)
	}
	cp, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Pool.String() != "5-7" {
		t.Errorf("checkpointed pool %q, want 5-7", cp.Pool)
	}
}

// TestSteadyPassIsCheap: once a container holds its plan, a pass re-asserts
// it from what the pass observed: no Docker inspect, and only the one file
// it did not read (cpu.max.burst) handed to Apply; a file changed by hand
// is still written back.
func TestSteadyPassIsCheap(t *testing.T) {
	a, eng, cg, _ := newTestAgent(t)
	in := model.Instance{ID: "web-1", Service: "web", Spec: model.Spec{Image: "img"}, Generation: 1,
		Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{2: 100, 3: 50}, NUMANode: 0, Memory: 64 << 20}}
	a.received(&pinfoldv1.WatchInstancesResponse{Revision: 1, Cpus: "0-7", Instances: []*pinfoldv1.Instance{pinfoldv1.NewInstance(in, nil, "pending", 100)}})
	settle(t, a)
	a.Reconcile(context.Background()) // the files now hold the plan
	eng.mu.Lock()
	eng.inspects = 0
	eng.mu.Unlock()
	cg.mu.Lock()
	cg.applied = 0
	cg.mu.Unlock()
	a.Reconcile(context.Background())
	eng.mu.Lock()
	inspects := eng.inspects
	eng.mu.Unlock()
	cg.mu.Lock()
	s, applied := cg.lastSpec, cg.applied
	cg.mu.Unlock()
	if inspects != 0 {
		t.Errorf("a steady pass inspected %d containers", inspects)
	}
	if applied != 1 || s.CPUs != nil || s.Mems != nil || s.CPUMax != nil || s.MemoryMax != nil || s.CPUWeight != 0 || s.CPUMaxBurst == nil {
		t.Errorf("a steady pass applied %d specs, the last %+v; want one with cpu.max.burst only", applied, s)
	}
	// cpuset written by hand: written back, and only it.
	cg.mu.Lock()
	for p := range cg.files {
		cg.files[p]["cpuset.cpus"] = "7"
	}
	cg.mu.Unlock()
	a.Reconcile(context.Background())
	cg.mu.Lock()
	s = cg.lastSpec
	cg.mu.Unlock()
	if s.CPUs == nil || s.CPUs.String() != "2-3" || s.CPUMax != nil || s.MemoryMax != nil {
		t.Errorf("after cpuset.cpus = 7 by hand the pass applied %+v; want cpuset.cpus 2-3 alone", s)
	}
}

// TestCreateSpecCarriesContainer: the agent creates a container with the
// instance's volumes, restart policy, labels (its generation label its
// own), user, workdir, read-only root, capabilities and logging.
func TestCreateSpecCarriesContainer(t *testing.T) {
	a, _, _, _ := newTestAgent(t)
	in := memInst(3, 64<<20)
	in.Container = model.Container{Volumes: []string{"/srv:/srv", "data:/data:ro"}, Restart: "on-failure:2",
		Labels: map[string]string{"team": "web", LabelGeneration: "99"}, User: "1000", Workdir: "/app", ReadOnly: true,
		CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}, LogDriver: "local", LogOpts: map[string]string{"max-size": "1m"}}
	got := a.spec(&in, 3, docker.Resources{})
	want := docker.CreateSpec{Name: "pinfold-db-1-g3", Image: "img", Cmd: []string{"sleep", "1"}, Service: "db", Instance: "db-1", Host: "h",
		Labels: map[string]string{"team": "web", LabelGeneration: "3"}, Binds: []string{"/srv:/srv", "data:/data:ro"}, Restart: "on-failure", RestartRetries: 2,
		User: "1000", Workdir: "/app", ReadOnly: true, CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}, LogDriver: "local", LogOpts: map[string]string{"max-size": "1m"}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(docker.CreateSpec{}, "Resources")); diff != "" {
		t.Errorf("create spec (-want +got):\n%s", diff)
	}
	in.Container = model.Container{Restart: "no"}
	if got := a.spec(&in, 3, docker.Resources{}); got.Restart != "" || got.Binds != nil {
		t.Errorf("restart no: create spec restart %q, binds %v; want the engine's default", got.Restart, got.Binds)
	}
}
