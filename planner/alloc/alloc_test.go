package alloc_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology"
)

const (
	MiB = int64(1) << 20
	GiB = int64(1) << 30
)

// host builds a host with n CPUs of capacity sb and the given used pieces.
func host(name string, n, sb int, used map[int]int, mem int64) *alloc.Host {
	h := &alloc.Host{Name: name, MemoryBytes: mem, Instances: map[string]int{}}
	for i := range n {
		h.CPUs = append(h.CPUs, alloc.CPU{ID: cpuset.CPUID(i), Capacity: sb, Used: used[i]})
	}
	return h
}

// memHost is a host whose memory-first capacity for 1 GiB instances is cap.
func memHost(name string, capacity, existing int) *alloc.Host {
	h := host(name, 64, 100, nil, int64(capacity)*GiB)
	h.Instances["web"] = existing
	return h
}

func counts(res *alloc.Result) map[string]int {
	out := map[string]int{}
	for _, p := range res.Placements {
		out[p.Host]++
	}
	return out
}

// TestSeedFragmentExample: seed 004's 1.7 CPU request (one whole CPU plus 70
// pieces of a second), and the worked example with NUMA and an
// already fragmented CPU.
func TestSeedFragmentExample(t *testing.T) {
	t.Parallel()
	h := host("h1", 4, 100, map[int]int{1: 30}, 4*GiB)
	h.MemoryUsed = GiB
	h.NUMANodes = []alloc.NUMANode{
		{ID: 0, CPUs: cpuset.MustParseCPUs("0-1"), MemoryBytes: 2 * GiB, MemoryUsed: GiB},
		{ID: 1, CPUs: cpuset.MustParseCPUs("2-3"), MemoryBytes: 2 * GiB},
	}
	h.Instances["web"] = 2
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h},
		alloc.Request{Service: "web", Count: 2, Pieces: 170, Bind: true, MemoryBytes: 512 * MiB, Strategy: alloc.Auto})
	if err != nil {
		t.Fatal(err)
	}
	want := []alloc.Placement{
		{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 1: 70}, NUMANode: 0, Memory: 512 * MiB}},
		{Host: "h1", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{2: 100, 3: 70}, NUMANode: 1, Memory: 512 * MiB}},
	}
	if diff := cmp.Diff(want, res.Placements); diff != "" {
		t.Errorf("placements (-want +got):\n%s", diff)
	}
	if res.Capacity["h1"] != 2 || res.TotalCapacity != 2 {
		t.Errorf("capacity = %v total %d, want h1:2 total 2", res.Capacity, res.TotalCapacity)
	}
	// A third does not fit: the error names the host and what ran out.
	_, err = alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h},
		alloc.Request{Service: "web", Count: 3, Pieces: 170, Bind: true, MemoryBytes: 512 * MiB})
	var ae *alloc.Error
	if !errors.As(err, &ae) || ae.Code != alloc.CodeInsufficient || !errors.Is(err, alloc.ErrInsufficient) ||
		ae.Message != "need 3 instances of web, the hosts can take 2: h1 takes 2 (cpu)" {
		t.Errorf("Plan(count 3) error = %#v", err)
	}
}

// TestSeedNUMAExample: 2 NUMA nodes × (2 cores, 1 GiB), 1 CPU + 600 MiB → 3:
// one on each node and one across nodes.
func TestSeedNUMAExample(t *testing.T) {
	t.Parallel()
	h := host("h", 4, 100, nil, 2*GiB)
	h.NUMANodes = []alloc.NUMANode{
		{ID: 0, CPUs: cpuset.MustParseCPUs("0-1"), MemoryBytes: GiB},
		{ID: 1, CPUs: cpuset.MustParseCPUs("2-3"), MemoryBytes: GiB},
	}
	r := alloc.Request{Service: "s", Count: 3, Pieces: 100, Bind: true, MemoryBytes: 600 * MiB}
	if c := alloc.HostCapacity(alloc.DefaultParams(), h, r); c.Count != 3 {
		t.Fatalf("capacity = %+v, want 3", c)
	}
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, r)
	if err != nil {
		t.Fatal(err)
	}
	var numa []cpuset.NUMANodeID
	for _, p := range res.Placements {
		numa = append(numa, p.NUMANode)
	}
	if !slices.Equal(numa, []cpuset.NUMANodeID{0, 1, -1}) {
		t.Errorf("NUMA nodes of the 3 placements = %v, want [0 1 -1]", numa)
	}
	if cross := res.Placements[2].CPUs; len(cross) != 1 {
		t.Errorf("cross-node placement = %v", cross)
	}
}

