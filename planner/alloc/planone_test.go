package alloc_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
)

// TestPlanOneIsTheFullPlan: a one-instance request's shortcut (one pass,
// no candidates, no heap) gives PlanValid's full answer, field for field,
// or the same error, over random fleets: ties (hosts that are copies of
// each other), the service already on some hosts, max per host, ranks,
// limits, seeds, unsorted input, memos, full hosts, and every strategy.
func TestPlanOneIsTheFullPlan(t *testing.T) {
	const sb = 100
	p := alloc.Params{ShareBase: sb, MaxFragmentCores: -1}
	strategies := alloc.Strategies
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 99))
		n := 1 + rng.IntN(12)
		var hosts []*alloc.Host
		for i := range n {
			name := fmt.Sprintf("h%02d", rng.IntN(100))
			if i > 0 && rng.IntN(3) == 0 { // a copy of another host: a tie
				c := *hosts[rng.IntN(len(hosts))]
				c.Name, c.Memo = name, nil
				hosts = append(hosts, &c)
				continue
			}
			h := randomHost(rng, name, sb)
			h.Instances["svc"] = rng.IntN(3)
			hosts = append(hosts, h)
		}
		seen := map[string]bool{}
		uniq := hosts[:0]
		for _, h := range hosts {
			if !seen[h.Name] {
				seen[h.Name] = true
				uniq = append(uniq, h)
			}
		}
		hosts = uniq
		for _, h := range hosts {
			if rng.IntN(2) == 0 {
				h.Memo = alloc.NewCapacityMemo()
			}
		}
		r := randomRequest(rng, sb)
		r.Strategy = strategies[rng.IntN(len(strategies))]
		if rng.IntN(2) == 0 {
			r.Seed = rng.Uint64()
		}
		if rng.IntN(4) == 0 {
			r.MaxPerHost = 1 + rng.IntN(3)
		}
		if rng.IntN(4) == 0 {
			r.Rank = map[string]int{}
			for _, h := range hosts {
				if rng.IntN(2) == 0 {
					r.Rank[h.Name] = rng.IntN(3)
				}
			}
		}
		if rng.IntN(4) == 0 {
			r.Limit = map[string]int{}
			for _, h := range hosts {
				if rng.IntN(2) == 0 {
					r.Limit[h.Name] = rng.IntN(3)
				}
			}
		}
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			got, gotErr := alloc.PlanValid(p, hosts, r)
			want, wantErr := alloc.PlanValidFull(p, hosts, r)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("%s %+v: error %v, the full plan's %v", r.Strategy, r, gotErr, wantErr)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("%s %+v over %d hosts: the shortcut's result differs from the full plan's (-full +shortcut):\n%s", r.Strategy, r, len(hosts), d)
			}
		})
	}
}
