package placement

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// randomFleet is 1–6 hosts of 1–8 CPUs and 1–8 GiB, one NUMA node or two,
// with zone and ssd properties, some disabled or in maintenance, some
// running db, and some used past what normal placement may use: memory in
// use over the host's memory (lowered under its instances, or a heal that
// used the overbooking), or over what the buffer leaves.
func randomFleet(rng *rand.Rand) []*Host {
	var hs []*Host
	for i := range 1 + rng.IntN(6) {
		name := fmt.Sprintf("h%d", i)
		h := &Host{Name: name, Properties: map[string]Value{
			"zone": Str([]string{"a", "b", "c"}[rng.IntN(3)]),
			"ssd":  BoolVal(rng.IntN(2) == 0),
		}}
		h.Disabled = rng.IntN(10) == 0
		h.Maintenance = rng.IntN(10) == 0
		cpus := 1 + rng.IntN(8)
		r := res(name, cpus, int64(1+rng.IntN(8))<<10)
		for c := range r.CPUs {
			switch rng.IntN(4) {
			case 0:
				r.CPUs[c].Used = 100
			case 1:
				r.CPUs[c].Used = 50
			}
		}
		switch rng.IntN(4) {
		case 0: // over its memory
			r.MemoryUsed = r.MemoryBytes + int64(1+rng.IntN(4))<<30
		case 1: // within its memory, perhaps over the buffer
			r.MemoryUsed = rng.Int64N(r.MemoryBytes)
		}
		if cpus > 1 && rng.IntN(2) == 0 {
			// Two NUMA nodes, the host's memory and use split between them:
			// one of them may be used past its memory alone.
			half := cpus / 2
			var lo, hi []cpuset.CPUID
			for c := range cpus {
				if c < half {
					lo = append(lo, cpuset.CPUID(c))
				} else {
					hi = append(hi, cpuset.CPUID(c))
				}
			}
			used0 := r.MemoryUsed
			if rng.IntN(2) == 0 {
				used0 = r.MemoryUsed / 2
			}
			r.NUMANodes = []alloc.NUMANode{
				{ID: 0, CPUs: cpuset.Of(lo...), MemoryBytes: r.MemoryBytes / 2, MemoryUsed: used0},
				{ID: 1, CPUs: cpuset.Of(hi...), MemoryBytes: r.MemoryBytes - r.MemoryBytes/2, MemoryUsed: r.MemoryUsed - used0},
			}
		}
		if rng.IntN(3) == 0 {
			r.Instances["db"] = 1
		}
		h.Resources = r
		hs = append(hs, h)
	}
	return hs
}

// randomSettings is a buffer or overbooking per resource, or none, and the
// placement constraint, affinity and capacity rules at any priority.
func randomSettings(rng *rand.Rand) Settings {
	s := Settings{Buffer: map[string]float64{}, Overbooking: map[string]float64{}, Priorities: map[Rule]Priority{}}
	for _, res := range Resources {
		switch rng.IntN(3) {
		case 0:
			s.Buffer[res] = []float64{0.1, 0.2, 0.3}[rng.IntN(3)]
		case 1:
			s.Overbooking[res] = []float64{0.25, 0.5, -1}[rng.IntN(3)]
		}
	}
	for _, rule := range []Rule{RulePlacementConstraint, RuleAffinity, RuleCapacity} {
		if rng.IntN(2) == 0 {
			s.Priorities[rule] = Priority(rng.IntN(4) - 1) // off, hard, soft or optimization
		}
	}
	return s
}

func randomRequest(rng *rand.Rand) Request {
	r := Request{Request: alloc.Request{Service: "probe", Strategy: []alloc.Strategy{alloc.Auto, alloc.Global, alloc.Drained}[rng.IntN(3)]}}
	r.Bind = rng.IntN(2) == 0
	if r.Bind {
		r.Pieces = []int{50, 100, 200}[rng.IntN(3)]
	} else {
		r.Pieces = []int{20, 50, 100}[rng.IntN(3)]
	}
	r.MemoryBytes = []int64{256 << 20, 1 << 30, 3 << 30}[rng.IntN(3)]
	if rng.IntN(3) == 0 {
		r.MaxPerHost = 1 + rng.IntN(2)
	}
	if rng.IntN(2) == 0 {
		r.Constraint = []string{`zone == a`, `zone in (a, b)`, `ssd == true`, `!(zone == c)`, `HostName != h0`, `ssd == true || zone == b`}[rng.IntN(6)]
	}
	if rng.IntN(4) == 0 {
		r.Affinity.Hard = []string{"db"}
	}
	r.UseBuffer = rng.IntN(5) == 0
	return r
}

