package main

import (
	"testing"

	"github.com/pinfold/pinfold/planner/servicesfile"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestDiffResizesInstancesOfAnotherSize: a service whose instances do not
// all have the file's size (an instance resized on its own, or the service
// deployed again at another size) is not "same" as the file: diff sends one
// resize of the service to the file's size (to_cpu, to_memory_bytes), which
// moves each instance by its own delta, naming the record's size it read.
// An instance already at the file's size is not first brought to the
// record's: it was shrunk and grown again (two resizes per apply, and a
// memory shrink that could be refused).
func TestDiffResizesInstancesOfAnotherSize(t *testing.T) {
	rec := &pinfoldv1.ServiceRecord{Name: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Strategy: "auto", Count: 2, ShareBase: 100}
	want := servicesfile.Service{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Count: 2}}
	bigger := servicesfile.Service{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img2", Cpu: "3", MemoryBytes: 4 << 30, Count: 2}}
	same := &pinfoldv1.Instance{Id: "u-1", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}
	no := false
	to := func(cpu string, mem int64) *pinfoldv1.ResizeRequest {
		return &pinfoldv1.ResizeRequest{Target: "u", ToCpu: cpu, ToMemoryBytes: mem, Bind: &no, ExpectCpu: "2", ExpectMemoryBytes: 2 << 30}
	}
	tests := []struct {
		name   string
		want   servicesfile.Service
		other  *pinfoldv1.Instance
		resize *pinfoldv1.ResizeRequest // nil: no step
		detail string
	}{
		{"all of the record's size", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}, nil, ""},
		{"bound, 1 CPU, 1 GiB", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, Bind: true, Cpus: map[int32]int32{9: 100}, ShareBase: 100},
			to("2", 2<<30), "1 instance of another size to 2 (memory-first), 2 GiB: u-2 (1 (bound), 1 GiB)"},
		{"less memory", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, CpuQuotaPieces: 200, ShareBase: 100},
			to("2", 2<<30), "1 instance of another size to 2 (memory-first), 2 GiB: u-2 (2 (memory-first), 1 GiB)"},
		{"a larger quota", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 250, ShareBase: 100},
			to("2", 2<<30), "1 instance of another size to 2 (memory-first), 2 GiB: u-2 (2.5 (memory-first), 2 GiB)"},
		{"one already at the file's size", bigger, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 4 << 30, CpuQuotaPieces: 300, ShareBase: 100},
			to("3", 4<<30), "cpu 2 → 3 (+1), memory 2 GiB → 4 GiB; 1 instance of another size to 3 (memory-first), 4 GiB: u-1 (2 (memory-first), 2 GiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, blocked := diffService(tt.want, rec, []*pinfoldv1.Instance{same, tt.other})
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
			if got.Target != w.Target || got.CpuDelta != "" || got.MemoryDeltaBytes != 0 || got.ToCpu != w.ToCpu || got.ToMemoryBytes != w.ToMemoryBytes ||
				got.Bind == nil || *got.Bind != *w.Bind || got.ExpectCpu != w.ExpectCpu || got.ExpectMemoryBytes != w.ExpectMemoryBytes {
				t.Errorf("resize %+v, want %+v", got, w)
			}
		})
	}
}
