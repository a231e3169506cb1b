package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pinfold/pinfold/planner/model"
)

// Memory is a store held in this process alone: the same cache, engine-view
// memo and reads as Store (replica), with its keys, their revisions and the
// checks of a commit's guards kept here instead of in etcd. Each write is
// applied to the cache before it returns, as a Store's commit waits for its
// watch to deliver it. For tests of the service and anything else that
// needs the store's behaviour without an etcd: the contract tests
// (contract_test.go) hold both to the same answers.
//
// What it does not do: nothing survives the process; there is one planner
// (Lead is won by one caller at a time, with no session to lose); a
// heartbeat has no lease and never expires by itself (ExpireLive ends it);
// a commit is never too large (etcd's --max-txn-ops and request limit are
// not modelled) and its answer is never lost.
type Memory struct {
	replica
	commitObserver
	cfg Config
	id  string // names this store's events (NewEventID)

	// kmu serialises writes: kv, rev and the cache's feed, in one order.
	kmu    sync.Mutex
	kv     map[string]memValue
	rev    int64
	closed bool
	// leading holds a token while a Lead runs.
	leading chan struct{}
}

// memValue is a key's value and revisions, as etcd keeps them.
type memValue struct {
	val         []byte
	create, mod int64
}

// memOp is one write: a put, or the deletion of one key (val nil).
type memOp struct {
	key string
	val []byte
}

// errClosed is why a closed Memory refuses a write.
var errClosed = errors.New("state: the in-memory store is closed")

// NewMemory is an empty in-memory store with the planner config cfg, for a
// planner speaking agent protocol protocol.
func NewMemory(cfg Config, protocol int) (*Memory, error) {
	if err := cfg.Params().Validate(); err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	m := &Memory{cfg: cfg, id: hex.EncodeToString(id[:]), kv: map[string]memValue{}, leading: make(chan struct{}, 1)}
	m.init(protocol)
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("state: planner config: %w", err)
	}
	m.kmu.Lock()
	m.writeLocked([]memOp{{ConfigKey, b}})
	m.kmu.Unlock()
	return m, nil
}

// Config is the planner-wide configuration.
func (m *Memory) Config() Config { return m.cfg }

// Close ends the store: later writes fail, waiters return.
func (m *Memory) Close() {
	m.kmu.Lock()
	m.closed = true
	m.kmu.Unlock()
	m.stop(errClosed)
}

// writeLocked applies ops as one revision (none when nothing changes: a
// deletion of a key that does not exist, as in etcd), feeds the cache and
// returns the revision; the caller holds kmu.
func (m *Memory) writeLocked(ops []memOp) int64 {
	next := m.rev + 1
	type applied struct {
		memOp
		deleted bool
	}
	var done []applied
	for _, op := range ops {
		old, had := m.kv[op.key]
		switch {
		case op.val != nil:
			create := next
			if had {
				create = old.create
			}
			m.kv[op.key] = memValue{val: op.val, create: create, mod: next}
			done = append(done, applied{op, false})
		case had:
			delete(m.kv, op.key)
			done = append(done, applied{op, true})
		}
	}
	if len(done) == 0 {
		return m.rev
	}
	m.rev = next
	m.mu.Lock()
	for _, a := range done {
		m.apply(a.key, a.val, next, a.deleted)
	}
	m.c.rev = next
	m.changed.Broadcast()
	m.mu.Unlock()
	return next
}

// write is writeLocked taking kmu, refused once closed.
func (m *Memory) write(ctx context.Context, ops []memOp) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.kmu.Lock()
	defer m.kmu.Unlock()
	if m.closed {
		return 0, errClosed
	}
	return m.writeLocked(ops), nil
}

