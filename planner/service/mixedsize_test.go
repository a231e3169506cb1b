package service_test

import (
	"context"
	"fmt"
	"testing"
	"testing/cryptotest"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestResizeOfMixedServiceKeepsItsRecordDeployable: a service deployed
// twice, once memory-first at 0.5 CPUs and once on whole cores, then
// resized as a whole, has the record of one of its instances, whole_cores
// included: the record kept whole_cores from the last deploy and took the
// CPUs and mode of the first instance resized, 0.5 memory-first, so every
// later scale was refused "whole cores need a bound request of a whole
// number of CPUs" (found by the simulation, seed 7 step 485). Instance IDs
// are random, so which instance comes first is fixed by seeding them.
func TestResizeOfMixedServiceKeepsItsRecordDeployable(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprintf("ids-seed-%d", seed), func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, seed)
			s := newMemService(t)
			ctx := context.Background()
			register(t, s, "h1", topologytest.DualXeonGold6230().Topology())
			if _, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Spec: model.Spec{Image: "i"}, Count: 1, Pieces: 50, Memory: GiB}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Spec: model.Spec{Image: "i"}, Count: 1, Pieces: 200, Bind: true, WholeCores: true, Memory: GiB}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Resize(ctx, service.ResizeRequest{Target: "web", MemoryDelta: -GiB / 2}); err != nil {
				t.Fatal(err)
			}
			svc, _, _ := s.ServiceRecord("web")
			if _, err := s.Scale(ctx, "web", 3); err != nil {
				t.Errorf("scale after the resize: %v (record: %d pieces, bind %v, whole cores %v)", err, svc.Pieces, svc.Bind, svc.WholeCores)
			}
			verify(t, s)
		})
	}
}

// TestResizeKeepsWholeCoresInTheRecord: a service on whole cores resized
// as a whole keeps whole_cores in its record (the record takes it from
// the resized instance), so a scale adds whole-cores instances.
func TestResizeKeepsWholeCoresInTheRecord(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.DualXeonGold6230().Topology())
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "db", Spec: model.Spec{Image: "i"}, Count: 1, Pieces: 200, Bind: true, WholeCores: true, Memory: GiB}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resize(ctx, service.ResizeRequest{Target: "db", CPUDelta: 200}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Scale(ctx, "db", 2)
	if err != nil {
		t.Fatal(err)
	}
	if svc, _, _ := s.ServiceRecord("db"); !svc.WholeCores || svc.Pieces != 400 || len(res.Added) != 1 || !res.Added[0].WholeCores {
		t.Errorf("record %d pieces whole cores %v, added %+v; want 4 CPUs on whole cores", svc.Pieces, svc.WholeCores, res.Added)
	}
}
