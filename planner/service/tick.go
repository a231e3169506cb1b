package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	textclip "github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/state"
)

// tracker is the leader's memory between ticks: when it first saw each
// host down, and the last error logged per subject (so a failure is logged
// once, not every tick).
type tracker struct {
	downSince map[string]time.Time
	logged    map[string]string
	// retryAt: an instance whose move was aborted is not moved again
	// before this time (a failing health gate is not retried every tick);
	// nor is a parked step (keyed by its subject, see failed).
	retryAt map[string]time.Time
	// failures counts the failures in a row of each step's subject: an
	// instance a drain moves (its ID), "heal/HOST", "settle/MOVE".
	failures map[string]int
	// drainStart is, per draining host, the start of the drain seen;
	// drainWhy the reason its last failing step gave (written again while
	// its steps stay parked: a heal's reason may have held the host's
	// Stuck meanwhile, and been cleared when the host came back).
	drainStart map[string]time.Time
	drainWhy   map[string]string
}

// A step of a persisted operation (a drain's move of one instance, the
// heal of a dead host, settling a move) that failed, or panicked, parkAfter
// times in a row is parked: tried again only every parkFor, never in a
// tight loop, with its reason on the host (state.Host.Stuck).
const (
	parkAfter = 3
	parkFor   = time.Minute
)

// failed records a failure of subject's step at now and reports whether
// the step is parked (not tried again before now+parkFor).
func (t *tracker) failed(subject string, now time.Time) bool {
	t.failures[subject]++
	if t.failures[subject] < parkAfter {
		return false
	}
	t.retryAt[subject] = now.Add(parkFor)
	return true
}

// succeeded forgets subject's failures.
func (t *tracker) succeeded(subject string) {
	delete(t.failures, subject)
	delete(t.logged, subject)
}

// waiting reports whether subject's step is parked or backing off at now.
func (t *tracker) waiting(subject string, now time.Time) bool {
	return now.Before(t.retryAt[subject])
}

// stuckReason is what state.Host.Stuck says of a failing step: the
// error's first 1,000 bytes (an elimination report is several lines).
func stuckReason(what string, err error, parked bool) string {
	msg := err.Error()
	if len(msg) > 1000 {
		msg = textclip.Text(msg, 1000)
	}
	// The parked note before the error: an error may end in an
	// elimination table, which the note ran on from (a new user's trial).
	r := what
	if parked {
		r += fmt.Sprintf(" (parked after %d failures in a row: tried again every %s)", parkAfter, parkFor)
	}
	return r + ": " + msg
}

// setStuck writes reason, a reason of kind ("heal" or "drain", its first
// word), as host's Stuck when it differs, and records a Stuck event; ""
// clears a reason of kind only. A dead host's heal outranks its drain: a
// drain never overwrites a heal's reason.
func (s *Service) setStuck(ctx context.Context, host, kind, reason string) {
	v, ok := s.st.Host(host)
	if !ok || v.Host.Stuck == reason {
		return
	}
	cur := v.Host.Stuck
	if reason == "" && !strings.HasPrefix(cur, kind) || kind == "drain" && strings.HasPrefix(cur, "heal") {
		return
	}
	if reason != "" {
		// The Stuck event goes with the change that writes the reason.
		ctx = WithAudit(ctx, &Audit{Event: state.Event{Identity: "planner", Kind: "Stuck", Subject: host, Host: host, Outcome: reason}})
	}
	if _, err := s.changeHost(ctx, host, func(h *state.Host) { h.Stuck = reason }); err != nil {
		s.log.Warn("recording why a host's drain or heal is stuck", "host", host, "err", err)
	}
}

// moveBackoff is how long a drain waits before moving an instance again
// after its move was aborted.
const moveBackoff = 30 * time.Second

func newTracker() *tracker {
	return &tracker{downSince: map[string]time.Time{}, logged: map[string]string{}, retryAt: map[string]time.Time{}, failures: map[string]int{},
		drainStart: map[string]time.Time{}, drainWhy: map[string]string{}}
}

// once reports whether msg is new for subject (and records it).
func (t *tracker) once(subject, msg string) bool {
	if t.logged[subject] == msg {
		return false
	}
	t.logged[subject] = msg
	return true
}