// Commit applies c if every guard holds (Store.Commit's contract): all its
// writes at one revision, seen by the cache before it returns. A guard
// that fails is ErrConflict; a leadership lost (GuardLeader, or ctx's) is
// ErrNotLeader, and ends that lead context.
func (m *Memory) Commit(ctx context.Context, c *Change) (rev int64, err error) {
	defer func() { m.observe(len(c.ops), err) }()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	leaders := c.leaders
	if l := LeaderOf(ctx); l != nil && !slices.Contains(leaders, l) {
		leaders = append(leaders[:len(leaders):len(leaders)], l)
	}
	ops := make([]memOp, len(c.ops))
	for i, op := range c.ops {
		switch {
		case op.IsPut():
			ops[i] = memOp{string(op.KeyBytes()), op.ValueBytes()}
			if ops[i].val == nil {
				ops[i].val = []byte{}
			}
		case op.IsDelete() && len(op.RangeBytes()) == 0:
			ops[i] = memOp{key: string(op.KeyBytes())}
		default:
			return 0, fmt.Errorf("state: in-memory commit: write %d on %q is neither a put nor a one-key delete", i, op.KeyBytes())
		}
	}
	m.kmu.Lock()
	defer m.kmu.Unlock()
	if m.closed {
		return 0, errClosed
	}
	for _, l := range leaders {
		if m.kv[l.key].create != l.rev {
			l.lose()
			return 0, ErrNotLeader
		}
	}
	for _, g := range c.guards {
		if m.kv[g.key].mod != g.rev {
			return 0, ErrConflict
		}
	}
	return m.writeLocked(ops), nil
}

// Heartbeat marks host live (Store.Heartbeat) with value (nil: the value
// it has while live, {} otherwise). There is no lease: the key stays until
// ExpireLive or DeleteHost removes it, whatever ttl.
func (m *Memory) Heartbeat(ctx context.Context, host string, value []byte, ttl time.Duration) error {
	if value == nil {
		if m.isLive(host) {
			return ctx.Err()
		}
		value = []byte("{}")
	}
	if _, err := m.write(ctx, []memOp{{LiveKey(host), value}}); err != nil {
		return fmt.Errorf("state: heartbeat of host %s: put %s: %w", host, LiveKey(host), err)
	}
	return nil
}

// ExpireLive deletes host's heartbeat: the host is down from the next
// revision.
func (m *Memory) ExpireLive(ctx context.Context, host string) error {
	if _, err := m.write(ctx, []memOp{{key: LiveKey(host)}}); err != nil {
		return fmt.Errorf("state: expire the heartbeat of host %s: %w", host, err)
	}
	return nil
}

// PutStatus records what a host's agent observed for one instance.
func (m *Memory) PutStatus(ctx context.Context, host, id string, st model.Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("state: status of %s: %w", id, err)
	}
	if _, err := m.write(ctx, []memOp{{StatusKey(host, id), b}}); err != nil {
		return fmt.Errorf("state: put %s: %w", StatusKey(host, id), err)
	}
	return nil
}

// Sync returns at once: every write is in the cache when it returns.
func (m *Memory) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.werr
}

// Lead runs lead once this caller holds the store's one leadership
// (Store.Lead's contract, with no session that can end): its context
// carries the Leadership, which fences the commits made with it.
func (m *Memory) Lead(ctx context.Context, id string, ttl time.Duration, lead func(context.Context) error) error {
	select {
	case m.leading <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("state: campaign for %s: %w", ElectionKey, ctx.Err())
	}
	defer func() { <-m.leading }()
	key := ElectionKey + "/" + m.id
	b, _ := json.Marshal(id)
	m.kmu.Lock()
	if m.closed {
		m.kmu.Unlock()
		return fmt.Errorf("state: campaign for %s: %w", ElectionKey, errClosed)
	}
	rev := m.writeLocked([]memOp{{key, b}})
	m.kmu.Unlock()
	defer func() { _, _ = m.write(context.Background(), []memOp{{key: key}}) }()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lctx = context.WithValue(lctx, leadershipKey{}, &Leadership{key: key, rev: rev, lose: cancel})
	err := lead(lctx)
	if ctx.Err() == nil && lctx.Err() != nil {
		return fmt.Errorf("state: lost the election session")
	}
	return err
}

// NewEventID is an event ID for time t from this store.
func (m *Memory) NewEventID(t time.Time, seq int64) string {
	return fmt.Sprintf("%020d-%s-%d", t.UnixNano(), m.id[:8], seq)
}

