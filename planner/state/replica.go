package state

import (
	"cmp"
	"context"
	"iter"
	"maps"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// replica is the documents as this process reads them: the cache and the
// engine-view memo under one lock, with the waiters for its revision and
// for each host's next change. It does no I/O: Store feeds it from one etcd
// watch, Memory from its own commits, both one key at a time (apply) or a
// whole load at once (load), holding mu for writing.
//
// Every exported method here is a read of the cache as of one revision,
// safe for concurrent use; the views it returns share maps with the cache
// and are immutable.
type replica struct {
	// mu guards c and the memo's drops (write: apply, load; read: every
	// read), werr and hostSignal.
	mu      sync.RWMutex
	changed *sync.Cond // broadcast when c.rev moves or werr is set
	c       *cache
	m       *viewMemo
	// werr is why the replica stopped following its feed (nil: it
	// follows): the watch ended, or the store was closed.
	werr error
	// hostSignal is, per host someone waits on, a channel closed at its
	// next change (WatchHost; the cache's hostChange). One channel per
	// host, not one condition for all: a change wakes only that host's
	// watchers, not every agent's stream.
	hostSignal map[string]chan struct{}
}

// init readies an empty replica for a planner speaking protocol.
func (s *replica) init(protocol int) {
	s.changed = sync.NewCond(&s.mu)
	s.c, s.m = newCache(protocol), newViewMemo()
	s.hostSignal = map[string]chan struct{}{}
}

// stop records why the replica stopped following its feed and wakes every
// waiter.
func (s *replica) stop(err error) {
	s.mu.Lock()
	s.werr = err
	s.changed.Broadcast()
	s.signalAll()
	s.mu.Unlock()
}

// Healthy reports whether the cache still follows etcd (its watch has not
// ended).
func (s *replica) Healthy() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.werr == nil
}

// reset empties the cache and the engine-view memo (a load follows); the
// caller holds mu.
func (s *replica) reset() {
	s.c.reset()
	if s.hostSignal == nil {
		s.hostSignal = map[string]chan struct{}{} // kept across a reload: its waiters are woken by signalAll
	}
	s.m.reset()
}

// load replaces the cache with kvs, read at rev; the caller holds mu.
func (s *replica) load(kvs []*mvccpb.KeyValue, rev int64) {
	s.reset()
	for _, kv := range kvs {
		s.apply(string(kv.Key), kv.Value, kv.ModRevision, false)
	}
	for _, h := range s.c.deriveWholeCores() {
		s.m.drop(h)
	}
	s.c.rev = rev
	s.c.reindexAll()
}

// apply lays one key over the cache and acts on what it changed: the
// host's engine or placement view is dropped, its watchers woken; the
// caller holds mu.
func (s *replica) apply(key string, val []byte, rev int64, deleted bool) {
	e := s.c.apply(key, val, rev, deleted)
	if e.marked {
		s.wake(e.host)
	}
	switch {
	case e.engine:
		s.m.drop(e.host)
	case e.placed:
		s.m.dropPlaced(e.host)
	}
}

// wake wakes host's watchers; the caller holds mu.
func (s *replica) wake(host string) {
	if ch, ok := s.hostSignal[host]; ok {
		close(ch)
		delete(s.hostSignal, host)
	}
}

// signalAll wakes every host's watchers; the caller holds mu.
func (s *replica) signalAll() {
	for h, ch := range s.hostSignal {
		close(ch)
		delete(s.hostSignal, h)
	}
}

// hostWait is the channel closed at host's next change; the caller holds mu.
func (s *replica) hostWait(host string) <-chan struct{} {
	ch, ok := s.hostSignal[host]
	if !ok {
		ch = make(chan struct{})
		s.hostSignal[host] = ch
	}
	return ch
}

// State is the host's state as placement sees it: HostState, and
// "protocol" for a live agent that speaks another agent protocol than this
// planner (it takes nothing new; it is not enforced as planned).
func (v HostView) State() string { return v.state }

// hostState is HostState, with "protocol" for an agent whose protocol is
// not want.
func hostState(h Host, live bool, want int) string {
	st := HostState(h, live)
	if st == "up" && h.Agent && h.Protocol != want {
		return "protocol"
	}
	return st
}

