package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	textclip "github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// A service is desired state: its record keeps the spec and the rules, and
// its instances are kept placed on hosts that run them. This file moves
// instances between hosts:
//
//   - heal: a host whose agent has been gone longer than the down grace
//     (placement.Settings.Grace) has its instances placed again elsewhere
//     at once, as an availability action (it may use the buffer and the
//     overbooking, seed 000), and the old ones released;
//   - move: drain and rebalance start a new instance elsewhere that
//     replaces the old one (model.Instance.Replaces); the old one is
//     removed only once the new one runs and passed its health gate on its
//     host (finishMoves), so a move never leaves a service short.
//
// Everything here is planned through the pipeline like a deploy, with the
// same placement rules: constraints, affinity, domain spread, max per host.

// placeLike plans a new instance of old's service, of old's size and spec,
// on one of the schedulable hosts other than skip (only on to when to is
// not ""), and adds it to c with its host's usage. The new instance
// replaces replaces ("" for none). A move (move: drain, rebalance,
// defragment; not a heal) of an instance its agent runs goes only to hosts
// with an agent: a move is blue-green, and only an agent can confirm that
// the new instance runs (on a host registered by hand it would wait for
// ever, its resources held twice).
func (s *Service) placeLike(rd reader, old model.Instance, skip, to, replaces string, move, useBuffer bool, c *state.Change) (model.Instance, error) {
	req := placement.Request{Request: alloc.Request{Service: old.Service, Count: 1, Pieces: old.Pieces(), Bind: old.Bind, WholeCores: old.WholeCores,
		MemoryBytes: old.Memory, Strategy: alloc.Auto}, UseBuffer: useBuffer, Ports: old.Spec.Ports}
	if d, ok := rd.Service(old.Service); ok {
		req.Strategy = oneMore(alloc.Strategy(d.Value.Strategy))
		svc := d.Value
		req.MaxPerHost = svc.MaxPerHost
		if r := svc.Rules; r != nil {
			req.Constraint, req.Affinity, req.AntiAffinity = r.Constraint, r.Affinity, r.AntiAffinity
			req.Policy, req.HostsOrder, req.DomainSpread = placement.Policy(r.Policy), r.HostsOrder, placement.Spread(r.DomainSpread)
		}
	}
	req.Seed = seedOf(old.ID)
	if err := alloc.ValidateRequest(s.params, req.Request); err != nil {
		return model.Instance{}, fromAlloc(err)
	}
	placed := rd.SchedulablePlacement()
	hosts := make([]*placement.Host, 0, len(placed.Hosts))
	domains, skipped := false, false
	for _, h := range placed.Hosts {
		domains = domains || h.FaultDomain != "" || h.UpgradeDomain != ""
		if h.Name != skip {
			hosts = append(hosts, h)
		} else {
			skipped = true
		}
	}
	if from, ok := rd.Host(old.Host); move && ok && from.Host.Agent {
		var byHand []string
		hosts = slices.DeleteFunc(hosts, func(h *placement.Host) bool {
			v, ok := rd.Host(h.Name)
			if !ok || !v.Host.Agent {
				byHand = append(byHand, h.Name)
				return true
			}
			return false
		})
		if len(hosts) == 0 && len(byHand) > 0 {
			e := errf(Exhausted, "instance %s runs under the agent of %s: a move is blue-green, and no other schedulable host has an agent to confirm the new instance runs (%s eliminated %d registered by hand)",
				old.ID, old.Host, placement.RuleNoAgent, len(byHand))
			e.Eliminations = []placement.Elimination{{Rule: placement.RuleNoAgent, Hosts: byHand}}
			return model.Instance{}, e
		}
	}
	if spread, _ := placement.ParseSpread(string(req.DomainSpread)); spread == placement.SpreadOff {
		domains = false
	}
	if to != "" && !domains {
		// Every rule but the domain spread is decided host by host.
		hosts = slices.DeleteFunc(hosts, func(h *placement.Host) bool { return h.Name != to })
	}
	res, err := placement.Plan(s.params, rd.PlacementSettings(), hosts, req)
	if err != nil {
		err = s.placementError(rd, err)
		var se *Error
		if skipped && errors.As(err, &se) && se.Code == Exhausted {
			// The host it leaves was eliminated first: say so, so that a
			// refusal over a single host names the rule that binds.
			se.Eliminations = append([]placement.Elimination{{Rule: placement.RuleOwnHost, Hosts: []string{skip}}}, se.Eliminations...)
			se.Message += fmt.Sprintf("\n%s eliminated %s: the host the instance leaves", placement.RuleOwnHost, skip)
		}
		return model.Instance{}, err
	}
	if len(res.Placements) != 1 {
		// Plan places Count (1) or fails; anything else is a planner
		// defect, reported for this instance only.
		return model.Instance{}, fmt.Errorf("placing one instance like %s: placement returned %d placements, want 1", old.ID, len(res.Placements))
	}
	p := res.Placements[0]
	if to != "" && p.Host != to {
		// The domain spread is decided over every host: it chose another.
		return model.Instance{}, errf(Exhausted, "instance %s cannot move to %s: the domain spread rules place it on %s", old.ID, to, p.Host)
	}
	v, found := rd.Host(p.Host)
	i, planned := placed.Index(p.Host)
	if !found || !planned || (state.Revs{Host: v.HostRev, Alloc: v.AllocRev}) != placed.Rev(i) {
		return model.Instance{}, state.ErrConflict
	}
	a := v.Alloc.Clone()
	c.GuardView(v)
	in := model.Instance{ID: newID(old.Service), Service: old.Service, Host: p.Host, Spec: old.Spec, Generation: 1,
		Allocation: p.Allocation, Replaces: replaces}
	in.MemorySoft = min(old.MemorySoft, in.Memory)
	a.Add(in, +1)
	c.PutAlloc(p.Host, a)
	c.PutInstance(in)
	return in, nil
}

