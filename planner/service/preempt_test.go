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

// TestNeverPreempted: an instance of a service deployed never preempted
// is no victim of a deploy or a resize of any priority; where such
// instances would be the fewest victims, others are chosen, and where
// they are all there is the request fails for want of room. Each row's
// control is the same cluster with the flag off. Batch and best-effort
// services may not ask for it, nor may a deploy of more instances change
// it.
func TestNeverPreempted(t *testing.T) {
	ctx := context.Background()
	guardDeploy := func(count, pieces int, never bool) service.DeployRequest {
		return service.DeployRequest{Service: "guard", Count: count, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
			Size: model.Size{Pieces: pieces, Bind: true, Memory: GiB / 4}, Scheduling: model.Scheduling{NeverPreempted: never}}}
	}
	t.Run("deploy", func(t *testing.T) {
		// h1 holds 4 guard instances of 2 CPUs, h2 8 of b (production) of
		// 1 CPU: a system deploy of 2 CPUs stops 1 guard instance (the
		// fewest) unless guard is never preempted, then 2 of b.
		for _, tt := range []struct {
			name        string
			never       bool
			wantService string
			wantVictims int
		}{
			{"never-preempted", true, "b", 2},
			{"control-preemptible", false, "guard", 1},
		} {
			t.Run(tt.name, func(t *testing.T) {
				cryptotest.SetGlobalRandom(t, 7)
				s := newMemService(t)
				register(t, s, "h1", topologytest.Laptop().Topology())
				if _, err := s.Deploy(ctx, guardDeploy(4, 200, tt.never)); err != nil {
					t.Fatal(err)
				}
				register(t, s, "h2", topologytest.Laptop().Topology())
				b := service.DeployRequest{Service: "b", Count: 8, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB / 4}}}
				if _, err := s.Deploy(ctx, b); err != nil {
					t.Fatal(err)
				}
				res, err := s.DeployWithRules(ctx, prodDeploy(1, 200, model.PrioritySystem))
				if err != nil || len(res.Preempted) != tt.wantVictims {
					t.Fatalf("Deploy(system, 2 CPUs) = %v, victims %v; want %d of %s", err, res.Preempted, tt.wantVictims, tt.wantService)
				}
				for _, v := range res.Preempted {
					if v.Service != tt.wantService {
						t.Errorf("victim %+v: want one of %s (guard never preempted: %t)", v, tt.wantService, tt.never)
					}
				}
				verify(t, s)
			})
		}
	})
	t.Run("deploy-nothing-else", func(t *testing.T) {
		for _, tt := range []struct {
			name  string
			never bool
		}{{"never-preempted", true}, {"control-preemptible", false}} {
			t.Run(tt.name, func(t *testing.T) {
				cryptotest.SetGlobalRandom(t, 7)
				s := newMemService(t)
				register(t, s, "h1", topologytest.Laptop().Topology())
				if _, err := s.Deploy(ctx, guardDeploy(8, 100, tt.never)); err != nil {
					t.Fatal(err)
				}
				before := instanceIDs(s, "guard")
				dry := prodDeploy(1, 100, model.PrioritySystem)
				dry.DryRun = true
				_, derr := s.DeployWithRules(ctx, dry)
				_, err := s.DeployWithRules(ctx, prodDeploy(1, 100, model.PrioritySystem))
				if tt.never {
					if service.CodeOf(err) != service.Exhausted || service.CodeOf(derr) != service.Exhausted || !slices.Equal(instanceIDs(s, "guard"), before) {
						t.Fatalf("Deploy(system) = %v (dry run %v), guard %d -> %d; want resource_exhausted, guard untouched", err, derr, len(before), len(instanceIDs(s, "guard")))
					}
					return
				}
				if err != nil || derr != nil || len(instanceIDs(s, "guard")) != len(before)-1 {
					t.Fatalf("Deploy(system) = %v (dry run %v), guard %d -> %d; want one guard instance preempted", err, derr, len(before), len(instanceIDs(s, "guard")))
				}
			})
		}
	})
	t.Run("resize", func(t *testing.T) {
		for _, tt := range []struct {
			name  string
			never bool
		}{{"never-preempted", true}, {"control-preemptible", false}} {
			t.Run(tt.name, func(t *testing.T) {
				cryptotest.SetGlobalRandom(t, 7)
				s := newMemService(t)
				register(t, s, "h1", topologytest.Laptop().Topology())
				ins, err := s.Deploy(ctx, prodDeploy(1, 100, model.PrioritySystem))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Deploy(ctx, guardDeploy(7, 100, tt.never)); err != nil {
					t.Fatal(err)
				}
				_, victims, err := s.ResizePreempting(ctx, service.ResizeRequest{Target: ins[0].ID, CPUDelta: 100})
				if tt.never {
					if service.CodeOf(err) != service.Exhausted || len(instanceIDs(s, "guard")) != 7 {
						t.Fatalf("ResizePreempting(+1 CPU) = %v, victims %v, guard %d; want resource_exhausted, guard untouched", err, victims, len(instanceIDs(s, "guard")))
					}
					return
				}
				if err != nil || len(victims) != 1 || victims[0].Service != "guard" {
					t.Fatalf("ResizePreempting(+1 CPU) = %v, victims %v; want one guard instance", err, victims)
				}
			})
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			prio model.Priority
			want string
		}{
			{"batch", model.PriorityBatch, "never_preempted = true: only for a priority of production (0) or higher, not batch"},
			{"best-effort", model.PriorityBestEffort, "never_preempted = true: only for a priority of production (0) or higher, not best-effort"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				s := newMemService(t)
				register(t, s, "h1", topologytest.Laptop().Topology())
				r := guardDeploy(1, 100, true)
				r.Priority = tt.prio
				_, err := s.Deploy(ctx, r)
				if service.CodeOf(err) != service.Invalid || err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Deploy(%s, never preempted) = %v; want invalid_argument with %q", tt.prio, err, tt.want)
				}
			})
		}
		t.Run("another-answer-than-the-record", func(t *testing.T) {
			s := newMemService(t)
			register(t, s, "h1", topologytest.Laptop().Topology())
			if _, err := s.Deploy(ctx, guardDeploy(1, 100, true)); err != nil {
				t.Fatal(err)
			}
			_, err := s.Deploy(ctx, guardDeploy(1, 100, false))
			if service.CodeOf(err) != service.Invalid || !strings.Contains(err.Error(), "runs with never_preempted true") {
				t.Fatalf("Deploy(guard, preemptible) after a never-preempted deploy = %v; want invalid_argument naming the record's", err)
			}
			if d, _ := s.Store().Service("guard"); !d.Value.NeverPreempted {
				t.Errorf("the record lost never_preempted: %+v", d.Value.Scheduling)
			}
		})
	})
}

