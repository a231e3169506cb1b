package service

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/preempt"
	"github.com/pinfold/pinfold/planner/state"
)

// Victim is an instance a request stops to make room (preemption, issue
// 40 item 2): deleted in the same commit that places the preemptor, so
// that no CPU is ever promised twice.
type Victim struct {
	ID       string         `json:"id"`
	Service  string         `json:"service"`
	Host     string         `json:"host"`
	Priority model.Priority `json:"priority"`
}

// preemption is what a request that does not fit stops, and the
// schedulable hosts as they are once those have stopped.
type preemption struct {
	victims []state.InstanceView // sorted by host, then ID
	hosts   []*placement.Host    // placed.Hosts, the victims' hosts without them
	gone    map[string]state.Alloc
}

// Victims is p's victims as the caller reports them, with their
// services' priorities.
func (p preemption) Victims(rd reader) []Victim {
	out := make([]Victim, 0, len(p.victims))
	for _, v := range p.victims {
		out = append(out, Victim{ID: v.Instance.ID, Service: v.Instance.Service, Host: v.Instance.Host, Priority: priorityOf(rd, v.Instance.Service)})
	}
	return out
}

// isNoRoom is whether a placement failure may be a lack of room
// (preemption may help), not a bad request.
func isNoRoom(err error) bool {
	var pe *placement.Error
	return errors.As(err, &pe) && !pe.Invalid
}

// priorityOf is service's priority (production without a record).
func priorityOf(rd reader, service string) model.Priority {
	d, _ := rd.Service(service)
	return d.Value.Priority
}

// candidate is v as the victim search sees it: its service's priority
// and whether that service is never preempted (production without a
// record).
func candidate(rd reader, v state.InstanceView) preempt.Candidate {
	d, _ := rd.Service(v.Instance.Service)
	return preempt.Candidate{ID: v.Instance.ID, Service: v.Instance.Service, Priority: d.Value.Priority, NeverPreempted: d.Value.NeverPreempted}
}

// preemptible is whether an instance may be stopped for another: not one
// in a move (it replaces another, or another replaces it), whose
// bookkeeping the drain or rebalance owns.
func preemptible(rd reader, v state.InstanceView) bool {
	return v.Instance.Replaces == "" && len(rd.Replacements(v.Instance.ID)) == 0
}

// maxPreemptFits bounds the one-host plans a deploy's or resize's
// preemption search makes over the whole fleet and count (preempt.Choose
// bounds each host's exact search to DefaultBudget, but a fleet of hosts
// and a count of instances multiplied it: 10,000 full hosts could cost
// tens of millions of plans inside the commit pipeline). A search past
// it refuses, as if no lower-priority work made room. A var for tests.
var maxPreemptFits = 50_000