// oneMore is the strategy that places one more instance of a service
// deployed with strategy st (heal, move, scale up): the per-host
// strategies (each: Count on every host; fill: every host topped up to
// Count) say how many instances each host holds, not where one more goes,
// and with a count of one they place nothing on a host that already holds
// one. One more instance goes where auto puts it: on the host holding
// fewest of the service. The others keep their own rule.
func oneMore(st alloc.Strategy) alloc.Strategy {
	switch st {
	case "", alloc.Each, alloc.Fill:
		return alloc.Auto
	}
	return st
}

// seedOf is a placement seed from an instance ID (deterministic: the same
// instance is planned the same way on every attempt).
func seedOf(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	return h | 1
}

// release adds to c the removal of instance v from its host, with the
// host's usage (when the host is still registered). allocs holds the usage
// of hosts already changed by c (nil: none), so that several instances of
// one host can be released in one change.
func release(rd reader, v state.InstanceView, c *state.Change, allocs map[string]state.Alloc) {
	in := v.Instance
	if h, ok := rd.Host(in.Host); ok {
		a, changed := allocs[in.Host]
		if !changed {
			a = h.Alloc.Clone()
			c.GuardAlloc(in.Host, h.AllocRev)
		}
		a.Add(in, -1)
		if allocs != nil {
			allocs[in.Host] = a
		}
		c.PutAlloc(in.Host, a)
	}
	c.GuardInstance(in.Host, in.ID, v.Rev)
	c.DeleteInstance(in.Host, in.ID)
}

// replacementOf is the instance that replaces id (a move in flight), if any.
func replacementOf(rd reader, service, id string) (state.InstanceView, bool) {
	for _, v := range rd.ServiceInstances(service) {
		if v.Instance.Replaces == id {
			return v, true
		}
	}
	return state.InstanceView{}, false
}