// HostState is up, down, disabled or maintenance (a host in maintenance
// keeps its instances and takes nothing new, live or not).
func HostState(h Host, live bool) string {
	switch {
	case h.Disabled:
		return "disabled"
	case !h.MaintenanceUntil.IsZero():
		return "maintenance"
	case h.Agent && !live:
		return "down"
	}
	return "up"
}

// HostView is a host with its usage and the revisions a plan was made from.
// Its maps and topology are shared with the cache: a view is immutable, and
// a caller that derives a changed document clones what it changes first
// (Alloc.Clone, maps.Clone), as the service does.
type HostView struct {
	Host     Host
	HostRev  int64
	Alloc    Alloc
	AllocRev int64
	Live     bool
	Metrics  *Metrics // nil until the agent sent some
	// Resources is the allocation engine's view of Host and Alloc
	// (AllocHost), shared and never changed; set where planning reads it
	// (SchedulablePlacement's views, Pending's pending hosts), nil elsewhere.
	Resources *alloc.Host
	// DesiredBytes is the size of the host's instance documents as
	// stored: what its agent receives as its desired set is at most about
	// this (the wire form is smaller than the JSON).
	DesiredBytes int64
	state        string
}

// PlacementSettings returns the cluster's placement settings.
func (s *replica) PlacementSettings() placement.Settings {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.placement
}

// Unschedulable returns the hosts that may not take new work, by reason
// (disabled, maintenance, down, protocol), each list sorted.
func (s *replica) Unschedulable() map[string][]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.unschedulable()
}

// Schedulable returns the hosts that may take new work, sorted by name,
// read from the index (disabled and down hosts are never visited).
// Planning reads SchedulablePlacement, which caches the views.
func (s *replica) Schedulable() []HostView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.views(s.c.schedNames())
}

// SchedulablePlacement returns the schedulable hosts' placement views: a
// cached list, rebuilt after a change from cached per-host views (a deploy
// over 10,000 hosts builds one view, not 10,000).
func (s *replica) SchedulablePlacement() *Placed {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m.placedList(s.c.schedNames(), s.c.view)
}

// PlacementHost is the host as the placement rules see it (Resources from
// the view, or built when the view has none).
func (v HostView) PlacementHost() *placement.Host {
	res := v.Resources
	if res == nil {
		res = AllocHost(v.Host, v.Alloc)
	}
	h := &placement.Host{Name: v.Host.Name, Type: v.Host.Type, Properties: v.Host.Properties, FaultDomain: v.Host.FaultDomain,
		UpgradeDomain: v.Host.UpgradeDomain, Disabled: v.Host.Disabled, Maintenance: !v.Host.MaintenanceUntil.IsZero(),
		NoAgent: !v.Host.Agent, Resources: res}
	if v.Metrics != nil {
		h.LoadAvg = v.Metrics.Load1
	}
	return h
}

// Host returns one host's view.
func (s *replica) Host(name string) (HostView, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.host(name)
}

// Hosts returns every host's view, sorted by name.
func (s *replica) Hosts() []HostView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.allHosts()
}

// Snapshot is the cache at one revision, for an audit that compares
// documents with each other (a host's usage with the sum of its
// instances): reads made one after another may see a commit between them
// and report a violation that never was.
type Snapshot struct {
	Rev       int64
	Hosts     []HostView                // sorted by name
	Instances map[string][]InstanceView // by host, sorted by ID
	Placement placement.Settings
}

// Snapshot reads every host, every instance and the placement settings
// under one lock: one revision of the cache.
func (s *replica) Snapshot() Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.snapshot()
}

// InstanceView is an instance with its revision and observed status; like
// HostView it shares maps with the cache and is immutable.
type InstanceView struct {
	Instance model.Instance
	Rev      int64
	Status   *model.Status
}

// Instances returns instances, sorted by host then ID; host "" means all.
func (s *replica) Instances(host string) []InstanceView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.instancesOn(host)
}

// Moving returns the instances that replace another (moves in flight),
// sorted by host then ID.
func (s *replica) Moving() []InstanceView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.movingInstances()
}

// Instance finds an instance by ID.
func (s *replica) Instance(id string) (InstanceView, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.instanceByID(id)
}

// ServiceInstances returns a service's instances, sorted by host then ID,
// from the service index (other services' instances are never visited).
func (s *replica) ServiceInstances(service string) []InstanceView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.serviceInstances(service)
}

