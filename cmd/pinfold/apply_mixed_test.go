package main

import (
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
)

// TestDiffSeesInstancesOfAnotherSize: a service whose instances do not all
// have the record's size (a deploy of the service again at another size
// adds such instances, and a resize moves every instance by one delta, so
// they stay apart) is not "same" as a file at the record's size: diff
// names the instance and asks for a recreate.
func TestDiffSeesInstancesOfAnotherSize(t *testing.T) {
	rec := &pinfoldv1.ServiceRecord{Name: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Strategy: "auto", Count: 2, ShareBase: 100}
	want := wantService{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Count: 2}}
	same := &pinfoldv1.Instance{Id: "u-1", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}
	tests := []struct {
		name    string
		other   *pinfoldv1.Instance
		blocked string // "" for none
	}{
		{"all of the record's size", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}, ""},
		{"bound, 1 CPU, 1 GiB", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, Bind: true, Cpus: map[int32]int32{9: 100}, ShareBase: 100},
			"instance u-2 has cpu 1 (bound), memory 1 GiB"},
		{"less memory", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, CpuQuotaPieces: 200, ShareBase: 100},
			"instance u-2 has cpu 2 (memory-first), memory 1 GiB"},
		{"another quota", &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 150, ShareBase: 100},
			"instance u-2 has cpu 1.5 (memory-first), memory 2 GiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, blocked := diffService(want, rec, []*pinfoldv1.Instance{same, tt.other})
			if tt.blocked == "" {
				if len(steps)+len(blocked) != 0 {
					t.Errorf("steps %v, blocked %v; want none", steps, blocked)
				}
				return
			}
			if len(blocked) != 1 || !strings.Contains(blocked[0], tt.blocked) {
				t.Errorf("blocked %q, want one naming %q (steps %v)", blocked, tt.blocked, steps)
			}
		})
	}
}
