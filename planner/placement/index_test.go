package placement

import (
	"fmt"
	"math/rand/v2"
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
