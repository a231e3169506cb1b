package service

import (
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// TestRebalanceFillsANewHost (issue 24): a lightly used cluster (far
// below the activity threshold) gains an empty host; rebalance proposes
// moves onto it, bounded by max moves, through the services' rules (an
// instance whose constraint excludes the new host stays), the CPU ratio
// goes from infinite to finite, and apply starts the moves there.
func TestRebalanceFillsANewHost(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	for _, h := range []string{"a", "b"} {
		f.agent(h) // moves off an agent's host are blue-green
		if _, err := f.SetHost(f.ctx, SetHostRequest{Name: h, SetProperties: map[string]placement.Value{"zone": placement.Str("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	// 0.1 CPU and 64 MiB each: 2.5 % of a host's CPUs at most.
	small := DeployRequest{Count: 4, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: 64 << 20}}}
	web, pinned := small, small
	web.Service = "web"
	pinned.Service, pinned.Rules = "pinned", model.Rules{Constraint: `zone == "x"`}
	for _, r := range []DeployRequest{web, pinned} {
		if _, err := f.DeployWithRules(f.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	f.agent("c") // a new host, its agent's
	rev := f.st.Rev()
	res, err := f.Rebalance(f.ctx, RebalanceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f.st.Rev() != rev {
		t.Errorf("a dry run changed the store")
	}
	if len(res.Moves) == 0 || res.Before["cpu"] != -1 || res.After["cpu"] == -1 {
		t.Fatalf("rebalance = %+v, want moves onto c taking the CPU ratio from ∞ to finite", res)
	}
	for _, m := range res.Moves {
		if m.To != "c" || m.Service != "web" || !strings.Contains(m.Why, "c ran nothing") {
			t.Errorf("move %+v: want web onto c, the new host (pinned's constraint excludes c), saying why", m)
		}
	}
	// Max moves bounds it; apply starts the move on c.
	res, err = f.Rebalance(f.ctx, RebalanceRequest{Options: balance.Options{MaxMoves: 1}, Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Moves) != 1 || res.Moves[0].To != "c" || res.Moves[0].NewInstance == "" {
		t.Fatalf("apply with max moves 1: %+v, want one move onto c", res.Moves)
	}
	if on := f.on("c"); len(on) != 1 || on[0].ID != res.Moves[0].NewInstance || on[0].Replaces != res.Moves[0].Instance {
		t.Errorf("c runs %+v, want the new instance replacing %s", on, res.Moves[0].Instance)
	}
	f.verify()
}

// TestRebalanceLeavesPerHostServices (a new user's trial): a service
// placed per host (strategy each or fill) keeps its count on every host:
// rebalance onto a new host moves a plain service's instances, never one
// of a per-host service's, and says once per service why they stay.
func TestRebalanceLeavesPerHostServices(t *testing.T) {
	for _, st := range []string{"each", "fill"} {
		t.Run(st, func(t *testing.T) {
			f := newHealFixture(t, "a", "b")
			f.agent("a")
			f.agent("b")
			small := DeployRequest{Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: 64 << 20}}}
			daemon, web := small, small
			daemon.Service, daemon.Strategy = "daemon", st
			web.Service, web.Count = "web", 4
			for _, r := range []DeployRequest{daemon, web} {
				if _, err := f.DeployWithRules(f.ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			f.agent("c") // a new host: rebalance fills it
			res, err := f.Rebalance(f.ctx, RebalanceRequest{Options: balance.Options{MaxMoves: 10}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Moves) == 0 {
				t.Fatalf("rebalance onto a new host moved nothing: %+v", res)
			}
			for _, m := range res.Moves {
				if m.Service == "daemon" {
					t.Errorf("move %+v: an instance of a service placed per host (%s) moved", m, st)
				}
			}
			var said []string
			for _, k := range res.Kept {
				if k.Service == "daemon" {
					said = append(said, k.Why)
				}
			}
			if want := "daemon: 4 instances stay where they are: the service is placed per host (strategy " + st; len(said) != 1 || !strings.HasPrefix(said[0], want) {
				t.Errorf("kept says %q, want one line beginning %q", said, want)
			}
		})
	}
}