// TestSeedAuto: existing A:3 B:1 C:5 D:4, room A:10 B:13 C:7 D:2. Up to 11
// new instances level out evenly; beyond that D is full and A, B, C level.
func TestSeedAuto(t *testing.T) {
	t.Parallel()
	hosts := []*alloc.Host{memHost("A", 10, 3), memHost("B", 13, 1), memHost("C", 7, 5), memHost("D", 2, 4)}
	tests := []struct {
		count int
		want  map[string]int // new instances
	}{
		{2, map[string]int{"B": 2}},
		{4, map[string]int{"A": 1, "B": 3}},
		{11, map[string]int{"A": 3, "B": 5, "C": 1, "D": 2}}, // B:6 A:6 D:6 C:6
		{14, map[string]int{"A": 4, "B": 6, "C": 2, "D": 2}}, // D is out of room
		{32, map[string]int{"A": 10, "B": 13, "C": 7, "D": 2}},
	}
	for _, tt := range tests {
		res, err := alloc.Plan(alloc.DefaultParams(), hosts, alloc.Request{Service: "web", Count: tt.count, Bind: false, MemoryBytes: GiB, Strategy: alloc.Auto})
		if err != nil {
			t.Fatalf("auto %d: %v", tt.count, err)
		}
		if diff := cmp.Diff(tt.want, counts(res)); diff != "" {
			t.Errorf("auto %d (-want +got):\n%s", tt.count, diff)
		}
	}
	if _, err := alloc.Plan(alloc.DefaultParams(), hosts, alloc.Request{Service: "web", Count: 33, MemoryBytes: GiB}); !errors.Is(err, alloc.ErrInsufficient) {
		t.Errorf("auto 33 error = %v, want insufficient", err)
	}
}

// TestSeedEach: room A:5 B:3 C:7 D:4; N=3 → 3 on each (12); N=5 → A and C.
func TestSeedEach(t *testing.T) {
	t.Parallel()
	hosts := []*alloc.Host{memHost("A", 5, 0), memHost("B", 3, 0), memHost("C", 7, 0), memHost("D", 4, 0)}
	for _, tt := range []struct {
		n    int
		want map[string]int
	}{
		{3, map[string]int{"A": 3, "B": 3, "C": 3, "D": 3}},
		{5, map[string]int{"A": 5, "C": 5}},
	} {
		res, err := alloc.Plan(alloc.DefaultParams(), hosts, alloc.Request{Service: "web", Count: tt.n, MemoryBytes: GiB, Strategy: alloc.Each})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, counts(res)); diff != "" {
			t.Errorf("each %d (-want +got):\n%s", tt.n, diff)
		}
	}
	_, err := alloc.Plan(alloc.DefaultParams(), hosts, alloc.Request{Service: "web", Count: 8, MemoryBytes: GiB, Strategy: alloc.Each})
	var ae *alloc.Error
	if !errors.As(err, &ae) || ae.Code != alloc.CodeNoHost {
		t.Errorf("each 8 error = %v, want no_host_qualifies", err)
	}
}