// healJob places instance id, on the dead host host, again elsewhere and
// releases it, unless it moved or its host came back meanwhile. A move of
// it in flight is finished instead: its replacement takes over at once.
func (s *Service) healJob(id, host string, evenLive bool, moved *[]Moved) planFunc {
	return func(rd reader) (*state.Change, error) {
		hit("heal")
		c := new(state.Change)
		v, ok := rd.Instance(id)
		if !ok || v.Instance.Host != host {
			return c, nil
		}
		if h, ok := rd.Host(host); ok && h.Live && !evenLive {
			return c, nil
		}
		if r, ok := replacementOf(rd, v.Instance.Service, id); ok {
			next := r.Instance
			next.Replaces = ""
			c.GuardInstance(next.Host, next.ID, r.Rev)
			c.PutInstance(next)
			release(rd, v, c, nil)
			*moved = []Moved{{From: v.Instance, To: next}}
			c.PutEvent(s.stamp(healEvent((*moved)[0])))
			return c, nil
		}
		in, err := s.placeLike(rd, v.Instance, host, "", "", false, true, c)
		if err != nil {
			return nil, err
		}
		release(rd, v, c, nil)
		*moved = []Moved{{From: v.Instance, To: in}}
		c.PutEvent(s.stamp(healEvent((*moved)[0])))
		return c, nil
	}
}

// healEvent is the event of an instance placed again, written with the
// change that places it.
func healEvent(m Moved) state.Event {
	return state.Event{Identity: "planner", Kind: "Heal", Subject: m.From.ID, Host: m.From.Host, Service: m.From.Service,
		Outcome: fmt.Sprintf("placed again on %s as %s", m.To.Host, m.To.ID)}
}

// Moved is one instance placed again: From the old, To the new.
type Moved struct {
	From, To model.Instance
}

// Heal places the instances of host again on other hosts (its agent is
// gone, and the caller decided the grace has passed; or evenLive: the host
// is being removed), each on its own: one
// that cannot be placed stays on host, and its error is returned with the
// others joined. Placement follows the service's rules and may use the
// buffer and the overbooking (an availability action).
func (s *Service) Heal(ctx context.Context, host string, evenLive bool) ([]Moved, error) {
	ins := s.st.Instances(host)
	moved := make([][]Moved, len(ins))
	plans := make([]planFunc, len(ins))
	for i, v := range ins {
		plans[i] = s.healJob(v.Instance.ID, host, evenLive, &moved[i])
	}
	var out []Moved
	var errs []error
	for i, err := range s.pipe.doAll(ctx, plans) {
		if err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", ins[i].Instance.ID, err))
			continue
		}
		out = append(out, moved[i]...)
	}
	for _, m := range out {
		s.log.Warn("instance placed again on another host", "evacuated", evenLive, "instance", m.From.ID, "from", m.From.Host, "new_instance", m.To.ID, "to", m.To.Host)
	}
	return out, errors.Join(errs...)
}

// moveJob starts a move of instance id off its host: a new instance on
// another host (on to when not "") that replaces it. Nothing happens when
// the instance is gone or already moving. With kind set (a drain's), the
// change writes the move's event of that kind.
func (s *Service) moveJob(id, to string, useBuffer bool, kind string, moved *[]Moved) planFunc {
	return func(rd reader) (*state.Change, error) {
		hit("move")
		c := new(state.Change)
		v, ok := rd.Instance(id)
		if !ok {
			return c, nil
		}
		if _, moving := replacementOf(rd, v.Instance.Service, id); moving || v.Instance.Replaces != "" {
			return c, nil
		}
		// An instance of a host registered by hand (no agent) runs nowhere
		// pinfold can see: there is nothing to keep alive, so its move
		// completes at once (the new instance, the old one released).
		from, ok := rd.Host(v.Instance.Host)
		now := ok && !from.Host.Agent
		replaces := id
		if now {
			replaces = ""
		}
		in, err := s.placeLike(rd, v.Instance, v.Instance.Host, to, replaces, true, useBuffer, c)
		if err != nil {
			return nil, err
		}
		if now {
			release(rd, v, c, nil)
		}
		*moved = []Moved{{From: v.Instance, To: in}}
		if kind != "" {
			c.PutEvent(s.stamp(state.Event{Identity: "planner", Kind: kind, Subject: id, Host: v.Instance.Host, Service: v.Instance.Service,
				Outcome: fmt.Sprintf("moving to %s as %s", in.Host, in.ID)}))
		}
		return c, nil
	}
}

