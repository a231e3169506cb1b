package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestConcurrentPlannersNeverOversell: two planners, each talking to a
// different member of a real 3-member etcd cluster, serve many goroutines
// that deploy, resize and remove at random; one etcd member is killed mid-run.
// Afterwards the store is re-checked: no CPU piece or byte allocated twice,
// every instance accounted.
func TestConcurrentPlannersNeverOversell(t *testing.T) {
	c := statetest.Start(t, 3)
	a := newService(t, c, c.Endpoints[0], c.Endpoints[1])
	b := newService(t, c, c.Endpoints[1], c.Endpoints[2])
	ctx := context.Background()
	for i := range 6 {
		register(t, a, fmt.Sprintf("h%d", i), topologytest.Laptop().Topology()) // 8 CPUs, 16 GiB each
	}
	var ok, full, conflicts atomic.Int64
	var wg sync.WaitGroup
	stopAt := time.Now().Add(6 * time.Second)
	for g := range 8 {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			for time.Now().Before(stopAt) {
				var err error
				switch op := r.IntN(10); {
				case op < 5:
					_, err = s.Deploy(ctx, service.DeployRequest{Service: fmt.Sprintf("svc%d", r.IntN(3)), Count: 1 + r.IntN(3), Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 30 + r.IntN(200), Bind: r.IntN(4) != 0, Memory: int64(1+r.IntN(4)) * GiB / 2}}})
				case op < 8:
					ins := s.Store().Instances("")
					if len(ins) == 0 {
						continue
					}
					_, err = s.Resize(ctx, service.ResizeRequest{Target: ins[r.IntN(len(ins))].Instance.ID, CPUDelta: r.IntN(100) - 50, MemoryDelta: int64(r.IntN(3)-1) * GiB / 4})
				default:
					ins := s.Store().Instances("")
					if len(ins) == 0 {
						continue
					}
					_, err = s.Remove(ctx, ins[r.IntN(len(ins))].Instance.ID)
				}
				switch service.CodeOf(err) {
				case "":
					if err == nil {
						ok.Add(1)
					} else {
						t.Errorf("internal error: %v", err)
						return
					}
				case service.Exhausted, service.Invalid, service.NotFound:
					full.Add(1) // expected under contention: full hosts, vanished instances
				case service.Conflicted:
					conflicts.Add(1)
				default:
					t.Errorf("unexpected error: %v", err)
					return
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	c.Stop(1) // kill the member both planners share, mid-run
	wg.Wait()
	// Let both caches catch up, then re-check the store through each planner.
	for _, s := range []planner{a, b} {
		if err := s.Store().Sync(ctx); err != nil {
			t.Fatal(err)
		}
		verify(t, s)
	}
	if ok.Load() < 20 {
		t.Errorf("only %d operations succeeded", ok.Load())
	}
	t.Logf("operations: %d succeeded, %d refused (full/invalid/gone), %d gave up on conflicts; %d instances at the end",
		ok.Load(), full.Load(), conflicts.Load(), len(a.Store().Instances("")))
}

// TestBatchCommitsUnderChurn: a 20,000-instance deploy commits while two
// clients keep deploying, resizing and removing small instances on the
// same hosts (before the commit pipeline it gave up after 50 conflicting
// attempts); the churn keeps being served while the batch waits its turn.
func TestBatchCommitsUnderChurn(t *testing.T) {
	c := statetest.Start(t, 1)
	s := newService(t, c)
	ctx := context.Background()
	for i := range 40 {
		register(t, s, fmt.Sprintf("h%02d", i), topologytest.BenchHost().Topology()) // 128 CPUs, 512 GiB each
	}
	stop := make(chan struct{})
	var churned atomic.Int64
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			svc := fmt.Sprintf("churn%d", g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ins, err := s.Deploy(ctx, service.DeployRequest{Service: svc, Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 20, Bind: true, Memory: 8 << 20}}})
				if err == nil {
					_, err = s.Resize(ctx, service.ResizeRequest{Target: ins[0].ID, CPUDelta: 10})
				}
				if err == nil {
					_, err = s.Remove(ctx, ins[0].ID)
				}
				if err != nil {
					t.Errorf("churn %d: %v", g, err)
					return
				}
				churned.Add(1)
			}
		})
	}
	for churned.Load() < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	before := churned.Load()
	ins, err := s.Deploy(ctx, service.DeployRequest{Service: "batch", Count: 20000, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: 8 << 20}}})
	during := churned.Load() - before
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the batch under churn: %v", err)
	}
	if len(ins) != 20000 {
		t.Fatalf("the batch placed %d, want 20000", len(ins))
	}
	t.Logf("churn rounds while the batch planned and committed: %d", during)
	verify(t, s)
}
