package service_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestResizeGuardsAndRollback: lowering memory below what the agent reported
// in memory.current is planned (the agent shrinks it guided by pressure, or
// refuses), and a resize the host refuses is rolled back to the previous
// allocation with the reason recorded.
func TestResizeGuardsAndRollback(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	ins, err := s.Deploy(ctx, service.DeployRequest{Service: "db", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 130, Bind: true, Memory: GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	in := ins[0]
	report := func(st model.Status) {
		t.Helper()
		if err := s.ReportStatus(ctx, "h1", in.ID, st); err != nil {
			t.Fatal(err)
		}
	}
	report(model.Status{State: "running", Generation: 1, MemoryCurrent: 700 << 20})
	waitFor(t, func() bool {
		v, _ := s.Store().Instance(in.ID)
		return v.Status != nil && v.Status.MemoryCurrent == 700<<20
	}, "status seen")

	// Above current use it goes through, and below it too: the agent
	// decides (pressure-guided shrink) and refuses if it cannot.
	if _, err := s.Resize(ctx, service.ResizeRequest{Target: in.ID, MemoryDelta: -GiB / 8}); err != nil {
		t.Fatalf("shrink to 896 MiB (700 MiB in use) = %v", err)
	}
	got, err := s.Resize(ctx, service.ResizeRequest{Target: in.ID, MemoryDelta: -GiB / 4, CPUDelta: 70})
	if err != nil {
		t.Fatalf("shrink below use = %v", err)
	}
	resized := got[0]
	if resized.Generation != 3 || resized.Memory != 640<<20 || resized.Previous == nil || resized.Previous.Memory != 896<<20 {
		t.Fatalf("resize below use = %+v (previous %+v)", resized, resized.Previous)
	}
	verify(t, s)
	waitFor(t, func() bool { v, _ := s.Store().Instance(in.ID); return v.Instance.Generation == 3 }, "resize seen")

	// The host refuses generation 3: the planner rolls back to generation 2's
	// allocation under generation 4 and says why.
	report(model.Status{State: "running", Generation: 2, Refused: 3, Error: "memory shrink to 640.0 MiB stopped with 700.0 MiB in use: memory.pressure"})
	waitFor(t, func() bool { v, _ := s.Store().Instance(in.ID); return v.Instance.Generation == 4 }, "rollback")
	v, _ := s.Store().Instance(in.ID)
	back := v.Instance
	if back.Memory != 896<<20 || !maps.Equal(back.CPUs, in.CPUs) || back.Previous != nil {
		t.Errorf("rolled back to %+v, want 896 MiB on %v", back, in.CPUs)
	}
	if !strings.Contains(back.RolledBack, "generation 3") || !strings.Contains(back.RolledBack, "memory.pressure") {
		t.Errorf("rolled_back = %q, want the generation and the host's reason", back.RolledBack)
	}
	verify(t, s)
	// A repeated report of the same refusal does nothing more.
	report(model.Status{State: "running", Generation: 2, Refused: 3, Error: "memory shrink to 640.0 MiB stopped with 700.0 MiB in use: memory.pressure"})
	if v, _ := s.Store().Instance(in.ID); v.Instance.Generation != 4 {
		t.Errorf("a stale refusal rolled back again: generation %d", v.Instance.Generation)
	}
}

// TestRollbackWhenReleasedCPUsWereTaken: a shrink releases CPUs, a deploy
// takes them, then the host refuses the shrink: the old allocation no longer
// fits, so the planner keeps the new one and records why, overselling nothing.
func TestRollbackWhenReleasedCPUsWereTaken(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology()) // 8 CPUs
	ins, err := s.Deploy(ctx, service.DeployRequest{Service: "big", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 800, Bind: true, Memory: GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resize(ctx, service.ResizeRequest{Target: ins[0].ID, CPUDelta: -400}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "other", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 400, Bind: true, Memory: GiB}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportStatus(ctx, "h1", ins[0].ID, model.Status{State: "running", Generation: 1, Refused: 2, Error: "kernel said no"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { v, _ := s.Store().Instance(ins[0].ID); return v.Instance.RolledBack != "" }, "refusal recorded")
	v, _ := s.Store().Instance(ins[0].ID)
	if len(v.Instance.CPUs) != 4 || !strings.Contains(v.Instance.RolledBack, "no longer fits") {
		t.Errorf("instance = %+v, want its 4 CPUs kept and the reason recorded", v.Instance)
	}
	verify(t, s)
}

// TestHealthChecksAndBatchReplace: health checks are validated field by
// field, and a replace limited to some hosts touches only those.
func TestHealthChecksAndBatchReplace(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	register(t, s, "h2", topologytest.Laptop().Topology())
	for _, tc := range []struct {
		h    model.HealthCheck
		want string
	}{
		{model.HealthCheck{}, "exactly one"},
		{model.HealthCheck{TCP: 70000}, "health tcp = 70000"},
		{model.HealthCheck{HTTP: "x/healthz"}, `health http = "x/healthz"`},
		{model.HealthCheck{Exec: []string{"true"}, TCP: 80}, "exactly one"},
		{model.HealthCheck{Exec: []string{"true"}, Timeout: "soon"}, `health timeout = "soon"`},
	} {
		_, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox", Health: &tc.h}, Size: model.Size{Pieces: 100, Memory: GiB}}})
		if service.CodeOf(err) != service.Invalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("health %+v: err = %v, want invalid naming %q", tc.h, err, tc.want)
		}
	}
	ins, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 4, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox", Health: &model.HealthCheck{HTTP: "8080/healthz", Timeout: "5s"}}, Size: model.Size{Pieces: 100, Memory: GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	if ins[0].Health == nil || ins[0].Health.HTTP != "8080/healthz" {
		t.Errorf("instance health = %+v", ins[0].Health)
	}
	rep, err := s.Replace(ctx, service.ReplaceRequest{Target: "web", Image: "busybox:2", Hosts: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range rep {
		if in.Host != "h2" {
			t.Errorf("replace of batch [h2] touched %s on %s", in.ID, in.Host)
		}
	}
	waitFor(t, func() bool {
		n := 0
		for _, v := range s.Store().Instances("") {
			if v.Instance.Image == "busybox:2" {
				n++
			}
		}
		return n == len(rep)
	}, "batch seen")
	for _, v := range s.Store().Instances("h1") {
		if v.Instance.Image != "busybox" || v.Instance.Generation != 1 {
			t.Errorf("instance %s on h1 changed: %+v", v.Instance.ID, v.Instance)
		}
	}
	if _, err := s.Replace(ctx, service.ReplaceRequest{Target: "web", Image: "x", Hosts: []string{"h9"}}); service.CodeOf(err) != service.NotFound {
		t.Errorf("replace on a host without instances = %v", err)
	}
}

// TestRollbackKeepsThePoolFloor: a memory-first instance's quota is
// lowered, a bound deploy takes the shared pool CPUs the lower quota left
// over, then the host refuses the resize: the larger quota would not fit
// the pool that is left, so the planner keeps the new allocation and
// records why (it rolled back to 1.35 CPUs over a pool of 1; simulation
// seed 6, pool-floor-broken). The other way round too: a bound instance
// turned memory-first gives its CPUs to the pool, a memory-first instance
// counts on them, and the bound allocation is not taken back.
func TestRollbackKeepsThePoolFloor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		first  service.DeployRequest
		resize service.ResizeRequest
		second service.DeployRequest
	}{
		{"a larger quota", service.DeployRequest{Service: "mf", Count: 1, Deploy: model.Deploy{Size: model.Size{Pieces: 135, Memory: GiB}}},
			service.ResizeRequest{Target: "mf", CPUDelta: -35},
			service.DeployRequest{Service: "b", Count: 1, Deploy: model.Deploy{Size: model.Size{Pieces: 700, Bind: true, Memory: GiB}}}},
		{"bound CPUs the pool needs", service.DeployRequest{Service: "b", Count: 1, Deploy: model.Deploy{Size: model.Size{Pieces: 400, Bind: true, Memory: GiB}}},
			service.ResizeRequest{Target: "b", Bind: new(bool)}, // false: memory-first
			service.DeployRequest{Service: "mf", Count: 1, Deploy: model.Deploy{Size: model.Size{Pieces: 800, Memory: GiB}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMemService(t)
			ctx := context.Background()
			register(t, s, "h1", topologytest.Laptop().Topology()) // 8 CPUs
			tc.first.Spec, tc.second.Spec = model.Spec{Image: "busybox"}, model.Spec{Image: "busybox"}
			ins, err := s.Deploy(ctx, tc.first)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Resize(ctx, tc.resize); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Deploy(ctx, tc.second); err != nil {
				t.Fatal(err)
			}
			verify(t, s)
			if err := s.ReportStatus(ctx, "h1", ins[0].ID, model.Status{State: "running", Generation: 1, Refused: 2, Error: "kernel said no"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { v, _ := s.Store().Instance(ins[0].ID); return v.Instance.RolledBack != "" }, "refusal recorded")
			v, _ := s.Store().Instance(ins[0].ID)
			if v.Instance.Generation != 2 || !strings.Contains(v.Instance.RolledBack, "no longer fits") || !strings.Contains(v.Instance.RolledBack, "shared pool") {
				t.Errorf("instance = %+v, want generation 2 kept and the reason (the shared pool) recorded", v.Instance)
			}
			verify(t, s)
		})
	}
}
