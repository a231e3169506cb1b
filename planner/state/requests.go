package state

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Idempotent writes: a mutating call may carry a request ID. The change it
// commits writes a Request record under that ID in the same transaction,
// guarded to be the first (the key must not exist), so a repeat of the ID,
// from the same planner or another, finds the record and returns the
// first outcome instead of changing anything again. Records live in the
// cache like every document under Prefix and are pruned by the leader
// after RequestTTL.

// RequestsPrefix holds the request records.
const RequestsPrefix = Prefix + "requests/"

// RequestTTL is how long a request ID is remembered.
const RequestTTL = 24 * time.Hour

// RequestKey is the key of request id's record.
func RequestKey(id string) string { return RequestsPrefix + id }

// Request is what a committed request did, enough to answer a repeat.
type Request struct {
	// Method is the API method that committed it ("Deploy", "Resize", …):
	// an ID repeated with another method is refused.
	Method string    `json:"method"`
	Time   time.Time `json:"time"`
	// Digest identifies the request's content: a repeat of the ID with
	// other content is refused.
	Digest string `json:"digest,omitempty"`
	// Instances are the instances it created or changed; Removed those it
	// removed.
	Instances []string `json:"instances,omitempty"`
	Removed   []string `json:"removed,omitempty"`
}

// PutRequest records request id in the change, guarded to be its first
// record. A second PutRequest of the same ID in one change replaces the
// first (Pending.Request lets a plan see it and not make one).
func (c *Change) PutRequest(id string, r Request) {
	key := RequestKey(id)
	c.guard(key, 0)
	c.put(key, r)
	if c.requests == nil {
		c.requests = map[string]Request{}
	}
	c.requests[id] = r
}

// Request returns request id's record, committed or pending.
func (p *Pending) Request(id string) (Request, bool) {
	if r, ok := p.c.requests[id]; ok {
		return r, true
	}
	return p.base.Request(id)
}

// MaxRequests bounds the request records kept: past it the oldest go
// first, whatever their age (a flood of distinct IDs cannot grow etcd or
// the cache for a whole RequestTTL).
const MaxRequests = 100_000

// maxRequests is MaxRequests (lowered by a test).
var maxRequests = MaxRequests

// PruneRequests deletes the records of requests made before before and
// the oldest beyond MaxRequests, at most 128 in a transaction, and reports
// how many it deleted.
func (s *Store) PruneRequests(ctx context.Context, before time.Time) (int, error) {
	old := s.oldRequests(before)
	deleted := 0
	for len(old) > 0 {
		n := min(len(old), 128)
		ops := make([]clientv3.Op, n)
		for i, id := range old[:n] {
			ops[i] = clientv3.OpDelete(RequestKey(id))
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return deleted, fmt.Errorf("state: prune %d request records made before %s: %w", n, before.Format(time.RFC3339), err)
		}
		deleted += n
		old = old[n:]
	}
	return deleted, nil
}

// oldRequests is the IDs of the records PruneRequests deletes: those made
// before before and the oldest beyond maxRequests, oldest first.
func (s *replica) oldRequests(before time.Time) []string {
	s.mu.RLock()
	type rec struct {
		id string
		at time.Time
	}
	all := make([]rec, 0, len(s.c.requests))
	for id, d := range s.c.requests {
		all = append(all, rec{id, d.Value.Time})
	}
	s.mu.RUnlock()
	slices.SortFunc(all, func(a, b rec) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	var old []string
	for i, r := range all {
		if r.at.Before(before) || len(all)-i > maxRequests {
			old = append(old, r.id)
		}
	}
	return old
}
