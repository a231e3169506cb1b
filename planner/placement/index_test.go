package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// indexFleet is n hosts sorted by name: 2-16 CPUs with random use, some
// NUMA-split, some with instances of "svc", some disabled, in maintenance
// or in a domain, some copies of others (ties), some with a capacity memo.
func indexFleet(rng *rand.Rand, n int) []*Host {
	var hs []*Host
	for i := range n {
		name := fmt.Sprintf("h%03d", i)
		if i > 0 && rng.IntN(3) == 0 {
			src := hs[rng.IntN(len(hs))]
			r := *src.Resources
			r.Name, r.Memo = name, nil
			hs = append(hs, &Host{Name: name, Resources: &r})
			continue
		}
		r := &alloc.Host{Name: name, MemoryBytes: int64(1+rng.IntN(16)) << 30, Instances: map[string]int{}}
		cpus := 2 + rng.IntN(15)
		for c := range cpus {
			cpu := alloc.CPU{ID: cpuset.CPUID(c), Capacity: 100}
			switch rng.IntN(4) {
			case 0:
				cpu.Used = 100
			case 1:
				cpu.Used = rng.IntN(100)
			}
			r.CPUs = append(r.CPUs, cpu)
		}
		r.MemoryUsed = rng.Int64N(r.MemoryBytes / 2)
		if rng.IntN(4) == 0 {
			r.Instances["svc"] = 1 + rng.IntN(2)
		}
		hs = append(hs, &Host{Name: name, Resources: r})
	}
	for _, h := range hs {
		h.Disabled = rng.IntN(10) == 0
		h.Maintenance = rng.IntN(10) == 0
		if rng.IntN(8) == 0 {
			h.FaultDomain = "fd:/dc1"
		}
		if rng.IntN(2) == 0 {
			h.Resources.Memo = alloc.NewCapacityMemo()
		}
	}
	return hs
}

// changedHosts is hs with some hosts replaced by emptied or filled copies
// (a deploy's pending change, or the next list of the store).
func changedHosts(rng *rand.Rand, hs []*Host) []*Host {
	out := append([]*Host(nil), hs...)
	for range 1 + rng.IntN(3) {
		i := rng.IntN(len(out))
		r := *out[i].Resources
		r.Memo = nil
		r.CPUs = append([]alloc.CPU(nil), r.CPUs...)
		used := 0 // emptied: likely the best host now
		if rng.IntN(2) == 0 {
			used = 100 // filled: no room left
		}
		for c := range r.CPUs {
			r.CPUs[c].Used = used
		}
		r.MemoryUsed = 0
		r.Instances = map[string]int{"svc": rng.IntN(2)}
		h := *out[i]
		h.Resources = &r
		out[i] = &h
	}
	return out
}

// TestIndexIsTheFullPlan: where the index answers a one-instance auto
// request, it places exactly what the full plan places (host and
// allocation, no violation, no spread), over random fleets, through a
// replaced host (pending changes) and through an index built from the
// one before; and it answers most plain requests (the test would pass
// vacuously otherwise).
func TestIndexIsTheFullPlan(t *testing.T) {
	answered, plain := 0, 0
	for seed := range uint64(1500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		hs := indexFleet(rng, 1+rng.IntN(40))
		x := NewIndex(params, hs, nil)
		r := Request{Request: alloc.Request{Service: "svc", Count: 1, Pieces: 10 * (1 + rng.IntN(30)), Bind: rng.IntN(5) != 0, MemoryBytes: int64(1+rng.IntN(8)) << 28}}
		if rng.IntN(3) > 0 {
			r.Seed = rng.Uint64()
		}
		if rng.IntN(4) == 0 {
			r.MaxPerHost = 1 + rng.IntN(2)
		}
		if rng.IntN(6) == 0 {
			r.DomainSpread = SpreadOff
		}
		if rng.IntN(8) == 0 { // not plain: the index must decline
			r.Constraint = "x == 1"
		}
		if rng.IntN(8) == 0 {
			r.Count = 2
		}
		s := Settings{}
		if rng.IntN(10) == 0 {
			s.Buffer = map[string]float64{"cpu": 0.1}
		}
		next := changedHosts(rng, hs)
		// first the pending copy over x, then next's own index built from x
		for li, list := range [][]*Host{hs, next, next} {
			idx := x
			if li == 2 {
				idx = NewIndex(params, next, x)
			}
			t.Run(fmt.Sprintf("seed %d list %d", seed, li), func(t *testing.T) {
				got, ok := idx.First(params, s, list, r)
				if idx.Plain(s, r) {
					plain++
				} else if ok {
					t.Fatalf("answered a request that is not plain: %+v", r)
				}
				if !ok {
					return
				}
				answered++
				want, err := Plan(params, s, list, r)
				if err != nil {
					t.Fatalf("the index placed %v; the full plan refused: %v", got.Placements, err)
				}
				if d := cmp.Diff(want.Placements, got.Placements); d != "" {
					t.Fatalf("%+v: the index's placement differs from the full plan's (-full +index):\n%s", r, d)
				}
				if len(want.Violations) > 0 || want.Spread != "" {
					t.Fatalf("the full plan has violations %v, spread %q: the request was not plain", want.Violations, want.Spread)
				}
			})
		}
	}
	if answered < plain/2 {
		t.Errorf("the index answered %d of %d plain requests: the test checks too little", answered, plain)
	}
	t.Logf("the index answered %d of %d plain requests", answered, plain)
}

