package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

const GiB = int64(1) << 30

// planner is a service with its store, which the tests read directly.
type planner struct {
	*service.Service
	st testStore
}

// testStore is the service's store with the reads the tests make beside
// the service's own.
type testStore interface {
	service.Store
	Schedulable() []state.HostView
}

func (p planner) Store() testStore { return p.st }

// newService is a service over etcd (c's members, or those endpoints): for
// tests of what etcd does (leases running out, several planners, members
// failing, restarts).
func newService(t *testing.T, c *statetest.Cluster, endpoints ...string) planner {
	t.Helper()
	st := c.Open(t, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol, endpoints...)
	return newPlanner(st)
}

// newMemService is a service over an in-memory store (state.Memory, held
// to the etcd-backed store's contract by state's contract tests): for
// tests of the service's own behaviour.
func newMemService(t *testing.T) planner {
	t.Helper()
	st, err := state.NewMemory(state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return newPlanner(st)
}

func newPlanner(st testStore) planner {
	svc := service.New(st, nil)
	svc.CheckIndex() // every deploy the room index places is planned in full too
	return planner{svc, st}
}

func register(t *testing.T, s planner, name string, top *topology.Topology) state.HostView {
	t.Helper()
	v, err := s.RegisterHost(context.Background(), service.RegisterHostRequest{Name: name, Topology: top, Settings: state.CapacitySettings{MemoryShare: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func verify(t *testing.T, s planner) {
	t.Helper()
	if bad := service.Verify(s.Store(), 100); len(bad) > 0 {
		t.Fatalf("store invariants violated:\n%s", strings.Join(bad, "\n"))
	}
}

func TestDeployResizeRemove(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	register(t, s, "h2", topologytest.Laptop().Topology())
	ins, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 4, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 170, Bind: true, Memory: GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, in := range ins {
		per[in.Host]++
		if len(in.CPUs) != 2 || in.NUMANode != 0 {
			t.Errorf("instance %s: cpus %v numa %d", in.ID, in.CPUs, in.NUMANode)
		}
	}
	if per["h1"] != 2 || per["h2"] != 2 {
		t.Errorf("auto spread = %v, want 2 and 2", per)
	}
	verify(t, s)
	// Resize one instance +0.3 CPU +512 MiB in place.
	got, err := s.Resize(ctx, service.ResizeRequest{Target: ins[0].ID, CPUDelta: 30, MemoryDelta: GiB / 2})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Generation != 2 || got[0].Memory != GiB+GiB/2 || len(got[0].CPUs) != 2 {
		t.Errorf("resized = %+v", got[0])
	}
	verify(t, s)
	// A resize that cannot fit changes nothing.
	before := s.Store().Instances("")
	_, err = s.Resize(ctx, service.ResizeRequest{Target: "web", CPUDelta: 500})
	if ae := (*alloc.Error)(nil); service.CodeOf(err) != service.Exhausted || !errors.As(err, &ae) || !errors.Is(err, alloc.ErrInsufficient) {
		t.Errorf("oversized resize = %v, want resource_exhausted wrapping the engine's *alloc.Error", err)
	}
	if after := s.Store().Instances(""); len(after) != len(before) || after[0].Rev != before[0].Rev {
		t.Errorf("a failed resize changed the store")
	}
	// Shrinking below zero is invalid.
	if _, err := s.Resize(ctx, service.ResizeRequest{Target: ins[1].ID, CPUDelta: -500}); service.CodeOf(err) != service.Invalid {
		t.Errorf("resize below zero = %v", err)
	}
	// Replace keeps the allocation and bumps the generation.
	prev := map[string]model.Instance{}
	for _, v := range s.Store().Instances("") {
		prev[v.Instance.ID] = v.Instance
	}
	rep, err := s.Replace(ctx, service.ReplaceRequest{Target: "web", Image: "busybox:2"})
	if err != nil || len(rep) != 4 {
		t.Fatalf("Replace = %v, %v", rep, err)
	}
	for _, in := range rep {
		old := prev[in.ID]
		if in.Image != "busybox:2" || in.Generation != old.Generation+1 || len(in.CPUs) != len(old.CPUs) || in.Memory != old.Memory {
			t.Errorf("replaced %+v, was %+v", in, old)
		}
		for id, p := range old.CPUs {
			if in.CPUs[id] != p {
				t.Errorf("replace moved instance %s off CPU %d", in.ID, id)
			}
		}
	}
	if _, err := s.Replace(ctx, service.ReplaceRequest{Target: "web", Image: " "}); service.CodeOf(err) != service.Invalid {
		t.Errorf("replace with a blank image = %v", err)
	}
	// No image: each instance keeps its own (a restart, or a change of
	// settings alone).
	if out, err := s.Replace(ctx, service.ReplaceRequest{Target: "web"}); err != nil || len(out) == 0 || out[0].Image != "busybox:2" {
		t.Errorf("replace without image = %+v, %v; want each instance keeping its image", out, err)
	}
	verify(t, s)
	ids, err := s.Remove(ctx, "web")
	if err != nil || len(ids) != 4 {
		t.Fatalf("Remove(web) = %v, %v", ids, err)
	}
	verify(t, s)
	if v, _ := s.Store().Host("h1"); len(v.Alloc.Used) != 0 || v.Alloc.MemoryUsed != 0 {
		t.Errorf("h1 after remove: %+v", v.Alloc)
	}
}

// TestWatchInstances: a host's watch sends its instances and its CPUs in
// capacity, again after a deploy and again after a capacity change.
func TestWatchInstances(t *testing.T) {
	s := newMemService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	register(t, s, "h1", topologytest.Laptop().Topology())
	type seen struct {
		cpus      int
		instances int
	}
	got := make(chan seen, 16)
	go func() {
		_ = s.WatchInstances(ctx, "h1", func(_ int64, h state.HostView, ins []state.InstanceView) error {
			got <- seen{len(h.Host.CPUs), len(ins)}
			return nil
		})
	}()
	next := func(want seen) {
		t.Helper()
		for {
			select {
			case g := <-got:
				if g == want {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no watch message with %+v", want)
			}
		}
	}
	next(seen{8, 0})
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}); err != nil {
		t.Fatal(err)
	}
	next(seen{8, 1})
	if _, err := s.SetHost(ctx, service.SetHostRequest{Name: "h1", RemoveCPUs: cpuset.MustParseCPUs("7")}); err != nil {
		t.Fatal(err)
	}
	next(seen{7, 1})
	if err := s.WatchInstances(ctx, "nope", nil); service.CodeOf(err) != service.NotFound {
		t.Errorf("watch of an unknown host = %v", err)
	}
}

func TestHostRulesAndBadInput(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	// Re-registering with another topology is refused unless forced.
	_, err := s.RegisterHost(ctx, service.RegisterHostRequest{Name: "h1", Topology: topologytest.FlatVM().Topology()})
	if service.CodeOf(err) != service.Exists {
		t.Errorf("re-register with another topology = %v", err)
	}
	bad := topologytest.Laptop().Topology()
	bad.CPUs[0].NUMANode = 9
	if _, err := s.RegisterHost(ctx, service.RegisterHostRequest{Name: "h2", Topology: bad}); service.CodeOf(err) != service.Invalid || !strings.Contains(err.Error(), "cpus[0].numa_node") {
		t.Errorf("invalid topology = %v", err)
	}
	if _, err := s.RegisterHost(ctx, service.RegisterHostRequest{Name: "bad name", Topology: topologytest.Laptop().Topology()}); service.CodeOf(err) != service.Invalid {
		t.Errorf("bad host name = %v", err)
	}
	ins, err := s.Deploy(ctx, service.DeployRequest{Service: "db", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	held := cpuset.Of(cpusOf(ins[0])...)
	// Below Docker's smallest memory limit: refused before planning, on
	// deploy and on resize (the API took 1 byte before).
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "tiny", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Memory: 1}}}); service.CodeOf(err) != service.Invalid || !strings.Contains(err.Error(), "6 MiB") {
		t.Errorf("deploy with 1 byte of memory = %v, want invalid naming 6 MiB", err)
	}
	if _, err := s.Resize(ctx, service.ResizeRequest{Target: ins[0].ID, MemoryDelta: -GiB + 4<<20}); service.CodeOf(err) != service.Invalid || !strings.Contains(err.Error(), "6 MiB") {
		t.Errorf("resize to 4 MiB = %v, want invalid naming 6 MiB", err)
	}
	if service.MinInstanceMemory != docker.MinMemory {
		t.Errorf("MinInstanceMemory %d != docker.MinMemory %d", service.MinInstanceMemory, docker.MinMemory)
	}
	// A forced registration may not take away what instances use: pieces
	// of a held CPU, memory, or a held CPU or memory reserved for the
	// system (issue 36 AG1: a change that would oversell is refused for
	// anyone, force or not).
	for _, tc := range []struct {
		settings state.CapacitySettings
		want     string
	}{
		{state.CapacitySettings{MemoryShare: 1, PiecesPerCPU: 50}, "h1: CPU " + held.String() + " would have 50 pieces; its instances use 100"},
		{state.CapacitySettings{MemoryShare: 0.05}, "memory would be"},
		{state.CapacitySettings{MemoryShare: 1, ReservedCPUs: held}, "CPUs " + held.String() + " are used by instances [" + ins[0].ID + "] and missing from the new registration (reserved CPUs " + held.String() + ")"},
		{state.CapacitySettings{MemoryShare: 1, ReservedMemory: topologytest.Laptop().Topology().MemoryBytes() - GiB/2}, "memory would be 512 MiB; its instances use 1 GiB"},
	} {
		_, err := s.RegisterHost(ctx, service.RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(), Force: true, Settings: tc.settings})
		if service.CodeOf(err) != service.Precond || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("forced registration with %+v = %v, want failed_precondition with %q", tc.settings, err, tc.want)
		}
	}
	verify(t, s)
	// Removing CPUs an instance uses is refused, naming the instance.
	_, err = s.SetHost(ctx, service.SetHostRequest{Name: "h1", RemoveCPUs: held})
	if service.CodeOf(err) != service.Precond || !strings.Contains(err.Error(), ins[0].ID) {
		t.Errorf("remove busy CPUs = %v", err)
	}
	// Removing free CPUs and adding memory works and keeps instances.
	v, err := s.SetHost(ctx, service.SetHostRequest{Name: "h1", RemoveCPUs: cpuset.MustParseCPUs("7"), MemoryDelta: GiB})
	if err != nil || len(v.Host.CPUs) != 7 {
		t.Fatalf("SetHost = %v, %v", v.Host.CPUs, err)
	}
	neg := int64(-5)
	if _, err := s.SetHost(ctx, service.SetHostRequest{Name: "h1", MemoryBytes: &neg}); service.CodeOf(err) != service.Invalid {
		t.Errorf("negative memory = %v", err)
	}
	if _, err := s.SetHost(ctx, service.SetHostRequest{Name: "nope"}); service.CodeOf(err) != service.NotFound {
		t.Errorf("unknown host = %v", err)
	}
	// A disabled host takes nothing new.
	if _, err := s.SetEnabled(ctx, "h1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "db", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}); service.CodeOf(err) != service.Exhausted {
		t.Errorf("deploy with the only host disabled = %v", err)
	}
	if len(s.Store().Schedulable()) != 0 {
		t.Errorf("disabled host still in the schedulable index")
	}
	if _, err := s.SetEnabled(ctx, "h1", true); err != nil {
		t.Fatal(err)
	}
	for _, r := range []service.DeployRequest{
		{Service: "", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}},
		{Service: "x", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: -1, Bind: true, Memory: GiB}}},
		{Service: "x", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: 0}}},
		{Service: "x", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}, Scheduling: model.Scheduling{Strategy: "best"}}},
		{Service: "x", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB, MemorySoft: 2 * GiB}}},
		// What a client sends past the CLI's checks: the planner refuses it.
		{Service: "x", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}, Scheduling: model.Scheduling{Priority: model.MaxPriority + 1}}},
		{Service: "x", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}, Scheduling: model.Scheduling{MaxPerHost: -1}}},
	} {
		if _, err := s.Deploy(ctx, r); service.CodeOf(err) != service.Invalid {
			t.Errorf("Deploy(%+v) = %v, want invalid_argument", r, err)
		}
	}
	// A service named like another's instance (issue 36: resize and
	// remove of it acted on that instance).
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "sec7-dec61c68bd", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}); service.CodeOf(err) != service.Invalid ||
		!strings.Contains(err.Error(), `service name "sec7-dec61c68bd": ends like an instance ID`) {
		t.Errorf("Deploy of a service named like an instance = %v, want invalid_argument naming it", err)
	}
	// No image: refused by the planner too (an API client that skips the CLI).
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "x", Count: 1, Deploy: model.Deploy{Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}); service.CodeOf(err) != service.Invalid || !strings.Contains(err.Error(), `image = "": required`) {
		t.Errorf("Deploy without an image = %v, want invalid_argument naming the image", err)
	}
	if _, err := s.RemoveHost(ctx, "h1"); service.CodeOf(err) != service.Precond {
		t.Errorf("remove a host with instances = %v", err)
	}
	if _, err := s.Remove(ctx, "nothing"); service.CodeOf(err) != service.NotFound {
		t.Errorf("remove unknown = %v", err)
	}
	verify(t, s)
}

