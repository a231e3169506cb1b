package alloc_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// topoHost makes an allocation host of a topology fixture, 100 pieces a CPU.
func topoHost(t *topology.Topology) *alloc.Host {
	h := &alloc.Host{Name: "h", Topology: t, MemoryBytes: t.MemoryBytes(), Instances: map[string]int{}}
	for _, c := range t.CPUs {
		h.CPUs = append(h.CPUs, alloc.CPU{ID: c.ID, Capacity: 100})
	}
	for _, n := range t.NUMANodes {
		h.NUMANodes = append(h.NUMANodes, alloc.NUMANode{ID: n.ID, CPUs: n.CPUs, MemoryBytes: n.MemoryBytes})
	}
	return h
}

func cpusOf(p alloc.Placement) cpuset.CPUs { return cpuset.Of(slices.Collect(maps.Keys(p.CPUs))...) }

// TestWholeCoresFirst: on an SMT host, 2 whole CPUs are one physical core
// (both siblings), and 3 whole CPUs lie inside one L3 group (a CCX).
func TestWholeCoresFirst(t *testing.T) {
	t.Parallel()
	tp := topologytest.EPYC7402().Topology() // siblings i, i+48; CCX of 3 cores
	h := topoHost(tp)
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, alloc.Request{Service: "s", Count: 2, Pieces: 200, Bind: true, MemoryBytes: GiB})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Placements {
		c, _ := tp.CPU(cpusOf(p).Slice()[0])
		if !cpusOf(p).Equal(c.Siblings) {
			t.Errorf("2 CPUs = %s, want one whole core", cpusOf(p))
		}
	}
	// 3 CPUs + fragment: whole CPUs inside one L3 group, fragment in it too.
	res, err = alloc.Plan(alloc.DefaultParams(), []*alloc.Host{topoHost(tp)}, alloc.Request{Service: "s", Count: 1, Pieces: 350, Bind: true, MemoryBytes: GiB})
	if err != nil {
		t.Fatal(err)
	}
	got := cpusOf(res.Placements[0])
	c, _ := tp.CPU(got.Slice()[0])
	if !got.IsSubsetOf(c.L3) {
		t.Errorf("3.5 CPUs = %s, not inside one L3 group %s", got, c.L3)
	}
}

// TestSingleCPUsPackCores: 1-CPU instances fill both threads of a core before
// breaking the next one, so whole cores stay free for bigger requests.
func TestSingleCPUsPackCores(t *testing.T) {
	t.Parallel()
	tp := topologytest.Laptop().Topology() // siblings (0,4) (1,5) (2,6) (3,7)
	h := topoHost(tp)
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, alloc.Request{Service: "s", Count: 4, Pieces: 100, Bind: true, MemoryBytes: GiB})
	if err != nil {
		t.Fatal(err)
	}
	var all cpuset.CPUs
	for _, p := range res.Placements {
		all = all.Union(cpusOf(p))
	}
	if all.String() != "0-1,4-5" {
		t.Errorf("4 single CPUs = %s, want two whole cores 0-1,4-5", all)
	}
}

// TestFragmentsPackOnFragmentedCPUs: fragments go to CPUs already
// fragmented first, and converted CPUs are whole cores' both threads.
func TestFragmentsPackOnFragmentedCPUs(t *testing.T) {
	t.Parallel()
	tp := topologytest.Laptop().Topology()
	h := topoHost(tp)
	h.CPUs[2].Used = 50 // CPU 2 already carries a fragment
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, alloc.Request{Service: "s", Count: 3, Pieces: 30, Bind: true, MemoryBytes: GiB})
	if err != nil {
		t.Fatal(err)
	}
	var on []cpuset.CPUID
	for _, p := range res.Placements {
		on = append(on, cpusOf(p).Slice()...)
	}
	// 50 free on CPU 2 holds one 30; the next two go to one converted CPU.
	if on[0] != 2 || on[1] != on[2] {
		t.Errorf("fragments on %v, want CPU 2 first then one converted CPU twice", on)
	}
}

