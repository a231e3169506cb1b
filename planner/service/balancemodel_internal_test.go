package service

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/model"
)

// plainItems is balanceModel's items as it built them before issue 39:
// a Use map per item.
func plainItems(items []balance.Item) []balance.Item {
	out := make([]balance.Item, len(items))
	for i, it := range items {
		out[i] = it
		out[i].Use = map[string]int64{}
		for r, u := range it.Use {
			out[i].Use[r] = u
		}
	}
	return out
}

// TestBalanceModelSharesUse (issue 39): balanceModel's items, which share
// one Use map per size, hold the use each instance has (its memory, and
// its pieces when bound), over random fleets of bound and memory-first
// services of several sizes, and a dry-run rebalance proposes over them
// what it proposes over items with a map each. Guards: many items, of
// several sizes, bound and not, and some proposals with moves.
func TestBalanceModelSharesUse(t *testing.T) {
	items, sizes, withMoves := 0, map[string]bool{}, 0
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 39))
		hosts := []string{"a", "b", "c", "d"}
		f := newHealFixture(t, hosts...)
		for i := range 3 + rng.IntN(4) {
			on := hosts[rng.IntN(len(hosts))]
			d := model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10 * (1 + rng.IntN(8)), Memory: int64(1+rng.IntN(4)) << 28, Bind: rng.IntN(2) == 0}}
			f.deployOn(on, hosts, DeployRequest{Service: fmt.Sprintf("s%d", i), Count: 1 + rng.IntN(5), Deploy: d})
		}
		pend := f.st.Pending()
		hs, got, _ := balanceModel(pend, false)
		for _, it := range got {
			v, ok := pend.Instance(it.ID)
			if !ok {
				t.Fatalf("item %s: no such instance", it.ID)
			}
			want := map[string]int64{"memory": v.Instance.Memory}
			if v.Instance.Bind {
				want["cpu"] = int64(v.Instance.Pieces())
			}
			if d := cmp.Diff(want, it.Use); d != "" {
				t.Fatalf("seed %d: item %s's use differs from its instance's (-instance +item):\n%s", seed, it.ID, d)
			}
			sizes[fmt.Sprint(want)] = true
			items++
		}
		moves, _ := balance.Plan(hs, got, balance.Options{}, func(balance.Item, string) bool { return true })
		plain, _ := balance.Plan(hs, plainItems(got), balance.Options{}, func(balance.Item, string) bool { return true })
		if d := cmp.Diff(plain, moves); d != "" {
			t.Fatalf("seed %d: the proposal over shared maps differs (-a map each +shared):\n%s", seed, d)
		}
		if len(moves) > 0 {
			withMoves++
		}
	}
	if items < 100 || len(sizes) < 10 || withMoves == 0 {
		t.Errorf("%d items of %d sizes, %d proposals with moves: the test checks too little", items, len(sizes), withMoves)
	}
	t.Logf("%d items of %d sizes, %d proposals with moves", items, len(sizes), withMoves)
}
