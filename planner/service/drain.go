package service

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/planner/state"
)

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
				if note := m.OverbookedNote(); note != "" {
					s.log.Warn("drain: moving with the overbooking: no host had nominal room", "instance", id, "from", h.Name, "new_instance", m.To.ID, "to", m.To.Host, "overbooked", note[2:])
					continue
				}
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