// TestCapacityIsWhatPlanPlaces: over random fleets, settings and requests,
// Capacity's total is what a deploy places: a plan of the total places
// that many, and one more is refused; no host's room is negative. The
// fleets have hosts used past their normal limits (the sim's
// capacity-negative: a host with -1 (memory) made the total undercount),
// and the placement constraint and affinity rules are off, hard, soft or
// optimization (the sim's capacity-soft-constraint: Capacity counted the
// hosts an optimization constraint does not match, and Plan never used
// them).
func TestCapacityIsWhatPlanPlaces(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(368, 249))
	probed := 0
	for i := range 3000 {
		hs, s, r := randomFleet(rng), randomSettings(rng), randomRequest(rng)
		name := fmt.Sprintf("case %d: %s with %+v over %s", i, describeRequest(r), s, describeFleet(hs))
		rooms, err := Capacity(params, s, hs, r)
		if err != nil {
			t.Fatalf("%s: capacity: %v", name, err)
		}
		total := 0
		for _, h := range slices.Sorted(maps.Keys(rooms)) {
			if n := rooms[h].Count; n < 0 {
				t.Errorf("%s: %s's room is %d (%s), want at least 0", name, h, n, rooms[h].Limit)
			}
			total += max(rooms[h].Count, 0)
		}
		if total > 200 {
			continue
		}
		probed++
		if total > 0 {
			r.Count = total
			out, err := Plan(params, s, hs, r)
			if err != nil {
				t.Errorf("%s: capacity %d %v, and a plan of %d was refused: %v", name, total, rooms, total, err)
				continue
			}
			if len(out.Placements) != total {
				t.Errorf("%s: a plan of %d placed %d", name, total, len(out.Placements))
			}
		}
		r.Count = total + 1
		if _, err := Plan(params, s, hs, r); err == nil {
			t.Errorf("%s: capacity %d %v, and a plan of %d placed too", name, total, rooms, total+1)
		} else if pe := (*Error)(nil); !errors.As(err, &pe) || pe.Invalid {
			t.Errorf("%s: a plan of %d: %v, want a refusal for room", name, total+1, err)
		}
	}
	if probed < 2000 {
		t.Errorf("only %d of 3000 cases probed", probed)
	}
}

