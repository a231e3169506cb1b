package service_test

import (
	"context"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestScaledToZeroResizeAndReplace: a service scaled to 0 can still be
// resized and replaced: the record alone changes, and the instances a
// scale adds get the new size and image (before, both were refused with
// "service has no instances", and an apply of a services file that
// changed either for a service at count 0 never settled). Bad sizes are
// refused as an instance's resize would be, and change nothing.
func TestScaledToZeroResizeAndReplace(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Spec: model.Spec{Image: "busybox:1"}, Count: 1, Pieces: 50, Memory: GiB}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Scale(ctx, "web", 0); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []service.ResizeRequest{
		{Target: "web", CPUDelta: -60},                  // less than no CPU
		{Target: "web", MemoryDelta: -GiB + 1<<20},      // 1 MiB
		{Target: "web", CPUDelta: 10, ExpectPieces: 70}, // the size read is stale
	} {
		before, _, _ := s.ServiceRecord("web")
		_, err := s.Resize(ctx, bad)
		after, _, _ := s.ServiceRecord("web")
		if err == nil {
			t.Errorf("resize %+v of a service at count 0 accepted; record %+v", bad, after)
		}
		if after.Pieces != before.Pieces || after.Memory != before.Memory {
			t.Errorf("refused resize %+v changed the record: %d/%d → %d/%d", bad, before.Pieces, before.Memory, after.Pieces, after.Memory)
		}
	}
	ins, err := s.Resize(ctx, service.ResizeRequest{Target: "web", CPUDelta: 150, MemoryDelta: GiB, ExpectPieces: 50, ExpectMemory: GiB})
	if err != nil {
		t.Fatalf("resize of a service at count 0: %v", err)
	}
	if len(ins) != 0 {
		t.Errorf("resize of a service at count 0 returned instances %v", ins)
	}
	if _, err := s.Replace(ctx, service.ReplaceRequest{Target: "web", Image: "busybox:2", Pull: model.PullMissing}); err != nil {
		t.Fatalf("replace of a service at count 0: %v", err)
	}
	svc, n, ok := s.ServiceRecord("web")
	if !ok || n != 0 || svc.Pieces != 200 || svc.Memory != 2*GiB || svc.Image != "busybox:2" {
		t.Fatalf("record = %+v (count %d, %v); want 2 CPUs, 2 GiB, busybox:2, count 0", svc, n, ok)
	}
	res, err := s.Scale(ctx, "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Added) != 1 || res.Added[0].Pieces() != 200 || res.Added[0].Memory != 2*GiB || res.Added[0].Image != "busybox:2" {
		t.Errorf("scaled-up instance %+v; want 2 CPUs, 2 GiB, busybox:2", res.Added)
	}
	// A name that is neither is still refused.
	if _, err := s.Resize(ctx, service.ResizeRequest{Target: "nope", CPUDelta: 10}); service.CodeOf(err) != service.NotFound {
		t.Errorf("resize of an unknown name: %v, want not found", err)
	}
	if _, err := s.Replace(ctx, service.ReplaceRequest{Target: "nope", Image: "x", Pull: model.PullMissing}); service.CodeOf(err) != service.NotFound {
		t.Errorf("replace of an unknown name: %v, want not found", err)
	}
}
