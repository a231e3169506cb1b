package service

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
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
//     overbooking, seed 000; the overbooking only when no host has
//     nominal room, issue 38), and the old ones released;
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
// ever, its resources held twice). It moves existing work, so with
// useBuffer it uses the overbooking only when no host has nominal room
// (placement.Request.NominalFirst); over then says what the host it chose
// holds past its nominal capacity (nil when placement did not need the
// overbooking).
func (s *Service) placeLike(rd reader, old model.Instance, skip, to, replaces string, move, useBuffer bool, c *state.Change) (in model.Instance, over []alloc.Overuse, err error) {
	// old's own size and spec (a resize or replace changes an instance,
	// not always its record), its record's strategy and rules.
	want := model.Deploy{Spec: old.Spec, Size: model.Size{Pieces: old.Pieces(), Bind: old.Bind, WholeCores: old.WholeCores, Memory: old.Memory}}
	if d, ok := rd.Service(old.Service); ok {
		want.Strategy = string(oneMore(alloc.Strategy(d.Value.Strategy)))
		want.MaxPerHost, want.Rules = d.Value.MaxPerHost, d.Value.Rules
	}
	req := placement.NewRequest(old.Service, 1, want)
	req.UseBuffer, req.NominalFirst = useBuffer, true
	req.Seed = seedOf(old.ID)
	if err := alloc.ValidateRequest(s.params, req.Request); err != nil {
		return model.Instance{}, nil, fromAlloc(err)
	}
	placed := rd.SchedulablePlacement()
	settings := rd.PlacementSettings()
	agentOnly := false
	if from, ok := rd.Host(old.Host); move && ok && from.Host.Agent {
		agentOnly = true
	}
	// One instance, auto, no rules, anywhere (a drain's, a heal's, a
	// rebalance's commonest move): the room index finds the host the full
	// plan over every host but skip would, without visiting each
	// (placement.Index.FirstWithout); over hosts that all have an agent
	// when only those may take it.
	var res *placement.Result
	if x := placed.RoomIndex(s.params); x != nil && to == "" && (!agentOnly || x.NoAgent() == 0) {
		if r, ok := x.FirstWithout(s.params, settings, placed.Hosts, req, skip); ok {
			res = r
			s.indexedMoves.Add(1)
		}
	}
	if res == nil || s.checkIndex {
		full, err := s.planLike(rd, placed, settings, old, req, skip, to, agentOnly)
		if res != nil && (err != nil || !reflect.DeepEqual(full.Placements, res.Placements) || full.Spread != "" || len(full.Violations) > 0 || full.Overbooked) {
			return model.Instance{}, nil, fmt.Errorf("room index: placed %v like %s, the full plan %v (error %v)", res.Placements, old.ID, placementsOf(full), err)
		}
		if err != nil {
			return model.Instance{}, nil, err
		}
		if res == nil {
			res = full
		}
	}
	if len(res.Placements) != 1 {
		// Plan places Count (1) or fails; anything else is a planner
		// defect, reported for this instance only.
		return model.Instance{}, nil, fmt.Errorf("placing one instance like %s: placement returned %d placements, want 1", old.ID, len(res.Placements))
	}
	p := res.Placements[0]
	if to != "" && p.Host != to {
		// The domain spread is decided over every host: it chose another.
		return model.Instance{}, nil, errf(Exhausted, "instance %s cannot move to %s: the domain spread rules place it on %s", old.ID, to, p.Host)
	}
	v, found := rd.Host(p.Host)
	i, planned := placed.Index(p.Host)
	if !found || !planned || (state.Revs{Host: v.HostRev, Alloc: v.AllocRev}) != placed.Rev(i) {
		return model.Instance{}, nil, state.ErrConflict
	}
	a := v.Alloc.Clone()
	c.GuardView(v)
	in = model.Instance{ID: newID(old.Service), Service: old.Service, Host: p.Host, Spec: old.Spec, Generation: 1,
		Allocation: p.Allocation, Replaces: replaces}
	in.MemorySoft = min(old.MemorySoft, in.Memory)
	a.Add(in, +1)
	c.PutAlloc(p.Host, a)
	c.PutInstance(in)
	if res.Overbooked {
		over = alloc.OverNominal(state.AllocHost(v.Host, a), s.params.ShareBase)
	}
	return in, over, nil
}