// moveOutcome is what to do with a move in flight.
type moveOutcome int

const (
	moveWait   moveOutcome = iota // the new instance is not up yet
	moveFinish                    // it runs and passed its gate: remove the old one
	moveAbort                     // it failed, or its host is gone: remove it, keep the old one
)

// judgeMove decides a move in flight from the new instance's report and
// host: it finishes once the new instance runs its generation with no
// error (its agent reports running only after the health gate), or past
// deadline (non-zero) once it exists at all; it aborts when the new
// instance's host is gone or down, or the instance failed or its host
// refused it (its health gate failed). Pure.
func judgeMove(n state.InstanceView, host state.HostView, hostOK bool, now, deadline time.Time) moveOutcome {
	st := n.Status
	switch {
	case !hostOK || host.Host.Agent && !host.Live:
		return moveAbort
	case st != nil && st.State == "running" && st.Generation == n.Instance.Generation && st.Error == "":
		return moveFinish
	case st != nil && (st.Refused == n.Instance.Generation ||
		st.Generation == n.Instance.Generation && (st.State == "error" || st.State == "exited" || st.State == "oom_killed")):
		return moveAbort
	case !deadline.IsZero() && now.After(deadline):
		return moveFinish
	}
	return moveWait
}

// finishJob settles the move whose new instance is id: outcome finish
// removes the old instance and clears Replaces; abort removes the new one.
// The change writes ev.
func (s *Service) finishJob(id string, outcome moveOutcome, ev state.Event) planFunc {
	return func(rd reader) (*state.Change, error) {
		hit("settle")
		c := new(state.Change)
		n, ok := rd.Instance(id)
		if !ok || n.Instance.Replaces == "" {
			return c, nil
		}
		if outcome == moveAbort {
			release(rd, n, c, nil)
			c.PutEvent(s.stamp(ev))
			return c, nil
		}
		next := n.Instance
		next.Replaces = ""
		c.GuardInstance(next.Host, next.ID, n.Rev)
		c.PutInstance(next)
		if old, ok := rd.Instance(n.Instance.Replaces); ok {
			release(rd, old, c, nil)
		}
		c.PutEvent(s.stamp(ev))
		return c, nil
	}
}

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
	r := what + ": " + msg
	if parked {
		r += fmt.Sprintf(" (parked after %d failures in a row: tried again every %s)", parkAfter, parkFor)
	}
	return r
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

