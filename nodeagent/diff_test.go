package nodeagent

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

var host6 = Host{CPUs: cpuset.MustParseCPUs("0-5"), Mems: cpuset.MustParseMems("0-1"), ShareBase: 100}

func inst(id string, cpus map[cpuset.CPUID]int, numa cpuset.NUMANodeID) model.Instance {
	return model.Instance{ID: id, Service: "web", Spec: model.Spec{Image: "img", Command: []string{"sleep", "1"}}, Generation: 1,
		Allocation: model.Allocation{Bind: true, CPUs: cpus, NUMANode: numa, Memory: 128 << 20}}
}

// memoryFirst is a memory-first instance of quota pieces.
func memoryFirst(id string, quota int) model.Instance {
	return model.Instance{ID: id, Service: "m", Spec: model.Spec{Image: "img"}, Generation: 1,
		Allocation: model.Allocation{CPUQuota: quota, NUMANode: -1, Memory: 64 << 20, MemorySoft: 32 << 20}}
}

func TestMap(t *testing.T) {
	t.Parallel()
	a := inst("a", map[cpuset.CPUID]int{0: 100, 2: 70}, 0)
	b := inst("b", map[cpuset.CPUID]int{1: 100, 2: 30}, 0)
	m := memoryFirst("m", 150)
	shared := pool(host6, []model.Instance{a, b, m})
	if shared.String() != "3-5" {
		t.Fatalf("pool = %s, want 3-5 (CPUs 0 and 1 are held whole, 2 in pieces)", shared)
	}
	tests := []struct {
		name   string
		in     model.Instance
		scheme Scheme
		cpus   string
		mems   string
		quota  int64
		weight uint64
	}{
		{"quota scheme 1.7", a, SchemeQuota, "0,2", "0", 170000, 170},
		{"quota scheme 1.3", b, SchemeQuota, "1-2", "0", 130000, 130},
		{"weight scheme 1.7", a, SchemeWeight, "0,2", "0", 0, 70},
		{"weight scheme 1.3", b, SchemeWeight, "1-2", "0", 0, 30},
		{"integer, no quota", inst("i", map[cpuset.CPUID]int{3: 100, 4: 100}, 1), SchemeQuota, "3-4", "1", 0, 200},
		{"cross-node: all mems", inst("x", map[cpuset.CPUID]int{2: 100, 3: 50}, -1), SchemeQuota, "2-3", "0-1", 150000, 150},
		{"memory-first: pool and quota", m, SchemeQuota, "3-5", "0-1", 150000, 150},
	}
	for _, tt := range tests {
		w := Map(host6, tt.in, tt.scheme, shared)
		r := w.Resources
		if r.CPUs.String() != tt.cpus || r.Mems.String() != tt.mems || r.CPUQuota != tt.quota || w.CPUWeight != tt.weight || r.PeriodUsec() != docker.Period {
			t.Errorf("%s: cpus %s mems %s quota %d/%d weight %d; want %s %s %d/%d %d", tt.name, r.CPUs, r.Mems, r.CPUQuota, r.PeriodUsec(), w.CPUWeight, tt.cpus, tt.mems, tt.quota, docker.Period, tt.weight)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: mapped resources invalid for Docker: %v", tt.name, err)
		}
	}
	// Share base 1000: a fraction under 0.01 CPU is a quota per 1 s period
	// (Docker and the kernel refuse a quota under 1 ms); 0.01 and above
	// stay per 100 ms.
	h1000 := host6
	h1000.ShareBase = 1000
	for _, tt := range []struct {
		name          string
		in            model.Instance
		scheme        Scheme
		quota, period int64
	}{
		{"memory-first 0.005", memoryFirst("m5", 5), SchemeQuota, 5000, docker.LongPeriod},
		{"memory-first 0.001", memoryFirst("m1", 1), SchemeCapped, 1000, docker.LongPeriod},
		{"memory-first 0.01", memoryFirst("m10", 10), SchemeCapped, 1000, docker.Period},
		{"bound 0.005 alone, capped", inst("b5", map[cpuset.CPUID]int{2: 5}, 0), SchemeCapped, 5000, docker.LongPeriod},
		{"bound 0.005 alone, quota", inst("q5", map[cpuset.CPUID]int{2: 5}, 0), SchemeQuota, 5000, docker.LongPeriod},
		{"bound 1.005", inst("b1005", map[cpuset.CPUID]int{1: 1000, 2: 5}, 0), SchemeCapped, 100500, docker.Period},
	} {
		w := Map(h1000, tt.in, tt.scheme, shared)
		r := w.Resources
		if r.CPUQuota != tt.quota || r.PeriodUsec() != tt.period || w.CPUWeight < 1 {
			t.Errorf("%s: cpu.max %d %d weight %d; want %d %d", tt.name, r.CPUQuota, r.PeriodUsec(), w.CPUWeight, tt.quota, tt.period)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: mapped resources invalid for Docker: %v", tt.name, err)
		}
	}
	if w := Map(host6, m, SchemeQuota, shared); w.Resources.MemoryReservation != 32<<20 {
		t.Errorf("soft limit not mapped to the reservation: %+v", w.Resources)
	}
}

