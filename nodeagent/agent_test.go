package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/nodeagent/checkpoint"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// fakeEngine keeps containers in memory. updateErr, when set, is what
// Update returns; health is what Inspect reports as HEALTHCHECK state;
// execCode is the exit code of every exec.
type fakeEngine struct {
	mu        sync.Mutex
	cs        map[string]*docker.Container
	n         int
	updateErr error
	health    string
	execCode  int
	execs     [][]string
	exitOnRun bool // new containers exit at once
	createErr error
	creates   int
	stops     []string
	specs     map[string]docker.CreateSpec // by container ID
	updates   int
	inspects  int
	// images, when not nil, are the images the engine has: Create of
	// another fails as the engine's "No such image"; Pull adds one.
	images  map[string]bool
	pulls   []string
	pullErr error
}

func (f *fakeEngine) Pull(_ context.Context, image string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls = append(f.pulls, image)
	if f.pullErr != nil {
		return f.pullErr
	}
	if f.images != nil {
		f.images[image] = true
	}
	return nil
}

func newFakeEngine() *fakeEngine { return &fakeEngine{cs: map[string]*docker.Container{}} }

func (f *fakeEngine) List(context.Context) ([]docker.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []docker.Container
	for _, c := range f.cs {
		out = append(out, *c)
	}
	return out, nil
}
func (f *fakeEngine) Create(_ context.Context, s docker.CreateSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if f.createErr != nil {
		return "", f.createErr
	}
	if f.images != nil && !f.images[s.Image] {
		return "", fmt.Errorf("docker: create %s from %s: Error response from daemon: No such image: %s", s.Name, s.Image, s.Image)
	}
	f.n++
	id := fmt.Sprintf("c%d", f.n)
	if f.specs == nil {
		f.specs = map[string]docker.CreateSpec{}
	}
	f.specs[id] = s
	labels := map[string]string{docker.LabelManaged: "true"}
	for k, v := range s.Labels {
		labels[k] = v
	}
	parent := "docker"
	if s.CgroupParent != "" {
		parent = s.CgroupParent
	}
	f.cs[id] = &docker.Container{ID: id, Name: s.Name, Image: s.Image, Cmd: s.Cmd, Service: s.Service, Instance: s.Instance, Host: s.Host,
		Labels: labels, Status: "created", Applied: s.Resources, CgroupPath: parent + "/" + id}
	return id, nil
}
func (f *fakeEngine) get(id string) (*docker.Container, error) {
	c, ok := f.cs[id]
	if !ok {
		return nil, docker.ErrNotFound
	}
	return c, nil
}
func (f *fakeEngine) Start(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.get(id)
	if err == nil {
		c.Running, c.Status, c.PID = !f.exitOnRun, "running", 100+f.n
		if f.exitOnRun {
			c.Status, c.ExitCode = "exited", 1
		}
	}
	return err
}
func (f *fakeEngine) Inspect(_ context.Context, id string) (docker.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inspects++
	c, err := f.get(id)
	if err != nil {
		return docker.Container{}, err
	}
	out := *c
	out.Health = f.health
	return out, nil
}
func (f *fakeEngine) Update(_ context.Context, id string, r docker.Resources) (docker.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates++
	if f.updateErr != nil {
		return docker.Container{}, f.updateErr
	}
	c, err := f.get(id)
	if err != nil {
		return docker.Container{}, err
	}
	c.Applied = r
	return *c, nil
}
func (f *fakeEngine) setPaused(id string, p bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.get(id)
	if err == nil {
		c.Paused = p
	}
	return err
}
func (f *fakeEngine) Pause(_ context.Context, id string) error { return f.setPaused(id, true) }
func (f *fakeEngine) Stop(_ context.Context, id string, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.get(id)
	if err == nil {
		c.Running, c.Paused, c.Status = false, false, "exited"
		f.stops = append(f.stops, id)
	}
	return err
}
func (f *fakeEngine) Unpause(_ context.Context, id string) error { return f.setPaused(id, false) }
func (f *fakeEngine) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cs, id)
	return nil
}
func (f *fakeEngine) Exec(_ context.Context, id string, cmd []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execs = append(f.execs, cmd)
	return f.execCode, nil
}

