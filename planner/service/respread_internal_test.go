package service

import (
	"strings"
	"testing"
	"time"

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
