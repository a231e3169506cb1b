package nodeagent

import (
	"slices"
	"testing"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/cpuset"
)

var host6 = Host{CPUs: cpuset.MustParseCPUs("0-5"), Mems: cpuset.MustParseMems("0-1"), ShareBase: 100}

func inst(id string, cpus map[cpuset.CPUID]int, numa cpuset.NUMANodeID) Instance {
	return Instance{ID: id, Service: "web", Bind: true, CPUs: cpus, NUMANode: numa, Memory: 128 << 20, Image: "img", Command: []string{"sleep", "1"}, Generation: 1}
}

func TestMap(t *testing.T) {
	t.Parallel()
	a := inst("a", map[cpuset.CPUID]int{0: 100, 2: 70}, 0)
	b := inst("b", map[cpuset.CPUID]int{1: 100, 2: 30}, 0)
	m := Instance{ID: "m", Bind: false, CPUQuota: 150, NUMANode: -1, Memory: 64 << 20, MemorySoft: 32 << 20}
	shared := pool(host6, []Instance{a, b, m})
	if shared.String() != "2-5" {
		t.Fatalf("pool = %s, want 2-5 (CPUs 0 and 1 are held whole)", shared)
	}
	tests := []struct {
		name   string
		in     Instance
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
		{"memory-first: pool and quota", m, SchemeQuota, "2-5", "0-1", 150000, 150},
	}
	for _, tt := range tests {
		w := Map(host6, tt.in, tt.scheme, shared)
		r := w.Resources
		if r.CPUs.String() != tt.cpus || r.Mems.String() != tt.mems || r.CPUQuota != tt.quota || w.CPUWeight != tt.weight {
			t.Errorf("%s: cpus %s mems %s quota %d weight %d; want %s %s %d %d", tt.name, r.CPUs, r.Mems, r.CPUQuota, w.CPUWeight, tt.cpus, tt.mems, tt.quota, tt.weight)
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
	return Observed{Container: docker.Container{ID: id, Instance: instance, Image: image, Cmd: []string{"sleep", "1"}, Running: running, Paused: paused, Applied: r, Status: "x"}, Generation: gen}
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
	want := Map(host6, a, SchemeQuota, pool(host6, []Instance{a}))
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
	tests := []struct {
		name     string
		desired  []Instance
		observed []Observed
		want     []string
	}{
		{"create", []Instance{a}, nil, []string{"create"}},
		{"in sync", []Instance{a}, []Observed{obs("c1", "a", "img", 1, want.Resources, true, false)}, []string{"reassert:c1"}},
		{"drift back", []Instance{a}, []Observed{obs("c1", "a", "img", 1, drifted, true, false)}, []string{"update:c1", "reassert:c1"}},
		{"stopped", []Instance{a}, []Observed{obs("c1", "a", "img", 1, want.Resources, false, false)}, []string{"start:c1", "reassert:c1"}},
		{"orphan", nil, []Observed{obs("c9", "gone", "img", 1, want.Resources, true, false)}, []string{"remove:c9"}},
		{"replace", []Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, true, false)}, []string{"replace:c1"}},
		{"network mode differs", []Instance{hostNet}, []Observed{onNet("default")}, []string{"replace:c1"}},
		{"network mode matches", []Instance{hostNet}, []Observed{onNet("host")}, []string{"reassert:c1"}},
		{"no network asked: any will do", []Instance{a}, []Observed{onNet("host")}, []string{"reassert:c1"}},
		{"replace in flight, new runs", []Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, false, true), obs("c2", "a", "img2", 2, want.Resources, true, false)}, []string{"finish-replace:c1"}},
		{"replace in flight, new failed", []Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, false, true), obs("c2", "a", "img2", 2, want.Resources, false, false)}, []string{"remove:c2", "unpause:c1"}},
	}
	// A replace that failed for this generation is not retried.
	if got := kinds(Diff(host6, []Instance{newImage}, []Observed{obs("c1", "a", "img", 1, want.Resources, true, false)}, SchemeQuota, map[string]int64{"a": 2})); !slices.Equal(got, []string{"reassert:c1"}) {
		t.Errorf("failed replace retried: %v", got)
	}
	for _, tt := range tests {
		got := kinds(Diff(host6, tt.desired, tt.observed, SchemeQuota, nil))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Diff = %v, want %v", tt.name, got, tt.want)
		}
	}
}
