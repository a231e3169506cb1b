package service_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/cryptotest"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// fullOfBatch is two 8-CPU hosts full of 16 one-CPU bound instances of
// the batch service "b".
func fullOfBatch(t *testing.T) planner {
	t.Helper()
	cryptotest.SetGlobalRandom(t, 7) // instance IDs, so that victims repeat
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	register(t, s, "h2", topologytest.Laptop().Topology())
	d := model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB / 2}, Scheduling: model.Scheduling{Priority: model.PriorityBatch}}
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "b", Count: 16, Deploy: d}); err != nil {
		t.Fatal(err)
	}
	return s
}

func prodDeploy(count, pieces int, prio model.Priority) service.DeployRequest {
	return service.DeployRequest{Service: "web", Count: count, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
		Size: model.Size{Pieces: pieces, Bind: true, Memory: GiB}, Scheduling: model.Scheduling{Priority: prio}}}
}

func instanceIDs(s planner, service string) []string {
	var ids []string
	for _, v := range s.Store().Instances("") {
		if v.Instance.Service == service {
			ids = append(ids, v.Instance.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestDeployPreempts: a deploy that does not fit stops the fewest
// instances of lower-priority services, on the host it then takes, in
// the same commit (the store's invariants hold: nothing oversold); a dry
// run names the same victims and changes nothing; --no-preempt and an
// equal priority fail as before; events name preemptor and victims.
func TestDeployPreempts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		req     service.DeployRequest
		victims int // 0: the deploy fails for want of room
	}{
		{"production-2cpu-stops-2-batch", prodDeploy(1, 200, model.PriorityProduction), 2},
		{"production-half-cpu-stops-1-batch", prodDeploy(1, 50, model.PriorityProduction), 1},
		{"production-2x3cpu-stops-6-batch", prodDeploy(2, 300, model.PriorityProduction), 6},
		{"batch-never-preempts-batch", prodDeploy(1, 100, model.PriorityBatch), 0},
		{"no-preempt", func() service.DeployRequest {
			r := prodDeploy(1, 100, model.PriorityProduction)
			r.NoPreempt = true
			return r
		}(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fullOfBatch(t)
			before := instanceIDs(s, "b")
			dry := tt.req
			dry.DryRun = true
			dres, derr := s.DeployWithRules(ctx, dry)
			if got := instanceIDs(s, "b"); !slices.Equal(got, before) || len(instanceIDs(s, "web")) != 0 {
				t.Fatalf("dry run changed the store: b %d -> %d instances, web %d", len(before), len(got), len(instanceIDs(s, "web")))
			}
			res, err := s.DeployWithRules(ctx, tt.req)
			if tt.victims == 0 {
				if service.CodeOf(err) != service.Exhausted || service.CodeOf(derr) != service.Exhausted {
					t.Fatalf("Deploy(%s) = %v (dry run %v), want resource_exhausted", tt.name, err, derr)
				}
				if got := instanceIDs(s, "b"); !slices.Equal(got, before) {
					t.Errorf("a failed deploy stopped %d instances", len(before)-len(got))
				}
				return
			}
			if err != nil || derr != nil {
				t.Fatalf("Deploy(%s) = %v (dry run %v), want it placed by preemption", tt.name, err, derr)
			}
			if len(res.Preempted) != tt.victims || !slices.Equal(res.Preempted, dres.Preempted) {
				t.Errorf("Deploy(%s) preempted %v, dry run %v; want %d, the same", tt.name, res.Preempted, dres.Preempted, tt.victims)
			}
			hosts := map[string]bool{}
			for _, in := range res.Instances {
				hosts[in.Host] = true
			}
			after := instanceIDs(s, "b")
			for _, v := range res.Preempted {
				if v.Service != "b" || v.Priority != model.PriorityBatch || !hosts[v.Host] || slices.Contains(after, v.ID) {
					t.Errorf("victim %+v: want a stopped batch instance of b on a host web took (%v)", v, hosts)
				}
			}
			if len(after) != len(before)-tt.victims {
				t.Errorf("b has %d instances, want %d", len(after), len(before)-tt.victims)
			}
			verify(t, s)
			evs, err := s.Events(ctx, service.EventQuery{Service: "b"})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ev := range evs {
				if ev.Kind == "Preempted" && strings.Contains(ev.Outcome, "preempted by web") {
					n++
				}
			}
			if n != tt.victims {
				t.Errorf("%d Preempted events naming web, want %d: %+v", n, tt.victims, evs)
			}
		})
	}
}

// TestResizePreempts: a live resize that does not fit its host stops the
// fewest lower-priority instances on that host only, in the same commit
// (Verify: nothing oversold); NoPreempt, and a resize of an instance of
// the same priority as everything around it, fail and stop nothing.
func TestResizePreempts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		prio      model.Priority // the resized service's
		delta     int
		noPreempt bool
		victims   int // 0: refused
	}{
		{"production-plus-1-cpu-stops-1-batch", model.PriorityProduction, 100, false, 1},
		{"production-plus-3-cpus-stops-3-batch", model.PriorityProduction, 300, false, 3},
		{"no-preempt", model.PriorityProduction, 100, true, 0},
		{"batch-never-preempts-batch", model.PriorityBatch, 100, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, 7)
			s := newMemService(t)
			register(t, s, "h1", topologytest.Laptop().Topology())
			register(t, s, "h2", topologytest.Laptop().Topology())
			ins, err := s.Deploy(ctx, prodDeploy(1, 100, tt.prio))
			if err != nil {
				t.Fatal(err)
			}
			d := model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB / 2}, Scheduling: model.Scheduling{Priority: model.PriorityBatch}}
			if _, err := s.Deploy(ctx, service.DeployRequest{Service: "b", Count: 15, Deploy: d}); err != nil {
				t.Fatal(err)
			}
			before := instanceIDs(s, "b")
			host := ins[0].Host
			_, victims, err := s.ResizePreempting(ctx, service.ResizeRequest{Target: ins[0].ID, CPUDelta: tt.delta, NoPreempt: tt.noPreempt})
			if tt.victims == 0 {
				if service.CodeOf(err) != service.Exhausted || len(instanceIDs(s, "b")) != len(before) {
					t.Fatalf("ResizePreempting(%s) = %v, b %d -> %d; want resource_exhausted, nothing stopped", tt.name, err, len(before), len(instanceIDs(s, "b")))
				}
				return
			}
			if err != nil || len(victims) != tt.victims {
				t.Fatalf("ResizePreempting(%s) = %v, victims %v; want %d", tt.name, err, victims, tt.victims)
			}
			for _, v := range victims {
				if v.Host != host || v.Service != "b" {
					t.Errorf("victim %+v: want an instance of b on %s, the resized instance's host", v, host)
				}
			}
			if got := len(instanceIDs(s, "b")); got != len(before)-tt.victims {
				t.Errorf("b has %d instances, want %d", got, len(before)-tt.victims)
			}
			verify(t, s)
		})
	}
}

// TestDeployPreemptsOnce: a preempting deploy repeated with its request
// ID stops nothing more and gives the same victims' IDs (the request
// record's Removed). Control: without recording the victims as Removed,
// the repeat reports none.
func TestDeployPreemptsOnce(t *testing.T) {
	s := fullOfBatch(t)
	victimIDs := func(vs []service.Victim) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	ctx, _ := withID("preempt-once")
	first, err := s.DeployWithRules(ctx, prodDeploy(1, 200, model.PriorityProduction))
	if err != nil || len(first.Preempted) != 2 {
		t.Fatalf("Deploy = %v, victims %v; want 2", err, first.Preempted)
	}
	left := instanceIDs(s, "b")
	ctx, _ = withID("preempt-once")
	again, err := s.DeployWithRules(ctx, prodDeploy(1, 200, model.PriorityProduction))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := victimIDs(again.Preempted), victimIDs(first.Preempted); !slices.Equal(got, want) || !slices.Equal(instanceIDs(s, "b"), left) || len(instanceIDs(s, "web")) != 1 {
		t.Errorf("repeat: victims %v, want %v; b %d -> %d instances, web %d", got, want, len(left), len(instanceIDs(s, "b")), len(instanceIDs(s, "web")))
	}
}