// drainTick starts moves for the instances of draining hosts, and ends the
// drain of a host that holds none.
func (s *Service) drainTick(ctx context.Context, t *tracker, views []state.HostView, now time.Time) {
	on := map[string][]state.InstanceView{}
	for _, v := range views {
		h := v.Host
		if !h.Draining {
			delete(t.drainStart, h.Name)
			delete(t.drainWhy, h.Name)
			continue
		}
		on[h.Name] = s.st.Instances(h.Name)
		if t.drainStart[h.Name] != h.DrainStarted {
			// A drain this leader has not seen: none of its steps is parked
			// by an earlier drain's failures.
			t.drainStart[h.Name] = h.DrainStarted
			delete(t.drainWhy, h.Name)
			for _, iv := range on[h.Name] {
				t.succeeded(iv.Instance.ID)
				delete(t.retryAt, iv.Instance.ID)
			}
		}
		if len(on[h.Name]) == 0 {
			if _, err := s.changeHost(ctx, h.Name, func(h *state.Host) {
				h.Draining, h.DrainDeadline, h.DrainMoveLocal, h.Stuck = false, time.Time{}, false, ""
			}); err != nil {
				s.log.Warn("ending a finished drain", "host", h.Name, "err", err)
			} else {
				s.log.Info("host drained: no instances left; it stays disabled", "host", h.Name)
			}
			continue
		}
		ins := slices.DeleteFunc(slices.Clone(on[h.Name]), func(v state.InstanceView) bool { return t.waiting(v.Instance.ID, now) })
		kept := ""
		if !h.DrainMoveLocal {
			ins = slices.DeleteFunc(ins, func(v state.InstanceView) bool {
				why := StaysForVolume(v.Instance)
				if why != "" && kept == "" {
					kept = "drain: " + why + "; drain with --move-local-volumes to move it (its data stays behind)"
				}
				return why != ""
			})
		}
		moved := make([][]Moved, len(ins))
		plans := make([]planFunc, len(ins))
		for i, iv := range ins {
			plans[i] = s.moveJob(iv.Instance.ID, "", true, "DrainMove", &moved[i])
		}
		stuck := ""
		for i, err := range s.pipe.doAll(ctx, plans) {
			id := ins[i].Instance.ID
			if err != nil {
				parked := t.failed(id, now)
				if t.once(id, err.Error()) || parked {
					s.log.Warn("drain: an instance cannot move", "host", h.Name, "instance", id, "parked", parked, "err", err)
				}
				if stuck == "" {
					stuck = stuckReason("drain: instance "+id+" cannot move", err, parked)
				}
				continue
			}
			t.succeeded(id)
			for _, m := range moved[i] {
				s.log.Info("drain: moving", "instance", id, "from", h.Name, "new_instance", m.To.ID, "to", m.To.Host)
			}
		}
		switch {
		case stuck != "":
			t.drainWhy[h.Name] = stuck
		case slices.ContainsFunc(on[h.Name], func(v state.InstanceView) bool { return t.failures[v.Instance.ID] > 0 }):
			stuck = t.drainWhy[h.Name] // a parked instance, not tried this tick: its reason stands
		default:
			delete(t.drainWhy, h.Name)
		}
		if stuck == "" {
			stuck = kept
		}
		s.setStuck(ctx, h.Name, "drain", stuck)
	}
}

// Drain disables host and marks it draining: the leader moves its
// instances to other hosts, blue-green, until none is left (deadline: see
// state.Host.DrainDeadline). cancel ends the drain (moves in flight
// settle; the host stays disabled).
func (s *Service) Drain(ctx context.Context, host string, deadline time.Duration, cancel bool, now time.Time) (state.HostView, error) {
	return s.DrainHost(ctx, DrainRequest{Host: host, Deadline: deadline, Cancel: cancel}, now)
}

// DrainRequest asks for a drain of Host (Service.Drain).
type DrainRequest struct {
	Host     string
	Deadline time.Duration
	Cancel   bool
	// MoveLocalVolumes moves instances with a host-local volume (a bind
	// mount or a named volume) too; their data stays behind. Without it
	// they stay, and the host's Stuck says which and why.
	MoveLocalVolumes bool
}

// DrainHost is Drain with every option.
func (s *Service) DrainHost(ctx context.Context, r DrainRequest, now time.Time) (state.HostView, error) {
	host, deadline, cancel := r.Host, r.Deadline, r.Cancel
	if deadline < 0 || deadline > 30*24*time.Hour {
		return state.HostView{}, errf(Invalid, "drain deadline = %s: want 0 (none) ..720h", deadline)
	}
	return s.changeHost(ctx, host, func(h *state.Host) {
		if cancel {
			h.Draining, h.DrainDeadline, h.DrainMoveLocal = false, time.Time{}, false
			if strings.HasPrefix(h.Stuck, "drain") { // a dead host's heal keeps its reason
				h.Stuck = ""
			}
			return
		}
		if !h.Draining {
			h.DrainStarted = now.UTC()
			if strings.HasPrefix(h.Stuck, "drain") { // the last drain's reason
				h.Stuck = ""
			}
		}
		if r.MoveLocalVolumes && strings.HasPrefix(h.Stuck, "drain") && strings.Contains(h.Stuck, "host-local volume") {
			h.Stuck = "" // the reason no longer holds
		}
		h.Disabled, h.Draining, h.DrainDeadline, h.DrainMoveLocal = true, true, time.Time{}, r.MoveLocalVolumes
		if deadline > 0 {
			h.DrainDeadline = now.Add(deadline).UTC().Truncate(time.Second)
		}
	})
}

