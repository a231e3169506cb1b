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
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox:1"}, Size: model.Size{Pieces: 50, Memory: GiB}}}); err != nil {
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

// TestScaledToZeroResizeFollowsInstanceRules: the record of a service at
// count 0 is resized by the rules an instance's resize follows
// (alloc.PlanResize), so that the instances a scale adds can be placed:
// a whole-cores service stays bound and resizes by whole CPUs (before, a
// resize to 2.5 CPUs or --no-bind was taken, and every scale up was then
// refused with request.whole_cores), and a memory-first service may come
// to 0 CPUs as its instances may (before, refused "want more than 0"),
// while a bound one may not.
func TestScaledToZeroResizeFollowsInstanceRules(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name        string
		deploy      service.DeployRequest
		resize      service.ResizeRequest
		wantErr     bool
		wantPieces  int
		wantBind    bool
		wantScaleUp bool // a scale to 1 then places an instance of the new size
	}{
		{name: "whole cores to a fraction", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 200, Bind: true, WholeCores: true}}},
			resize: service.ResizeRequest{CPUDelta: 50}, wantErr: true},
		{name: "whole cores to memory-first", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 200, Bind: true, WholeCores: true}}},
			resize: service.ResizeRequest{Bind: &no}, wantErr: true},
		{name: "whole cores by a whole CPU", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 200, Bind: true, WholeCores: true}}},
			resize: service.ResizeRequest{CPUDelta: 200}, wantPieces: 400, wantBind: true, wantScaleUp: true},
		{name: "bound to 0 CPUs", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 150, Bind: true}}},
			resize: service.ResizeRequest{CPUDelta: -150}, wantErr: true},
		{name: "memory-first to 0 CPUs", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 50}}},
			resize: service.ResizeRequest{CPUDelta: -50}, wantPieces: 0, wantScaleUp: true},
		{name: "memory-first below 0 CPUs", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 50}}},
			resize: service.ResizeRequest{CPUDelta: -60}, wantErr: true},
		{name: "memory-first at 0 CPUs to bound", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 0}}},
			resize: service.ResizeRequest{Bind: &yes}, wantErr: true},
		{name: "bound to memory-first at 0 CPUs", deploy: service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 150, Bind: true}}},
			resize: service.ResizeRequest{CPUDelta: -150, Bind: &no}, wantPieces: 0, wantScaleUp: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newMemService(t)
			ctx := context.Background()
			register(t, s, "h1", topologytest.DualXeonGold6230().Topology())
			d := tt.deploy
			d.Service, d.Spec, d.Count, d.Memory = "db", model.Spec{Image: "busybox:1"}, 1, GiB
			if _, err := s.Deploy(ctx, d); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Scale(ctx, "db", 0); err != nil {
				t.Fatal(err)
			}
			before, _, _ := s.ServiceRecord("db")
			r := tt.resize
			r.Target = "db"
			_, err := s.Resize(ctx, r)
			after, _, _ := s.ServiceRecord("db")
			if tt.wantErr {
				if service.CodeOf(err) != service.Invalid {
					t.Errorf("resize %+v: %v, want invalid; record %+v", tt.resize, err, after)
				}
				if after.Pieces != before.Pieces || after.Bind != before.Bind || after.Memory != before.Memory {
					t.Errorf("refused resize changed the record: %d/%t → %d/%t", before.Pieces, before.Bind, after.Pieces, after.Bind)
				}
				return
			}
			if err != nil {
				t.Fatalf("resize %+v: %v", tt.resize, err)
			}
			if after.Pieces != tt.wantPieces || after.Bind != tt.wantBind {
				t.Errorf("record %d pieces, bind %t; want %d, %t", after.Pieces, after.Bind, tt.wantPieces, tt.wantBind)
			}
			if !tt.wantScaleUp {
				return
			}
			res, err := s.Scale(ctx, "db", 1)
			if err != nil {
				t.Fatalf("scale up after the resize: %v", err)
			}
			if len(res.Added) != 1 || res.Added[0].Pieces() != tt.wantPieces || res.Added[0].Bind != tt.wantBind {
				t.Errorf("scaled-up instance %+v; want %d pieces, bind %t", res.Added, tt.wantPieces, tt.wantBind)
			}
		})
	}
}