// planPreempt looks for room for req, which does not fit placed as it is,
// by stopping instances of services of strictly lower priority than
// req's, none of a service never preempted: one instance at a time, it asks preempt.Choose for the host and
// the fewest victims that let one more instance fit (each host as it is
// after the victims and instances chosen before), then plans the whole
// request on the hosts without the victims. With a count of 1 the
// victims are the fewest; with more they are chosen greedily, one
// instance after another. False when no lower-priority work can make
// room (or the whole request still does not fit without it).
func planPreempt(p alloc.Params, rd reader, placed *state.Placed, settings placement.Settings, req placement.Request) (preemption, *placement.Result, bool) {
	one := req
	one.Count = 1
	views := map[string]state.HostView{}
	view := func(host string) (state.HostView, bool) {
		v, ok := views[host]
		if !ok {
			if v, ok = rd.Host(host); ok {
				views[host] = v
			}
		}
		return v, ok
	}
	// work: each changed host's usage with the victims gone and this
	// request's instances chosen so far charged; gone: the victims only.
	work, gone := map[string]state.Alloc{}, map[string]state.Alloc{}
	usage := func(m map[string]state.Alloc, host string) state.Alloc {
		if a, ok := m[host]; ok {
			return a
		}
		v, _ := view(host)
		return v.Alloc
	}
	instances := map[string]state.InstanceView{}
	stopped := map[string]bool{}
	without := func(a state.Alloc, ids []string) state.Alloc {
		a = a.Clone()
		for _, id := range ids {
			a.Add(instances[id].Instance, -1)
		}
		return a
	}
	phost := func(host string, a state.Alloc) *placement.Host {
		v, _ := view(host)
		v.Alloc, v.Resources = a, state.AllocHost(v.Host, a)
		return v.PlacementHost()
	}
	var cands []preempt.Host
	for _, h := range placed.Hosts {
		ch := preempt.Host{Name: h.Name}
		for _, in := range rd.Instances(h.Name) {
			if !preemptible(rd, in) {
				continue
			}
			instances[in.Instance.ID] = in
			ch.Instances = append(ch.Instances, candidate(rd, in))
		}
		cands = append(cands, ch)
	}
	var victims []string
	calls := 0 // fits of the whole request: bounded (maxPreemptFits)
	for range req.Count {
		placedOne := map[string]*placement.Result{} // by host, for the fits of this round
		fits := func(host string, ids []string) bool {
			if calls++; calls > maxPreemptFits {
				return false
			}
			res, err := placement.PlanValid(p, settings, []*placement.Host{phost(host, without(usage(work, host), ids))}, one)
			if err == nil {
				placedOne[host+"\x00"+strings.Join(ids, ",")] = res
			}
			return err == nil
		}
		for i := range cands {
			cands[i].Instances = slices.DeleteFunc(cands[i].Instances, func(c preempt.Candidate) bool { return stopped[c.ID] })
		}
		c, ok := preempt.Choose(cands, req.Priority, fits, 0)
		if !ok || calls > maxPreemptFits {
			// Past the bound a choice is not known to be the fewest:
			// refused as not fitting, nothing stopped.
			return preemption{}, nil, false
		}
		ids := c.IDs()
		res := placedOne[c.Host+"\x00"+strings.Join(ids, ",")]
		if res == nil || len(res.Placements) != 1 {
			return preemption{}, nil, false
		}
		a := without(usage(work, c.Host), ids)
		a.Add(model.Instance{Service: req.Service, Allocation: res.Placements[0].Allocation}, +1)
		work[c.Host] = a
		if len(ids) > 0 {
			gone[c.Host] = without(usage(gone, c.Host), ids)
		}
		for _, id := range ids {
			stopped[id] = true
			victims = append(victims, id)
		}
	}
	if len(victims) == 0 {
		return preemption{}, nil, false // room without stopping anything: not this path's
	}
	hosts := slices.Clone(placed.Hosts)
	for _, h := range slices.Sorted(maps.Keys(gone)) {
		i, _ := placed.Index(h)
		hosts[i] = phost(h, gone[h])
	}
	res, err := placement.PlanValid(p, settings, hosts, req)
	if err != nil {
		return preemption{}, nil, false
	}
	out := preemption{hosts: hosts, gone: gone}
	for _, id := range victims {
		out.victims = append(out.victims, instances[id])
	}
	slices.SortFunc(out.victims, func(a, b state.InstanceView) int {
		return strings.Compare(a.Instance.Host+"\x00"+a.Instance.ID, b.Instance.Host+"\x00"+b.Instance.ID)
	})
	return out, res, true
}

// resizeVictims finds on in's host (v, whose usage this change has made
// a) the fewest instances of strictly lower priority than in's service
// whose removal lets rz fit (preempt.OnHost): never one of the resize's
// own targets, one stopped already, one in a move, or one of a service
// never preempted. It returns them,
// sorted by ID, and a without them.
func resizeVictims(p alloc.Params, rd reader, v state.HostView, a state.Alloc, in model.Instance, rz alloc.Resize, targets []state.InstanceView, stopped map[string]bool) ([]state.InstanceView, state.Alloc, bool) {
	own := map[string]bool{}
	for _, t := range targets {
		own[t.Instance.ID] = true
	}
	byID := map[string]state.InstanceView{}
	h := preempt.Host{Name: v.Host.Name}
	for _, x := range rd.Instances(v.Host.Name) {
		if own[x.Instance.ID] || stopped[x.Instance.ID] || !preemptible(rd, x) {
			continue
		}
		byID[x.Instance.ID] = x
		h.Instances = append(h.Instances, candidate(rd, x))
	}
	without := func(ids []string) state.Alloc {
		b := a.Clone()
		for _, id := range ids {
			b.Add(byID[id].Instance, -1)
		}
		return b
	}
	fits := func(_ string, ids []string) bool {
		_, err := alloc.PlanResize(p, state.AllocHost(v.Host, without(ids)), rz)
		return err == nil
	}
	c, ok := preempt.OnHost(h, priorityOf(rd, in.Service), fits, 0)
	if !ok || len(c.Victims) == 0 {
		return nil, a, false
	}
	var out []state.InstanceView
	for _, id := range c.IDs() {
		out = append(out, byID[id])
	}
	return out, without(c.IDs()), true
}

// victimList is victims for people: "ID (service, priority) on host", by
// host then ID.
func victimList(vs []Victim) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%s (%s, %s) on %s", v.ID, v.Service, v.Priority, v.Host)
	}
	return strings.Join(parts, ", ")
}
