package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

// runAll reports every instance that moves started as running, so that
// the leader's next tick settles them.
func (f healFixture) runAll() {
	f.t.Helper()
	for _, v := range f.st.Moving() {
		if err := f.ReportStatus(f.ctx, v.Instance.Host, v.Instance.ID, model.Status{State: "running", Generation: v.Instance.Generation}); err != nil {
			f.t.Fatal(err)
		}
	}
	f.sync()
}

// TestEveryStrategyThroughEveryMove runs a service deployed with each
// strategy through what moves or adds one instance at a time: drain,
// rebalance, heal, scale up and down. Before, a fill or each service made
// placeLike index an empty placement (a panic in the commit pipeline's
// goroutine: the planner died, and again after a restart, resuming the
// drain); scale up of such a service placed nothing.
func TestEveryStrategyThroughEveryMove(t *testing.T) {
	for _, st := range alloc.Strategies {
		t.Run(string(st), func(t *testing.T) {
			// The repro: two hosts, count 2 (each and fill: 2 on
			// every host), then drain a.
			f := newHealFixture(t, "a", "b")
			res, err := f.DeployWithRules(f.ctx, DeployRequest{Service: "f", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: 64 << 20}, Scheduling: model.Scheduling{Strategy: string(st)}}})
			if err != nil {
				t.Fatal(err)
			}
			n, want := len(res.Instances), 2
			if st == alloc.Each || st == alloc.Fill {
				want = 4
			}
			if n != want {
				t.Fatalf("deployed %d instances, want %d", n, want)
			}

			// Drain a: both move, blue-green, and the drain ends.
			if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
				t.Fatal(err)
			}
			tr, now := newTracker(), time.Now()
			for i := 0; i < 4 && len(f.on("a")) > 0; i++ {
				f.tick(f.ctx, tr, now.Add(time.Duration(i)*time.Second))
				f.runAll()
			}
			if on := f.on("a"); len(on) != 0 {
				t.Fatalf("after draining a, it still holds %v", on)
			}
			if got := countInstances(f.st.ServiceInstances("f")); got != n {
				t.Fatalf("f has %d instances after the drain, want %d", got, n)
			}
			f.set("a", true)

			// Rebalance onto a (empty again): a dry run and an apply.
			if _, err := f.Rebalance(f.ctx, RebalanceRequest{}); err != nil {
				t.Fatalf("rebalance dry run: %v", err)
			}
			if _, err := f.Rebalance(f.ctx, RebalanceRequest{Apply: true}); err != nil {
				t.Fatalf("rebalance apply: %v", err)
			}
			f.runAll()
			f.tick(f.ctx, tr, now.Add(10*time.Second))

			// The host of one instance dies: it is placed again.
			victim := f.st.ServiceInstances("f")[0].Instance.Host
			f.dies(victim)
			f.tick(f.ctx, tr, now.Add(20*time.Second))
			if _, err := f.Heal(f.ctx, victim, false); err != nil {
				t.Fatalf("heal of %s: %v", victim, err)
			}
			if on := f.on(victim); len(on) != 0 {
				t.Fatalf("after healing %s, it still holds %v", victim, on)
			}

			// Scale up by one, then down to one: the counts are exact and
			// the strategy stays the service's.
			if r, err := f.Scale(f.ctx, "f", n+1); err != nil || len(r.Added) != 1 {
				t.Fatalf("scale to %d = %+v, %v; want one added", n+1, r, err)
			}
			if d, _ := f.st.Service("f"); d.Value.Strategy != string(st) {
				t.Errorf("after scale up the service's strategy is %q, want %q", d.Value.Strategy, st)
			}
			if r, err := f.Scale(f.ctx, "f", 1); err != nil || len(r.Removed) != n {
				t.Fatalf("scale to 1 = %+v, %v; want %d removed", r, err, n)
			}
			if got := countInstances(f.st.ServiceInstances("f")); got != 1 {
				t.Errorf("f has %d instances, want 1", got)
			}
			f.verify()
		})
	}
}

// TestScaleDownKeepsTheSpread: 3 + 3 over two hosts scaled to 2 leaves one
// on each (before: both on one host, the first host's three counted as
// the most crowded once and removed together); with fault domains the
// domain holding most loses first.
func TestScaleDownKeepsTheSpread(t *testing.T) {
	for _, tc := range []struct {
		name    string
		domains map[string]string
		from    map[string]int
		to      int
		want    map[string]int // per fault domain (per host without domains)
	}{
		{"3+3 to 2", nil, map[string]int{"a": 3, "b": 3}, 2, map[string]int{"a": 1, "b": 1}},
		{"3+3 to 4", nil, map[string]int{"a": 3, "b": 3}, 4, map[string]int{"a": 2, "b": 2}},
		{"4+1+1 to 3", nil, map[string]int{"a": 4, "b": 1, "c": 1}, 3, map[string]int{"a": 1, "b": 1, "c": 1}},
		{"domains 2+2 | 2 to 3", map[string]string{"a": "fd:/dc1", "b": "fd:/dc1", "c": "fd:/dc2"},
			map[string]int{"a": 2, "b": 2, "c": 2}, 3, map[string]int{"fd:/dc1": 2, "fd:/dc2": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hosts []string
			for _, h := range []string{"a", "b", "c"} {
				if tc.from[h] > 0 {
					hosts = append(hosts, h)
				}
			}
			f := newHealFixture(t, hosts...)
			for h, fd := range tc.domains {
				fd := fd
				if _, err := f.SetHost(f.ctx, SetHostRequest{Name: h, FaultDomain: &fd}); err != nil {
					t.Fatal(err)
				}
			}
			for _, h := range hosts {
				f.deployOn(h, hosts, DeployRequest{Service: "web", Count: tc.from[h], Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: gib}}})
			}
			if _, err := f.Scale(f.ctx, "web", tc.to); err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, v := range f.st.ServiceInstances("web") {
				k := v.Instance.Host
				if tc.domains != nil {
					k = tc.domains[k]
				}
				got[k]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("after scaling to %d: %v, want %v", tc.to, got, tc.want)
			}
			f.verify()
		})
	}
}