// TestResizeDryRun: a resize's dry run gives the instances at their new
// size and the victims the resize then stops, and changes nothing (the
// store, the resized instance's size, its generation); a dry run of a
// resize that is refused is refused alike.
func TestResizeDryRun(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		delta     int
		noPreempt bool
		victims   int // 0: refused
	}{
		{"plus-1-cpu-stops-1", 100, false, 1},
		{"plus-3-cpus-stops-3", 300, false, 3},
		{"no-preempt-refused", 100, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, 7)
			s := newMemService(t)
			register(t, s, "h1", topologytest.Laptop().Topology())
			register(t, s, "h2", topologytest.Laptop().Topology())
			ins, err := s.Deploy(ctx, prodDeploy(1, 100, model.PriorityProduction))
			if err != nil {
				t.Fatal(err)
			}
			d := model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB / 2}, Scheduling: model.Scheduling{Priority: model.PriorityBatch}}
			if _, err := s.Deploy(ctx, service.DeployRequest{Service: "b", Count: 15, Deploy: d}); err != nil {
				t.Fatal(err)
			}
			before := instanceIDs(s, "b")
			r := service.ResizeRequest{Target: ins[0].ID, CPUDelta: tt.delta, NoPreempt: tt.noPreempt}
			dry := r
			dry.DryRun = true
			dout, dvictims, derr := s.ResizePreempting(ctx, dry)
			if got := instanceIDs(s, "b"); !slices.Equal(got, before) {
				t.Fatalf("dry run stopped %d instances", len(before)-len(got))
			}
			for _, v := range s.Store().Instances("") {
				if v.Instance.ID == ins[0].ID && (v.Instance.Pieces() != 100 || v.Instance.Generation != ins[0].Generation) {
					t.Fatalf("dry run changed %s: %d pieces, generation %d", ins[0].ID, v.Instance.Pieces(), v.Instance.Generation)
				}
			}
			out, victims, err := s.ResizePreempting(ctx, r)
			if tt.victims == 0 {
				if service.CodeOf(err) != service.Exhausted || service.CodeOf(derr) != service.Exhausted {
					t.Fatalf("ResizePreempting(%s) = %v, dry run %v; want both resource_exhausted", tt.name, err, derr)
				}
				return
			}
			if err != nil || derr != nil {
				t.Fatalf("ResizePreempting(%s) = %v, dry run %v", tt.name, err, derr)
			}
			if len(victims) != tt.victims || !slices.Equal(victims, dvictims) {
				t.Errorf("ResizePreempting(%s) stopped %v, dry run named %v; want %d, the same", tt.name, victims, dvictims, tt.victims)
			}
			if len(dout) != 1 || len(out) != 1 || dout[0].Pieces() != 100+tt.delta || dout[0].Pieces() != out[0].Pieces() {
				t.Errorf("dry run sized %v, the resize %v; want both at %d pieces", dout, out, 100+tt.delta)
			}
			verify(t, s)
		})
	}
}

// TestScalePreempts: a scale whose deploy preempts returns the victims
// (ScaleResult.Preempted), the instances it stopped; one that fits
// without preempting returns none. Control: without Preempted in the
// result the first row fails.
func TestScalePreempts(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		batch   int // b's instances, 1 CPU each, on two 8-CPU hosts with web's 1
		victims int
	}{
		{"full-stops-1", 15, 1},
		{"room-stops-none", 14, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, 7)
			s := newMemService(t)
			register(t, s, "h1", topologytest.Laptop().Topology())
			register(t, s, "h2", topologytest.Laptop().Topology())
			if _, err := s.Deploy(ctx, prodDeploy(1, 100, model.PriorityProduction)); err != nil {
				t.Fatal(err)
			}
			d := model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: GiB / 2}, Scheduling: model.Scheduling{Priority: model.PriorityBatch}}
			if _, err := s.Deploy(ctx, service.DeployRequest{Service: "b", Count: tt.batch, Deploy: d}); err != nil {
				t.Fatal(err)
			}
			before := instanceIDs(s, "b")
			res, err := s.Scale(ctx, "web", 2)
			if err != nil || len(res.Added) != 1 {
				t.Fatalf("Scale(web, 2) = %+v, %v; want one added", res, err)
			}
			var listed []string
			for _, v := range res.Preempted {
				listed = append(listed, v.ID)
			}
			var gone []string
			for _, id := range before {
				if !slices.Contains(instanceIDs(s, "b"), id) {
					gone = append(gone, id)
				}
			}
			if len(gone) != tt.victims || !slices.Equal(listed, gone) {
				t.Errorf("Scale(web, 2) listed %v, stopped %v; want %d, the same", listed, gone, tt.victims)
			}
			verify(t, s)
		})
	}
}
