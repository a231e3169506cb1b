package service_test

import (
	"context"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestScaledToZeroResizeAsAnInstance: a resize of a service at count 0
// is accepted or refused as the same resize of the service with one
// instance would be, and leaves the record that one would: a record an
// instance could not have (whole_cores at a fraction of a CPU, or
// unbound) made every later scale fail, and a best-effort service (0
// CPUs, memory-first) could not change its memory at 0 at all.
func TestScaledToZeroResizeAsAnInstance(t *testing.T) {
	yes, no := true, false
	const MiB = int64(1) << 20
	for _, tc := range []struct {
		name   string
		deploy service.DeployRequest
		resize service.ResizeRequest
	}{
		{"whole cores by half a CPU", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 200, Bind: true, WholeCores: true, Memory: GiB}}}, service.ResizeRequest{CPUDelta: 50}},
		{"whole cores unbound", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 200, Bind: true, WholeCores: true, Memory: GiB}}}, service.ResizeRequest{Bind: &no}},
		{"whole cores by a core", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 200, Bind: true, WholeCores: true, Memory: GiB}}}, service.ResizeRequest{CPUDelta: 200}},
		{"best effort memory", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 0, Memory: GiB}}}, service.ResizeRequest{MemoryDelta: 64 * MiB}},
		{"memory-first to no CPU", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 50, Memory: GiB}}}, service.ResizeRequest{CPUDelta: -50}},
		{"memory-first below no CPU", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 50, Memory: GiB}}}, service.ResizeRequest{CPUDelta: -60}},
		{"bound to no CPU", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 50, Bind: true, Memory: GiB}}}, service.ResizeRequest{CPUDelta: -50}},
		{"best effort bound", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 0, Memory: GiB}}}, service.ResizeRequest{Bind: &yes}},
		{"bound to memory-first", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 150, Bind: true, Memory: GiB}}}, service.ResizeRequest{Bind: &no, CPUDelta: 20}},
		{"soft limit follows", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 50, Memory: GiB, MemorySoft: 768 * MiB}}}, service.ResizeRequest{MemoryDelta: -512 * MiB}},
		{"too little memory", service.DeployRequest{Deploy: model.Deploy{Size: model.Size{Pieces: 50, Memory: GiB}}}, service.ResizeRequest{MemoryDelta: -GiB + MiB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			run := func(count int) (error, []any) {
				s := newMemService(t)
				register(t, s, "h1", topologytest.Laptop().Topology())
				d := tc.deploy
				d.Service, d.Spec, d.Count = "web", model.Spec{Image: "busybox:1"}, 1
				if _, err := s.Deploy(ctx, d); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Scale(ctx, "web", count); err != nil {
					t.Fatal(err)
				}
				r := tc.resize
				r.Target = "web"
				before, _, _ := s.ServiceRecord("web")
				_, err := s.Resize(ctx, r)
				svc, _, _ := s.ServiceRecord("web")
				if err != nil && (svc.Pieces != before.Pieces || svc.Bind != before.Bind || svc.Memory != before.Memory) {
					t.Errorf("count %d: refused resize changed the record: %+v → %+v", count, before, svc)
				}
				if count == 0 && err == nil {
					// The instances a scale adds get the record's size.
					res, err := s.Scale(ctx, "web", 1)
					if err != nil {
						t.Fatalf("scale to 1 after the resize at count 0: %v (record %d pieces, bind %v, whole cores %v)", err, svc.Pieces, svc.Bind, svc.WholeCores)
					}
					if in := res.Added[0]; in.Pieces() != svc.Pieces || in.Bind != svc.Bind || in.Memory != svc.Memory || in.MemorySoft != svc.MemorySoft {
						t.Errorf("scaled-up instance %d pieces bind %v %d/%d bytes; record %d pieces bind %v %d/%d",
							in.Pieces(), in.Bind, in.Memory, in.MemorySoft, svc.Pieces, svc.Bind, svc.Memory, svc.MemorySoft)
					}
					verify(t, s)
				}
				return err, []any{svc.Pieces, svc.Bind, svc.Memory, svc.MemorySoft}
			}
			err1, rec1 := run(1)
			err0, rec0 := run(0)
			if (err1 == nil) != (err0 == nil) {
				t.Fatalf("with one instance: %v; at count 0: %v; want both accepted or both refused", err1, err0)
			}
			if err0 != nil && service.CodeOf(err0) != service.CodeOf(err1) {
				t.Errorf("refused at count 0 as %v, with one instance as %v", err0, err1)
			}
			if err0 == nil && !equalAll(rec0, rec1) {
				t.Errorf("record after the resize at count 0 %v, with one instance %v (pieces, bind, memory, soft)", rec0, rec1)
			}
		})
	}
}

func equalAll(a, b []any) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