// TestIndexWithoutIsTheFullPlan: FirstWithout places exactly what the full
// plan places over the list with the skipped host removed (a move's or a
// heal's), over random fleets in which most hosts may run the service
// already (auto's whole order, not only the best hosts without it), through
// a replaced host and through an index built from the one before. Guards:
// it answers most plain requests; in some answers the skipped host is the
// one the plan over the whole list takes (the skip decided); in some the
// host taken runs the service already (the order's count came first).
func TestIndexWithoutIsTheFullPlan(t *testing.T) {
	answered, plain, skipDecided, ranAlready := 0, 0, 0, 0
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 11))
		n := 1 + rng.IntN(40)
		if rng.IntN(3) == 0 {
			n = 33 + rng.IntN(40) // more hosts than the candidates kept
		}
		hs := indexFleet(rng, n)
		if rng.IntN(2) == 0 { // most hosts run the service
			for _, h := range hs {
				if rng.IntN(8) != 0 {
					h.Resources.Instances["svc"] = 1 + rng.IntN(3)
				}
			}
		}
		x := NewIndex(params, hs, nil)
		r := Request{Request: alloc.Request{Service: "svc", Count: 1, Pieces: 10 * (1 + rng.IntN(30)), Bind: rng.IntN(5) != 0, MemoryBytes: int64(1+rng.IntN(8)) << 28},
			UseBuffer: rng.IntN(2) == 0, NominalFirst: rng.IntN(2) == 0}
		if rng.IntN(3) > 0 {
			r.Seed = rng.Uint64()
		}
		if rng.IntN(4) == 0 {
			r.MaxPerHost = 1 + rng.IntN(3)
		}
		if rng.IntN(6) == 0 {
			r.DomainSpread = SpreadOff
		}
		if rng.IntN(10) == 0 { // not plain: the index must decline
			r.Constraint = "x == 1"
		}
		s := Settings{}
		if rng.IntN(10) == 0 {
			s.Overbooking = map[string]float64{"memory": 0.2}
		}
		next := changedHosts(rng, hs)
		for li, list := range [][]*Host{hs, next, next} {
			idx := x
			if li == 2 {
				idx = NewIndex(params, next, x)
			}
			skip := ""
			switch rng.IntN(4) {
			case 0: // none
			case 1:
				skip = "nowhere"
			case 2: // the host the whole list's plan takes
				if all, err := Plan(params, s, list, r); err == nil {
					skip = all.Placements[0].Host
				}
			default:
				skip = list[rng.IntN(len(list))].Name
			}
			t.Run(fmt.Sprintf("seed %d list %d skip %q", seed, li, skip), func(t *testing.T) {
				got, ok := idx.FirstWithout(params, s, list, r, skip)
				if idx.Plain(s, r) {
					plain++
				} else if ok {
					t.Fatalf("answered a request that is not plain: %+v", r)
				}
				if !ok {
					return
				}
				answered++
				without := slices.DeleteFunc(slices.Clone(list), func(h *Host) bool { return h.Name == skip })
				want, err := Plan(params, s, without, r)
				if err != nil {
					t.Fatalf("the index placed %v; the full plan without %q refused: %v", got.Placements, skip, err)
				}
				if d := cmp.Diff(want.Placements, got.Placements); d != "" {
					t.Fatalf("%+v without %q: the index's placement differs from the full plan's (-full +index):\n%s", r, skip, d)
				}
				if len(want.Violations) > 0 || want.Spread != "" || want.Overbooked {
					t.Fatalf("the full plan has violations %v, spread %q, overbooked %v: the request was not plain", want.Violations, want.Spread, want.Overbooked)
				}
				if all, err := Plan(params, s, list, r); err == nil && all.Placements[0].Host == skip {
					skipDecided++
				}
				for _, h := range list {
					if h.Name == got.Placements[0].Host && h.Resources.Instances["svc"] > 0 {
						ranAlready++
					}
				}
			})
		}
	}
	if answered < plain*3/4 || skipDecided < 200 || ranAlready < 200 {
		t.Errorf("the index answered %d of %d plain requests, %d where the skipped host was the whole list's choice, %d on a host running the service: the test checks too little",
			answered, plain, skipDecided, ranAlready)
	}
	t.Logf("the index answered %d of %d plain requests (%d decided by the skip, %d on a host running the service)", answered, plain, skipDecided, ranAlready)
}