// PutEvents writes events, MaxEventsPerCommit to a revision.
func (m *Memory) PutEvents(ctx context.Context, evs []Event) error {
	for len(evs) > 0 {
		n := min(len(evs), MaxEventsPerCommit)
		ops := make([]memOp, 0, n)
		for _, ev := range evs[:n] {
			ev = ev.Clipped()
			b, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("state: event %s: %w", ev.ID, err)
			}
			ops = append(ops, memOp{eventKey(ev.ID), b})
		}
		if _, err := m.write(ctx, ops); err != nil {
			return fmt.Errorf("state: write %d events: %w", n, err)
		}
		evs = evs[n:]
	}
	return nil
}

// eventKeys is the keys of the events kept, oldest first.
func (m *Memory) eventKeys() []string {
	m.kmu.Lock()
	defer m.kmu.Unlock()
	var keys []string
	for k := range maps.Keys(m.kv) {
		if strings.HasPrefix(k, EventsPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Events is Store.Events: up to limit events after after that keep
// accepts, oldest first, reading at most scan of them.
func (m *Memory) Events(ctx context.Context, after string, limit, scan int, keep func(Event) bool) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("state: read events: %w", err)
	}
	keys := m.eventKeys()
	i := 0
	if after != "" {
		i, _ = slices.BinarySearch(keys, eventKey(after)+"\x00")
	}
	var out []Event
	for scanned := 0; i < len(keys) && scanned < scan && len(out) < limit; i++ {
		scanned++
		m.kmu.Lock()
		v, ok := m.kv[keys[i]]
		m.kmu.Unlock()
		var ev Event
		if !ok || json.Unmarshal(v.val, &ev) != nil {
			continue
		}
		if keep == nil || keep(ev) {
			out = append(out, ev)
		}
	}
	return out, nil
}

// LatestEvents is Store.LatestEvents: the newest limit events that keep
// accepts, oldest first, reading at most scan back from the newest.
func (m *Memory) LatestEvents(ctx context.Context, limit, scan int, keep func(Event) bool) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("state: read the newest events: %w", err)
	}
	keys := m.eventKeys()
	var out []Event
	for i, scanned := len(keys)-1, 0; i >= 0 && scanned < scan && len(out) < limit; i, scanned = i-1, scanned+1 {
		m.kmu.Lock()
		v, ok := m.kv[keys[i]]
		m.kmu.Unlock()
		var ev Event
		if !ok || json.Unmarshal(v.val, &ev) != nil {
			continue
		}
		if keep == nil || keep(ev) {
			out = append(out, ev)
		}
	}
	slices.Reverse(out)
	return out, nil
}

// PruneEvents is Store.PruneEvents: it deletes events older than before
// (zero: none by age) and the oldest beyond keep (0: no count limit).
func (m *Memory) PruneEvents(ctx context.Context, keep int, before time.Time) (int, error) {
	keys := m.eventKeys()
	n := 0
	if !before.IsZero() {
		n, _ = slices.BinarySearch(keys, EventsPrefix+fmt.Sprintf("%020d", before.UnixNano()))
	}
	if keep > 0 && len(keys)-n > keep {
		n = len(keys) - keep
	}
	if n == 0 {
		return 0, nil
	}
	ops := make([]memOp, n)
	for i, k := range keys[:n] {
		ops[i] = memOp{key: k}
	}
	if _, err := m.write(ctx, ops); err != nil {
		return 0, fmt.Errorf("state: prune %d events: %w", n, err)
	}
	return n, nil
}

// PruneRequests is Store.PruneRequests: it deletes the records of requests
// made before before and the oldest beyond MaxRequests.
func (m *Memory) PruneRequests(ctx context.Context, before time.Time) (int, error) {
	old := m.oldRequests(before)
	if len(old) == 0 {
		return 0, nil
	}
	ops := make([]memOp, len(old))
	for i, id := range old {
		ops[i] = memOp{key: RequestKey(id)}
	}
	if _, err := m.write(ctx, ops); err != nil {
		return 0, fmt.Errorf("state: prune %d request records made before %s: %w", len(old), before.Format(time.RFC3339), err)
	}
	return len(old), nil
}