// planLike is placeLike's full plan: over every schedulable host but
// skip (only those with an agent when agentOnly; only to when to is not
// "" and no domain spread applies), with the elimination report of a
// refusal.
func (s *Service) planLike(rd reader, placed *state.Placed, settings placement.Settings, old model.Instance, req placement.Request, skip, to string, agentOnly bool) (*placement.Result, error) {
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
	if agentOnly {
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
			return nil, e
		}
	}
	if spread, _ := placement.ParseSpread(string(req.DomainSpread)); spread == placement.SpreadOff {
		domains = false
	}
	if to != "" && !domains {
		// Every rule but the domain spread is decided host by host.
		hosts = slices.DeleteFunc(hosts, func(h *placement.Host) bool { return h.Name != to })
	}
	res, err := placement.Plan(s.params, settings, hosts, req)
	if err != nil {
		err = s.placementError(rd, err)
		var se *Error
		if skipped && errors.As(err, &se) && se.Code == Exhausted {
			// The host it leaves was eliminated first: say so, so that a
			// refusal over a single host names the rule that binds.
			se.Eliminations = append([]placement.Elimination{{Rule: placement.RuleOwnHost, Hosts: []string{skip}}}, se.Eliminations...)
			se.Message += fmt.Sprintf("\n%s eliminated %s: the host the instance leaves", placement.RuleOwnHost, skip)
		}
		return nil, err
	}
	return res, nil
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

// replacementOf is the instance of service that replaces id (a move in
// flight), if any: the first by host then ID. It reads the replacement
// index, not the service's instances (a drain of 1,000 instances of a
// service of 50,000 sorted those 1,000 times).
func replacementOf(rd reader, service, id string) (state.InstanceView, bool) {
	for _, v := range rd.Replacements(id) {
		if v.Instance.Service == service {
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
		in, over, err := s.placeLike(rd, v.Instance, host, "", "", false, true, c)
		if err != nil {
			return nil, err
		}
		release(rd, v, c, nil)
		*moved = []Moved{{From: v.Instance, To: in, Overbooked: over}}
		c.PutEvent(s.stamp(healEvent((*moved)[0])))
		return c, nil
	}
}

// healEvent is the event of an instance placed again, written with the
// change that places it.
func healEvent(m Moved) state.Event {
	return state.Event{Identity: "planner", Kind: "Heal", Subject: m.From.ID, Host: m.From.Host, Service: m.From.Service,
		Outcome: fmt.Sprintf("placed again on %s as %s", m.To.Host, m.To.ID) + m.OverbookedNote()}
}

// Moved is one instance placed again: From the old, To the new.
type Moved struct {
	From, To model.Instance
	// Overbooked: no host had nominal room for it, and the one it went to
	// holds this past its nominal capacity (nil: placed within it).
	Overbooked []alloc.Overuse
}

// OverbookedNote is what a move's event, log and output add when its
// placement used the overbooking ("; placed on small using overbooking:
// memory 15.5 GiB/14.4 GiB"), "" when it did not.
func (m Moved) OverbookedNote() string {
	if len(m.Overbooked) == 0 {
		return ""
	}
	parts := make([]string, len(m.Overbooked))
	for i, o := range m.Overbooked {
		parts[i] = o.String()
	}
	return fmt.Sprintf("; placed on %s using overbooking: %s", m.To.Host, strings.Join(parts, ", "))
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
		s.log.Warn("instance placed again on another host", "evacuated", evenLive, "instance", m.From.ID, "from", m.From.Host, "new_instance", m.To.ID, "to", m.To.Host,
			"overbooked", strings.TrimPrefix(m.OverbookedNote(), "; "))
	}
	return out, errors.Join(errs...)
}
