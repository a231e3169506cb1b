package service

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// TestRebalanceRepairsTheSpread (issue 38 item 5): four web instances
// placed while dc2's hosts were disabled (as a drain and its cancel leave
// them) sit in dc1; health warns "FaultDomain web … dc1 4, dc2 0", and a
// dry-run rebalance proposes the moves that repair it (two into dc2, each
// saying why), within --max-moves; nothing is above the CPU or memory
// thresholds, so the spread is the only reason. Applied, health has
// nothing more to say. Control: without respread the dry run proposes
// nothing and the test fails.
func TestRebalanceRepairsTheSpread(t *testing.T) {
	f := newHealFixture(t, "a1", "a2", "b1", "b2")
	for _, h := range []string{"a1", "a2", "b1", "b2"} {
		dc := "fd:/dc" + map[byte]string{'a': "1", 'b': "2"}[h[0]]
		if _, err := f.SetHost(f.ctx, SetHostRequest{Name: h, FaultDomain: &dc}); err != nil {
			t.Fatal(err)
		}
	}
	// Every host runs something (a host that ran nothing is filled by the
	// balancing of CPU and memory, below its activity threshold too).
	if _, err := f.Deploy(f.ctx, DeployRequest{Service: "base", Count: 4, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Memory: 64 << 20},
		Scheduling: model.Scheduling{MaxPerHost: 1}}}); err != nil {
		t.Fatal(err)
	}
	f.set("b1", false)
	f.set("b2", false)
	if _, err := f.Deploy(f.ctx, DeployRequest{Service: "web", Count: 4, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Memory: 64 << 20}}}); err != nil {
		t.Fatal(err)
	}
	f.set("b1", true)
	f.set("b2", true)
	ws := f.Health(time.Now())
	if len(ws) != 1 || ws[0].Kind != placement.RuleFaultDomain || !strings.Contains(ws[0].Detail, "dc1 4, dc2 0") {
		t.Fatalf("health = %+v, want the one FaultDomain warning dc1 4, dc2 0", ws)
	}
	one, err := f.Rebalance(f.ctx, RebalanceRequest{Options: balance.Options{MaxMoves: 1}})
	if err != nil || len(one.Moves) != 1 {
		t.Fatalf("rebalance --max-moves 1 = %+v, %v; want one move", one.Moves, err)
	}
	out, err := f.Rebalance(f.ctx, RebalanceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Moves) != 2 {
		t.Fatalf("rebalance proposed %+v, want two moves into dc2", out.Moves)
	}
	for _, m := range out.Moves {
		if !strings.HasPrefix(m.From, "a") || !strings.HasPrefix(m.To, "b") || !strings.Contains(m.Why, "domain spread") {
			t.Errorf("move %+v: want from dc1 to dc2, saying it repairs the domain spread", m)
		}
	}
	if _, err := f.Rebalance(f.ctx, RebalanceRequest{Apply: true}); err != nil {
		t.Fatal(err)
	}
	// The moves are blue-green: the old instances leave once the new ones
	// run; the spread already counts the new ones (health counts both).
	for _, w := range f.Health(time.Now()) {
		if w.Kind == placement.RuleFaultDomain && strings.Contains(w.Detail, "dc2 0") {
			t.Errorf("after the rebalance health still warns %+v", w)
		}
	}
}

// TestRebalanceSaysWhyNoMove (issue 38 item 5): a proposal without a move
// says why, per resource and per refused candidate (it said "nothing is
// above the thresholds, or nothing can move without breaking a rule" at
// ratios 16 and 916, never which). A nearly idle cluster names the
// activity threshold; a loaded host whose instances a constraint keeps
// names the rule and the host it eliminated. Control: without noMove the
// result has no reasons and both cases fail.
func TestRebalanceSaysWhyNoMove(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	deploy := func(svc string, count int, mem int64, constraint string) {
		t.Helper()
		if _, err := f.Deploy(f.ctx, DeployRequest{Service: svc, Count: count, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
			Size: model.Size{Pieces: 10, Memory: mem}, Rules: model.Rules{Constraint: constraint}}}); err != nil {
			t.Fatal(err)
		}
	}
	deploy("base", 1, 64<<20, "HostName == b")
	deploy("web", 1, 512<<20, "HostName == a")
	idle, err := f.Rebalance(f.ctx, RebalanceRequest{})
	if err != nil || len(idle.Moves) != 0 || !strings.Contains(strings.Join(idle.NoMove, "\n"), "below the activity threshold 0.1") {
		t.Errorf("a nearly idle cluster: moves %+v, why %q, %v; want no move naming the activity threshold", idle.Moves, idle.NoMove, err)
	}
	deploy("big", 4, 1<<30, "HostName == a") // a: 4.5 of 16 GiB, b: 64 MiB
	held, err := f.Rebalance(f.ctx, RebalanceRequest{})
	why := strings.Join(held.NoMove, "\n")
	if err != nil || len(held.Moves) != 0 || !strings.Contains(why, "above the balancing threshold 1.5") ||
		!regexp.MustCompile(`refused: big-\w+ from a to b: PlacementConstraint eliminated b`).MatchString(why) {
		t.Errorf("a host held by its constraint: moves %+v, why:\n%s\nwant no move naming the constraint that eliminated b", held.Moves, why)
	}
}

// TestRespreadWithoutDomains (issue 39): respread returns at once when no
// host has a fault or upgrade domain; over random fleets (no domains,
// fault domains only, upgrade domains only, both), each service deployed
// while some hosts were disabled (packed), it proposes exactly what the
// full read (respreadOver) proposes. Guards: in some fleets with only
// upgrade domains and in some with fault domains the full read proposes
// moves (a shortcut that skipped them would fail).
func TestRespreadWithoutDomains(t *testing.T) {
	withMoves := map[string]int{}
	for seed := range uint64(24) {
		rng := rand.New(rand.NewPCG(seed, 38))
		kind := []string{"none", "fault", "upgrade", "both"}[seed%4]
		hosts := []string{"a1", "a2", "a3", "b1", "b2", "b3"}
		f := newHealFixture(t, hosts...)
		for _, h := range hosts {
			r := SetHostRequest{Name: h}
			fd, ud := "fd:/dc"+h[:1], "ud"+h[:1]
			if kind == "fault" || kind == "both" {
				r.FaultDomain = &fd
			}
			if kind == "upgrade" || kind == "both" {
				r.UpgradeDomain = &ud
			}
			if _, err := f.SetHost(f.ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 + rng.IntN(3) {
			off := hosts[3:]
			if rng.IntN(2) == 0 {
				off = hosts[:3]
			}
			for _, h := range off {
				f.set(h, false)
			}
			_, _ = f.Deploy(f.ctx, DeployRequest{Service: fmt.Sprintf("s%d", i), Count: 2 + rng.IntN(6), Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Memory: 64 << 20}}})
			for _, h := range off {
				f.set(h, true)
			}
		}
		got := f.respread(f.ctx, f.st.Pending(), 100, 0, false)
		want := f.respreadOver(f.ctx, f.st.Pending(), f.st.Hosts(), 100, 0, false)
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("seed %d (%s domains): respread differs from the full read (-full +respread):\n%s", seed, kind, d)
		}
		if len(want) > 0 {
			withMoves[kind]++
		}
	}
	if withMoves["upgrade"] == 0 || withMoves["fault"] == 0 || withMoves["both"] == 0 {
		t.Errorf("fleets whose full read proposes moves, by domains: %v: the test checks too little", withMoves)
	}
	t.Logf("fleets whose full read proposes moves, by domains: %v", withMoves)
}