// TestSeedFill reproduces the fill examples (host:room:existing).
func TestSeedFill(t *testing.T) {
	t.Parallel()
	type hc struct {
		name           string
		room, existing int
	}
	tests := []struct {
		name     string
		hosts    []hc
		n        int
		want     map[string]int
		wantCode alloc.Code
	}{
		{"fill to 10", []hc{{"A", 10, 2}, {"B", 10, 3}, {"C", 10, 5}, {"D", 10, 7}}, 10, map[string]int{"A": 8, "B": 7, "C": 5, "D": 3}, ""},
		{"fill to 5", []hc{{"A", 10, 2}, {"B", 10, 3}, {"C", 10, 5}, {"D", 10, 7}}, 5, map[string]int{"A": 3, "B": 2}, ""},
		{"all or nothing", []hc{{"A", 3, 5}, {"B", 1, 5}, {"C", 1, 5}, {"D", 1, 5}}, 7, nil, alloc.CodeFillImpossible},
		{"hosts above N are left alone", []hc{{"A", 10, 2}, {"B", 5, 3}, {"C", 7, 4}, {"D", 9, 5}}, 4, map[string]int{"A": 2, "B": 1}, ""},
	}
	for _, tt := range tests {
		var hosts []*alloc.Host
		for _, h := range tt.hosts {
			hosts = append(hosts, memHost(h.name, h.room, h.existing))
		}
		res, err := alloc.Plan(alloc.DefaultParams(), hosts, alloc.Request{Service: "web", Count: tt.n, MemoryBytes: GiB, Strategy: alloc.Fill})
		if tt.wantCode != "" {
			var ae *alloc.Error
			if !errors.As(err, &ae) || ae.Code != tt.wantCode || !slices.Equal(ae.Hosts, []string{"B", "C", "D"}) {
				t.Errorf("%s: error = %v, want %s naming B, C, D", tt.name, err, tt.wantCode)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, counts(res)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestGlobalAndDrained: global puts each instance where the used share after
// one more is lowest; drained fills the smallest remaining capacity first.
func TestGlobalAndDrained(t *testing.T) {
	t.Parallel()
	mk := func() []*alloc.Host {
		a := host("a", 4, 100, map[int]int{0: 100, 1: 100}, 8*GiB) // 50% CPU used
		b := host("b", 4, 100, nil, 8*GiB)                         // 0%
		c := host("c", 8, 100, nil, 8*GiB)                         // 0%, twice as big
		return []*alloc.Host{a, b, c}
	}
	res, err := alloc.Plan(alloc.DefaultParams(), mk(), alloc.Request{Service: "s", Count: 4, Pieces: 100, Bind: true, MemoryBytes: GiB, Strategy: alloc.Global})
	if err != nil {
		t.Fatal(err)
	}
	// c after 1: 1/8; b after 1: 1/4 (tie with c after 2: 2/8 → b by name); a after 1: 3/4.
	if diff := cmp.Diff(map[string]int{"b": 1, "c": 3}, counts(res)); diff != "" {
		t.Errorf("global (-want +got):\n%s", diff)
	}
	res, err = alloc.Plan(alloc.DefaultParams(), mk(), alloc.Request{Service: "s", Count: 5, Pieces: 100, Bind: true, MemoryBytes: GiB, Strategy: alloc.Drained})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"a": 2, "b": 3}, counts(res)); diff != "" {
		t.Errorf("drained (-want +got):\n%s", diff)
	}
	// max_per_host caps how many a host takes, not how full it is: a (2
	// free) still goes first, though capped at 2 it ties with b and c; one
	// instance and several, for any seed (a trial found the emptier host
	// chosen by the seed's hash).
	for seed := range uint64(20) {
		for _, n := range []int{1, 3} {
			res, err = alloc.Plan(alloc.DefaultParams(), mk(), alloc.Request{Service: "s", Count: n, Pieces: 100, Bind: true, MemoryBytes: GiB, Strategy: alloc.Drained, MaxPerHost: 2, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			if got := counts(res); got["a"] != min(n, 2) {
				t.Errorf("drained, max per host 2, count %d, seed %d: %v, want a filled first", n, seed, got)
			}
		}
	}
}

// TestSeedSpreadsTies: with a seed, equally good hosts are ordered by a hash
// of (seed, name): deterministic per seed, different across seeds.
func TestSeedSpreadsTies(t *testing.T) {
	t.Parallel()
	var hosts []*alloc.Host
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		hosts = append(hosts, memHost(n, 10, 0))
	}
	first := map[string]bool{}
	for seed := uint64(0); seed < 16; seed++ {
		r := alloc.Request{Service: "web", Count: 1, MemoryBytes: GiB, Seed: seed}
		res, err := alloc.Plan(alloc.DefaultParams(), hosts, r)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := alloc.Plan(alloc.DefaultParams(), hosts, r)
		if again.Placements[0].Host != res.Placements[0].Host {
			t.Fatalf("seed %d not deterministic", seed)
		}
		if seed == 0 && res.Placements[0].Host != "a" {
			t.Errorf("seed 0 picked %s, want a (name order)", res.Placements[0].Host)
		}
		first[res.Placements[0].Host] = true
	}
	if len(first) < 4 {
		t.Errorf("16 seeds picked only %d distinct hosts among 8 equal ones", len(first))
	}
}

func TestMaxPerHost(t *testing.T) {
	t.Parallel()
	hosts := []*alloc.Host{memHost("A", 10, 3), memHost("B", 10, 0)}
	res, err := alloc.Plan(alloc.DefaultParams(), hosts, alloc.Request{Service: "web", Count: 5, MemoryBytes: GiB, MaxPerHost: 4})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"A": 1, "B": 4}, counts(res)); diff != "" {
		t.Errorf("max_per_host (-want +got):\n%s", diff)
	}
	_, err = alloc.Plan(alloc.DefaultParams(), hosts, alloc.Request{Service: "web", Count: 6, MemoryBytes: GiB, MaxPerHost: 4})
	if err == nil || !slices.Contains([]string{err.Error()}, "need 6 instances of web, the hosts can take 5: A takes 1 (max_per_host), B takes 4 (max_per_host)") {
		t.Errorf("max_per_host shortage error = %v", err)
	}
}

// TestRounding: 0.29 CPU at base 100 is 29 pieces (Eru truncated to 28);
// an amount off the grid of pieces is refused with the nearest amounts on
// it, not rounded to a size nobody asked for.
func TestRounding(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cpu     float64
		base    int
		want    int
		wantErr string
	}{
		{0.29, 100, 29, ""}, {0.57, 100, 57, ""}, {1.15, 100, 115, ""}, {2.3, 100, 230, ""}, {0.001, 1000, 1, ""}, {1.7, 10, 17, ""},
		{999999.99, 100, 99999999, ""}, {1e6, 10000, 1e10, ""},
		// FormatPieces's 4 decimals at a base that is not a power of ten
		{0.0003, 3000, 1, ""}, {1.6667, 3, 5, ""}, {0.3333, 3000, 1000, ""},
		{0.0004, 1000, 0, "cpu = 0.0004: less than one piece of a CPU (1 piece = 0.001 CPU at share base 1000): the smallest amount above 0 is 0.001"},
		{0.505, 100, 0, "cpu = 0.505: not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are 0.5 and 0.51"},
		{1.25, 10, 0, "the nearest amounts are 1.2 and 1.3"},
		{0.0005, 3000, 0, "the nearest amounts are 0.0003 and 0.0007"},
		{1.5, 3, 0, "at share base 3"},
		// Float noise is a few units in the last place of cpu × base, not
		// a millionth of a piece: an amount 1/100 piece off the grid near
		// the top was taken as the piece beside it.
		{999999.999999, 10000, 0, "the nearest amounts are 999999.9999 and 1000000"},
		{1e-7, 10, 0, "cpu = 1e-07: less than one piece of a CPU"},
		{0.1 + 0.2, 100, 30, ""}, {math.Copysign(0, -1), 100, 0, ""}, {1e6, 9999, 9999e6, ""},
		// At a base that is not a power of ten, only amounts of at most 4
		// decimals are taken as the piece they round (either way at a tie):
		// 0.00015 at 9999 is neither 1 piece (0.00010001) nor its 0.0001.
		{0.00015, 9999, 0, "the nearest amounts are 0.0001 and 0.0002"},
		{0.00062, 3000, 0, "the nearest amounts are 0.0003 and 0.0007"},
		{0.00004, 64, 0, "less than one piece of a CPU (1 piece = 0.0156 CPU at share base 64)"},
		{0.01566, 64, 0, "the nearest amounts are 0.0156 and 0.0312"},
		{0.0156, 64, 1, ""}, {0.015625, 64, 1, ""}, {0.0312, 32, 1, ""}, {0.0313, 32, 1, ""}, {0.0001, 9999, 1, ""},
		{999999.9999, 9999, 9998999999, ""},
		// A share base below 1 (invalid) converts nothing.
		{1, 0, 0, "share base 0"}, {1, -100, 0, "share base -100"},
	} {
		got, err := alloc.PiecesOf("cpu", tt.cpu, tt.base)
		checkPieces(t, fmt.Sprintf("PiecesOf(%v, %d)", tt.cpu, tt.base), got, err, tt.want, tt.wantErr)
	}
	h := host("h", 1, 100, nil, GiB)
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, alloc.Request{Service: "s", Count: 1, Pieces: 29, Bind: true, MemoryBytes: MiB})
	if err != nil || res.Placements[0].CPUs[0] != 29 {
		t.Errorf("0.29 CPU placement = %+v, %v", res, err)
	}
}

