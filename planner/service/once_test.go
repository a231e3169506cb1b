package service_test

import (
	"context"
	"sync"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestCreateOnlyAndExpectedSize: what two runs of one apply at once send
// changes the planner once. Deploys with CreateOnly of one new service,
// at once: one places its instances, the others are refused (Exists).
// Resizes of a service by one delta, each expecting the size read before:
// one is made, the others refused (Conflicted). Without the guards both
// deploys add instances and both deltas are added (found by a trial of
// pinfold apply: every service doubled, cpu 0.02 + 2 × 0.03).
func TestCreateOnlyAndExpectedSize(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	register(t, s, "h2", topologytest.Laptop().Topology())
	const runs = 4
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 2, CreateOnly: true, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 10, Memory: 64 << 20}}})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if service.CodeOf(err) != service.Exists {
			t.Errorf("a concurrent create-only deploy failed with %v, want %s", err, service.Exists)
		}
	}
	if n := len(s.st.ServiceInstances("web")); ok != 1 || n != 2 {
		t.Fatalf("%d of %d create-only deploys placed, web has %d instances: want 1 deploy and 2 instances", ok, runs, n)
	}
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Resize(ctx, service.ResizeRequest{Target: "web", CPUDelta: 5, MemoryDelta: 16 << 20, ExpectPieces: 10, ExpectMemory: 64 << 20})
		}()
	}
	wg.Wait()
	ok = 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if service.CodeOf(err) != service.Conflicted {
			t.Errorf("a concurrent resize expecting the old size failed with %v, want %s", err, service.Conflicted)
		}
	}
	for _, in := range s.st.ServiceInstances("web") {
		if in.Instance.Pieces() != 15 || in.Instance.Memory != 80<<20 {
			t.Errorf("%s: %d pieces, %d bytes after %d resizes of +5 pieces +16 MiB from 10 and 64 MiB; want 15 and 80 MiB", in.Instance.ID, in.Instance.Pieces(), in.Instance.Memory, ok)
		}
	}
	if ok != 1 {
		t.Errorf("%d of %d resizes expecting the same size were made, want 1", ok, runs)
	}
	verify(t, s)
}
