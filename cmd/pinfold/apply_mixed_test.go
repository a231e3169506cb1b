package main

import (
	"testing"

	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
)

// TestDiffResizesInstancesOfAnotherSize: a service whose instances do not
// all have the record's size (an instance resized on its own, or the
// service deployed again at another size) is not "same" as a file at the
// record's size: diff resizes each such instance to the record's size by
// its own delta (a resize of the service would move it by the service's
// delta and keep it apart), naming the size it read.
func TestDiffResizesInstancesOfAnotherSize(t *testing.T) {
	rec := &pinfoldv1.ServiceRecord{Name: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Strategy: "auto", Count: 2, ShareBase: 100}
	want := wantService{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Count: 2}}
	same := &pinfoldv1.Instance{Id: "u-1", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}
	no := false
	tests := []struct {
		name   string
		other  *pinfoldv1.Instance
		resize *pinfoldv1.ResizeRequest // nil: no step
		detail string
	}{
		{"all of the record's size", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}, nil, ""},
		{"bound, 1 CPU, 1 GiB", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, Bind: true, Cpus: map[int32]int32{9: 100}, ShareBase: 100},
			&pinfoldv1.ResizeRequest{Target: "u-2", CpuDelta: "1", MemoryDeltaBytes: 1 << 30, Bind: &no, ExpectCpu: "1", ExpectMemoryBytes: 1 << 30},
			"instance u-2 to the service's size: cpu 1 (bound) → 2 (memory-first), memory 1 GiB → 2 GiB"},
		{"less memory", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, CpuQuotaPieces: 200, ShareBase: 100},
			&pinfoldv1.ResizeRequest{Target: "u-2", MemoryDeltaBytes: 1 << 30, ExpectCpu: "2", ExpectMemoryBytes: 1 << 30},
			"instance u-2 to the service's size: memory 1 GiB → 2 GiB"},
		{"a larger quota", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 250, ShareBase: 100},
			&pinfoldv1.ResizeRequest{Target: "u-2", CpuDelta: "-0.5", ExpectCpu: "2.5", ExpectMemoryBytes: 2 << 30},
			"instance u-2 to the service's size: cpu 2.5 (memory-first) → 2 (memory-first)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, blocked := diffService(want, rec, []*pinfoldv1.Instance{same, tt.other})
			if len(blocked) > 0 {
				t.Fatalf("blocked %q, want none", blocked)
			}
			if tt.resize == nil {
				if len(steps) != 0 {
					t.Errorf("steps %+v, want none", steps)
				}
				return
			}
			if len(steps) != 1 || steps[0].Action != "resize" || steps[0].Detail != tt.detail {
				t.Fatalf("steps %+v, want one resize: %s", steps, tt.detail)
			}
			got, w := steps[0].resize, tt.resize
			if got.Target != w.Target || got.CpuDelta != w.CpuDelta || got.MemoryDeltaBytes != w.MemoryDeltaBytes || (got.Bind == nil) != (w.Bind == nil) ||
				got.Bind != nil && *got.Bind != *w.Bind || got.ExpectCpu != w.ExpectCpu || got.ExpectMemoryBytes != w.ExpectMemoryBytes {
				t.Errorf("resize %+v, want %+v", got, w)
			}
		})
	}
}
