package state

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/topology"
)

// cache is the documents under Prefix as of one revision, decoded, with the
// indexes the planner reads instead of scanning: the hosts that may take
// new work, instances by service and by ID, the moves in flight, the
// sorted orders pages are read from, and per host the revision of its last
// change that WatchHost reports.
//
// It is pure: no etcd, no clock, no I/O, no logging. Its feed is apply, one
// key at a time, as the watch or a load delivers them; what a key changed
// beyond the cache (a host's engine view stale, its watchers to wake) comes
// back as an effect, for the layers above it (replica) to act on.
//
// Concurrency: the caller serialises apply and reset (a write lock) against
// every read; reads may run side by side (a read lock). The lazily rebuilt
// orders (schedOrder, pages) have their own mutexes so that readers can
// rebuild them; they are never changed in place, only replaced.
type cache struct {
	// protocol is the agent protocol version this planner speaks: a live
	// agent speaking another is not schedulable.
	protocol int
	// rev is the revision the cache has caught up to (the caller sets it:
	// a watch response's header may be past its last key's revision).
	rev int64

	hosts     map[string]Doc[Host]
	allocs    map[string]Doc[Alloc]
	instances map[string]map[string]Doc[model.Instance] // host → id
	statuses  map[string]map[string]Doc[model.Status]
	services  map[string]Doc[Service]
	requests  map[string]Doc[Request] // request ID → its record (requests.go)
	live      map[string]bool
	metrics   map[string]Metrics // from the live key's value
	placement placement.Settings
	// schedulable is the index of hosts that may take new work: enabled,
	// and up (a live heartbeat) when an agent manages them, speaking the
	// current protocol. Planning reads only these, never scans the rest.
	schedulable map[string]bool
	// schedOrder is schedulable's names sorted, rebuilt on the first read
	// after the index changed (nil); schedMu guards it.
	schedMu    sync.Mutex
	schedOrder []string
	// pages are the sorted indexes listings read a page at a time from
	// (pages.go); orderMu guards them.
	orderMu sync.Mutex
	pages   pageIndexes
	// topologies interns decoded topologies by their JSON: hosts of one
	// model share one copy (10,000 identical hosts cost one topology).
	topologies map[[32]byte]*topology.Topology
	// cpuMaps interns decoded hosts' capacity maps (Host.CPUs) by their
	// JSON: hosts of one model and reservation share one map, as they
	// share a topology (a 128-CPU map is 5 KiB; 10,000 hosts held 50 MiB
	// of them, issue 27). A cached host's maps are never written (a change
	// clones them first, service.SetHostRequest.apply), so sharing is
	// safe. Emptied past maxCPUMaps(hosts) entries, so that hosts whose
	// capacity was changed one by one cannot grow it without bound.
	cpuMaps map[[32]byte]map[cpuset.CPUID]int

	// byService indexes instances: service → ID → host; where is ID → host.
	byService map[string]map[string]string
	where     map[string]string
	// moving indexes the instances with Replaces set (moves in flight):
	// ID → host, so the leader's tick reads them without a full scan.
	moving map[string]string
	// replacedBy indexes the moves in flight by the instance they replace:
	// old ID → new ID → its host, so that finding an instance's
	// replacement reads its own entry, not its service's instances.
	replacedBy map[string]map[string]string

	// hostChange is, per host, the revision of the last change to its
	// registration or desired instances (WatchHost).
	hostChange map[string]int64

	// instSize is each instance document's size (its stored JSON), and
	// hostSize their sum per host: HostView.DesiredBytes, what an agent
	// receives is at most about (issue 36 A2).
	instSize map[string]int32
	hostSize map[string]int64
}

// effect is what applying one key changed beyond the cache itself.
type effect struct {
	// host is the host the key belongs to ("": none, or a key of no host).
	host string
	// engine: the host's registration or usage changed, its engine view
	// (and with it its placement view) is stale.
	engine bool
	// placed: its placement view is stale (heartbeat, metrics, or whether
	// it is schedulable changed).
	placed bool
	// marked: a change WatchHost reports (registration, desired instance);
	// the host's watchers are to be woken.
	marked bool
}

// newCache is an empty cache for a planner speaking protocol.
func newCache(protocol int) *cache {
	c := &cache{protocol: protocol}
	c.reset()
	return c
}