// TestCapacityTable: the defects the simulation found, by hand.
func TestCapacityTable(t *testing.T) {
	t.Parallel()
	ssd := func(name string, has bool, memMiB int64) *Host {
		h := &Host{Name: name, Properties: map[string]Value{"ssd": BoolVal(has)}, Resources: res(name, 4, memMiB)}
		return h
	}
	over := ssd("over", true, 4<<10)
	over.Resources.MemoryUsed = 6 << 30 // 2 GiB over: -2 (memory) for 1 GiB instances
	memReq := Request{Request: alloc.Request{Service: "probe", Pieces: 50, MemoryBytes: 1 << 30, Strategy: alloc.Auto}}
	withC := memReq
	// 1 CPU bound: a CPU overbooked to 125 pieces gives fragments only.
	wholeCPU := Request{Request: alloc.Request{Service: "probe", Pieces: 100, Bind: true, MemoryBytes: 1 << 30, Strategy: alloc.Auto}, UseBuffer: true}
	withC.Constraint = "ssd == true"
	for _, tt := range []struct {
		name  string
		s     Settings
		hosts []*Host
		r     Request
		want  map[string]int
	}{
		{"host over its memory takes none", Settings{}, []*Host{over, ssd("ok", true, 4<<10)}, memReq, map[string]int{"over": 0, "ok": 4}},
		{"host over its buffered memory takes none", Settings{Buffer: map[string]float64{"memory": 0.5}},
			[]*Host{func() *Host { h := ssd("b", true, 4<<10); h.Resources.MemoryUsed = 3 << 30; return h }(), ssd("ok", true, 4<<10)},
			memReq, map[string]int{"b": 0, "ok": 2}},
		{"hard constraint: the matching hosts", Settings{}, []*Host{ssd("y", true, 2<<10), ssd("n", false, 2<<10)}, withC, map[string]int{"y": 2, "n": 0}},
		{"soft constraint: every host", Settings{Priorities: map[Rule]Priority{RulePlacementConstraint: Soft}},
			[]*Host{ssd("y", true, 2<<10), ssd("n", false, 2<<10)}, withC, map[string]int{"y": 2, "n": 2}},
		{"optimization constraint: every host", Settings{Priorities: map[Rule]Priority{RulePlacementConstraint: Optimization}},
			[]*Host{ssd("y", true, 2<<10), ssd("n", false, 2<<10)}, withC, map[string]int{"y": 2, "n": 2}},
		{"off constraint: every host", Settings{Priorities: map[Rule]Priority{RulePlacementConstraint: Off}},
			[]*Host{ssd("y", true, 2<<10), ssd("n", false, 2<<10)}, withC, map[string]int{"y": 2, "n": 2}},
		{"cpu overbooking, whole CPUs, with the buffer: as normal placement sees the host", Settings{Overbooking: map[string]float64{"cpu": 0.25}},
			[]*Host{ssd("y", true, 8<<10)}, wholeCPU, map[string]int{"y": 4}},
		{"soft capacity: the buffer too", Settings{Buffer: map[string]float64{"memory": 0.5}, Priorities: map[Rule]Priority{RuleCapacity: Soft}},
			[]*Host{ssd("y", true, 2<<10)}, memReq, map[string]int{"y": 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rooms, err := Capacity(params, tt.s, tt.hosts, tt.r)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for h, want := range tt.want {
				if rooms[h].Count != want {
					t.Errorf("%s takes %d (%s), want %d", h, rooms[h].Count, rooms[h].Limit, want)
				}
				total += want
			}
			r := tt.r
			r.Count = total
			out, err := Plan(params, tt.s, tt.hosts, r)
			if err != nil {
				t.Fatalf("a plan of %d: %v", total, err)
			}
			if got := perHost(out); len(out.Placements) != total {
				t.Errorf("a plan of %d placed %v", total, got)
			}
			r.Count = total + 1
			if _, err := Plan(params, tt.s, tt.hosts, r); err == nil {
				t.Errorf("a plan of %d placed too", total+1)
			}
		})
	}
}

func describeRequest(r Request) string {
	return fmt.Sprintf("%s bind=%v pieces=%d mem=%dMiB max/host=%d constraint=%q affinity=%v usebuffer=%v",
		r.Strategy, r.Bind, r.Pieces, r.MemoryBytes>>20, r.MaxPerHost, r.Constraint, r.Affinity.Hard, r.UseBuffer)
}

func describeFleet(hs []*Host) string {
	var parts []string
	for _, h := range hs {
		r := h.Resources
		used := 0
		for _, c := range r.CPUs {
			used += c.Used
		}
		s := fmt.Sprintf("%s{%d CPUs %d used, %d/%d MiB, %d NUMA, %v", h.Name, len(r.CPUs), used, r.MemoryUsed>>20, r.MemoryBytes>>20, len(r.NUMANodes), h.Properties)
		if h.Disabled {
			s += " disabled"
		}
		if h.Maintenance {
			s += " maintenance"
		}
		if r.Instances["db"] > 0 {
			s += " db"
		}
		parts = append(parts, s+"}")
	}
	return strings.Join(parts, " ")
}

// TestRefusalNamesWhatLimitsEachHost: a deploy refused where the placement
// layer caps each host first (a buffer, overbooking or domains) names what
// Capacity names for the host, not the engine's own limit: deploy
// --max-per-host 2 with a cpu buffer said "epyc1 takes 2 (cpu)".
func TestRefusalNamesWhatLimitsEachHost(t *testing.T) {
	p := alloc.DefaultParams()
	s := Settings{Buffer: map[string]float64{"cpu": 0.1}}
	hosts := []*Host{{Name: "epyc1", Resources: res("epyc1", 8, 8<<10)}}
	r := Request{Request: alloc.Request{Service: "web", Count: 3, Pieces: 100, Bind: true, MemoryBytes: 64 << 20, Strategy: alloc.Auto, MaxPerHost: 2}}
	rooms, err := Capacity(p, s, hosts, r)
	if err != nil || rooms["epyc1"].Limit != "max_per_host" {
		t.Fatalf("Capacity = %+v, %v; want epyc1 limited by max_per_host", rooms, err)
	}
	_, err = PlanValid(p, s, hosts, r)
	if want := "epyc1 takes 2 (max_per_host)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("PlanValid(%d of web, max_per_host 2, cpu buffer 0.1) = %v, want a refusal naming %q", r.Count, err, want)
	}
}