// TestEruPitfalls covers the bugs research/eru.md §10 says not to copy.
func TestEruPitfalls(t *testing.T) {
	t.Parallel()
	// #2: MaxFragmentCores below the existing fragment count must not panic;
	// the existing fragments are used without converting whole CPUs.
	h := host("h", 3, 100, map[int]int{0: 50, 1: 50}, GiB)
	p := alloc.Params{ShareBase: 100, MaxFragmentCores: 1}
	r := alloc.Request{Service: "s", Count: 2, Pieces: 30, Bind: true, MemoryBytes: MiB}
	if c := alloc.HostCapacity(p, h, r); c.Count != 2 {
		t.Errorf("capacity with MF=1 and 2 fragments = %d, want 2", c.Count)
	}
	res, err := alloc.Plan(p, []*alloc.Host{h}, r)
	if err != nil || res.Placements[0].CPUs[0] != 30 || res.Placements[1].CPUs[1] != 30 {
		t.Errorf("fragment placements = %+v, %v", res, err)
	}
	// #3: numeric CPU order: with CPUs 0..11, whole picks are 0, 1, 2 … not "10" before "2".
	h = host("h", 12, 100, nil, GiB)
	res, err = alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, alloc.Request{Service: "s", Count: 1, Pieces: 300, Bind: true, MemoryBytes: MiB})
	if err != nil || !slices.Equal(slices.Sorted(maps.Keys(res.Placements[0].CPUs)), []cpuset.CPUID{0, 1, 2}) {
		t.Errorf("3 whole CPUs = %+v, %v", res, err)
	}
	// Oversold CPUs (core#504): {0:200,1:200,2:200} gives 3 plans of 2 CPUs,
	// never 200 pieces of one CPU to one instance.
	h = host("h", 3, 200, nil, GiB)
	r = alloc.Request{Service: "s", Count: 3, Pieces: 200, Bind: true, MemoryBytes: MiB}
	res, err = alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range res.Placements {
		if len(pl.CPUs) != 2 {
			t.Errorf("oversold placement %v: want 2 distinct CPUs of 100", pl.CPUs)
		}
	}
}