// reset empties the cache (a reload follows).
func (c *cache) reset() {
	c.rev = 0
	c.hosts, c.allocs, c.services = map[string]Doc[Host]{}, map[string]Doc[Alloc]{}, map[string]Doc[Service]{}
	c.requests = map[string]Doc[Request]{}
	c.instances, c.statuses = map[string]map[string]Doc[model.Instance]{}, map[string]map[string]Doc[model.Status]{}
	c.live, c.schedulable, c.metrics = map[string]bool{}, map[string]bool{}, map[string]Metrics{}
	c.schedMu.Lock()
	c.schedOrder = nil
	c.schedMu.Unlock()
	c.orderMu.Lock()
	c.pages = pageIndexes{}
	c.orderMu.Unlock()
	c.placement = placement.Settings{}
	c.topologies = map[[32]byte]*topology.Topology{}
	c.cpuMaps = map[[32]byte]map[cpuset.CPUID]int{}
	c.hostChange = map[string]int64{}
	c.byService, c.where, c.moving = map[string]map[string]string{}, map[string]string{}, map[string]string{}
	c.replacedBy = map[string]map[string]string{}
	c.instSize, c.hostSize = map[string]int32{}, map[string]int64{}
}

// apply lays one key's new value (deleted: its deletion) at rev over the
// cache and keeps every index right. A key outside Prefix, of a kind the
// cache does not hold, or whose value does not decode changes nothing (a
// value that does not decode leaves the document as it was).
func (c *cache) apply(key string, val []byte, rev int64, deleted bool) effect {
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return effect{}
	}
	kind, name, _ := strings.Cut(rest, "/")
	switch kind {
	case "hosts":
		c.hostChange[name] = rev
		_, had := c.hosts[name]
		if deleted {
			delete(c.hosts, name)
		} else if h, ok := c.decodeHost(val); ok {
			c.hosts[name] = Doc[Host]{h, rev}
		}
		if _, has := c.hosts[name]; has != had {
			c.dropPages(true, false)
		}
		c.reindex(name)
		return effect{host: name, engine: true, placed: true, marked: true}
	case "alloc":
		if deleted {
			delete(c.allocs, name)
		} else if a, ok := decode[Alloc](val); ok {
			c.allocs[name] = Doc[Alloc]{a, rev}
		}
		return effect{host: name, engine: true, placed: true}
	case "instances":
		host, id, _ := strings.Cut(name, "/")
		c.hostChange[host] = rev
		old, had := c.instances[host][id]
		_, hadHost := c.instances[host]
		c.unindex(host, id)
		setNested(c.instances, host, id, val, rev, deleted)
		d, has := c.instances[host][id]
		if sz, ok := c.instSize[id]; ok {
			if c.hostSize[host] -= int64(sz); c.hostSize[host] <= 0 {
				delete(c.hostSize, host)
			}
			delete(c.instSize, id)
		}
		if has {
			c.instSize[id] = int32(min(len(val), 1<<30))
			c.hostSize[host] += int64(c.instSize[id])
		}
		if _, hasHost := c.instances[host]; hasHost != hadHost {
			c.dropPages(false, true)
		}
		if had != has || old.Value.Service != d.Value.Service {
			c.dropPages(false, false, old.Value.Service, d.Value.Service)
		}
		if has {
			svc := d.Value.Service
			if c.byService[svc] == nil {
				c.byService[svc] = map[string]string{}
			}
			c.byService[svc][id] = host
			c.where[id] = host
			if old := d.Value.Replaces; old != "" {
				c.moving[id] = host
				if c.replacedBy[old] == nil {
					c.replacedBy[old] = map[string]string{}
				}
				c.replacedBy[old][id] = host
			}
		}
		return effect{host: host, marked: true}
	case "status":
		host, id, _ := strings.Cut(name, "/")
		setNested(c.statuses, host, id, val, rev, deleted)
	case "services":
		if deleted {
			delete(c.services, name)
		} else if v, ok := decode[Service](val); ok {
			c.services[name] = Doc[Service]{v, rev}
		}
	case "requests":
		if deleted {
			delete(c.requests, name)
		} else if v, ok := decode[Request](val); ok {
			c.requests[name] = Doc[Request]{v, rev}
		}
	case "settings":
		if name == "placement" {
			c.placement = placement.Settings{}
			if !deleted {
				if v, ok := decode[placement.Settings](val); ok {
					c.placement = v
				}
			}
		}
	case "live":
		c.live[name] = !deleted
		delete(c.metrics, name)
		if deleted {
			delete(c.live, name)
		} else if m, ok := decode[Metrics](val); ok {
			c.metrics[name] = m
		}
		c.reindex(name)
		return effect{host: name, placed: true}
	}
	return effect{}
}

