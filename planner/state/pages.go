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

// pageIndexes are the sorted indexes pages are read from; the cache's
// orderMu guards them, so that readers holding the store's read lock can
// rebuild them. An index is never changed in place, only
// replaced or dropped (nil).
type pageIndexes struct {
	hosts     []string                 // the cache's hosts' names
	instHosts []string                 // the cache's hosts with instances
	services  map[string][]InstanceRef // a service's instances
}

// hostOrder is every host's name, sorted.
func (c *cache) hostOrder() []string {
	c.orderMu.Lock()
	defer c.orderMu.Unlock()
	if c.pages.hosts == nil {
		c.pages.hosts = slices.Sorted(maps.Keys(c.hosts))
	}
	return c.pages.hosts
}

// instHosts is the hosts with instances, sorted.
func (c *cache) instHosts() []string {
	c.orderMu.Lock()
	defer c.orderMu.Unlock()
	if c.pages.instHosts == nil {
		c.pages.instHosts = slices.Sorted(maps.Keys(c.instances))
	}
	return c.pages.instHosts
}

// serviceOrder is service's instances, sorted.
func (c *cache) serviceOrder(service string) []InstanceRef {
	c.orderMu.Lock()
	defer c.orderMu.Unlock()
	keys, ok := c.pages.services[service]
	if !ok {
		ids := c.byService[service]
		keys = make([]InstanceRef, 0, len(ids))
		for id, h := range ids {
			keys = append(keys, InstanceRef{h, id})
		}
		slices.SortFunc(keys, InstanceRef.Compare)
		if c.pages.services == nil {
			c.pages.services = map[string][]InstanceRef{}
		}
		c.pages.services[service] = keys
	}
	return keys
}

// dropPages forgets the indexes a change to these sets invalidates.
func (c *cache) dropPages(hosts, instHosts bool, services ...string) {
	c.orderMu.Lock()
	defer c.orderMu.Unlock()
	if hosts {
		c.pages.hosts = nil
	}
	if instHosts {
		c.pages.instHosts = nil
	}
	for _, svc := range services {
		delete(c.pages.services, svc)
	}
}

// hostsAfter is HostsAfter on the cache.
func (c *cache) hostsAfter(after string, limit int) ([]HostView, bool) {
	names := c.hostOrder()
	i, found := slices.BinarySearch(names, after)
	if found {
		i++
	}
	end := min(i+max(limit, 0), len(names))
	return c.views(names[i:end]), end < len(names)
}

// instancesAfter is InstancesAfter on the cache.
func (c *cache) instancesAfter(host, service string, after InstanceRef, limit int) ([]InstanceView, bool) {
	limit = max(limit, 0)
	out := make([]InstanceView, 0, min(limit, 1024))
	if host == "" && service != "" {
		keys := c.serviceOrder(service)
		i, found := slices.BinarySearchFunc(keys, after, InstanceRef.Compare)
		if found {
			i++
		}
		end := min(i+limit, len(keys))
		for _, k := range keys[i:end] {
			out = append(out, c.instance(k.Host, k.ID))
		}
		return out, end < len(keys)
	}
	hosts := []string{host}
	if host == "" {
		hosts = c.instHosts()
		i, _ := slices.BinarySearch(hosts, after.Host)
		hosts = hosts[i:]
	}
	var ids []string // reused across hosts: a call holds one host's IDs
	for _, h := range hosts {
		ins := c.instances[h]
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
			out = append(out, c.instance(h, id))
		}
	}
	return out, false
}