// fakeCgroup keeps the cpu.weight written by Apply and reports
// memory.current from mem.
type fakeCgroup struct {
	mu     sync.Mutex
	mem    map[string]int64  // cgroup path → memory.current
	weight map[string]uint64 // cgroup path → cpu.weight
	usage  map[string]uint64 // cgroup path → cpu.stat usage_usec
	high   map[string]int64  // cgroup path → memory.high (absent: max)
	stall  map[string]uint64 // cgroup path → cpu.pressure some total (µs)
	// throttled is cpu.stat nr_throttled, memSome memory.pressure's some
	// avg10 (a percentage), per cgroup path.
	throttled map[string]uint64
	memSome   map[string]float64
	memMax    map[string]int64 // cgroup path → memory.max as last written
	// files holds cpuset.cpus, cpuset.mems and cpu.max as last applied,
	// per cgroup path; applied counts Apply calls and reads Read calls.
	files          map[string]map[string]string
	applied, reads int
	lastSpec       cgroup.Spec
}

func (f *fakeCgroup) Apply(_ context.Context, s cgroup.Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied++
	f.lastSpec = s
	set := func(file, v string) {
		if f.files == nil {
			f.files = map[string]map[string]string{}
		}
		if f.files[s.Path.String()] == nil {
			f.files[s.Path.String()] = map[string]string{}
		}
		f.files[s.Path.String()][file] = v
	}
	if s.CPUs != nil {
		set("cpuset.cpus", s.CPUs.String())
	}
	if s.Mems != nil {
		set("cpuset.mems", s.Mems.String())
	}
	if m := s.CPUMax; m != nil {
		q := "max"
		if m.Quota != cgroup.Max {
			q = fmt.Sprint(m.Quota)
		}
		set("cpu.max", fmt.Sprintf("%s %d", q, m.Period))
	}
	if s.CPUWeight != 0 {
		if f.weight == nil {
			f.weight = map[string]uint64{}
		}
		f.weight[s.Path.String()] = s.CPUWeight
	}
	if s.MemoryHigh != nil {
		if f.high == nil {
			f.high = map[string]int64{}
		}
		f.high[s.Path.String()] = *s.MemoryHigh
	}
	if s.MemoryMax != nil {
		if f.memMax == nil {
			f.memMax = map[string]int64{}
		}
		f.memMax[s.Path.String()] = *s.MemoryMax
	}
	return nil
}
func (f *fakeCgroup) Read(p cgroup.Path, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	switch name {
	case "cpuset.cpus", "cpuset.mems", "cpu.max":
		if v, ok := f.files[p.String()][name]; ok {
			return v, nil
		}
		return "", errors.New("not written yet: " + name)
	case "memory.max":
		if v, ok := f.memMax[p.String()]; ok {
			return strconv.FormatInt(v, 10), nil
		}
		return "", errors.New("not written yet: memory.max")
	case "memory.current":
		return strconv.FormatInt(f.mem[p.String()], 10), nil
	case "cpu.weight":
		return strconv.FormatUint(f.weight[p.String()], 10), nil
	case "cpu.stat":
		return fmt.Sprintf("usage_usec %d\nuser_usec 0\nsystem_usec 0\nnr_periods 10\nnr_throttled %d\n", f.usage[p.String()], f.throttled[p.String()]), nil
	case "memory.high":
		if h, ok := f.high[p.String()]; ok && h != cgroup.Max {
			return strconv.FormatInt(h, 10), nil
		}
		return "max", nil
	case "cpu.pressure":
		return fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", f.stall[p.String()]), nil
	case "memory.pressure":
		return fmt.Sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", f.memSome[p.String()]), nil
	}
	return "", errors.New("unexpected read of " + name)
}

// fakePlanner records status reports and heartbeats.
type fakePlanner struct {
	mu      sync.Mutex
	reports []*pinfoldv1.ReportStatusRequest
	beats   []*pinfoldv1.HeartbeatRequest
}

func (f *fakePlanner) RegisterHost(context.Context, *connect.Request[pinfoldv1.RegisterHostRequest]) (*connect.Response[pinfoldv1.RegisterHostResponse], error) {
	return connect.NewResponse(&pinfoldv1.RegisterHostResponse{Host: &pinfoldv1.Host{ShareBase: 100}}), nil
}
func (f *fakePlanner) Heartbeat(_ context.Context, r *connect.Request[pinfoldv1.HeartbeatRequest]) (*connect.Response[pinfoldv1.HeartbeatResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats = append(f.beats, r.Msg)
	return connect.NewResponse(&pinfoldv1.HeartbeatResponse{}), nil
}
func (f *fakePlanner) ReportStatus(_ context.Context, r *connect.Request[pinfoldv1.ReportStatusRequest]) (*connect.Response[pinfoldv1.ReportStatusResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, r.Msg)
	return connect.NewResponse(&pinfoldv1.ReportStatusResponse{}), nil
}
func (f *fakePlanner) WatchInstances(context.Context, *connect.Request[pinfoldv1.WatchInstancesRequest]) (*connect.ServerStreamForClient[pinfoldv1.WatchInstancesResponse], error) {
	return nil, errors.New("not in this test")
}
func (f *fakePlanner) last(id string) *pinfoldv1.ReportStatusRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.reports) - 1; i >= 0; i-- {
		if f.reports[i].Id == id {
			return f.reports[i]
		}
	}
	return nil
}

