package placement

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
)

// mutate replaces some hosts with copies whose usage, Disabled or
// Maintenance changed (domains untouched: TestIndexPendingGainsDomain), possibly
// renaming one (list names differ).
func atkMutate(rng *rand.Rand, hs []*Host, rename bool) []*Host {
	out := changedHosts(rng, hs)
	for range rng.IntN(3) {
		i := rng.IntN(len(out))
		h := *out[i]
		if h.FaultDomain == "" && h.UpgradeDomain == "" {
			h.Disabled = rng.IntN(3) == 0
			h.Maintenance = rng.IntN(3) == 0
		}
		out[i] = &h
	}
	if rename && rng.IntN(4) == 0 {
		i := rng.IntN(len(out))
		h := *out[i]
		h.Name = out[i].Name + "x" // sorts right after, before the next
		res := *h.Resources
		res.Name, res.Memo = h.Name, nil
		h.Resources = &res
		out[i] = &h
	}
	return out
}

// TestIndexRandom: First against the full plan with settings priorities,
// WholeCores, memory-first, seed 0, MaxPerHost, UseBuffer, every spread,
// pending copies changing usage/Disabled/Maintenance, renamed hosts and
// six generations of carried indexes; and the index answers at least half
// the plain requests (else it checks too little).
func TestIndexRandom(t *testing.T) {
	rules := []Rule{RuleCapacity, RuleAffinity, RulePlacementConstraint, RuleFaultDomain, RuleUpgradeDomain}
	prios := []Priority{Off, Hard, Soft, Optimization}
	answered, plain, bad := 0, 0, 0
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 99))
		n := 1 + rng.IntN(80)
		if rng.IntN(4) == 0 {
			n = 33 + rng.IntN(10)
		}
		hs := indexFleet(rng, n)
		if rng.IntN(3) == 0 { // many running the service
			for _, h := range hs {
				if rng.IntN(10) != 0 {
					h.Resources.Instances["svc"] = 1
				}
			}
		}
		s := Settings{Priorities: map[Rule]Priority{}}
		for _, ru := range rules {
			if rng.IntN(2) == 0 {
				s.Priorities[ru] = prios[rng.IntN(len(prios))]
			}
		}
		x := NewIndex(params, hs, nil)
		list := hs
		for gen := range 6 {
			pieces := 100 * (1 + rng.IntN(4))
			if rng.IntN(2) == 0 {
				pieces = 10 * (1 + rng.IntN(30))
			}
			r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, Pieces: pieces, Bind: rng.IntN(4) != 0, MemoryBytes: int64(1+rng.IntN(8)) << 28}}
			if r.Bind && pieces%100 == 0 && rng.IntN(2) == 0 {
				r.WholeCores = true
			}
			if rng.IntN(2) == 0 {
				r.Seed = rng.Uint64()
			}
			if rng.IntN(3) == 0 {
				r.MaxPerHost = 1 + rng.IntN(3)
			}
			r.UseBuffer = rng.IntN(2) == 0
			r.DomainSpread = []Spread{"", SpreadOff, Adaptive, MaxDifference, QuorumSafe}[rng.IntN(5)]
			lists := [][]*Host{list, atkMutate(rng, list, false)}
			for li, l := range lists {
				got, ok := x.First(params, s, l, r)
				if x.Plain(s, r) {
					plain++
				}
				if !ok {
					continue
				}
				answered++
				want, err := PlanValid(params, s, l, r)
				var d string
				if err == nil {
					d = cmp.Diff(want.Placements, got.Placements)
				}
				if err != nil || d != "" || want.Spread != "" || len(want.Violations) > 0 {
					bad++
					if bad < 5 {
						var sp Spread
						var vio []Violation
						if want != nil {
							sp, vio = want.Spread, want.Violations
						}
						t.Errorf("seed %d gen %d list %d %+v settings %v: err %v spread %q vio %v\n%s", seed, gen, li, r, s.Priorities, err, sp, vio, d)
					}
				}
			}
			next := atkMutate(rng, list, true)
			x = NewIndex(params, next, x)
			list = next
		}
	}
	// An index that declines everything passes the loop: the guard.
	if answered < plain/2 {
		t.Errorf("the index answered %d of %d plain requests: the test checks too little", answered, plain)
	}
	t.Logf("answered %d of %d plain, bad %d", answered, plain, bad)
}
