package state

import (
	"slices"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// Pending is the store's cache with changes that are planned but not yet
// committed laid over it: the planner plans several requests one after
// another against it and commits their changes together (the commit
// pipeline). Revisions are the cache's, so the guards a request takes from
// a Pending view are the ones the merged commit needs. Not safe for
// concurrent use; the Store under it is.
type Pending struct {
	base *replica
	c    Change
	// resources caches the engine view of each host with pending usage
	// (built once per Add that changes the host, not once per read).
	resources map[string]*alloc.Host
	// replacedBy indexes the pending writes of instances that replace
	// another: old ID → new IDs (a candidate only: a later write may have
	// changed or deleted it; Replacements reads each again).
	replacedBy map[string]map[string]bool
	// placed is the last list SchedulablePlacement built, from the store's
	// list placedFrom; stale is the hosts whose usage an Add changed since.
	// The next list copies it and builds only those again, instead of every
	// host with pending usage (a drain of 1,000 instances built 1,000 views
	// for each of its 1,000 moves).
	placed, placedFrom *Placed
	stale              map[string]bool
}

// Add lays c over the view: what c writes is what the next read sees.
func (p *Pending) Add(c *Change) {
	p.c.Merge(c)
	for h := range c.allocs {
		delete(p.resources, h)
		if p.placed != nil {
			if p.stale == nil {
				p.stale = map[string]bool{}
			}
			p.stale[h] = true
		}
	}
	for id, w := range c.instances {
		if w.in == nil || w.in.Replaces == "" {
			continue
		}
		if p.replacedBy == nil {
			p.replacedBy = map[string]map[string]bool{}
		}
		if p.replacedBy[w.in.Replaces] == nil {
			p.replacedBy[w.in.Replaces] = map[string]bool{}
		}
		p.replacedBy[w.in.Replaces][id] = true
	}
}

// Change is everything added so far, merged into one change.
func (p *Pending) Change() *Change { return &p.c }

// PlacementSettings returns the cluster's placement settings.
func (p *Pending) PlacementSettings() placement.Settings { return p.base.PlacementSettings() }

// Unschedulable is the store's (the pipeline changes no host's state).
func (p *Pending) Unschedulable() map[string][]string { return p.base.Unschedulable() }

// SchedulablePlacement is Store.SchedulablePlacement with the hosts whose
// usage is pending replaced by their pending views (the store's list is
// shared: it is copied before one is replaced).
//
// The list built last is kept while the store's list is the same one (the
// cache has not changed): the next copies it and builds again only the
// hosts whose usage changed since, so that a call costs the hosts' number
// and the new changes', not every pending change again.
func (p *Pending) SchedulablePlacement() *Placed {
	base := p.base.SchedulablePlacement()
	if len(p.c.allocs) == 0 {
		return base
	}
	from, changed := p.placed, p.stale
	if from == nil || p.placedFrom != base {
		from, changed = base, make(map[string]bool, len(p.c.allocs))
		for h := range p.c.allocs {
			changed[h] = true
		}
	}
	if len(changed) == 0 {
		return from
	}
	out := &Placed{Hosts: slices.Clone(from.Hosts), revs: make([]Revs, len(from.Hosts)), index: base.index}
	for i := range out.revs {
		out.revs[i] = from.Rev(i)
	}
	for h := range changed {
		i, ok := out.Index(h)
		if !ok {
			continue // not schedulable (any more)
		}
		v, found := p.Host(h)
		if !found {
			continue
		}
		out.Hosts[i], out.revs[i] = v.PlacementHost(), Revs{v.HostRev, v.AllocRev}
	}
	p.placed, p.placedFrom, p.stale = out, base, nil
	return out
}

// Host returns one host's view with its pending usage (Resources only
// where the usage is pending).
func (p *Pending) Host(name string) (HostView, bool) {
	v, ok := p.base.Host(name)
	if !ok {
		return v, false
	}
	return p.over(v), true
}

func (p *Pending) over(v HostView) HostView {
	a, ok := p.c.allocs[v.Host.Name]
	if !ok {
		return v
	}
	v.Alloc = a
	r, ok := p.resources[v.Host.Name]
	if !ok {
		r = AllocHost(v.Host, a)
		r.Memo = alloc.NewCapacityMemo()
		if p.resources == nil {
			p.resources = map[string]*alloc.Host{}
		}
		p.resources[v.Host.Name] = r
	}
	v.Resources = r
	return v
}

// Instance finds an instance by ID, pending writes first.
func (p *Pending) Instance(id string) (InstanceView, bool) {
	base, ok := p.base.Instance(id)
	w, pending := p.c.instances[id]
	switch {
	case !pending:
		return base, ok
	case w.in == nil:
		return InstanceView{}, false
	}
	v := InstanceView{Instance: *w.in}
	if ok && base.Instance.Host == w.in.Host {
		v.Rev, v.Status = base.Rev, base.Status
	}
	return v, true
}

// ServiceInstances returns a service's instances with pending writes,
// sorted by host then ID.
func (p *Pending) ServiceInstances(service string) []InstanceView {
	return p.overlay(p.base.ServiceInstances(service), func(in *model.Instance) bool { return in.Service == service })
}

// overlay lays the pending writes over the cache's instances base: those
// written or deleted go, and the written ones that match come back as
// written; sorted by host then ID.
func (p *Pending) overlay(base []InstanceView, match func(*model.Instance) bool) []InstanceView {
	if len(p.c.instances) == 0 {
		return base
	}
	out := slices.DeleteFunc(base, func(v InstanceView) bool {
		_, pending := p.c.instances[v.Instance.ID]
		return pending
	})
	for id, w := range p.c.instances {
		if w.in == nil || !match(w.in) {
			continue
		}
		if v, ok := p.Instance(id); ok {
			out = append(out, v)
		}
	}
	sortInstances(out)
	return out
}

// Replacements returns the instances that replace instance id, with
// pending writes, sorted by host then ID: the cache's and the pending
// writes' candidates, each read again as it is now.
func (p *Pending) Replacements(id string) []InstanceView {
	seen := map[string]bool{}
	var out []InstanceView
	keep := func(nid string) {
		if seen[nid] {
			return
		}
		seen[nid] = true
		if v, ok := p.Instance(nid); ok && v.Instance.Replaces == id {
			out = append(out, v)
		}
	}
	for _, v := range p.base.Replacements(id) {
		keep(v.Instance.ID)
	}
	for nid := range p.replacedBy[id] {
		keep(nid)
	}
	sortInstances(out)
	return out
}

// Service returns a service spec, pending writes first; the revision is
// the cache's (0 for a service not yet committed).
func (p *Pending) Service(name string) (Doc[Service], bool) {
	d, ok := p.base.Service(name)
	s, pending := p.c.services[name]
	switch {
	case !pending:
		return d, ok
	case s == nil:
		return Doc[Service]{}, false
	}
	return Doc[Service]{Value: *s, Rev: d.Rev}, true
}

// Instances returns host's instances with pending writes, sorted by ID.
func (p *Pending) Instances(host string) []InstanceView {
	return p.overlay(p.base.Instances(host), func(in *model.Instance) bool { return in.Host == host })
}
