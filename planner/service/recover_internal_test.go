package service

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// injectPanic makes every step of kind step panic until the test ends or
// the returned function is called.
func injectPanic(t *testing.T, step string) (stop func()) {
	t.Helper()
	f := func(s string) {
		if s == step {
			panic("injected panic in " + s)
		}
	}
	failpoint.Store(&f)
	stop = func() { failpoint.Store(nil) }
	t.Cleanup(stop)
	return stop
}

func isPanic(err error) bool {
	var pe *PanicError
	return errors.As(err, &pe)
}

// eventually polls cond every 20 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

var web = DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}}

// TestNoPanicStopsThePlanner injects a panic into each kind of step a
// request or the leader runs. Each time the panic is that request's or
// step's internal error only: it is counted, recorded, and the planner
// goes on serving (a deploy after it commits). Without the recovery the
// test binary dies at the first case.
func TestNoPanicStopsThePlanner(t *testing.T) {
	// afterwards: the planner still serves.
	serves := func(t *testing.T, f healFixture) {
		t.Helper()
		if _, err := f.DeployWithRules(f.ctx, DeployRequest{Service: "after", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Memory: gib}}}); err != nil {
			t.Fatalf("a deploy after the panic: %v", err)
		}
		if f.Panics() == 0 {
			t.Errorf("no panic counted")
		}
		f.verify()
	}
	for _, step := range []string{"deploy", "commit"} {
		t.Run(step, func(t *testing.T) {
			f := newHealFixture(t, "a", "b")
			stop := injectPanic(t, step)
			_, err := f.DeployWithRules(f.ctx, web)
			if !isPanic(err) || !strings.Contains(err.Error(), "internal error") {
				t.Fatalf("deploy with a panic in %s = %v, want the internal error", step, err)
			}
			if got := len(f.st.ServiceInstances("web")); got != 0 {
				t.Errorf("a deploy that panicked before committing left %d instances", got)
			}
			stop()
			serves(t, f)
		})
	}
	t.Run("heal", func(t *testing.T) {
		f := newHealFixture(t, "a", "b")
		f.deployOn("a", []string{"a", "b"}, web)
		f.dies("a")
		stop := injectPanic(t, "heal")
		if _, err := f.Heal(f.ctx, "a", false); !isPanic(err) {
			t.Fatalf("heal with a panic = %v, want the internal error", err)
		}
		stop()
		if _, err := f.Heal(f.ctx, "a", false); err != nil || len(f.on("a")) != 0 {
			t.Fatalf("heal after the panic: %v, %d left on a", err, len(f.on("a")))
		}
		serves(t, f)
	})
	// A drain whose moves panic every time: parked after parkAfter
	// failures with the reason on the host, not retried before parkFor
	// (no crash loop, no tight loop), and done once the step works again.
	t.Run("move", func(t *testing.T) {
		f := newHealFixture(t, "a", "b")
		f.agent("a")
		f.agent("b")
		f.deployOn("a", []string{"a", "b"}, web)
		if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
			t.Fatal(err)
		}
		stop := injectPanic(t, "move")
		tr, now := newTracker(), time.Now()
		for i := range parkAfter {
			f.tick(f.ctx, tr, now.Add(time.Duration(i)*time.Second))
		}
		v, _ := f.Host("a")
		if !strings.Contains(v.Host.Stuck, "internal error") || !strings.Contains(v.Host.Stuck, "parked") {
			t.Fatalf("after %d failed ticks the host's stuck reason is %q, want the internal error, parked", parkAfter, v.Host.Stuck)
		}
		n := f.Panics()
		f.tick(f.ctx, tr, now.Add(parkFor/2))
		if f.Panics() != n {
			t.Errorf("a parked drain was tried again before %s", parkFor)
		}
		stop()
		f.tick(f.ctx, tr, now.Add(2*parkFor))
		f.runAll()
		f.tick(f.ctx, tr, now.Add(2*parkFor+time.Second))
		f.tick(f.ctx, tr, now.Add(2*parkFor+2*time.Second))
		if v, _ := f.Host("a"); len(f.on("a")) != 0 || v.Host.Draining || v.Host.Stuck != "" {
			t.Fatalf("after the step works again: %d on a, draining %v, stuck %q", len(f.on("a")), v.Host.Draining, v.Host.Stuck)
		}
		serves(t, f)
	})
	t.Run("settle", func(t *testing.T) {
		f := newHealFixture(t, "a", "b")
		f.agent("a")
		f.agent("b")
		f.deployOn("a", []string{"a", "b"}, web)
		if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
			t.Fatal(err)
		}
		tr, now := newTracker(), time.Now()
		f.tick(f.ctx, tr, now)
		f.runAll()
		stop := injectPanic(t, "settle")
		for i := range parkAfter + 2 {
			f.tick(f.ctx, tr, now.Add(time.Duration(1+i)*time.Second))
		}
		if got := f.Panics(); got != 2*parkAfter {
			t.Errorf("%d panics over %d ticks of two moves, want %d (parked after %d each)", got, parkAfter+2, 2*parkAfter, parkAfter)
		}
		stop()
		f.tick(f.ctx, tr, now.Add(2*parkFor))
		if len(f.on("a")) != 0 {
			t.Fatalf("moves not settled after the step works again: %v on a", f.on("a"))
		}
		serves(t, f)
	})
	// The leader's loops: the tick and the audit panic every time; the
	// loop goes on (more panics counted) and keeps leading.
	for _, step := range []string{"tick", "audit"} {
		t.Run(step, func(t *testing.T) {
			f := newHealFixture(t, "a", "b")
			injectPanic(t, step)
			ctx, cancel := context.WithCancel(f.ctx)
			done := make(chan error, 1)
			go func() { done <- f.RunBackground(ctx, "p1", 5*time.Second, 50*time.Millisecond, nil) }()
			eventually(t, "two panics in the "+step, func() bool { return f.Panics() >= 2 })
			if !f.Leading() {
				t.Errorf("the planner stopped leading after panics in its %s", step)
			}
			serves(t, f)
			cancel()
			<-done
		})
	}
	t.Run("events", func(t *testing.T) {
		f := newHealFixture(t, "a")
		stop := injectPanic(t, "events")
		ctx, cancel := context.WithCancel(f.ctx)
		done := make(chan struct{})
		go func() { defer close(done); f.RunEvents(ctx) }()
		f.Record(state.Event{Identity: "test", Kind: "Lost"})
		eventually(t, "a panic in the event writer", func() bool { return f.Panics() >= 1 })
		stop()
		f.Record(state.Event{Identity: "test", Kind: "Kept"})
		eventually(t, "the next event written", func() bool {
			evs, err := f.Events(f.ctx, EventQuery{Limit: 100})
			for _, e := range evs {
				if e.Kind == "Kept" {
					return err == nil
				}
			}
			return false
		})
		cancel()
		<-done
		serves(t, f)
	})
}