func newTestAgent(t *testing.T) (*Agent, *fakeEngine, *fakeCgroup, *fakePlanner) {
	t.Helper()
	eng, cg, pl := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}, &fakePlanner{}
	a := New(Config{Host: "h", HealthWait: 50 * time.Millisecond, HealthTimeout: 600 * time.Millisecond}, pl, eng, cg,
		topologytest.Laptop().Topology(), nil)
	return a, eng, cg, pl
}

func memInst(gen int64, mem int64) model.Instance {
	return model.Instance{ID: "db-1", Service: "db", Spec: model.Spec{Image: "img", Command: []string{"sleep", "1"}}, Generation: gen,
		Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100}, NUMANode: 0, Memory: mem}}
}

// settle runs passes until one acts on nothing (a pass reports what the
// one before it did), at most 5.
func settle(t *testing.T, a *Agent) {
	t.Helper()
	for range 5 {
		if !a.Reconcile(context.Background()) {
			return
		}
	}
	t.Fatal("the agent still acts after 5 passes")
}

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

// TestHealthy: each kind of health check passes and fails as it should.
func TestHealthy(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tcpPort := tcp.Addr().(*net.TCPAddr).Port
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	_, httpPort, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	for _, tc := range []struct {
		name     string
		probe    *Probe
		health   string
		execCode int
		exits    bool
		want     string // "" = healthy, else a part of the error
	}{
		{"no check, keeps running", nil, "", 0, false, ""},
		{"no check, exits", nil, "", 0, true, "exited"},
		{"HEALTHCHECK healthy", nil, "healthy", 0, false, ""},
		{"HEALTHCHECK unhealthy", nil, "unhealthy", 0, false, "unhealthy"},
		{"HEALTHCHECK stuck starting", nil, "starting", 0, false, "did not pass within"},
		{"exec passes", &Probe{Exec: []string{"true"}}, "", 0, false, ""},
		{"exec fails", &Probe{Exec: []string{"false"}, Timeout: time.Second}, "", 1, false, "exited 1"},
		{"probe beats an unhealthy HEALTHCHECK", &Probe{Exec: []string{"true"}}, "unhealthy", 0, false, ""},
		{"tcp open", &Probe{TCP: tcpPort}, "", 0, false, ""},
		{"tcp closed", &Probe{TCP: closedPort, Timeout: time.Second}, "", 0, false, "tcp"},
		{"http 200", &Probe{HTTP: httpPort + "/healthz"}, "", 0, false, ""},
		{"http 503", &Probe{HTTP: httpPort + "/other", Timeout: time.Second}, "", 0, false, "status 503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, eng, _, _ := newTestAgent(t)
			eng.health, eng.execCode, eng.exitOnRun = tc.health, tc.execCode, tc.exits
			id, _ := eng.Create(context.Background(), docker.CreateSpec{Name: "x", Image: "img", Service: "s", Instance: "s-1"})
			_ = eng.Start(context.Background(), id)
			err := a.healthy(context.Background(), id, tc.probe)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("healthy = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("healthy = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestReplaceRollsBackOnProbe: a replacement whose probe fails is removed
// and the old container resumes; the failure is reported.
func TestReplaceRollsBackOnProbe(t *testing.T) {
	a, eng, _, pl := newTestAgent(t)
	ctx := context.Background()
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	next := memInst(2, 128<<20)
	next.Image, next.Health = "img:2", &model.HealthCheck{Exec: []string{"test", "-f", "/ready"}, Timeout: "300ms"}
	eng.execCode = 1
	a.SetDesired([]model.Instance{next})
	settle(t, a)
	cs, _ := eng.List(ctx)
	if len(cs) != 1 || cs[0].ID != "c1" || cs[0].Paused || !cs[0].Running {
		t.Errorf("after a failed probe: %+v, want only c1, running, not paused", cs)
	}
	if r := pl.last("db-1"); !strings.Contains(r.Error, "rolled back") || !strings.Contains(r.Error, "exited 1") || r.RefusedGeneration != 2 {
		t.Errorf("report %+v, want the rollback and the probe's exit code", r)
	}
	if len(eng.execs) == 0 || eng.execs[0][0] != "test" {
		t.Errorf("probe not run in the container: %v", eng.execs)
	}
}

// TestMetrics: gopsutil measures this machine; MetricsChanged filters noise.
func TestMetrics(t *testing.T) {
	m, err := HostMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.MemTotalBytes == 0 || m.MemAvailableBytes == 0 || m.MemAvailableBytes > m.MemTotalBytes || m.Load1 < 0 {
		t.Errorf("HostMetrics = %+v", m)
	}
	base := &pinfoldv1.HostMetrics{Load1: 1, MemTotalBytes: 1000, MemAvailableBytes: 500}
	for _, tc := range []struct {
		m    *pinfoldv1.HostMetrics
		want bool
	}{
		{&pinfoldv1.HostMetrics{Load1: 1.1, MemTotalBytes: 1000, MemAvailableBytes: 510}, false},
		{&pinfoldv1.HostMetrics{Load1: 1.3, MemTotalBytes: 1000, MemAvailableBytes: 500}, true},
		{&pinfoldv1.HostMetrics{Load1: 1, MemTotalBytes: 1000, MemAvailableBytes: 560}, true},
		{&pinfoldv1.HostMetrics{Load1: 1, MemTotalBytes: 2000, MemAvailableBytes: 500}, true},
	} {
		if got := MetricsChanged(base, tc.m); got != tc.want {
			t.Errorf("MetricsChanged(%+v) = %v, want %v", tc.m, got, tc.want)
		}
	}
	if !MetricsChanged(nil, base) {
		t.Errorf("first metrics not sent")
	}
}

func TestMemoryMoved(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		sent, now int64
		want      bool
	}{
		{0, mib - 1, false},               // below 1 MiB
		{0, mib, true},                    // first MiB
		{40 * mib, 40*mib + mib/2, false}, // growth under 1 MiB
		// The e2e case: caught at 37.8 MiB while a 40 MiB file was written.
		{37*mib + 800*1024, 40 * mib, true},
		{400 * mib, 403 * mib, false},      // growth under 1%
		{400 * mib, 404 * mib, true},       // growth of 1%
		{400 * mib, 370 * mib, false},      // a drop under 10%
		{400 * mib, 360 * mib, true},       // a drop of 10%
		{5 * mib, 4*mib + 512*1024, false}, // a 10% drop under 1 MiB
	} {
		if got := memoryMoved(tc.sent, tc.now); got != tc.want {
			t.Errorf("memoryMoved(sent %d, now %d) = %v, want %v", tc.sent, tc.now, got, tc.want)
		}
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

// TestCPUGot: the CPU a container gets is measured from cpu.stat between
// passes, reported in pieces, and re-sent only when it moved enough.
func TestCPUGot(t *testing.T) {
	a, _, cg, pl := newTestAgent(t)
	cg.usage = map[string]uint64{}
	in := memInst(1, 128<<20)
	in.CPUs = map[cpuset.CPUID]int{0: 100, 2: 70}
	a.SetDesired([]model.Instance{in})
	settle(t, a)
	obs := func(usage uint64) []Observed {
		return []Observed{{Container: docker.Container{ID: "c1", Instance: "db-1", Running: true}, CPUUsageUsec: usage}}
	}
	t0 := time.Now().Add(cpuWindow) // a window after settle's own sample, so t0 is the baseline
	a.measure([]model.Instance{in}, obs(1_000_000), 100, t0)
	a.measure([]model.Instance{in}, obs(1_000_000+3_400_000), 100, t0.Add(2*time.Second)) // 1.7 CPUs for 2 s
	if got := a.records["db-1"].cpuGot; got != 170 {
		t.Errorf("cpuGot = %d pieces, want 170", got)
	}
	// Through a real pass: the fake kernel's counter advances 1.2 CPUs.
	cg.mu.Lock()
	cg.usage["docker/c1"] = 0
	cg.mu.Unlock()
	a.Reconcile(context.Background())
	time.Sleep(cpuWindow)
	cg.mu.Lock()
	cg.usage["docker/c1"] = 1_200_000
	cg.mu.Unlock()
	a.Reconcile(context.Background())
	r := pl.last("db-1")
	if r.CpuGotPieces < 90 || r.CpuGotPieces > 125 {
		t.Errorf("reported cpu_got = %d pieces after 1.2 s of CPU in ~1 s, want about 120", r.CpuGotPieces)
	}
	for _, tc := range []struct {
		sent, now int
		want      bool
	}{
		{170, 172, false}, {170, 178, false}, {170, 179, true}, {0, 4, false}, {0, 5, true}, {1000, 1040, false}, {1000, 1050, true}, {200, 150, true},
	} {
		if got := cpuMoved(tc.sent, tc.now, 100); got != tc.want {
			t.Errorf("cpuMoved(%d, %d) = %v, want %v", tc.sent, tc.now, got, tc.want)
		}
	}
	// Another container (a replace) or a counter going back is no sample.
	if _, ok := piecesPerSecond(cpuSample{"c1", 10, t0}, cpuSample{"c2", 20, t0.Add(time.Second)}, 100); ok {
		t.Errorf("a sample across containers was used")
	}
	if _, ok := piecesPerSecond(cpuSample{"c1", 10, t0}, cpuSample{"c1", 5, t0.Add(time.Second)}, 100); ok {
		t.Errorf("a counter that went back was used")
	}
}

// TestFailingActionNotInATightLoop: a create the engine keeps refusing is
// retried at the resync period (one immediate follow-up pass at most), not
// as fast as passes can run.
func TestFailingActionNotInATightLoop(t *testing.T) {
	eng, cg := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}
	eng.createErr = errors.New("pull access denied")
	a := New(Config{Host: "h", Resync: 200 * time.Millisecond}, &downPlanner{}, eng, cg, topologytest.Laptop().Topology(), nil)
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = a.Run(ctx)
	eng.mu.Lock()
	n := eng.creates
	eng.mu.Unlock()
	// 1 s at 200 ms: about 5 passes, each with at most one follow-up.
	if n < 2 || n > 12 {
		t.Errorf("%d create attempts in 1 s with --resync 200ms, want about 5..10", n)
	}
	if r := a.records["db-1"]; r == nil || !strings.Contains(r.err, "pull access denied") {
		t.Errorf("the failure is not recorded: %+v", r)
	}
}

// TestReplaceSameImageSwaps: a replace with the image and command the
// container already runs (SpecGeneration grows) still makes a new
// container; a resize after it does not. With Pull always the host pulls
// first; with the default, only an image the engine lacks is pulled.
func TestReplaceSameImageSwaps(t *testing.T) {
	a, eng, _, pl := newTestAgent(t)
	ctx := context.Background()
	eng.images = map[string]bool{}
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	if !slices.Equal(eng.pulls, []string{"img"}) {
		t.Errorf("pulls after creating from a missing image = %v, want [img] (pull missing)", eng.pulls)
	}
	restart := memInst(2, 128<<20)
	restart.SpecGeneration, restart.Pull = 2, model.PullAlways
	a.SetDesired([]model.Instance{restart})
	a.Reconcile(ctx) // reports the old container, then replaces it
	if r := pl.last("db-1"); r.Generation != 1 {
		t.Errorf("the old container was reported at generation %d; want 1 (it predates the replace)", r.Generation)
	}
	settle(t, a)
	cs, _ := eng.List(ctx)
	if len(cs) != 1 || cs[0].ID == "c1" || cs[0].Labels[LabelGeneration] != "2" {
		t.Fatalf("after a replace with the same image: %+v, want one new container of generation 2", cs)
	}
	if !slices.Equal(eng.pulls, []string{"img", "img"}) {
		t.Errorf("pulls = %v, want the image pulled again (pull always)", eng.pulls)
	}
	if r := pl.last("db-1"); r.State != "running" || r.Generation != 2 {
		t.Errorf("report after the restart: %+v", r)
	}
	resized := restart
	resized.Generation, resized.Memory = 3, 96<<20
	a.SetDesired([]model.Instance{resized})
	settle(t, a)
	if cs2, _ := eng.List(ctx); len(cs2) != 1 || cs2[0].ID != cs[0].ID {
		t.Errorf("a resize after the restart replaced the container: %+v", cs2)
	}
	eng.pullErr = errors.New("registry unreachable")
	again := resized
	again.Generation, again.SpecGeneration = 4, 4
	a.SetDesired([]model.Instance{again})
	settle(t, a)
	if cs3, _ := eng.List(ctx); len(cs3) != 1 || cs3[0].ID != cs[0].ID || !cs3[0].Running {
		t.Errorf("a replace whose pull failed: %+v, want the old container running on", cs3)
	}
	if r := pl.last("db-1"); !strings.Contains(r.Error, "registry unreachable") || r.RefusedGeneration != 4 {
		t.Errorf("report after a failed pull: %+v, want the pull's error and generation 4 refused", r)
	}
}

// TestMoveHealthGate: an instance that replaces another (a move) is
// reported running only after its health gate; one that fails it is
// removed, reported refused, and not created again.
func TestMoveHealthGate(t *testing.T) {
	a, eng, _, pl := newTestAgent(t)
	ctx := context.Background()
	in := memInst(1, 128<<20)
	in.Replaces, in.Health = "db-0", &model.HealthCheck{Exec: []string{"test", "-f", "/ready"}, Timeout: "300ms"}
	eng.execCode = 1
	a.SetDesired([]model.Instance{in})
	a.Reconcile(ctx)
	a.Reconcile(ctx)
	if cs, _ := eng.List(ctx); len(cs) != 0 {
		t.Errorf("after a failed health gate: %+v, want the container removed", cs)
	}
	r := pl.last("db-1")
	if r == nil || r.RefusedGeneration != 1 || !strings.Contains(r.Error, "health gate") || r.State == "running" {
		t.Fatalf("report after a failed gate: %+v, want refused generation 1 naming the gate", r)
	}
	creates := eng.creates
	settle(t, a)
	if eng.creates != creates {
		t.Errorf("a move whose gate failed was created again (%d creates, was %d)", eng.creates, creates)
	}
	// The same with a passing probe: running once the gate passed.
	b, eng2, _, pl2 := newTestAgent(t)
	eng2.execCode = 0
	b.SetDesired([]model.Instance{in})
	settle(t, b)
	if r := pl2.last("db-1"); r == nil || r.State != "running" || r.Error != "" || r.Generation != 1 {
		t.Errorf("report after a passing gate: %+v", r)
	}
	if len(eng2.execs) == 0 {
		t.Errorf("the probe never ran")
	}
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

// TestAgentMetrics: the agent's series, scraped over HTTP and parsed as the
// Prometheus text format: per instance the plan, the memory and pressure
// read from its cgroup, the actions, reconcile and Docker call latency.
func TestAgentMetrics(t *testing.T) {
	a, _, cg, _ := newTestAgent(t)
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	cg.mu.Lock()
	cg.mem["docker/c1"] = 40 << 20
	cg.throttled = map[string]uint64{"docker/c1": 7}
	cg.memSome = map[string]float64{"docker/c1": 12.5}
	cg.mu.Unlock()
	reg := prometheus.NewRegistry()
	if err := a.Register(reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(promodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, labels ...string) (float64, bool) {
		for _, m := range fams[name].GetMetric() {
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				ok = ok && found
			}
			if !ok {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pinfold_agent_instance_cpu_planned_cpus", []string{"instance", "db-1", "service", "db"}, 1},
		{"pinfold_agent_instance_memory_limit_bytes", []string{"instance", "db-1"}, 128 << 20},
		{"pinfold_agent_instance_memory_current_bytes", []string{"instance", "db-1"}, 40 << 20},
		{"pinfold_agent_instance_cpu_throttled_periods_total", []string{"instance", "db-1"}, 7},
		{"pinfold_agent_instance_memory_pressure_some_ratio", []string{"instance", "db-1"}, 0.125},
		{"pinfold_agent_instance_cpu_pressure_some_ratio", []string{"instance", "db-1"}, 0},
		{"pinfold_agent_actions_total", []string{"kind", "create", "result", "ok"}, 1},
	} {
		if v, ok := get(tc.name, tc.labels...); !ok || v != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, v, ok, tc.want)
		}
	}
	for _, name := range []string{"pinfold_agent_reconcile_duration_seconds", "pinfold_agent_docker_call_duration_seconds"} {
		if v, ok := get(name); !ok || v == 0 {
			t.Errorf("%s: %v observations (present %v), want some", name, v, ok)
		}
	}
	if _, ok := get("pinfold_agent_instance_cpu_used_cpus", "instance", "db-1"); !ok {
		t.Errorf("pinfold_agent_instance_cpu_used_cpus missing for a running instance")
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