// TestFragmentFollowsL3: the fragment goes to the L3 group of the
// instance's whole CPUs when a CPU there holds it (an existing fragment
// CPU first, else a whole free CPU becomes one), and elsewhere only when
// the group has no room. EPYC 7402: L3 groups of 3 cores, siblings i and
// i+48; every CPU but the ones listed is held whole by others.
func TestFragmentFollowsL3(t *testing.T) {
	t.Parallel()
	tp := topologytest.EPYC7402().Topology()
	groupA := cpuset.MustParseCPUs("0-2,48-50")
	for _, tc := range []struct {
		name   string
		free   map[cpuset.CPUID]int // free pieces; every other CPU is full
		pieces int
		want   string // the instance's CPUs
	}{
		// Before: the fragment went to CPU 3 (best fit, another L3 group).
		{"a whole CPU of the group becomes the fragment CPU", map[cpuset.CPUID]int{0: 100, 1: 100, 2: 100, 48: 100, 49: 100, 50: 100, 3: 50, 4: 100, 5: 100, 51: 100}, 550, "0-2,48-50"},
		// Before: CPU 3 (30 free fits 30 more tightly than CPU 50's 50).
		{"the group's fragment CPU before a tighter one elsewhere", map[cpuset.CPUID]int{0: 100, 1: 100, 2: 100, 48: 100, 49: 100, 50: 50, 3: 30, 4: 100}, 530, "0-2,48-50"},
		{"no room in the group: the fragment goes elsewhere", map[cpuset.CPUID]int{0: 100, 1: 100, 2: 100, 48: 100, 49: 100, 3: 50}, 550, "0-3,48-49"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := topoHost(tp)
			for i := range h.CPUs {
				h.CPUs[i].Used = 100 - tc.free[h.CPUs[i].ID]
			}
			r := alloc.Request{Service: "s", Count: 1, Pieces: tc.pieces, Bind: true, MemoryBytes: GiB}
			if c := alloc.HostCapacity(alloc.DefaultParams(), h, r); c.Count < 1 {
				t.Fatalf("capacity %d", c.Count)
			}
			res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, r)
			if err != nil {
				t.Fatal(err)
			}
			if got := cpusOf(res.Placements[0]); got.String() != tc.want {
				t.Errorf("%s CPUs = %s, want %s (L3 group of CPU 0: %s)", alloc.FormatPieces(tc.pieces, 100), got, tc.want, groupA)
			}
		})
	}
}

