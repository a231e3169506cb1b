package service

import (
	"context"
	"fmt"
	"time"

	"github.com/pinfold/pinfold/planner/state"
)

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
		in, over, err := s.placeLike(rd, v.Instance, v.Instance.Host, to, replaces, true, useBuffer, c)
		if err != nil {
			return nil, err
		}
		if now {
			release(rd, v, c, nil)
		}
		*moved = []Moved{{From: v.Instance, To: in, Overbooked: over}}
		if kind != "" {
			c.PutEvent(s.stamp(state.Event{Identity: "planner", Kind: kind, Subject: id, Host: v.Instance.Host, Service: v.Instance.Service,
				Outcome: fmt.Sprintf("moving to %s as %s", in.Host, in.ID) + (*moved)[0].OverbookedNote()}))
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
