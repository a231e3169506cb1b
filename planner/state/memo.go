package state

import (
	"cmp"
	"slices"
	"sync"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
)

// viewMemo is the engine-view memo: per host, the allocation engine's view
// of its registration and usage (AllocHost, with a capacity memo) and its
// placement view, and the list of the schedulable hosts' placement views
// that planning reads (Placed), with the placement index carried from one
// list to the next. It holds no documents: the caller passes what it reads
// from the cache, and drops a host's entries when its documents change
// (drop: registration or usage; dropPlaced: heartbeat, metrics, whether it
// is schedulable).
//
// Concurrency: readers of the store, holding its read lock, fill the memo
// side by side, so mu guards its maps; buildMu lets one reader at a time
// build the list. Drops come from the store's writer (its write lock held),
// never during a build.
type viewMemo struct {
	mu sync.Mutex
	// engines are the hosts' engine views, for their current registration
	// and usage.
	engines map[string]*alloc.Host
	// placed are the schedulable hosts' placement views, and list all of
	// them sorted by name (nil after any drop).
	placed map[string]placedHost
	list   *Placed
	// prev is the last list built and dirty the hosts whose views were
	// dropped since: the next list is prev with those replaced, when it
	// names the same hosts (one rebuilt host per deploy, not 10,000 looked
	// up again).
	prev  *Placed
	dirty map[string]bool
	// buildMu lets one reader at a time build list: two would both start
	// from prev, and the second, finding dirty already cleared, would build
	// a stale list.
	buildMu sync.Mutex
	// line carries each list's placement index over to the next.
	line indexLine
}

// newViewMemo is an empty memo.
func newViewMemo() *viewMemo {
	m := &viewMemo{}
	m.reset()
	return m
}

// reset forgets everything (a reload).
func (m *viewMemo) reset() {
	m.mu.Lock()
	m.engines = map[string]*alloc.Host{}
	m.placed, m.list = map[string]placedHost{}, nil
	m.prev, m.dirty = nil, map[string]bool{}
	m.mu.Unlock()
}

// drop forgets host's engine view and placement view: its registration or
// usage changed.
func (m *viewMemo) drop(host string) {
	m.mu.Lock()
	delete(m.engines, host)
	delete(m.placed, host)
	m.list = nil
	m.dirty[host] = true
	m.mu.Unlock()
}

// dropPlaced forgets host's placement view (its engine view stays): its
// heartbeat or metrics changed, or whether it may take new work.
func (m *viewMemo) dropPlaced(host string) {
	m.mu.Lock()
	delete(m.placed, host)
	m.list = nil
	m.dirty[host] = true
	m.mu.Unlock()
}

// engine is host name's engine view for h and a, cached until drop.
func (m *viewMemo) engine(name string, h Host, a Alloc) *alloc.Host {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.engines[name]; ok {
		return r
	}
	r := AllocHost(h, a)
	r.Memo = alloc.NewCapacityMemo()
	m.engines[name] = r
	return r
}

// placedList is the placement views of the hosts names (sorted, shared:
// the same slice while the set is unchanged), as view describes each: the
// cached list, or one rebuilt from the cached per-host views, building only
// the views dropped since.
func (m *viewMemo) placedList(names []string, view func(name string) HostView) *Placed {
	m.mu.Lock()
	list := m.list
	m.mu.Unlock()
	if list != nil {
		return list
	}
	m.buildMu.Lock()
	defer m.buildMu.Unlock()
	m.mu.Lock()
	list = m.list // another reader may have built it meanwhile
	m.mu.Unlock()
	if list != nil {
		return list
	}
	list = &Placed{Hosts: make([]*placement.Host, len(names)), revs: make([]Revs, len(names)), names: names}
	var missing []int
	m.mu.Lock() // one lock for the cached views, not one per host
	if prev := m.prev; prev != nil && len(prev.names) == len(names) && len(names) > 0 && &prev.names[0] == &names[0] && len(m.dirty) < len(names)/4 {
		// The same hosts as the list before: copy it, replace the dropped.
		copy(list.Hosts, prev.Hosts)
		copy(list.revs, prev.revs)
		for name := range m.dirty {
			i, ok := slices.BinarySearch(names, name)
			if !ok {
				continue
			}
			if e, ok := m.placed[name]; ok {
				list.Hosts[i], list.revs[i] = e.ph, e.revs
			} else {
				missing = append(missing, i)
			}
		}
	} else {
		for i, name := range names {
			e, ok := m.placed[name]
			if !ok {
				missing = append(missing, i)
				continue
			}
			list.Hosts[i], list.revs[i] = e.ph, e.revs
		}
	}
	clear(m.dirty)
	m.mu.Unlock()
	for _, i := range missing {
		name := names[i]
		m.mu.Lock()
		e, ok := m.placed[name]
		m.mu.Unlock()
		if !ok {
			v := view(name)
			v.Resources = m.engine(name, v.Host, v.Alloc)
			e = placedHost{v.PlacementHost(), Revs{v.HostRev, v.AllocRev}}
			m.mu.Lock()
			m.placed[name] = e
			m.mu.Unlock()
		}
		list.Hosts[i], list.revs[i] = e.ph, e.revs
	}
	list.index = &placedIndex{hosts: list.Hosts, line: &m.line}
	m.mu.Lock()
	m.list, m.prev = list, list
	m.mu.Unlock()
	return list
}

// Placed is the hosts that may take new work as the placement rules see
// them, sorted by name, with the revisions of the documents each view was
// built from: a change planned on Hosts[i] guards Rev(i), so a host that
// changed since fails the commit instead of being planned stale. Shared:
// never change it.
type Placed struct {
	Hosts []*placement.Host
	revs  []Revs
	index *placedIndex
	names []string // the store's sorted names the list was built from
}

// Rev is the revisions Hosts[i] was built from.
func (p *Placed) Rev(i int) Revs { return p.revs[i] }

// Revs are the revisions of a host's registration and usage documents.
type Revs struct{ Host, Alloc int64 }

// Index finds host name.
func (p *Placed) Index(name string) (int, bool) {
	return slices.BinarySearchFunc(p.Hosts, name, func(h *placement.Host, name string) int { return cmp.Compare(h.Name, name) })
}

// placedHost is one host's cached placement view and its revisions.
type placedHost struct {
	ph   *placement.Host
	revs Revs
}