// TestWholeCores: a whole-cores request (kubelet's full-pcpus-only) gets
// whole physical cores only, never a core another instance or the system
// touches, and capacity counts exactly those.
func TestWholeCores(t *testing.T) {
	t.Parallel()
	laptop := topologytest.Laptop().Topology() // siblings (0,4) (1,5) (2,6) (3,7)
	epyc := topologytest.EPYC7402().Topology() // siblings i, i+48; L3 groups of 3 cores
	sparse := topologytest.SMTOffSparse().Topology()
	for _, tc := range []struct {
		name     string
		tp       *topology.Topology
		setup    func(h *alloc.Host)
		pieces   int
		capacity int
		check    func(t *testing.T, got cpuset.CPUs)
	}{
		{"laptop: a CPU in use takes its core out", laptop, func(h *alloc.Host) { h.CPUs[0].Used = 30 }, 200, 3, nil},
		{"laptop: 3 CPUs are not whole cores of 2", laptop, nil, 300, 0, nil},
		{"laptop: an oversold CPU is not a whole core", laptop, func(h *alloc.Host) { h.CPUs[5].Capacity = 150 }, 200, 3, nil},
		{"laptop: a sibling reserved for the system", laptop, func(h *alloc.Host) { h.CPUs = slices.Delete(h.CPUs, 6, 7) }, 200, 3, nil},
		{"laptop: 4 CPUs are two cores", laptop, nil, 400, 2, nil},
		{"SMT off: any count of single-thread cores", sparse, nil, 300, 2, nil},
		{"EPYC: 6 CPUs are the 3 cores of one L3 group", epyc, nil, 600, 16, func(t *testing.T, got cpuset.CPUs) {
			c, _ := epyc.CPU(got.Slice()[0])
			if !got.Equal(c.L3) {
				t.Errorf("6 whole-core CPUs = %s, want one L3 group (%s)", got, c.L3)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := topoHost(tc.tp)
			h.MemoryBytes = 1 << 50
			if tc.setup != nil {
				tc.setup(h)
			}
			r := alloc.Request{Service: "s", Count: 1, Pieces: tc.pieces, Bind: true, WholeCores: true, MemoryBytes: GiB}
			c := alloc.HostCapacity(alloc.DefaultParams(), h, r)
			if c.Count != tc.capacity {
				t.Fatalf("capacity %d, want %d", c.Count, tc.capacity)
			}
			r.Count = tc.capacity + 1
			if _, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, r); err == nil {
				t.Errorf("%d instances placed, capacity %d", r.Count, tc.capacity)
			}
			if tc.capacity == 0 {
				return
			}
			r.Count = tc.capacity
			res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, r)
			if err != nil {
				t.Fatal(err)
			}
			checkWholeCores(t, h, res.Placements)
			if tc.check != nil {
				tc.check(t, cpusOf(res.Placements[0]))
			}
		})
	}
	if _, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{topoHost(laptop)}, alloc.Request{Service: "s", Count: 1, Pieces: 150, Bind: true, WholeCores: true, MemoryBytes: GiB}); err == nil || !strings.Contains(err.Error(), `request.whole_cores = "1.5"`) {
		t.Errorf("1.5 CPUs of whole cores = %v, want refused naming request.whole_cores", err)
	}
	// The refusal says why a count of CPUs never fits a host's cores (it
	// said only "cpu", as if the host were full); a host whose cores do
	// divide it, or one that is full, says what it said before.
	full := topoHost(laptop)
	for i := range full.CPUs {
		full.CPUs[i].Used = 100
	}
	for _, tc := range []struct {
		name   string
		hosts  []*alloc.Host
		pieces int
		want   string
	}{
		{"3 CPUs on SMT-2", []*alloc.Host{topoHost(laptop)}, 300, "takes 0 (whole cores: 3 CPUs is not a multiple of its 2 threads per core)"},
		{"5 CPUs on SMT-2 and on a full host with SMT off", []*alloc.Host{topoHost(laptop), func() *alloc.Host {
			h := topoHost(sparse)
			h.Name = "sparse"
			for i := range h.CPUs {
				h.CPUs[i].Used = 100
			}
			return h
		}()}, 500, "takes 0 (whole cores: 5 CPUs is not a multiple of its 2 threads per core), sparse takes 0 (cpu)"},
		{"4 CPUs on a full SMT-2 host", []*alloc.Host{full}, 400, "takes 0 (cpu)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := alloc.Plan(alloc.DefaultParams(), tc.hosts, alloc.Request{Service: "s", Count: 1, Pieces: tc.pieces, Bind: true, WholeCores: true, MemoryBytes: GiB})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "need 1 instance of s, the hosts can take 0: ") {
				t.Errorf("Plan = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// checkWholeCores: every placement holds whole cores the host had wholly
// free, each CPU whole, no core shared.
func checkWholeCores(t *testing.T, h *alloc.Host, pls []alloc.Placement) {
	t.Helper()
	before := map[cpuset.CPUID]alloc.CPU{}
	for _, c := range h.CPUs {
		before[c.ID] = c
	}
	owner := map[cpuset.CPUID]int{}
	for i, pl := range pls {
		if !pl.WholeCores {
			t.Errorf("placement %d not marked whole cores", i)
		}
		for id, v := range pl.CPUs {
			if v != 100 {
				t.Errorf("placement %d holds %d pieces of CPU %d", i, v, id)
			}
			if o, ok := owner[id]; ok {
				t.Errorf("CPU %d given to placements %d and %d", id, o, i)
			}
			owner[id] = i
			sib := cpuset.Of(id)
			if h.Topology != nil {
				c, _ := h.Topology.CPU(id)
				sib = c.Siblings
			}
			for s := range sib.All() {
				c, ok := before[s]
				if _, mine := pl.CPUs[s]; !mine || !ok || c.Used != 0 || c.Capacity != 100 {
					t.Errorf("placement %d: CPU %d's sibling %d is not its own wholly free CPU (on host %v, %+v)", i, id, s, ok, c)
				}
			}
		}
	}
}

// TestWholeCoresCapacityIsExact: on random hosts (topology fixtures with
// random use), the whole-cores capacity N places N and refuses N+1.
func TestWholeCoresCapacityIsExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 9))
	p := alloc.DefaultParams()
	checked := 0
	for i := range 400 {
		h := randomHost(rng, fmt.Sprint("h", i), 100)
		r := alloc.Request{Service: "svc", Count: 1, Pieces: 100 * (1 + rng.IntN(6)), Bind: true, WholeCores: true, MemoryBytes: int64(1+rng.IntN(8)) * GiB / 4}
		n := alloc.HostCapacity(p, h, r).Count
		r.Count = n + 1
		if _, err := alloc.Plan(p, []*alloc.Host{h}, r); err == nil {
			t.Fatalf("host %d: %d placed, capacity %d", i, n+1, n)
		}
		if n == 0 {
			continue
		}
		r.Count = n
		res, err := alloc.Plan(p, []*alloc.Host{h}, r)
		if err != nil {
			t.Fatalf("host %d: capacity %d, plan: %v", i, n, err)
		}
		checkPlacements(t, p, h, r, res.Placements)
		checkWholeCores(t, h, res.Placements)
		checked++
	}
	if checked < 50 {
		t.Fatalf("only %d hosts had room: the test draws too few", checked)
	}
}

