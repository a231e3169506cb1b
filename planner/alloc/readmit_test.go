package alloc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// TestReadmit: a previous allocation goes back on its host (a resize the
// host refused is rolled back) only where it still fits: its CPUs'
// pieces, whole-cores marks, memory, its NUMA node, and the shared pool's
// floor, which a larger memory-first quota or bound CPUs taken back from
// the pool would break (the simulation found a rollback to a quota of
// 1.35 CPUs over a pool of 1).
func TestReadmit(t *testing.T) {
	t.Parallel()
	p := alloc.DefaultParams()
	bound := func(numa cpuset.NUMANodeID, cpus map[cpuset.CPUID]int) model.Allocation {
		return model.Allocation{Bind: true, CPUs: cpus, NUMANode: numa, Memory: GiB}
	}
	memFirst := func(quota int) model.Allocation {
		return model.Allocation{CPUs: map[cpuset.CPUID]int{}, NUMANode: -1, Memory: GiB, CPUQuota: quota}
	}
	// base: 4 CPUs; CPUs 0-1 used by other instances as given; two NUMA
	// nodes (0: CPUs 0-1, 1: CPUs 2-3) of 4 GiB.
	base := func(used map[int]int, memoryFirst map[int]int) *alloc.Host {
		h := host("h", 4, 100, used, 8*GiB)
		h.MemoryFirst = memoryFirst
		h.NUMANodes = []alloc.NUMANode{{ID: 0, CPUs: cpuset.Of[cpuset.CPUID](0, 1), MemoryBytes: 4 * GiB}, {ID: 1, CPUs: cpuset.Of[cpuset.CPUID](2, 3), MemoryBytes: 4 * GiB}}
		return h
	}
	for _, tc := range []struct {
		name string
		h    func() *alloc.Host
		a    model.Allocation
		want string // "" fits
	}{
		{"bound on free CPUs", func() *alloc.Host { return base(nil, nil) }, bound(1, map[cpuset.CPUID]int{2: 100, 3: 50}), ""},
		{"bound beside a fragment", func() *alloc.Host { return base(map[int]int{0: 50}, nil) }, bound(0, map[cpuset.CPUID]int{0: 50}), ""},
		{"pieces taken", func() *alloc.Host { return base(map[int]int{0: 60}, nil) }, bound(0, map[cpuset.CPUID]int{0: 50}), "CPU 0 has 40 of its 100 pieces free, 50 needed"},
		{"not a CPU of the host", func() *alloc.Host { return base(nil, nil) }, bound(-1, map[cpuset.CPUID]int{9: 100}), "CPU 9 is not one of its CPUs"},
		{"held by a whole-cores instance", func() *alloc.Host {
			h := base(map[int]int{0: 100}, nil)
			h.CPUs[0].Capacity, h.CPUs[0].WholeCores = 200, true
			return h
		}, bound(0, map[cpuset.CPUID]int{0: 50}), "CPU 0 is held by a whole-cores instance"},
		{"whole cores over another's fragment", func() *alloc.Host {
			h := base(map[int]int{1: 10}, nil)
			h.CPUs[1].Capacity = 200
			return h
		}, model.Allocation{Bind: true, WholeCores: true, CPUs: map[cpuset.CPUID]int{1: 100}, NUMANode: 0, Memory: GiB}, "CPU 1 of its whole cores holds 10 pieces of other instances"},
		{"host memory", func() *alloc.Host { h := base(nil, nil); h.MemoryUsed = 7*GiB + 1; return h }, memFirst(100), "memory: 1073741823 B free, 1 GiB needed"},
		{"NUMA node memory", func() *alloc.Host { h := base(nil, nil); h.NUMANodes[1].MemoryUsed = 3*GiB + 1; return h }, bound(1, map[cpuset.CPUID]int{2: 100}), "NUMA node 1 memory"},
		{"no such NUMA node", func() *alloc.Host { return base(nil, nil) }, bound(5, map[cpuset.CPUID]int{2: 100}), "no NUMA node 5"},
		{"a quota the pool holds", func() *alloc.Host { return base(map[int]int{0: 100, 1: 100}, nil) }, memFirst(200), ""},
		{"a quota larger than the pool", func() *alloc.Host { return base(map[int]int{0: 100, 1: 100, 2: 100}, map[int]int{100: 1}) }, memFirst(135),
			`the shared pool would be 1 CPUs ("3"), below a memory-first quota of 1.35 CPUs`},
		{"bound CPUs the pool needs", func() *alloc.Host { return base(map[int]int{0: 100}, map[int]int{300: 1}) }, bound(1, map[cpuset.CPUID]int{3: 100}),
			`the shared pool would be 2 CPUs ("1-2"), below a memory-first quota of 3 CPUs`},
		{"bound CPUs the pool can spare", func() *alloc.Host { return base(nil, map[int]int{300: 1}) }, bound(1, map[cpuset.CPUID]int{3: 100}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h()
			err := alloc.Readmit(p, h, tc.a)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Readmit = %v, want it to fit", err)
				}
				return
			}
			var ae *alloc.Error
			if !errors.As(err, &ae) || ae.Code != alloc.CodeResizeNoFit || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Readmit = %v, want %s naming %q", err, alloc.CodeResizeNoFit, tc.want)
			}
		})
	}
	if err := alloc.Readmit(alloc.Params{ShareBase: 1}, host("h", 1, 1, nil, GiB), memFirst(1)); err == nil {
		t.Errorf("share base 1 accepted")
	}
}
