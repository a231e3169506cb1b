package balance

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// cluster builds hosts of 8 CPUs (800 pieces) and 16 GiB and items of cpu
// pieces each, placed per host.
func cluster(per map[string][]int64) ([]Host, []Item) {
	var hosts []Host
	var items []Item
	for _, name := range []string{"a", "b", "c", "d"} {
		ps, ok := per[name]
		if !ok {
			continue
		}
		h := Host{Name: name, Capacity: map[string]int64{"cpu": 800, "memory": 16 << 30}, Used: map[string]int64{}}
		for i, p := range ps {
			items = append(items, Item{ID: fmt.Sprintf("%s-%d", name, i), Service: "web", Host: name, Use: map[string]int64{"cpu": p, "memory": 1 << 30}})
			h.Used["cpu"] += p
			h.Used["memory"] += 1 << 30
		}
		hosts = append(hosts, h)
	}
	return hosts, items
}

// model is the caller's side of Try: it accepts unless refuse says no.
func accept(refuse func(Item, string) bool) Try {
	return func(it Item, to string) bool { return refuse == nil || !refuse(it, to) }
}

func TestPlan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		per       map[string][]int64
		o         Options
		refuse    func(Item, string) bool
		wantMoves int // -1: at least one
		check     func(t *testing.T, moves []Move)
	}{
		{name: "all on one host: moves until balanced", per: map[string][]int64{"a": {100, 100, 100, 100, 100, 100}, "b": {}, "c": {}}, wantMoves: 4},
		{name: "balanced within the threshold: nothing", per: map[string][]int64{"a": {100, 100, 100}, "b": {100, 100}, "c": {100, 100}}, wantMoves: 0},
		{name: "above a 1.2 threshold, but no single move lowers the spread", per: map[string][]int64{"a": {100, 100, 100}, "b": {100, 100}, "c": {100, 100}}, o: Options{BalancingThreshold: 1.2}, wantMoves: 0},
		{name: "idle cluster under the activity threshold: nothing", per: map[string][]int64{"a": {10, 10, 10, 10}, "b": {5}, "c": {5}}, o: Options{ActivityThreshold: 0.3}, wantMoves: 0},
		// Issue 24: a host that joins empty is filled, however idle.
		{name: "a new host is filled under the activity threshold", per: map[string][]int64{"a": {10, 10, 10}, "b": {10, 10, 10}, "c": {}}, wantMoves: 2,
			check: func(t *testing.T, moves []Move) {
				for _, m := range moves {
					if m.To != "c" || !strings.Contains(m.Why, "c ran nothing") {
						t.Errorf("move %+v: want to c, the new host, saying so", m)
					}
				}
			}},
		{name: "below the activity threshold only the new host takes moves", per: map[string][]int64{"a": {10, 10, 10, 10}, "b": {10}, "c": {}}, o: Options{ActivityThreshold: 0.3}, wantMoves: 2,
			check: func(t *testing.T, moves []Move) {
				for _, m := range moves {
					if m.To != "c" || m.Item.Host != "a" {
						t.Errorf("move %+v: want a to c (b is running work, under the activity threshold)", m)
					}
				}
			}},
		{name: "two new hosts are filled by name", per: map[string][]int64{"a": {10, 10, 10, 10, 10, 10}, "b": {}, "c": {}}, wantMoves: 4,
			check: func(t *testing.T, moves []Move) {
				if moves[0].To != "b" || moves[1].To != "c" {
					t.Errorf("moves %+v: want b first (ties by name), then c", moves)
				}
			}},
		{name: "max moves bounds filling a new host", per: map[string][]int64{"a": {10, 10, 10, 10, 10, 10, 10, 10}, "b": {}}, o: Options{MaxMoves: 1, ActivityThreshold: 0.6}, wantMoves: 1},
		{name: "a single instance is not swapped onto a new host", per: map[string][]int64{"a": {10}, "b": {}}, wantMoves: 0},
		{name: "above the activity threshold the new host is named in the reason", per: map[string][]int64{"a": {400, 400}, "b": {}}, wantMoves: 1,
			check: func(t *testing.T, moves []Move) {
				if !strings.Contains(moves[0].Why, "∞: b uses none") {
					t.Errorf("why = %q, want the host that uses none named", moves[0].Why)
				}
			}},
		{name: "a hard rule refuses c: only b takes", per: map[string][]int64{"a": {100, 100, 100, 100}, "b": {}, "c": {}},
			refuse: func(_ Item, to string) bool { return to == "c" }, wantMoves: -1,
			check: func(t *testing.T, moves []Move) {
				for _, m := range moves {
					if m.To == "c" {
						t.Errorf("move %+v to a refused host", m)
					}
				}
			}},
		{name: "max moves bounds the proposal", per: map[string][]int64{"a": {50, 50, 50, 50, 50, 50, 50, 50}, "b": {}, "c": {}, "d": {}}, o: Options{MaxMoves: 3}, wantMoves: 3},
		{name: "a move that would overshoot is not made", per: map[string][]int64{"a": {400}, "b": {50}}, wantMoves: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hosts, items := cluster(tc.per)
			before := Score(hosts)
			moves, after := Plan(hosts, items, tc.o, accept(tc.refuse))
			switch {
			case tc.wantMoves == -1 && len(moves) == 0:
				t.Fatalf("no moves, want some")
			case tc.wantMoves >= 0 && len(moves) != tc.wantMoves:
				t.Fatalf("%d moves %+v, want %d", len(moves), moves, tc.wantMoves)
			}
			if len(moves) > 0 && !(Score(after) < before) {
				t.Errorf("score %.4f → %.4f: the moves did not reduce imbalance", before, Score(after))
			}
			// Replaying the moves one by one, each lowers the score.
			cur := make([]Host, len(hosts))
			for i, h := range hosts {
				cur[i] = Host{Name: h.Name, Capacity: h.Capacity, Used: clone(h.Used)}
			}
			for _, m := range moves {
				s0 := Score(cur)
				var from, to *Host
				for i := range cur {
					switch cur[i].Name {
					case m.Item.Host:
						from = &cur[i]
					case m.To:
						to = &cur[i]
					}
				}
				shift(from, to, m.Item, +1)
				if s1 := Score(cur); !(s1 < s0) {
					t.Errorf("move %+v: score %.4f → %.4f", m, s0, s1)
				}
				if m.Why == "" {
					t.Errorf("move %+v has no reason", m)
				}
			}
			for i := range cur {
				for _, r := range Resources {
					if cur[i].Used[r] != after[i].Used[r] {
						t.Errorf("replayed host %s uses %d of %s, Plan says %d", cur[i].Name, cur[i].Used[r], r, after[i].Used[r])
					}
				}
			}
			if tc.check != nil {
				tc.check(t, moves)
			}
			// hosts and items are not changed, and the result is the same twice.
			hosts2, items2 := cluster(tc.per)
			if !reflect.DeepEqual(hosts, hosts2) || !reflect.DeepEqual(items, items2) {
				t.Errorf("Plan changed its input")
			}
			again, _ := Plan(hosts2, items2, tc.o, accept(tc.refuse))
			if !reflect.DeepEqual(moves, again) {
				t.Errorf("not deterministic: %+v then %+v", moves, again)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	t.Parallel()
	hosts, _ := cluster(map[string][]int64{"a": {400}, "b": {200}})
	if got := Ratio(hosts, "cpu"); got != 2 {
		t.Errorf("Ratio = %v, want 2", got)
	}
	hosts, _ = cluster(map[string][]int64{"a": {400}, "b": {}})
	if got := Ratio(hosts, "cpu"); !math.IsInf(got, 1) {
		t.Errorf("Ratio with an empty host = %v, want +Inf", got)
	}
	hosts, _ = cluster(map[string][]int64{"a": {}, "b": {}})
	if got := Ratio(hosts, "cpu"); got != 1 {
		t.Errorf("Ratio of an idle cluster = %v, want 1", got)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{BalancingThreshold: 0.5}, {BalancingThreshold: math.NaN()}, {ActivityThreshold: -0.1}, {ActivityThreshold: 2}, {MaxMoves: -1}, {MaxMoves: MaxMovesLimit + 1}} {
		if err := o.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", o)
		}
	}
	if err := (Options{BalancingThreshold: 1, ActivityThreshold: 0.5, MaxMoves: 5}).Validate(); err != nil {
		t.Errorf("Validate(valid) = %v", err)
	}
}

// BenchmarkPlan10kHosts: the proposal over 10,000 hosts of 64 CPUs with
// 20 instances each, all piled on the first tenth (the caller accepts every
// move): the cost of choosing 10 moves, placement aside.
func BenchmarkPlan10kHosts(b *testing.B) {
	var hosts []Host
	var items []Item
	for i := range 10000 {
		name := fmt.Sprintf("h%05d", i)
		h := Host{Name: name, Capacity: map[string]int64{"cpu": 6400, "memory": 256 << 30}, Used: map[string]int64{}}
		if i < 1000 {
			for j := range 20 {
				items = append(items, Item{ID: fmt.Sprintf("%s-%d", name, j), Service: "web", Host: name, Use: map[string]int64{"cpu": 250, "memory": 8 << 30}})
				h.Used["cpu"] += 250
				h.Used["memory"] += 8 << 30
			}
		}
		hosts = append(hosts, h)
	}
	b.Run("accepted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if moves, _ := Plan(hosts, items, Options{}, accept(nil)); len(moves) != DefaultMaxMoves {
				b.Fatalf("%d moves", len(moves))
			}
		}
	})
	// Every move refused (no host may take any): the worst case, bounded
	// by MaxTargets tries per instance of the busiest host.
	b.Run("refused", func(b *testing.B) {
		tries := 0
		for b.Loop() {
			tries = 0
			if moves, _ := Plan(hosts, items, Options{}, func(Item, string) bool { tries++; return false }); len(moves) != 0 {
				b.Fatalf("%d moves", len(moves))
			}
		}
		b.ReportMetric(float64(tries), "tries/op")
	})
}

// TestPlanLeavesUseAlone: items that share one Use map (the service
// interns them: one map per size) get the moves items with their own
// maps get, and the shared map is as it was afterwards. Guard: the plans
// move something.
func TestPlanLeavesUseAlone(t *testing.T) {
	t.Parallel()
	per := map[string][]int64{"a": {100, 100, 100, 100, 100, 100}, "b": {100}, "c": {}, "d": {100, 100}}
	hosts, own := cluster(per)
	_, shared := cluster(per)
	one := map[string]int64{"cpu": 100, "memory": 1 << 30}
	for i := range shared {
		shared[i].Use = one
	}
	want, _ := Plan(hosts, own, Options{}, accept(nil))
	got, _ := Plan(hosts, shared, Options{}, accept(nil))
	if len(want) == 0 {
		t.Fatal("the plan moved nothing: the test checks nothing")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with one shared Use map Plan = %+v, with a map per item %+v", got, want)
	}
	if !reflect.DeepEqual(one, map[string]int64{"cpu": 100, "memory": 1 << 30}) {
		t.Errorf("Plan wrote the shared Use map: %v", one)
	}
}
