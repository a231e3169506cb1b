package state

import (
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// Change is a set of writes committed all or nothing, guarded by the
// revisions its plan was read at: Commit applies it only if every guarded
// document is still at its revision (0: the document must not exist).
// The zero value is an empty change.
//
// A key is written at most once: a later write of the same key replaces the
// earlier one (etcd refuses a transaction that names a key twice), which is
// what merging the changes of several requests into one commit needs. The
// writes to allocations, instances and services are also kept as values, so
// that Pending can show them to the next request before they commit.
type Change struct {
	guards []guardRev
	seen   map[guardRev]bool
	ops    []clientv3.Op
	at     map[string]int // key → index in ops

	allocs    map[string]Alloc
	instances map[string]pendingInstance // id → the write
	services  map[string]*Service        // nil: deleted
	requests  map[string]Request         // request ID → its record

	leaders []*Leadership // GuardLeader
}

// pendingInstance is an instance written (in != nil) or deleted by a change.
type pendingInstance struct {
	host string
	in   *model.Instance
}

// guardRev is one guard: key must be at revision rev. Two guards of one key
// at different revisions both stay (the commit then fails, as it must: two
// requests read the key at different revisions).
type guardRev struct {
	key string
	rev int64
}

func (c *Change) guard(key string, rev int64) {
	g := guardRev{key, rev}
	if c.seen[g] {
		return
	}
	if c.seen == nil {
		c.seen = map[guardRev]bool{}
	}
	c.seen[g] = true
	c.guards = append(c.guards, g)
}

// cmps are the guards as etcd compares.
func (c *Change) cmps() []clientv3.Cmp {
	out := make([]clientv3.Cmp, len(c.guards))
	for i, g := range c.guards {
		out[i] = clientv3.Compare(clientv3.ModRevision(g.key), "=", g.rev)
	}
	return out
}

func (c *Change) op(key string, op clientv3.Op) {
	if i, ok := c.at[key]; ok {
		c.ops[i] = op
		return
	}
	if c.at == nil {
		c.at = map[string]int{}
	}
	c.at[key] = len(c.ops)
	c.ops = append(c.ops, op)
}

func (c *Change) put(key string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("state: marshal %s: %v", key, err)) // our own types always marshal
	}
	c.op(key, clientv3.OpPut(key, string(b)))
}

func (c *Change) del(key string) { c.op(key, clientv3.OpDelete(key)) }

// GuardHost makes the change depend on the host document's revision.
func (c *Change) GuardHost(host string, rev int64) { c.guard(HostKey(host), rev) }

// GuardAlloc makes the change depend on the host's usage document.
func (c *Change) GuardAlloc(host string, rev int64) { c.guard(AllocKey(host), rev) }

// GuardView guards both documents of a host view: its registration and usage.
func (c *Change) GuardView(v HostView) {
	c.GuardAlloc(v.Host.Name, v.AllocRev)
	c.GuardHost(v.Host.Name, v.HostRev)
}

// GuardInstance makes the change depend on an instance document.
func (c *Change) GuardInstance(host, id string, rev int64) { c.guard(InstanceKey(host, id), rev) }

// GuardService makes the change depend on a service document.
func (c *Change) GuardService(name string, rev int64) { c.guard(ServiceKey(name), rev) }

// PutHost writes a host's registration.
func (c *Change) PutHost(h Host) { c.put(HostKey(h.Name), h) }

// PutAlloc writes a host's usage.
func (c *Change) PutAlloc(host string, a Alloc) {
	c.put(AllocKey(host), a)
	if c.allocs == nil {
		c.allocs = map[string]Alloc{}
	}
	c.allocs[host] = a
}

// PutInstance writes a desired instance.
func (c *Change) PutInstance(in model.Instance) {
	c.put(InstanceKey(in.Host, in.ID), in)
	c.setInstance(in.ID, pendingInstance{host: in.Host, in: &in})
}

func (c *Change) setInstance(id string, p pendingInstance) {
	if c.instances == nil {
		c.instances = map[string]pendingInstance{}
	}
	c.instances[id] = p
}

// PutService writes a service spec.
func (c *Change) PutService(s Service) {
	c.put(ServiceKey(s.Name), s)
	c.setService(s.Name, &s)
}

func (c *Change) setService(name string, s *Service) {
	if c.services == nil {
		c.services = map[string]*Service{}
	}
	c.services[name] = s
}

// PutPlacement writes the cluster's placement settings.
func (c *Change) PutPlacement(ps placement.Settings) { c.put(PlacementKey, ps) }

// DeleteInstance removes a desired instance and its observed status.
func (c *Change) DeleteInstance(host, id string) {
	c.del(InstanceKey(host, id))
	c.del(StatusKey(host, id))
	c.setInstance(id, pendingInstance{host: host})
}

// DeleteService removes a service spec.
func (c *Change) DeleteService(name string) {
	c.del(ServiceKey(name))
	c.setService(name, nil)
}

// DeleteHost removes a host's registration, usage and heartbeat.
func (c *Change) DeleteHost(name string) {
	c.del(HostKey(name))
	c.del(AllocKey(name))
	c.del(LiveKey(name))
}

// Len is the number of writes.
func (c *Change) Len() int { return len(c.ops) }

// Merge adds o's guards and writes to c, o's writes replacing c's of the
// same key: committing the merged change is committing c, then o, in one
// transaction, when o was planned from what c leaves (see Pending).
func (c *Change) Merge(o *Change) {
	for _, g := range o.guards {
		c.guard(g.key, g.rev)
	}
	for _, l := range o.leaders {
		c.GuardLeader(l)
	}
	for _, op := range o.ops {
		c.op(string(op.KeyBytes()), op)
	}
	for h, a := range o.allocs {
		if c.allocs == nil {
			c.allocs = map[string]Alloc{}
		}
		c.allocs[h] = a
	}
	for id, p := range o.instances {
		c.setInstance(id, p)
	}
	for name, s := range o.services {
		c.setService(name, s)
	}
	for id, r := range o.requests {
		if c.requests == nil {
			c.requests = map[string]Request{}
		}
		c.requests[id] = r
	}
}