// deadHosts updates t from the hosts' views at now and returns the hosts
// whose agent has been gone at least grace and that hold instances, by name.
// A host in maintenance (until a time not yet passed) is never dead: it
// keeps its instances. Pure apart from t.
func (t *tracker) deadHosts(views []state.HostView, instances map[string]int, now time.Time, grace time.Duration) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range views {
		h := v.Host
		seen[h.Name] = true
		if !h.Agent || v.Live || !h.MaintenanceUntil.IsZero() && now.Before(h.MaintenanceUntil) {
			delete(t.downSince, h.Name)
			continue
		}
		since, ok := t.downSince[h.Name]
		if !ok {
			t.downSince[h.Name] = now
			since = now
		}
		if now.Sub(since) >= grace && instances[h.Name] > 0 {
			out = append(out, h.Name)
		}
	}
	for h := range t.downSince {
		if !seen[h] {
			delete(t.downSince, h)
		}
	}
	slices.Sort(out)
	return out
}

// tick is one pass of the leader's healing: dead hosts' instances placed
// again, moves in flight settled, draining hosts' instances moved.
func (s *Service) tick(ctx context.Context, t *tracker, now time.Time) {
	hit("tick")
	for id, at := range t.retryAt {
		if !now.Before(at) {
			delete(t.retryAt, id)
		}
	}
	// The hosts' usage documents count their instances; the instances
	// themselves are read only where there is work: the moves in flight
	// (an index) and the draining hosts'. An idle cluster costs a copy of
	// the host views a second, not of every instance.
	views := s.st.Hosts()
	perHost := map[string]int{}
	for _, v := range views {
		for _, n := range v.Alloc.Instances {
			perHost[v.Host.Name] += n
		}
	}
	for _, host := range t.deadHosts(views, perHost, now, s.st.PlacementSettings().Grace()) {
		subject := "heal/" + host
		if t.waiting(subject, now) {
			continue
		}
		_, err := s.Heal(ctx, host, false)
		if err == nil {
			t.succeeded(subject)
			s.setStuck(ctx, host, "heal", "")
			continue
		}
		parked := t.failed(subject, now)
		if t.once(subject, err.Error()) || parked {
			s.log.Error("instances of a dead host could not be placed again", "host", host, "parked", parked, "err", err)
		}
		s.setStuck(ctx, host, "heal", stuckReason("heal: instances cannot be placed again", err, parked))
	}
	s.settleMoves(ctx, t, views, s.st.Moving(), now)
	s.drainTick(ctx, t, views, now)
}

// settleMoves finishes or aborts the moves in flight.
func (s *Service) settleMoves(ctx context.Context, t *tracker, views []state.HostView, moving []state.InstanceView, now time.Time) {
	if len(moving) == 0 {
		return
	}
	byName := map[string]state.HostView{}
	for _, v := range views {
		byName[v.Host.Name] = v
	}
	where := map[string]string{}
	for _, v := range moving {
		if old, ok := s.st.Instance(v.Instance.Replaces); ok {
			where[old.Instance.ID] = old.Instance.Host
		}
	}
	all := moving
	var plans []planFunc
	var what, newIDs []string
	var aborted []string // the old instances of aborted moves
	for _, n := range all {
		if n.Instance.Replaces == "" {
			continue
		}
		h, ok := byName[n.Instance.Host]
		var deadline time.Time
		if from, ok := byName[where[n.Instance.Replaces]]; ok && from.Host.Draining {
			deadline = from.Host.DrainDeadline
		}
		if t.waiting("settle/"+n.Instance.ID, now) {
			continue
		}
		switch o := judgeMove(n, h, ok, now, deadline); o {
		case moveFinish, moveAbort:
			w := fmt.Sprintf("%s→%s (%s)", n.Instance.Replaces, n.Instance.ID, map[moveOutcome]string{moveFinish: "finished", moveAbort: "aborted"}[o])
			plans = append(plans, s.finishJob(n.Instance.ID, o,
				state.Event{Identity: "planner", Kind: "MoveSettled", Subject: w, Host: n.Instance.Host, Service: n.Instance.Service}))
			newIDs = append(newIDs, n.Instance.ID)
			what = append(what, w)
			old := ""
			if o == moveAbort {
				old = n.Instance.Replaces
			}
			aborted = append(aborted, old)
		}
	}
	for i, err := range s.pipe.doAll(ctx, plans) {
		subject := "settle/" + newIDs[i]
		if err != nil {
			parked := t.failed(subject, now)
			if t.once(subject, err.Error()) || parked {
				s.log.Warn("settling a move failed", "move", what[i], "parked", parked, "err", err)
			}
			continue
		}
		t.succeeded(subject)
		if aborted[i] != "" {
			t.retryAt[aborted[i]] = now.Add(moveBackoff)
		}
		s.log.Info("move settled", "move", what[i])
	}
}
