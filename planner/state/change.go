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
type Change struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
}

func (c *Change) guard(key string, rev int64) {
	c.cmps = append(c.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
}

func (c *Change) put(key string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("state: marshal %s: %v", key, err)) // our own types always marshal
	}
	c.ops = append(c.ops, clientv3.OpPut(key, string(b)))
}

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
func (c *Change) PutAlloc(host string, a Alloc) { c.put(AllocKey(host), a) }

// PutInstance writes a desired instance.
func (c *Change) PutInstance(in model.Instance) { c.put(InstanceKey(in.Host, in.ID), in) }

// PutService writes a service spec.
func (c *Change) PutService(s Service) { c.put(ServiceKey(s.Name), s) }

// PutPlacement writes the cluster's placement settings.
func (c *Change) PutPlacement(ps placement.Settings) { c.put(PlacementKey, ps) }

// DeleteInstance removes a desired instance and its observed status.
func (c *Change) DeleteInstance(host, id string) {
	c.ops = append(c.ops, clientv3.OpDelete(InstanceKey(host, id)), clientv3.OpDelete(StatusKey(host, id)))
}

// DeleteService removes a service spec.
func (c *Change) DeleteService(name string) {
	c.ops = append(c.ops, clientv3.OpDelete(ServiceKey(name)))
}

// DeleteHost removes a host's registration, usage and heartbeat.
func (c *Change) DeleteHost(name string) {
	c.ops = append(c.ops, clientv3.OpDelete(HostKey(name)), clientv3.OpDelete(AllocKey(name)), clientv3.OpDelete(LiveKey(name)))
}

// Len is the number of writes.
func (c *Change) Len() int { return len(c.ops) }
