package alloc_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// twoNodeHost: 8 CPUs, NUMA node 0 = 0-3, node 1 = 4-7, 8 GiB (4 per node).
func twoNodeHost(used map[int]int, mem, mem0 int64) *alloc.Host {
	h := host("h1", 8, 100, used, 8*GiB)
	h.MemoryUsed = mem
	h.NUMANodes = []alloc.NUMANode{
		{ID: 0, CPUs: cpuset.MustParseCPUs("0-3"), MemoryBytes: 4 * GiB, MemoryUsed: mem0},
		{ID: 1, CPUs: cpuset.MustParseCPUs("4-7"), MemoryBytes: 4 * GiB},
	}
	return h
}

func TestPlanResize(t *testing.T) {
	t.Parallel()
	cur := model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{1: 100, 2: 70}, NUMANode: 0, Memory: GiB}
	tests := []struct {
		name     string
		host     *alloc.Host
		rz       alloc.Resize
		want     alloc.Placement
		wantCode alloc.Code
	}{
		{
			name: "grow the fragment in place",
			host: twoNodeHost(map[int]int{1: 100, 2: 70}, GiB, GiB),
			rz:   alloc.Resize{Current: cur, CPUDelta: 20, Bind: true},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{1: 100, 2: 90}, NUMANode: 0, Memory: GiB}},
		},
		{
			name: "grow by 0.7: the old fragment CPU becomes whole, a new fragment nearby",
			host: twoNodeHost(map[int]int{1: 100, 2: 70}, GiB, GiB),
			rz:   alloc.Resize{Current: cur, CPUDelta: 70, MemoryDelta: GiB / 2, Bind: true},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{1: 100, 2: 100, 3: 40}, NUMANode: 0, Memory: GiB + GiB/2}},
		},
		{
			name: "shrink keeps the whole CPU",
			host: twoNodeHost(map[int]int{1: 100, 2: 70}, GiB, GiB),
			rz:   alloc.Resize{Current: cur, CPUDelta: -70, Bind: true},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{1: 100}, NUMANode: 0, Memory: GiB}},
		},
		{
			name: "shrink below one CPU keeps the old whole CPU as the fragment",
			host: twoNodeHost(map[int]int{1: 100, 2: 70}, GiB, GiB),
			rz:   alloc.Resize{Current: cur, CPUDelta: -120, Bind: true},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{2: 50}, NUMANode: 0, Memory: GiB}},
		},
		{
			name: "fragment CPU shared with another instance stays a fragment",
			host: twoNodeHost(map[int]int{1: 100, 2: 100}, GiB, GiB), // someone else holds 30 of CPU 2
			rz:   alloc.Resize{Current: cur, CPUDelta: 100, Bind: true},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{1: 100, 0: 100, 2: 70}, NUMANode: 0, Memory: GiB}},
		},
		{
			name: "node 0 full: moves to node 1 (1.7+1.3 = 3 whole CPUs)",
			host: twoNodeHost(map[int]int{0: 100, 1: 100, 2: 70, 3: 100}, GiB, GiB),
			rz:   alloc.Resize{Current: cur, CPUDelta: 130, Bind: true},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{4: 100, 5: 100, 6: 100}, NUMANode: 1, Memory: GiB}},
		},
		{
			name: "unbind: memory-first with the same CPU as quota",
			host: twoNodeHost(map[int]int{1: 100, 2: 70}, GiB, GiB),
			rz:   alloc.Resize{Current: cur, Bind: false},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, NUMANode: -1, Memory: GiB, CPUQuota: 170}},
		},
		{
			name: "bind a memory-first instance",
			host: twoNodeHost(nil, GiB, 0),
			rz:   alloc.Resize{Current: model.Allocation{CPUs: map[cpuset.CPUID]int{}, NUMANode: -1, Memory: GiB, CPUQuota: 150}, Bind: true},
			want: alloc.Placement{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 3: 50}, NUMANode: 0, Memory: GiB}},
		},
		{
			name:     "does not fit: memory",
			host:     twoNodeHost(map[int]int{1: 100, 2: 70}, 8*GiB, GiB),
			rz:       alloc.Resize{Current: cur, MemoryDelta: GiB, Bind: true},
			wantCode: alloc.CodeResizeNoFit,
		},
		{
			name:     "does not fit: CPUs",
			host:     twoNodeHost(map[int]int{1: 100, 2: 70}, GiB, GiB),
			rz:       alloc.Resize{Current: cur, CPUDelta: 700, Bind: true},
			wantCode: alloc.CodeResizeNoFit,
		},
		{
			name:     "below zero",
			host:     twoNodeHost(map[int]int{1: 100, 2: 70}, GiB, GiB),
			rz:       alloc.Resize{Current: cur, CPUDelta: -170, Bind: true},
			wantCode: alloc.CodeInvalid,
		},
		{
			name:     "current not held by the host",
			host:     twoNodeHost(nil, GiB, GiB),
			rz:       alloc.Resize{Current: cur, CPUDelta: 10, Bind: true},
			wantCode: alloc.CodeInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := *tt.host
			got, err := alloc.PlanResize(alloc.DefaultParams(), tt.host, tt.rz)
			if diff := cmp.Diff(before, *tt.host); diff != "" {
				t.Fatalf("PlanResize changed the host:\n%s", diff)
			}
			if tt.wantCode != "" {
				var ae *alloc.Error
				if !errors.As(err, &ae) || ae.Code != tt.wantCode {
					t.Fatalf("PlanResize error = %v, want %s", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("PlanResize (-want +got):\n%s", diff)
			}
		})
	}
}