// Replacements returns the instances that replace instance id (moves in
// flight: their Replaces is id), sorted by host then ID, from an index:
// its cost is its answer's, not the fleet's or the service's.
func (s *replica) Replacements(id string) []InstanceView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.replacements(id)
}

func sortInstances(out []InstanceView) {
	slices.SortFunc(out, func(a, b InstanceView) int {
		return cmp.Or(cmp.Compare(a.Instance.Host, b.Instance.Host), cmp.Compare(a.Instance.ID, b.Instance.ID))
	})
}

// Service returns a service spec.
func (s *replica) Service(name string) (Doc[Service], bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.c.services[name]
	return d, ok
}

// Rev is the revision the cache has caught up to.
func (s *replica) Rev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.rev
}

// WaitRev blocks until the cache has seen revision rev (or ctx ends).
func (s *replica) WaitRev(ctx context.Context, rev int64) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.c.rev < rev {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.werr != nil {
			return s.werr
		}
		s.changed.Wait()
	}
	return nil
}

func (s *replica) isLive(host string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.live[host]
}

// WatchHost calls send with the revision the cache has caught up to, then
// again each time host's registration or one of its desired instances
// changes, until ctx ends or send fails. It reads the store's own watch
// (no etcd watch per caller): a burst of changes is sent once, as of the
// revision the cache reached.
func (s *replica) WatchHost(ctx context.Context, host string, send func(rev int64) error) error {
	s.mu.RLock()
	seen := s.c.hostChange[host]
	rev := s.c.rev
	s.mu.RUnlock()
	for {
		if err := send(rev); err != nil {
			return err
		}
		s.mu.Lock()
		for s.c.hostChange[host] == seen {
			if s.werr != nil {
				err := s.werr
				s.mu.Unlock()
				return err
			}
			ch := s.hostWait(host)
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			s.mu.Lock()
		}
		seen, rev = s.c.hostChange[host], s.c.rev
		s.mu.Unlock()
	}
}

// HostsAfter returns the views of up to limit hosts whose names sort after
// after ("": from the first), sorted by name, and whether more follow. A
// host added or removed since the page before changes nothing for the
// others: each is listed once, none skipped.
func (s *replica) HostsAfter(after string, limit int) ([]HostView, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.hostsAfter(after, limit)
}

// InstancesAfter returns up to limit instances on host ("": any) of
// service ("": any) whose keys sort after after (the zero key: from the
// first), sorted by host then ID, and whether more follow.
func (s *replica) InstancesAfter(host, service string, after InstanceRef, limit int) ([]InstanceView, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.instancesAfter(host, service, after, limit)
}

// Request returns request id's record, if it committed.
func (s *replica) Request(id string) (Request, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.c.requests[id]
	return d.Value, ok
}

// Pending returns an empty overlay over the cache.
func (s *replica) Pending() *Pending { return &Pending{base: s} }

// Fleet is the cache at one revision, read in place: what ReadFleet passes
// its function. It is valid only during that call (the cache's read lock
// is held), and what it yields shares maps with the cache and must not be
// changed or kept.
type Fleet struct{ c *cache }

// Rev is the revision the fleet is read at.
func (f Fleet) Rev() int64 { return f.c.rev }

// Placement is the placement settings at the fleet's revision.
func (f Fleet) Placement() placement.Settings { return f.c.placement }

// Hosts yields every registered host's view, sorted by name (as Hosts).
func (f Fleet) Hosts() iter.Seq[HostView] {
	return func(yield func(HostView) bool) {
		for _, name := range slices.Sorted(maps.Keys(f.c.hosts)) {
			if !yield(f.c.view(name)) {
				return
			}
		}
	}
}

// Instances yields host's instances in no set order (the cache's map
// order: a caller that reports them sorts what it reports), without their
// statuses or revisions, and without a copy of the host's list.
func (f Fleet) Instances(host string) iter.Seq[model.Instance] {
	return func(yield func(model.Instance) bool) {
		for _, d := range f.c.instances[host] {
			if !yield(d.Value) {
				return
			}
		}
	}
}

// ReadFleet calls fn with the cache at one revision, under the read lock:
// the audit and health read every instance this way, where Snapshot's
// copy of each (sorted, with its status) was half their time at 1,000,000
// instances (issue 39). fn must not call the store (a writer waiting on
// the lock would deadlock a second read lock) and should not block.
func (s *replica) ReadFleet(fn func(Fleet)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(Fleet{s.c})
}