// decodeHost decodes a host document, sharing the topology with any other
// host whose topology JSON is identical.
func (c *cache) decodeHost(val []byte) (Host, bool) {
	var w struct {
		Host
		Topology json.RawMessage `json:"topology"`
		CPUs     json.RawMessage `json:"cpus"`
	}
	if json.Unmarshal(val, &w) != nil {
		return Host{}, false
	}
	h := w.Host
	if len(w.CPUs) > 0 && string(w.CPUs) != "null" {
		key := sha256.Sum256(w.CPUs)
		m, ok := c.cpuMaps[key]
		if !ok {
			if json.Unmarshal(w.CPUs, &m) != nil {
				return Host{}, false
			}
			if len(c.cpuMaps) >= maxCPUMaps(len(c.hosts)) {
				clear(c.cpuMaps)
			}
			c.cpuMaps[key] = m
		}
		h.CPUs = m
	}
	if len(w.Topology) > 0 && string(w.Topology) != "null" {
		key := sha256.Sum256(w.Topology)
		t, ok := c.topologies[key]
		if !ok {
			t = new(topology.Topology)
			if json.Unmarshal(w.Topology, t) != nil {
				return Host{}, false
			}
			c.topologies[key] = t
		}
		h.Topology = t
	}
	return h, true
}

// maxCPUMaps bounds cache.cpuMaps for a cache of hosts hosts.
func maxCPUMaps(hosts int) int { return 2*hosts + 64 }

// unindex removes the instance host/id from the indexes.
func (c *cache) unindex(host, id string) {
	d, ok := c.instances[host][id]
	if !ok {
		return
	}
	svc := d.Value.Service
	delete(c.byService[svc], id)
	if len(c.byService[svc]) == 0 {
		delete(c.byService, svc)
	}
	if c.where[id] == host {
		delete(c.where, id)
	}
	if c.moving[id] == host {
		delete(c.moving, id)
	}
	if old := d.Value.Replaces; old != "" && c.replacedBy[old][id] == host {
		delete(c.replacedBy[old], id)
		if len(c.replacedBy[old]) == 0 {
			delete(c.replacedBy, old)
		}
	}
}

func setNested[T any](m map[string]map[string]Doc[T], host, id string, val []byte, rev int64, deleted bool) {
	if deleted {
		delete(m[host], id)
		if len(m[host]) == 0 {
			delete(m, host)
		}
		return
	}
	v, ok := decode[T](val)
	if !ok {
		return
	}
	if m[host] == nil {
		m[host] = map[string]Doc[T]{}
	}
	m[host][id] = Doc[T]{v, rev}
}

func (c *cache) reindexAll() {
	for name := range c.hosts {
		c.reindex(name)
	}
}

// reindex keeps the schedulable index right for one host.
func (c *cache) reindex(name string) {
	h, ok := c.hosts[name]
	was := c.schedulable[name]
	if ok && hostState(h.Value, c.live[name], c.protocol) == "up" {
		c.schedulable[name] = true
	} else {
		delete(c.schedulable, name)
	}
	if was != c.schedulable[name] {
		c.schedMu.Lock()
		c.schedOrder = nil
		c.schedMu.Unlock()
	}
}

// schedNames is the schedulable hosts' names, sorted; shared, never
// changed in place.
func (c *cache) schedNames() []string {
	c.schedMu.Lock()
	defer c.schedMu.Unlock()
	if c.schedOrder == nil {
		c.schedOrder = slices.Sorted(maps.Keys(c.schedulable))
	}
	return c.schedOrder
}

// unschedulable is the hosts that may not take new work, by reason.
func (c *cache) unschedulable() map[string][]string {
	out := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(c.hosts)) {
		if c.schedulable[name] {
			continue
		}
		why := hostState(c.hosts[name].Value, c.live[name], c.protocol)
		out[why] = append(out[why], name)
	}
	return out
}