// TestMaxFragmentCores: with MF=1 and no fragments yet, only one CPU may be
// converted, so at most floor(100/30)=3 fragments of 0.3 exist.
func TestMaxFragmentCores(t *testing.T) {
	t.Parallel()
	h := host("h", 8, 100, nil, 64*GiB)
	p := alloc.Params{ShareBase: 100, MaxFragmentCores: 1}
	if c := alloc.HostCapacity(p, h, alloc.Request{Pieces: 130, Bind: true, MemoryBytes: MiB}); c.Count != 3 {
		t.Errorf("1.3 CPU with MF=1 on 8 CPUs = %d, want 3", c.Count)
	}
	if c := alloc.HostCapacity(alloc.DefaultParams(), h, alloc.Request{Pieces: 130, Bind: true, MemoryBytes: MiB}); c.Count != 6 {
		t.Errorf("1.3 CPU without MF on 8 CPUs = %d, want 6 (6 whole + 2 fragment CPUs)", c.Count)
	}
}

func TestMemoryFirst(t *testing.T) {
	t.Parallel()
	h := host("h", 4, 100, map[int]int{0: 100}, 10*GiB)
	r := alloc.Request{Service: "s", Count: 3, Pieces: 250, Bind: false, MemoryBytes: 3 * GiB}
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range res.Placements {
		if len(pl.CPUs) != 0 || pl.CPUQuota != 250 || pl.NUMANode != -1 {
			t.Errorf("memory-first placement = %+v", pl)
		}
	}
	if c := alloc.HostCapacity(alloc.DefaultParams(), h, r); c.Count != 3 || c.Limit() != "memory" {
		t.Errorf("capacity = %+v limit %s", c, c.Limit())
	}
	// A quota above the shared pool (3 CPUs not bound) cannot be met.
	if c := alloc.HostCapacity(alloc.DefaultParams(), h, alloc.Request{Pieces: 350, MemoryBytes: GiB}); c.Count != 0 || c.Limit() != "cpu" {
		t.Errorf("quota 3.5 over a 3-CPU pool: capacity %+v", c)
	}
}