// TestWholeCoresResize: a whole-cores instance resizes by whole CPUs to
// whole cores: a grow keeps its cores and adds free ones, a shrink keeps a
// subset of its own; odd counts on SMT-2 cores and fractions are refused,
// and a grow with no free core does not fit.
func TestWholeCoresResize(t *testing.T) {
	t.Parallel()
	laptop := topologytest.Laptop().Topology() // siblings (0,4) (1,5) (2,6) (3,7)
	p := alloc.DefaultParams()
	place := func(h *alloc.Host, pieces int) alloc.Placement {
		t.Helper()
		res, err := alloc.Plan(p, []*alloc.Host{h}, alloc.Request{Service: "s", Count: 1, Pieces: pieces, Bind: true, WholeCores: true, MemoryBytes: GiB})
		if err != nil {
			t.Fatal(err)
		}
		pl := res.Placements[0]
		charge(h, pl.Allocation, +1)
		return pl
	}
	h := topoHost(laptop)
	other := place(h, 200) // another instance's core
	cur := place(h, 200)
	grown, err := alloc.PlanResize(p, h, alloc.Resize{Host: "h", Current: cur.Allocation, CPUDelta: 200, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	if !cpusOf(cur).IsSubsetOf(cpusOf(grown)) || cpusOf(grown).Len() != 4 || !grown.WholeCores || !cpusOf(grown).Intersect(cpusOf(other)).IsEmpty() {
		t.Errorf("grow 2 → 4 whole-core CPUs: %s (had %s, the other instance %s)", cpusOf(grown), cpusOf(cur), cpusOf(other))
	}
	charge(h, cur.Allocation, -1)
	charge(h, grown.Allocation, +1)
	shrunk, err := alloc.PlanResize(p, h, alloc.Resize{Host: "h", Current: grown.Allocation, CPUDelta: -200, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	if !cpusOf(shrunk).IsSubsetOf(cpusOf(grown)) || cpusOf(shrunk).Len() != 2 {
		t.Errorf("shrink 4 → 2: %s, want one of its own cores of %s", cpusOf(shrunk), cpusOf(grown))
	}
	checkWholeCores(t, h, nil)
	for _, tc := range []struct {
		delta int
		want  string
	}{{100, "whole cores: 5 CPUs is not a multiple of its 2 threads per core"}, {50, "resizes by whole CPUs"}, {400, "no NUMA node"}} {
		if _, err := alloc.PlanResize(p, h, alloc.Resize{Host: "h", Current: grown.Allocation, CPUDelta: tc.delta, Bind: true}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("resize by %s: %v, want %q", alloc.FormatPieces(tc.delta, 100), err, tc.want)
		}
	}
}

// charge adds (sign +1) or removes an allocation's pieces and memory (and
// a whole-cores instance's marks, as the planner's usage document does).
func charge(h *alloc.Host, a model.Allocation, sign int) {
	for i := range h.CPUs {
		v, ok := a.CPUs[h.CPUs[i].ID]
		h.CPUs[i].Used += sign * v
		if ok && a.WholeCores {
			h.CPUs[i].WholeCores = sign > 0
		}
	}
	h.MemoryUsed += int64(sign) * a.Memory
	for i := range h.NUMANodes {
		if h.NUMANodes[i].ID == a.NUMANode {
			h.NUMANodes[i].MemoryUsed += int64(sign) * a.Memory
		}
	}
}

// overbook raises every CPU's capacity by the factor num/den, as the
// cluster's CPU overbooking does for a heal (placement's adjust).
func overbook(h *alloc.Host, num, den int) {
	for i := range h.CPUs {
		h.CPUs[i].Capacity = h.CPUs[i].Capacity * num / den
	}
}

// checkNotShared fails when a placement holds a piece of a CPU a
// whole-cores instance holds.
func checkNotShared(t *testing.T, h *alloc.Host, pls ...alloc.Placement) {
	t.Helper()
	for _, c := range h.CPUs {
		for i, pl := range pls {
			if v, ok := pl.CPUs[c.ID]; ok && c.WholeCores {
				t.Errorf("placement %d (%v) holds %d pieces of CPU %d, which a whole-cores instance holds", i, pl.CPUs, v, c.ID)
			}
		}
	}
}

// TestWholeCoresNeverShared: the cores of a whole-cores instance are
// never shared, also when their capacity is raised above what the
// instance holds (CPU overbooking, an oversold CPU): no bound deploy,
// fragment or resize gets a piece of them (the simulation found a heal
// with overbooking giving 50 pieces of one to a 0.5 CPU instance).
func TestWholeCoresNeverShared(t *testing.T) {
	t.Parallel()
	laptop := topologytest.Laptop().Topology() // siblings (0,4) (1,5) (2,6) (3,7)
	p := alloc.DefaultParams()
	// setup: a whole-cores instance of 2 CPUs (one core); with full, every
	// other CPU wholly used; then capacities ×2 (each whole-cores CPU
	// then has 100 pieces spare).
	setup := func(t *testing.T, full bool) (*alloc.Host, alloc.Placement) {
		t.Helper()
		h := topoHost(laptop)
		res, err := alloc.Plan(p, []*alloc.Host{h}, alloc.Request{Service: "wc", Count: 1, Pieces: 200, Bind: true, WholeCores: true, MemoryBytes: GiB})
		if err != nil {
			t.Fatal(err)
		}
		wc := res.Placements[0]
		charge(h, wc.Allocation, +1)
		overbook(h, 2, 1)
		if full {
			for i := range h.CPUs {
				if !h.CPUs[i].WholeCores {
					h.CPUs[i].Used = h.CPUs[i].Capacity
				}
			}
		}
		return h, wc
	}
	for _, tc := range []struct {
		name   string
		full   bool
		pieces int
		want   int // capacity
	}{
		{"fragment, other CPUs free", false, 50, 24},
		{"fragment, other CPUs full", true, 50, 0},
		{"small fragment, other CPUs full", true, 10, 0},
		{"whole CPU, other CPUs free", false, 100, 12},
		{"whole CPU, other CPUs full", true, 100, 0},
		{"whole and fragment, other CPUs free", false, 150, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := setup(t, tc.full)
			r := alloc.Request{Service: "s", Count: 1, Pieces: tc.pieces, Bind: true, MemoryBytes: MiB}
			if got := alloc.HostCapacity(p, h, r).Count; got != tc.want {
				t.Errorf("capacity for %s CPUs = %d, want %d", alloc.FormatPieces(tc.pieces, 100), got, tc.want)
			}
			r.Count = tc.want + 1
			if _, err := alloc.Plan(p, []*alloc.Host{h}, r); err == nil {
				t.Errorf("%d instances placed, capacity %d", r.Count, tc.want)
			}
			if tc.want == 0 {
				return
			}
			r.Count = tc.want
			res, err := alloc.Plan(p, []*alloc.Host{h}, r)
			if err != nil {
				t.Fatal(err)
			}
			checkPlacements(t, p, h, r, res.Placements)
			checkNotShared(t, h, res.Placements...)
		})
	}
	t.Run("a bound instance's resize grows around them", func(t *testing.T) {
		h, _ := setup(t, true)
		// A 0.5 CPU instance on a CPU of its own, the rest of that CPU free.
		var cur alloc.Placement
		for i, c := range h.CPUs {
			if !c.WholeCores {
				h.CPUs[i].Used = 50
				h.MemoryUsed += MiB
				cur = alloc.Placement{Host: "h", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{c.ID: 50}, NUMANode: -1, Memory: MiB}}
				break
			}
		}
		for _, delta := range []int{50, 150, 250} {
			pl, err := alloc.PlanResize(p, h, alloc.Resize{Host: "h", Current: cur.Allocation, CPUDelta: delta, Bind: true})
			switch {
			case delta == 50 && err != nil:
				t.Errorf("resize by 0.5 on its own CPU: %v", err)
			case delta > 50 && err == nil:
				t.Errorf("resize by %s = %v: only the whole-cores instance's CPUs have pieces spare", alloc.FormatPieces(delta, 100), pl.CPUs)
			}
			checkNotShared(t, h, pl)
		}
	})
	t.Run("random hosts", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 17))
		marked := 0
		for i := range 300 {
			h := randomHost(rng, fmt.Sprint("h", i), 100)
			wc := alloc.Request{Service: "wc", Count: 1, Pieces: 100 * (1 + rng.IntN(2)), Bind: true, WholeCores: true, MemoryBytes: MiB}
			if wc.Count = min(alloc.HostCapacity(p, h, wc).Count, 1+rng.IntN(3)); wc.Count == 0 {
				continue
			}
			res, err := alloc.Plan(p, []*alloc.Host{h}, wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, pl := range res.Placements {
				charge(h, pl.Allocation, +1)
			}
			overbook(h, 2+rng.IntN(3), 2)
			r := randomRequest(rng, 100)
			r.Bind = true
			if r.Count = alloc.HostCapacity(p, h, r).Count; r.Count == 0 {
				continue
			}
			got, err := alloc.Plan(p, []*alloc.Host{h}, r)
			if err != nil {
				t.Fatalf("host %d: capacity %d, plan: %v", i, r.Count, err)
			}
			checkNotShared(t, h, got.Placements...)
			marked++
		}
		if marked < 50 {
			t.Fatalf("only %d hosts were checked: the test draws too few", marked)
		}
	})
}