// Move starts moving instance id to host to (any other host when ""),
// blue-green: the new instance replaces it once it runs.
func (s *Service) Move(ctx context.Context, id, to string) (Moved, error) {
	var moved []Moved
	if err := s.pipe.do(ctx, s.moveJob(id, to, false, "", &moved)); err != nil {
		return Moved{}, err
	}
	if len(moved) == 0 {
		return Moved{}, errf(Precond, "instance %s is gone or already moving", id)
	}
	return moved[0], nil
}

// ScaleResult is what a scale did.
type ScaleResult struct {
	Added   []model.Instance
	Removed []string
	Count   int // the service's instances now
}

// Scale sets the number of service's instances to count: it deploys the
// missing ones through placement with the service's spec, size and rules,
// or removes the worst placed first (worstFirst). An instance and the one
// replacing it (a move in flight) count once. A resize, replace or other
// scale committed between its read and its deploy makes it read again:
// the added instances have the service's size then, and two scales to N
// leave N.
func (s *Service) Scale(ctx context.Context, service string, count int) (ScaleResult, error) {
	if err := state.ValidateServiceName(service); err != nil {
		return ScaleResult{}, errf(Invalid, "service: %w", err)
	}
	if count < 0 || count > MaxDeployCount {
		return ScaleResult{}, errf(Invalid, "count = %d: want 0..%d", count, MaxDeployCount)
	}
	for attempt := 1; ; attempt++ {
		d, ok := s.st.Service(service)
		if !ok {
			return ScaleResult{}, errf(NotFound, "service %q is not deployed: deploy it first (scale keeps its spec, size and rules)", service)
		}
		have := countInstances(s.st.ServiceInstances(service))
		if count <= have {
			return s.scaleDown(ctx, service, count, have)
		}
		svc := d.Value
		r := DeployRequest{Service: service, Spec: svc.Spec, Count: count - have, Pieces: svc.Pieces, Bind: svc.Bind, WholeCores: svc.WholeCores, Memory: svc.Memory,
			MemorySoft: svc.MemorySoft, Strategy: oneMore(alloc.Strategy(svc.Strategy)), MaxPerHost: svc.MaxPerHost,
			recorded: alloc.Strategy(svc.Strategy), scale: &scaleRead{record: svc, have: have}}
		if svc.Rules != nil {
			r.Rules = *svc.Rules
		}
		// Scale is idempotent by its count: the deploy it makes records
		// nothing under the caller's request ID (a deploy's record there
		// would answer a later deploy with this one's instances).
		res, err := s.DeployWithRules(withoutRequest(ctx), r)
		if errors.Is(err, errScaleChanged) {
			// A resize, replace or another scale came after the read
			// above: read again, once the cache holds it. The change may
			// be one planned before this deploy in the same commit group,
			// which is still committing: an empty request is planned
			// after that group committed and the cache reflects it.
			if attempt < scaleAttempts {
				if err := s.pipe.do(ctx, func(reader) (*state.Change, error) { return new(state.Change), nil }); err != nil {
					return ScaleResult{}, err
				}
				continue
			}
			return ScaleResult{}, errf(Conflicted, "service %q: %v %d times in a row (other scales, resizes or replaces); nothing was added: run scale again", service, err, attempt)
		}
		if err != nil {
			return ScaleResult{}, err
		}
		return ScaleResult{Added: res.Instances, Count: count}, nil
	}
}

// scaleAttempts bounds how often Scale reads the service again when it
// changed between the read and the deploy (errScaleChanged).
const scaleAttempts = 8