func obs(id, instance, image string, gen int64, r docker.Resources, running, paused bool) Observed {
	return Observed{Container: docker.Container{ID: id, Instance: instance, Image: image, Cmd: []string{"sleep", "1"}, Running: running, Paused: paused, Applied: r, Status: "x",
		Host: "h"}, Generation: gen}
}

func kinds(as []Action) []string {
	var out []string
	for _, a := range as {
		s := string(a.Kind)
		if a.Container != "" {
			s += ":" + a.Container
		}
		out = append(out, s)
	}
	return out
}

func TestDiff(t *testing.T) {
	t.Parallel()
	a := inst("a", map[cpuset.CPUID]int{0: 100, 2: 70}, 0)
	want := Map(host6, a, SchemeQuota, pool(host6, []model.Instance{a}))
	drifted := want.Resources
	drifted.CPUs = cpuset.MustParseCPUs("0")
	newImage := a
	newImage.Image, newImage.Generation = "img2", 2
	hostNet := a
	hostNet.Network = "host"
	onNet := func(network string) Observed {
		o := obs("c1", "a", "img", 1, want.Resources, true, false)
		o.Network = network
		return o
	}
	restart := a
	restart.Generation, restart.SpecGeneration = 2, 2
	restartResized := restart
	restartResized.Generation = 3
	foreign := obs("c8", "elsewhere", "img", 1, want.Resources, true, false)
	foreign.Host = "other-host" // own() drops it before Diff; Diff alone would remove it
	legacy := obs("c7", "old", "img", 1, want.Resources, true, false)
	legacy.Host = ""
	legacyA := obs("c1", "a", "img", 1, want.Resources, true, false)
	legacyA.Host = ""
	tests := []struct {
		name     string
		desired  []model.Instance
		observed []Observed
		want     []string
	}{
		{"create", []model.Instance{a}, nil, []string{"create"}},
		{"in sync", []model.Instance{a}, []Observed{obs("c1", "a", "img", 1, want.Resources, true, false)}, []string{"reassert:c1"}},
		{"drift back", []model.Instance{a}, []Observed{obs("c1", "a", "img", 1, drifted, true, false)}, []string{"update:c1", "reassert:c1"}},
		{"stopped", []model.Instance{a}, []Observed{obs("c1", "a", "img", 1, want.Resources, false, false)}, []string{"start:c1", "reassert:c1"}},
		{"orphan", nil, []Observed{obs("c9", "gone", "img", 1, want.Resources, true, false)}, []string{"remove:c9"}},
		{"replace", []model.Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, true, false)}, []string{"replace:c1"}},
		{"network mode differs", []model.Instance{hostNet}, []Observed{onNet("default")}, []string{"replace:c1"}},
		{"network mode matches", []model.Instance{hostNet}, []Observed{onNet("host")}, []string{"reassert:c1"}},
		{"no network asked: any will do", []model.Instance{a}, []Observed{onNet("host")}, []string{"reassert:c1"}},
		{"replace in flight, new runs", []model.Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, false, true), obs("c2", "a", "img2", 2, want.Resources, true, false)}, []string{"finish-replace:c1"}},
		{"replace in flight, new failed", []model.Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, false, true), obs("c2", "a", "img2", 2, want.Resources, false, false)}, []string{"remove:c2", "unpause:c1"}},
		// replace with the same image: the container predates SpecGeneration.
		{"restart: same image, older container", []model.Instance{restart}, []Observed{obs("c1", "a", "img", 1, want.Resources, true, false)}, []string{"replace:c1"}},
		{"restart done: container of the replace's generation", []model.Instance{restart}, []Observed{obs("c1", "a", "img", 2, want.Resources, true, false)}, []string{"reassert:c1"}},
		{"resize after a restart: no replace", []model.Instance{restartResized}, []Observed{obs("c1", "a", "img", 2, want.Resources, true, false)}, []string{"reassert:c1"}},
		{"another host's container is not an orphan", nil, []Observed{foreign}, nil},
		{"a container without a host label is never removed", nil, []Observed{legacy}, nil},
		{"a legacy container of a desired instance is adopted", []model.Instance{a}, []Observed{legacyA}, []string{"reassert:c1"}},
	}
	// A replace that failed for this generation is not retried.
	if got := kinds(Diff(host6, []model.Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, true, false)}, SchemeQuota, Known{Failed: map[string]int64{"a": 2}})); !slices.Equal(got, []string{"reassert:c1"}) {
		t.Errorf("failed replace retried: %v", got)
	}
	// A resize the host refused at this generation is not retried either.
	if got := kinds(Diff(host6, []model.Instance{a}, []Observed{obs("c1", "a", "img", 1, drifted, true, false)}, SchemeQuota, Known{Refused: map[string]int64{"a": 1}})); !slices.Equal(got, []string{"reassert:c1"}) {
		t.Errorf("refused resize retried: %v", got)
	}
	for _, tt := range tests {
		observed := tt.observed
		var cs []docker.Container
		for _, o := range observed {
			cs = append(cs, o.Container)
		}
		if kept := own(cs, "h"); len(kept) != len(cs) {
			observed = slices.DeleteFunc(slices.Clone(observed), func(o Observed) bool { return o.Host != "" && o.Host != "h" })
		}
		got := kinds(Diff(host6, tt.desired, observed, SchemeQuota, Known{}))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Diff = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPool: memory-first instances share the planner's pool when it sent
// one; otherwise the same computed here: the CPUs in the planner's capacity
// (reserved CPUs are not in it) that are not isolated and that no bound
// instance holds pieces of (a fragment CPU is its holders', as the planner
// counts it: before, the agent put memory-first instances on fragment CPUs
// the planner did not count in the pool).
func TestPool(t *testing.T) {
	t.Parallel()
	// 8 online CPUs; the planner's capacity leaves out the reserved 0-1.
	capacity := cpuset.MustParseCPUs("2-7")
	for _, tc := range []struct {
		name     string
		isolated string
		desired  []model.Instance
		planner  string
		want     string
	}{
		{"reserved CPUs are not in the pool", "", nil, "", "2-7"},
		{"isolated CPUs are not in the pool", "6-7", nil, "", "2-5"},
		{"CPUs bound instances hold are not", "6-7", []model.Instance{inst("a", map[cpuset.CPUID]int{2: 100, 3: 50}, 0)}, "", "4-5"},
		{"a fragment CPU is not shared", "", []model.Instance{inst("a", map[cpuset.CPUID]int{4: 30}, 0)}, "", "2-3,5-7"},
		{"all held whole: the open CPUs", "6-7", []model.Instance{inst("a", map[cpuset.CPUID]int{2: 100, 3: 100, 4: 100, 5: 100}, 0)}, "", "2-5"},
		{"all isolated: capacity", "2-7", nil, "", "2-7"},
		{"the planner's pool is the pool", "", []model.Instance{inst("a", map[cpuset.CPUID]int{2: 100}, 0)}, "5-7", "5-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Host{CPUs: capacity, Isolated: cpuset.MustParseCPUs(tc.isolated), Mems: cpuset.MustParseMems("0"), ShareBase: 100, Pool: cpuset.MustParseCPUs(tc.planner)}
			ds := append(slices.Clone(tc.desired), memoryFirst("m", 150))
			if got := pool(h, ds); got.String() != tc.want {
				t.Errorf("pool = %s, want %s", got, tc.want)
			}
			if got := Map(h, ds[len(ds)-1], DefaultScheme, pool(h, ds)).Resources.CPUs; got.String() != tc.want {
				t.Errorf("memory-first cpuset = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestStatusOf: the host reports the desired generation only when the
// container has everything that generation asks for.
func TestStatusOf(t *testing.T) {
	t.Parallel()
	in := inst("a", map[cpuset.CPUID]int{0: 100, 2: 70}, 0)
	in.Generation = 2
	shared := pool(host6, []model.Instance{in})
	want := Map(host6, in, DefaultScheme, shared).Resources
	other := want
	other.MemoryBytes = 64 << 20
	running := func(img string, cmd []string, r docker.Resources) Observed {
		o := obs("c1", "a", img, 1, r, true, false)
		o.Cmd = cmd
		return o
	}
	for _, tc := range []struct {
		name    string
		cs      []Observed
		rec     record
		state   string
		gen     int64
		refused int64
	}{
		{"no container", nil, record{}, "pending", 0, 0},
		{"everything matches", []Observed{running("img", []string{"sleep", "1"}, want)}, record{}, "running", 2, 0},
		{"resources differ (a resize to apply)", []Observed{running("img", []string{"sleep", "1"}, other)}, record{}, "running", 1, 0},
		{"same image, old command (a replace to make)", []Observed{running("img", []string{"sleep", "9"}, want)}, record{}, "running", 1, 0},
		{"other image", []Observed{running("img:1", []string{"sleep", "1"}, want)}, record{}, "running", 1, 0},
		{"replace failed for this generation", []Observed{running("img:1", []string{"sleep", "1"}, want)}, record{failed: 2, failMsg: "rolled back"}, "running", 1, 2},
		{"refused resize", []Observed{running("img", []string{"sleep", "1"}, other)}, record{refused: 2, err: "no"}, "running", 1, 2},
		{"the running one of two", []Observed{obs("c0", "a", "img", 1, want, false, true), running("img", []string{"sleep", "1"}, want)}, record{}, "running", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := statusOf(host6, in, tc.cs, DefaultScheme, shared, tc.rec)
			if st.State != tc.state || st.Generation != tc.gen || st.Refused != tc.refused {
				t.Errorf("status = %+v, want state %s generation %d refused %d", st, tc.state, tc.gen, tc.refused)
			}
		})
	}
}

// TestDiffOrder: what releases resources goes first. CPU 2 moves from b to
// a (a's ID sorts first) and an orphan holds memory: the orphan is removed,
// then b shrinks, and only then a grows. The share loop's weight replaces
// the mapped one.
func TestDiffOrder(t *testing.T) {
	t.Parallel()
	a0 := inst("a", map[cpuset.CPUID]int{0: 100}, 0)
	b0 := inst("b", map[cpuset.CPUID]int{1: 100, 2: 100}, 0)
	a1 := inst("a", map[cpuset.CPUID]int{0: 100, 2: 100}, 0)
	b1 := inst("b", map[cpuset.CPUID]int{1: 100}, 0)
	ma := Map(host6, a0, SchemeCapped, host6.CPUs).Resources
	mb := Map(host6, b0, SchemeCapped, host6.CPUs).Resources
	observed := []Observed{obs("ca", "a", "img", 1, ma, true, false), obs("cb", "b", "img", 1, mb, true, false),
		obs("cz", "gone", "img", 1, ma, true, false)}
	got := kinds(Diff(host6, []model.Instance{a1, b1}, observed, SchemeCapped, Known{}))
	want := []string{"remove:cz", "update:cb", "update:ca", "reassert:ca", "reassert:cb"}
	if !slices.Equal(got, want) {
		t.Errorf("Diff = %v, want %v (releases first)", got, want)
	}
	// Growing memory is not a release; shrinking it is.
	bigger := a0
	bigger.Memory *= 2
	if releases(ma, Map(host6, bigger, SchemeCapped, host6.CPUs).Resources) {
		t.Errorf("more memory counted as a release")
	}
	if !releases(Map(host6, bigger, SchemeCapped, host6.CPUs).Resources, ma) {
		t.Errorf("less memory not counted as a release")
	}
	// Lifting a CPU quota (0 = no limit) is not a release.
	if releases(docker.Resources{CPUs: ma.CPUs, Mems: ma.Mems, CPUQuota: 50000}, docker.Resources{CPUs: ma.CPUs, Mems: ma.Mems}) {
		t.Errorf("lifting a quota counted as a release")
	}
	acts := Diff(host6, []model.Instance{a0}, observed[:1], SchemeCapped, Known{Weights: map[string]uint64{"a": 77}})
	if acts[len(acts)-1].Kind != Reassert || acts[len(acts)-1].Want.CPUWeight != 77 {
		t.Errorf("the share loop's weight was not kept: %+v", acts)
	}
}

// TestDiffPreemptionOrder (issue 40 item 2): a preemption commits the
// victim's removal and the preemptor's placement on the victim's CPUs in
// one change, so one pass sees both; the victim's container ("z", sorting
// last) is removed before the preemptor's ("a") is created or grown onto
// its CPU. Control: with the orphans appended after the other actions in
// Diff, both rows fail.
func TestDiffPreemptionOrder(t *testing.T) {
	t.Parallel()
	victim := inst("z", map[cpuset.CPUID]int{2: 100}, 0)
	mz := Map(host6, victim, SchemeCapped, host6.CPUs).Resources
	a0 := inst("a", map[cpuset.CPUID]int{0: 100}, 0)
	ma := Map(host6, a0, SchemeCapped, host6.CPUs).Resources
	grown := inst("a", map[cpuset.CPUID]int{0: 100, 2: 100}, 0)
	for _, tt := range []struct {
		name     string
		desired  []model.Instance
		observed []Observed
		want     []string
	}{
		{"deploy", []model.Instance{inst("a", map[cpuset.CPUID]int{2: 100}, 0)}, []Observed{obs("cz", "z", "img", 1, mz, true, false)}, []string{"remove:cz", "create"}},
		{"resize", []model.Instance{grown}, []Observed{obs("ca", "a", "img", 1, ma, true, false), obs("cz", "z", "img", 1, mz, true, false)}, []string{"remove:cz", "update:ca"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := kinds(Diff(host6, tt.desired, tt.observed, SchemeCapped, Known{}))
			if len(got) < len(tt.want) || !slices.Equal(got[:len(tt.want)], tt.want) {
				t.Errorf("Diff = %v, want it to begin %v (the victim's container goes first)", got, tt.want)
			}
		})
	}
}

// TestKernelDrift: cgroup files written behind Docker's back (its stored
// config still matches the plan) make the pass re-assert them, saying
// which file drifted; page rounding of memory.max is no drift.
func TestKernelDrift(t *testing.T) {
	t.Parallel()
	in := model.Instance{ID: "a", Service: "s", Spec: model.Spec{Image: "img", Command: []string{"sleep", "1"}}, Generation: 1,
		Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{2: 100, 3: 100}, NUMANode: 0, Memory: 100<<20 + 100}}
	want := Map(host6, in, SchemeQuota, pool(host6, []model.Instance{in}))
	clean := obs("c1", "a", "img", 1, want.Resources, true, false)
	k := want.Resources
	k.MemoryBytes -= 100 // the kernel's page rounding
	clean.Kernel = &k
	if acts := Diff(host6, []model.Instance{in}, []Observed{clean}, SchemeQuota, Known{}); len(acts) != 1 || acts[0].Kind != Reassert || acts[0].Reason != "" {
		t.Errorf("no drift: %+v", acts)
	}
	for _, tc := range []struct {
		name   string
		change func(*docker.Resources)
		want   string
	}{
		{"cpuset written by hand", func(r *docker.Resources) { r.CPUs = cpuset.MustParseCPUs("0") }, `cpuset.cpus "0" (plan "2-3")`},
		{"memory.max raised", func(r *docker.Resources) { r.MemoryBytes = 1 << 30 }, "memory.max 1073741824"},
		{"cpu.max set", func(r *docker.Resources) { r.CPUQuota = 50000 }, `cpu.max "50000 100000" (plan "max 100000")`},
	} {
		o := obs("c1", "a", "img", 1, want.Resources, true, false)
		k := want.Resources
		tc.change(&k)
		o.Kernel = &k
		acts := Diff(host6, []model.Instance{in}, []Observed{o}, SchemeQuota, Known{})
		if len(acts) != 1 || acts[0].Kind != Reassert || !strings.Contains(acts[0].Reason, tc.want) {
			t.Errorf("%s: %+v, want a reassert naming %q", tc.name, acts, tc.want)
		}
	}
	// cpu.weight written by hand: named too (the plan's, or the share
	// loop's weight when it runs), and re-asserted.
	o := clean
	o.CPUWeight = want.CPUWeight + 7
	if acts := Diff(host6, []model.Instance{in}, []Observed{o}, SchemeQuota, Known{}); len(acts) != 1 || !strings.Contains(acts[0].Reason, fmt.Sprintf("cpu.weight %d (plan %d)", want.CPUWeight+7, want.CPUWeight)) {
		t.Errorf("cpu.weight drift: %+v", acts)
	}
	o.CPUWeight = 77
	if acts := Diff(host6, []model.Instance{in}, []Observed{o}, SchemeQuota, Known{Weights: map[string]uint64{"a": 77}}); len(acts) != 1 || acts[0].Reason != "" {
		t.Errorf("the share loop's own weight named as drift: %+v", acts)
	}
}

// TestReassertKeepsARefusedResize: while the host refuses a resize (say a
// memory shrink below use), the re-asserted files are what Docker holds,
// not the refused plan: memory.max is not lowered behind the refusal.
func TestReassertKeepsARefusedResize(t *testing.T) {
	t.Parallel()
	in := model.Instance{ID: "a", Service: "s", Spec: model.Spec{Image: "img", Command: []string{"sleep", "1"}}, Generation: 2,
		Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{2: 100}, NUMANode: 0, Memory: 32 << 20}}
	want := Map(host6, in, SchemeQuota, pool(host6, []model.Instance{in}))
	have := want.Resources
	have.MemoryBytes = 128 << 20
	o := obs("c1", "a", "img", 1, have, true, false)
	acts := Diff(host6, []model.Instance{in}, []Observed{o}, SchemeQuota, Known{Refused: map[string]int64{"a": 2}})
	if len(acts) != 1 || acts[0].Kind != Reassert || acts[0].Want.Resources.MemoryBytes != 128<<20 {
		t.Fatalf("refused resize: %+v, want one reassert of Docker's 128 MiB", acts)
	}
	acts = Diff(host6, []model.Instance{in}, []Observed{o}, SchemeQuota, Known{})
	if len(acts) != 2 || acts[0].Kind != Update || acts[1].Want.Resources.MemoryBytes != 32<<20 {
		t.Fatalf("resize not refused: %+v, want update then reassert of the plan", acts)
	}
}
