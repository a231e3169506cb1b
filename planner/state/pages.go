package state

import (
	"cmp"
	"maps"
	"slices"
)

// Pages: hosts and instances are listed a page at a time, each page read
// from sorted name indexes that are kept across calls, so that one page
// costs its own size, not the cluster's. An index is rebuilt (sorted once,
// shared by every later call) on the first read after the set it orders
// changed: a host added or removed, a host's first instance or its last,
// an instance of a service added or removed. Updates to a host or an
// instance that stays (usage, status, generation) keep every index.

// InstanceRef names an instance by its host and ID; refs order instances
// by host, then by ID.
type InstanceRef struct{ Host, ID string }

// Compare orders k before (-1), at (0) or after (+1) o.
func (k InstanceRef) Compare(o InstanceRef) int {
	return cmp.Or(cmp.Compare(k.Host, o.Host), cmp.Compare(k.ID, o.ID))
}

// pageIndexes are the sorted indexes pages are read from; the Store's
// orderMu guards them apart from mu, so that readers holding mu's read
// lock can rebuild them. An index is never changed in place, only
// replaced or dropped (nil).
type pageIndexes struct {
	hosts     []string                 // s.hosts' names
	instHosts []string                 // s.instances' hosts (those with instances)
	services  map[string][]InstanceRef // a service's instances
}

// hostOrderLocked is every host's name, sorted; the caller holds mu.
func (s *Store) hostOrderLocked() []string {
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	if s.pages.hosts == nil {
		s.pages.hosts = slices.Sorted(maps.Keys(s.hosts))
	}
	return s.pages.hosts
}

// instHostsLocked is the hosts with instances, sorted; the caller holds mu.
func (s *Store) instHostsLocked() []string {
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	if s.pages.instHosts == nil {
		s.pages.instHosts = slices.Sorted(maps.Keys(s.instances))
	}
	return s.pages.instHosts
}

// serviceOrderLocked is service's instances, sorted; the caller holds mu.
func (s *Store) serviceOrderLocked(service string) []InstanceRef {
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	keys, ok := s.pages.services[service]
	if !ok {
		ids := s.byService[service]
		keys = make([]InstanceRef, 0, len(ids))
		for id, h := range ids {
			keys = append(keys, InstanceRef{h, id})
		}
		slices.SortFunc(keys, InstanceRef.Compare)
		if s.pages.services == nil {
			s.pages.services = map[string][]InstanceRef{}
		}
		s.pages.services[service] = keys
	}
	return keys
}

// dropPages forgets the indexes a change to these sets invalidates; the
// caller holds mu.
func (s *Store) dropPages(hosts, instHosts bool, services ...string) {
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	if hosts {
		s.pages.hosts = nil
	}
	if instHosts {
		s.pages.instHosts = nil
	}
	for _, svc := range services {
		delete(s.pages.services, svc)
	}
}

// HostsAfter returns the views of up to limit hosts whose names sort after
// after ("": from the first), sorted by name, and whether more follow. A
// host added or removed since the page before changes nothing for the
// others: each is listed once, none skipped.
func (s *Store) HostsAfter(after string, limit int) ([]HostView, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := s.hostOrderLocked()
	i, found := slices.BinarySearch(names, after)
	if found {
		i++
	}
	end := min(i+max(limit, 0), len(names))
	return s.viewsLocked(names[i:end]), end < len(names)
}

// InstancesAfter returns up to limit instances on host ("": any) of
// service ("": any) whose keys sort after after (the zero key: from the
// first), sorted by host then ID, and whether more follow.
func (s *Store) InstancesAfter(host, service string, after InstanceRef, limit int) ([]InstanceView, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	limit = max(limit, 0)
	out := make([]InstanceView, 0, min(limit, 1024))
	if host == "" && service != "" {
		keys := s.serviceOrderLocked(service)
		i, found := slices.BinarySearchFunc(keys, after, InstanceRef.Compare)
		if found {
			i++
		}
		end := min(i+limit, len(keys))
		for _, k := range keys[i:end] {
			out = append(out, s.instanceLocked(k.Host, k.ID))
		}
		return out, end < len(keys)
	}
	hosts := []string{host}
	if host == "" {
		hosts = s.instHostsLocked()
		i, _ := slices.BinarySearch(hosts, after.Host)
		hosts = hosts[i:]
	}
	var ids []string // reused across hosts: a call holds one host's IDs
	for _, h := range hosts {
		ins := s.instances[h]
		ids = ids[:0]
		for id, d := range ins {
			if (service == "" || d.Value.Service == service) && (InstanceRef{h, id}).Compare(after) > 0 {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			if len(out) == limit {
				return out, true
			}
			out = append(out, s.instanceLocked(h, id))
		}
	}
	return out, false
}