// scaleDown removes instances of service, worst placed first, until it has
// count (have when read; counted again in the plan); count == have
// changes nothing.
func (s *Service) scaleDown(ctx context.Context, service string, count, have int) (ScaleResult, error) {
	if count == have {
		return ScaleResult{Count: have}, nil
	}
	var removed []string
	err := s.pipe.do(ctx, func(rd reader) (*state.Change, error) {
		removed = nil
		ins := rd.ServiceInstances(service)
		k := countInstances(ins) - count
		if k <= 0 {
			return new(state.Change), nil
		}
		views := map[string]state.HostView{}
		for _, v := range ins {
			if _, ok := views[v.Instance.Host]; !ok {
				views[v.Instance.Host], _ = rd.Host(v.Instance.Host)
			}
		}
		c := new(state.Change)
		allocs := map[string]state.Alloc{}
		for _, v := range worstFirst(ins, views, k) {
			release(rd, v, c, allocs)
			removed = append(removed, v.Instance.ID)
			if r, ok := replacementOf(rd, service, v.Instance.ID); ok {
				release(rd, r, c, allocs) // its move in flight goes with it
				removed = append(removed, r.Instance.ID)
			}
		}
		return c, nil
	})
	if err != nil {
		return ScaleResult{}, err
	}
	s.log.Info("scaled down", "service", service, "count", count, "removed", removed)
	return ScaleResult{Removed: removed, Count: count}, nil
}

// countInstances counts a service's instances, an instance being replaced
// by a move in flight and its replacement once.
func countInstances(ins []state.InstanceView) int {
	n := 0
	for _, v := range ins {
		if v.Instance.Replaces == "" {
			n++
		}
	}
	return n
}

// worstFirst picks k of a service's instances to remove (replacements of
// moves in flight left out), one at a time, each the worst placed given
// the ones picked before it: on a host that is not up, then in the fault
// domain holding most of the service, then on the host holding most of
// it, then on the host with the largest share of its CPU in use, ties by
// ID. Counting again after each pick keeps the spread: 3 + 3 scaled to 2
// leaves 1 + 1, not 2 + 0. Pure.
func worstFirst(ins []state.InstanceView, hosts map[string]state.HostView, k int) []state.InstanceView {
	perHost, perDomain := map[string]int{}, map[string]int{}
	domain := func(h string) string { return hosts[h].Host.FaultDomain }
	left := slices.DeleteFunc(slices.Clone(ins), func(v state.InstanceView) bool { return v.Instance.Replaces != "" })
	for _, v := range left {
		perHost[v.Instance.Host]++
		perDomain[domain(v.Instance.Host)]++
	}
	used := func(h string) float64 {
		v := hosts[h]
		c, u := 0, 0
		for id, p := range v.Host.CPUs {
			c += p
			u += v.Alloc.Used[id]
		}
		if c == 0 {
			return 0
		}
		return float64(u) / float64(c)
	}
	up := func(h string) int {
		if v, ok := hosts[h]; ok && v.State() == "up" {
			return 1
		}
		return 0
	}
	worse := func(a, b state.InstanceView) bool {
		ha, hb := a.Instance.Host, b.Instance.Host
		if d := up(ha) - up(hb); d != 0 {
			return d < 0
		}
		if d := perDomain[domain(hb)] - perDomain[domain(ha)]; d != 0 {
			return d < 0
		}
		if d := perHost[hb] - perHost[ha]; d != 0 {
			return d < 0
		}
		if ua, ub := used(ha), used(hb); ua != ub {
			return ua > ub
		}
		return a.Instance.ID < b.Instance.ID
	}
	var out []state.InstanceView
	for len(out) < k && len(left) > 0 {
		w := 0
		for i := range left {
			if worse(left[i], left[w]) {
				w = i
			}
		}
		v := left[w]
		out = append(out, v)
		left = slices.Delete(left, w, w+1)
		perHost[v.Instance.Host]--
		perDomain[domain(v.Instance.Host)]--
	}
	return out
}