// parkedDrain is agents' hosts a and b, web's two instances on a, b
// disabled, and a's drain parked for want of room (parkAfter ticks from
// now); the leader's tracker goes on.
func parkedDrain(t *testing.T) (healFixture, *tracker, time.Time) {
	t.Helper()
	f := newHealFixture(t, "a", "b")
	f.agent("a")
	f.agent("b")
	f.deployOn("a", []string{"a", "b"}, web)
	f.set("b", false)
	now := time.Now()
	if _, err := f.Drain(f.ctx, "a", 0, false, now); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for i := range parkAfter {
		f.tick(f.ctx, tr, now.Add(time.Duration(i)*time.Second))
	}
	return f, tr, now
}

// TestNewDrainStartsAfresh: a drain parked for want of room is cancelled;
// room appears and the host is drained again: the new drain moves at once
// instead of waiting out the last one's park (the attack found it idle
// and reasonless for up to a minute), and it does not start with the last
// drain's reason.
func TestNewDrainStartsAfresh(t *testing.T) {
	f, tr, now := parkedDrain(t)
	if v, _ := f.Host("a"); !strings.Contains(v.Host.Stuck, "parked") {
		t.Fatalf("with nowhere to go the drain is not parked: stuck %q", v.Host.Stuck)
	}
	if _, err := f.Drain(f.ctx, "a", 0, true, now.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	f.set("b", true)
	v, err := f.Drain(f.ctx, "a", 0, false, now.Add(5*time.Second))
	if err != nil || v.Host.Stuck != "" {
		t.Fatalf("a new drain: %v, stuck %q; want no reason yet", err, v.Host.Stuck)
	}
	f.tick(f.ctx, tr, now.Add(6*time.Second))
	if m := f.st.Moving(); len(m) != 2 {
		t.Errorf("the new drain's first tick started %d moves, want 2 (not parked by the last drain)", len(m))
	}
}

// TestHealReasonOutranksDrain: a dead host that is also draining, whose
// instances fit nowhere: its reason is the heal's, and the drain's pass
// neither overwrites nor clears it (the simulation found it lost: seeds
// 9, 11, 12).
func TestHealReasonOutranksDrain(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	f.deployOn("a", []string{"a", "b"}, web)
	f.dies("a")
	if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.set("b", false)
	if _, err := f.SetPlacementSettings(f.ctx, placement.Settings{DownGrace: time.Second}); err != nil {
		t.Fatal(err)
	}
	tr, now := newTracker(), time.Now()
	for i := range 6 {
		f.tick(f.ctx, tr, now.Add(time.Duration(i)*2*time.Second))
		if v, _ := f.Host("a"); i > 0 && !strings.HasPrefix(v.Host.Stuck, "heal") {
			t.Fatalf("tick %d: the dead, draining host's reason is %q, want the heal's", i, v.Host.Stuck)
		}
	}
}

// TestMoveNeedsAnAgentsHost: an instance its agent runs moves blue-green,
// so only onto a host whose agent can report the new instance running;
// with only hosts registered by hand left, the move is refused up front
// with the reason, and rebalance proposes none (the attack found such
// moves waiting for ever, their resources held twice). A removal (a heal
// of a live host), which is no move, may still use them.
func TestMoveNeedsAnAgentsHost(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	f.agent("a")
	ins := f.deployOn("a", []string{"a", "b"}, web)
	if _, err := f.Move(f.ctx, ins[0].ID, ""); CodeOf(err) != Exhausted || !strings.Contains(err.Error(), "agent") {
		t.Errorf("moving %s off an agent's host with only b (by hand) left = %v, want refused naming the agent", ins[0].ID, err)
	}
	if res, err := f.Rebalance(f.ctx, RebalanceRequest{}); err != nil || len(res.Moves) != 0 {
		t.Errorf("rebalance = %+v, %v; want no move onto the host registered by hand", res.Moves, err)
	}
	if len(f.st.Moving()) != 0 {
		t.Errorf("moves in flight: %v", f.st.Moving())
	}
	// A removal is no move: it places them on b at once.
	if moved, err := f.RemoveHost(f.ctx, "a"); err != nil || len(moved) != 2 || moved[0].To.Host != "b" {
		t.Errorf("removing a = %+v, %v; want both placed on b", moved, err)
	}
}

// TestParkedDrainKeepsItsReason: a heal's reason held a draining host's
// Stuck and was cleared when the host came back; the drain, still parked,
// writes its own reason again at its next tick (the long simulation found
// draining hosts parked with no reason: drain-reason-missing).
func TestParkedDrainKeepsItsReason(t *testing.T) {
	f, tr, now := parkedDrain(t)
	v, _ := f.Host("a")
	parked := v.Host.Stuck
	if !strings.Contains(parked, "parked") {
		t.Fatalf("not parked: %q", parked)
	}
	f.setStuck(f.ctx, "a", "heal", "heal: instances cannot be placed again: (a stand-in)")
	f.setStuck(f.ctx, "a", "heal", "")
	f.tick(f.ctx, tr, now.Add(10*time.Second)) // parked: not tried
	if v, _ := f.Host("a"); v.Host.Stuck != parked {
		t.Errorf("after a heal's reason came and went, the parked drain's reason is %q, want %q", v.Host.Stuck, parked)
	}
}