func (c *cache) views(names []string) []HostView {
	out := make([]HostView, 0, len(names))
	for _, name := range names {
		out = append(out, c.view(name))
	}
	return out
}

// view is host name's view (the zero registration when there is none).
func (c *cache) view(name string) HostView {
	h := c.hosts[name]
	a, ok := c.allocs[name]
	if !ok {
		a.Value = NewAlloc()
	}
	v := HostView{Host: h.Value, HostRev: h.Rev, Alloc: a.Value, AllocRev: a.Rev, Live: c.live[name], state: hostState(h.Value, c.live[name], c.protocol),
		DesiredBytes: c.hostSize[name]}
	if m, ok := c.metrics[name]; ok {
		v.Metrics = &m
	}
	return v
}

// host is host name's view, if it is registered.
func (c *cache) host(name string) (HostView, bool) {
	if _, ok := c.hosts[name]; !ok {
		return HostView{}, false
	}
	return c.view(name), true
}

// allHosts is every host's view, sorted by name.
func (c *cache) allHosts() []HostView { return c.views(slices.Sorted(maps.Keys(c.hosts))) }

func (c *cache) snapshot() Snapshot {
	snap := Snapshot{Rev: c.rev, Hosts: c.allHosts(), Instances: map[string][]InstanceView{}, Placement: c.placement}
	for h, ins := range c.instances {
		out := make([]InstanceView, 0, len(ins))
		for _, id := range slices.Sorted(maps.Keys(ins)) {
			out = append(out, c.instance(h, id))
		}
		snap.Instances[h] = out
	}
	return snap
}

// instance is the instance host/id with its status.
func (c *cache) instance(h, id string) InstanceView {
	d := c.instances[h][id]
	v := InstanceView{Instance: d.Value, Rev: d.Rev}
	if st, ok := c.statuses[h][id]; ok {
		stv := st.Value
		v.Status = &stv
	}
	return v
}

// instanceByID finds an instance by ID (the where index).
func (c *cache) instanceByID(id string) (InstanceView, bool) {
	h, ok := c.where[id]
	if !ok {
		return InstanceView{}, false
	}
	return c.instance(h, id), true
}

// instancesOn is host's instances ("": all), sorted by host then ID.
func (c *cache) instancesOn(host string) []InstanceView {
	var out []InstanceView
	hosts := []string{host}
	n := len(c.instances[host])
	if host == "" {
		hosts = slices.Sorted(maps.Keys(c.instances))
		n = len(c.where)
	}
	if n > 0 {
		out = make([]InstanceView, 0, n) // one copy of each view, not the doublings of append
	}
	for _, h := range hosts {
		for _, id := range slices.Sorted(maps.Keys(c.instances[h])) {
			out = append(out, c.instance(h, id))
		}
	}
	return out
}

// movingInstances is the moves in flight, sorted by host then ID.
func (c *cache) movingInstances() []InstanceView {
	ids := slices.Collect(maps.Keys(c.moving))
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(c.moving[a], c.moving[b]), cmp.Compare(a, b)) })
	out := make([]InstanceView, 0, len(ids))
	for _, id := range ids {
		out = append(out, c.instance(c.moving[id], id))
	}
	return out
}

// replacements is the instances that replace id (moves in flight), from
// the replacedBy index, sorted by host then ID.
func (c *cache) replacements(id string) []InstanceView {
	var out []InstanceView
	for nid, h := range c.replacedBy[id] {
		out = append(out, c.instance(h, nid))
	}
	sortInstances(out)
	return out
}

// serviceInstances is a service's instances from the service index,
// sorted by host then ID.
func (c *cache) serviceInstances(service string) []InstanceView {
	ids := c.byService[service]
	out := make([]InstanceView, 0, len(ids))
	for id, h := range ids {
		out = append(out, c.instance(h, id))
	}
	sortInstances(out)
	return out
}

// deriveWholeCores gives every usage document without whole-cores marks
// those its host's instances imply (upgrade.go), and returns the hosts
// whose usage it changed, sorted.
func (c *cache) deriveWholeCores() []string {
	var changed []string
	for _, host := range slices.Sorted(maps.Keys(c.allocs)) {
		if deriveMarks(c.allocs, c.instances, host) {
			changed = append(changed, host)
		}
	}
	return changed
}