func TestValidateRequest(t *testing.T) {
	t.Parallel()
	hosts := []*alloc.Host{host("h", 2, 100, nil, GiB)}
	tests := []struct {
		r     alloc.Request
		field string
	}{
		{alloc.Request{Count: 1, Pieces: 100, Bind: true, MemoryBytes: 1}, "request.service"},
		{alloc.Request{Service: "s", Count: 0, Pieces: 100, Bind: true, MemoryBytes: 1}, "request.count"},
		{alloc.Request{Service: "s", Count: 1, Pieces: 0, Bind: true, MemoryBytes: 1}, "request.cpu"},
		{alloc.Request{Service: "s", Count: alloc.MaxCount + 1, Pieces: 100, MemoryBytes: 1}, "request.count"},
		{alloc.Request{Service: "s", Count: 1, Pieces: 100, Bind: true, MemoryBytes: 0}, "request.memory_bytes"},
		{alloc.Request{Service: "s", Count: 1, Pieces: 100, Bind: true, MemoryBytes: 1, Strategy: "best"}, "request.strategy"},
		{alloc.Request{Service: "s", Count: 1, Pieces: 100, Bind: true, MemoryBytes: 1, MaxPerHost: -1}, "request.max_per_host"},
	}
	for _, tt := range tests {
		_, err := alloc.Plan(alloc.DefaultParams(), hosts, tt.r)
		var ae *alloc.Error
		if !errors.As(err, &ae) || ae.Code != alloc.CodeInvalid || ae.Field != tt.field {
			t.Errorf("Plan(%+v) error = %v, want invalid %s", tt.r, err, tt.field)
		}
	}
	if err := (alloc.Params{ShareBase: 5, MaxFragmentCores: -1}).Validate(); err == nil {
		t.Errorf("share_base 5 accepted")
	}
}

// TestKeptPool: bound placement leaves the largest memory-first quota,
// rounded up to whole CPUs, of the shared pool: its highest IDs, isolated
// CPUs and CPUs holding pieces not counted; all of a smaller pool.
func TestKeptPool(t *testing.T) {
	t.Parallel()
	host := func(used map[cpuset.CPUID]int, quotas map[int]int, isolated string) *alloc.Host {
		h := &alloc.Host{Name: "h", MemoryFirst: quotas}
		for id := range cpuset.CPUID(8) {
			h.CPUs = append(h.CPUs, alloc.CPU{ID: id, Capacity: 100, Used: used[id]})
		}
		if isolated != "" {
			h.Topology = &topology.Topology{Isolated: cpuset.MustParseCPUs(isolated)}
		}
		return h
	}
	for _, tt := range []struct {
		name string
		h    *alloc.Host
		want string
	}{
		{"no memory-first", host(nil, nil, ""), ""},
		{"quota 0 keeps nothing", host(nil, map[int]int{0: 3}, ""), ""},
		{"largest 2.5 keeps 3", host(nil, map[int]int{250: 1, 100: 4}, ""), "5-7"},
		{"held CPUs are no pool", host(map[cpuset.CPUID]int{7: 30}, map[int]int{150: 1}, ""), "5-6"},
		{"isolated CPUs are no pool", host(nil, map[int]int{200: 1}, "6-7"), "4-5"},
		{"a smaller pool is kept whole", host(map[cpuset.CPUID]int{0: 100, 1: 100, 2: 100, 3: 100, 4: 100, 5: 100}, map[int]int{500: 1}, ""), "6-7"},
		{"a count of 0 is no quota", host(nil, map[int]int{900: 0, 100: 1}, ""), "7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.KeptPool(100).String(); got != tt.want {
				t.Errorf("KeptPool = %q, want %q", got, tt.want)
			}
		})
	}
}
