package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
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