func cpusOf(in model.Instance) []cpuset.CPUID {
	var out []cpuset.CPUID
	for id := range in.CPUs {
		out = append(out, id)
	}
	return out
}

// TestHeartbeat: an agent-managed host is planned on only while its lease
// lives; a disable recorded while it is down holds when it returns.
func TestHeartbeat(t *testing.T) {
	c := statetest.Start(t, 1)
	s := newService(t, c)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	met := &state.Metrics{Load1: 0.5, Load5: 0.25, Load15: 0.125, MemTotal: 8 << 30, MemAvailable: 6 << 30}
	if err := s.Heartbeat(ctx, "h1", "test", model.Protocol, 2*time.Second, met); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { v, _ := s.Store().Host("h1"); return v.Live && v.Host.Agent }, "host live")
	if v, _ := s.Store().Host("h1"); v.Metrics == nil || v.Metrics.Load1 != 0.5 || v.Metrics.MemAvailable != 6<<30 || v.Metrics.AgentVersion != "test" {
		t.Errorf("metrics = %+v, want load1 0.5, 6 GiB available, version test", v.Metrics)
	}
	if len(s.Store().Schedulable()) != 1 {
		t.Fatalf("live host not schedulable")
	}
	// No more heartbeats: the lease expires and the host goes down.
	waitFor(t, func() bool { v, _ := s.Store().Host("h1"); return state.HostState(v.Host, v.Live) == "down" }, "host down")
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "w", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB}}}); service.CodeOf(err) != service.Exhausted {
		t.Errorf("deploy onto a down host = %v", err)
	}
	if _, err := s.SetEnabled(ctx, "h1", false); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "h1", "test", model.Protocol, 2*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { v, _ := s.Store().Host("h1"); return v.Live }, "host back")
	if v, _ := s.Store().Host("h1"); state.HostState(v.Host, v.Live) != "disabled" || len(s.Store().Schedulable()) != 0 {
		t.Errorf("host came back %s; the recorded disable must hold", state.HostState(v.Host, v.Live))
	}
	// An agent speaking another protocol gets no new work.
	if _, err := s.SetEnabled(ctx, "h1", true); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "h1", "future", model.Protocol+1, 2*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { v, _ := s.Store().Host("h1"); return v.Host.Protocol == model.Protocol+1 }, "protocol recorded")
	if len(s.Store().Schedulable()) != 0 {
		t.Errorf("a host whose agent speaks protocol %d is still schedulable", model.Protocol+1)
	}
	// host list and placement agree: the host does not show as up.
	if v, _ := s.Store().Host("h1"); v.State() != "protocol" {
		t.Errorf("host state = %q with a protocol %d agent, want protocol (placement skips it)", v.State(), model.Protocol+1)
	}
	// An agent of another protocol may not register: it would read the
	// wire wrongly (protocol 1 sent CPU quotas as decimal strings).
	_, err := s.RegisterHost(ctx, service.RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(), Agent: true,
		AgentVersion: "old", Protocol: model.Protocol - 1, Settings: state.CapacitySettings{MemoryShare: 1}})
	if service.CodeOf(err) != service.Precond || !strings.Contains(err.Error(), fmt.Sprintf("speaks protocol %d and this planner speaks %d", model.Protocol-1, model.Protocol)) {
		t.Errorf("registration by an old agent = %v, want failed_precondition naming both protocols", err)
	}
	if err := s.Heartbeat(ctx, "nope", "x", 1, time.Second, nil); service.CodeOf(err) != service.NotFound {
		t.Errorf("heartbeat of an unknown host = %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRestartLosesNothing: a new planner over the same etcd data directory
// sees every host and instance.
func TestRestartLosesNothing(t *testing.T) {
	c := statetest.Start(t, 1)
	s := newService(t, c)
	ctx := context.Background()
	register(t, s, "h1", topologytest.DualXeonGold6230().Topology())
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 10, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 130, Bind: true, Memory: GiB}}}); err != nil {
		t.Fatal(err)
	}
	s2 := newService(t, c)
	if n := len(s2.Store().Instances("")); n != 10 {
		t.Errorf("a second planner sees %d instances, want 10", n)
	}
	verify(t, s2)
}
