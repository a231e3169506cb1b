package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Doc is a cached document with its etcd revision.
type Doc[T any] struct {
	Value T
	Rev   int64 // ModRevision; 0 when the key does not exist
}

// Store caches the whole /pinfold/v1/ prefix from one etcd watch and commits
// changes with revision-guarded transactions.
type Store struct {
	cli *clientv3.Client
	log *slog.Logger
	cfg Config
	// failover moves the client off a member that stopped answering (nil:
	// one endpoint); reqTimeout bounds one attempt of a commit.
	failover   *failover
	reqTimeout time.Duration

	// replica is the cache the watch feeds; its reads are the store's.
	replica
	cancel context.CancelFunc
	done   chan struct{}

	leaseMu sync.Mutex
	leases  map[string]clientv3.LeaseID // host → its heartbeat lease

	// id names this store's commit marker; commits numbers its values.
	// commitMu lets one transaction at a time write the marker, so that a
	// later commit cannot overwrite it before a lost answer is read back.
	// markerRev is the marker's revision as this store last knew it (0:
	// none): every commit requires it, so a transaction whose answer was
	// lost can be made never to apply by moving the marker on (resolve).
	id        string
	commits   atomic.Int64
	commitMu  sync.Mutex
	markerRev int64

	commitObserver
}

// Commit outcomes, as ObserveCommits reports them.
const (
	CommitOK       = "ok"
	CommitConflict = "conflict"
	CommitTooLarge = "too_large"
	CommitError    = "error"
)

// ObserveCommits calls f after every commit with its number of writes and
// its outcome (CommitOK, CommitConflict, CommitTooLarge, CommitError): the
// planner's metrics. f must be quick and must not call the store.
func (o *commitObserver) ObserveCommits(f func(writes int, outcome string)) { o.observer.Store(&f) }

// commitObserver is who hears of every commit (ObserveCommits).
type commitObserver struct {
	observer atomic.Pointer[func(writes int, outcome string)]
}

func (o *commitObserver) observe(writes int, err error) {
	f := o.observer.Load()
	if f == nil {
		return
	}
	outcome := CommitOK
	switch {
	case errors.Is(err, ErrConflict):
		outcome = CommitConflict
	case errors.Is(err, ErrTooLarge):
		outcome = CommitTooLarge
	case err != nil:
		outcome = CommitError
	}
	(*f)(writes, outcome)
}

// Open connects to the etcd endpoints, loads the store, initialises or
// checks the planner config, and starts the watch. protocol is the agent
// protocol version this planner speaks. Close releases the connection.
func Open(ctx context.Context, d Dial, cfg Config, protocol int, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Params().Validate(); err != nil {
		return nil, err
	}
	cli, fo, err := newClient(d.Endpoints, d.TLS, log)
	if err != nil {
		return nil, fmt.Errorf("state: etcd client for %v: %w", d.Endpoints, err)
	}
	s, err := open(ctx, cli, cfg, protocol, log)
	if err != nil {
		cli.Close()
		if fo != nil {
			fo.stop()
		}
		return nil, err
	}
	s.failover = fo
	s.reqTimeout = d.RequestTimeout
	return s, nil
}

func open(ctx context.Context, cli *clientv3.Client, cfg Config, protocol int, log *slog.Logger) (*Store, error) {
	b, _ := json.Marshal(cfg)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(ConfigKey), "=", 0)).
		Then(clientv3.OpPut(ConfigKey, string(b))).Else(clientv3.OpGet(ConfigKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("state: initialise %s: %w", ConfigKey, err)
	}
	if !resp.Succeeded {
		var have Config
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || json.Unmarshal(kvs[0].Value, &have) != nil {
			return nil, fmt.Errorf("state: %s is unreadable", ConfigKey)
		}
		if have.ShareBase != cfg.ShareBase {
			return nil, fmt.Errorf("state: the store was created with share_base %d; this planner was started with %d", have.ShareBase, cfg.ShareBase)
		}
		cfg = have
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	s := &Store{cli: cli, log: log, cfg: cfg, done: make(chan struct{}), leases: map[string]clientv3.LeaseID{}, id: hex.EncodeToString(id[:])}
	s.init(protocol)
	kvs, rev, err := loadAll(ctx, cli)
	if err != nil {
		return nil, err
	}
	s.load(kvs, rev)
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.watch(wctx, rev+1)
	return s, nil
}

// Close stops the watch and closes the etcd connection.
func (s *Store) Close() {
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, _ = s.cli.Delete(ctx, s.markerKey()) // best effort: a marker left behind is one small key
	cancel()
	s.cli.Close()
	if s.failover != nil {
		s.failover.stop()
	}
}

// Config is the planner-wide configuration.
func (s *Store) Config() Config { return s.cfg }

func (s *Store) watch(ctx context.Context, from int64) {
	defer close(s.done)
	for {
		wc := s.cli.Watch(clientv3.WithRequireLeader(ctx), Prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())
		for wr := range wc {
			if err := wr.Err(); err != nil {
				s.log.Warn("store watch interrupted", "err", err)
				break
			}
			s.mu.Lock()
			for _, ev := range wr.Events {
				s.apply(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision, ev.Type == clientv3.EventTypeDelete)
			}
			s.c.rev = wr.Header.Revision
			from = s.c.rev + 1
			s.changed.Broadcast()
			s.mu.Unlock()
		}
		if ctx.Err() != nil {
			s.stop(ctx.Err())
			return
		}
		// Compacted or lost leader: reload everything and watch again.
		kvs, rev, err := loadAll(ctx, s.cli)
		if err != nil {
			s.log.Warn("store reload failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		s.mu.Lock()
		before := s.c.hostChange
		s.load(kvs, rev)
		// A reload may hide deletions: every host's watchers look again.
		for h := range before {
			s.c.hostChange[h] = s.c.rev
		}
		for h := range s.c.hostChange {
			s.c.hostChange[h] = s.c.rev
		}
		s.signalAll()
		from = s.c.rev + 1
		s.changed.Broadcast()
		s.mu.Unlock()
	}
}

// loadPage is how many keys one read of the initial load asks for: a host
// document with a 1,024-CPU topology is about 120 KiB, so a page stays well
// under the client's 64 MiB message limit (a 10,000-host store is about
// 150 MB, which one response cannot carry).
const loadPage = 200

// loadAll reads every key under Prefix at one revision, a page at a time,
// and returns them with that revision.
func loadAll(ctx context.Context, cli *clientv3.Client) ([]*mvccpb.KeyValue, int64, error) {
	var out []*mvccpb.KeyValue
	var rev int64
	key, end := Prefix, clientv3.GetPrefixRangeEnd(Prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(loadPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("state: load %s from %q (%d keys read): %w", Prefix, key, len(out), err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		out = append(out, resp.Kvs...)
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func decode[T any](b []byte) (T, bool) {
	var v T
	return v, json.Unmarshal(b, &v) == nil
}

// ErrTooLarge means etcd refused a commit as too large (more writes than
// its --max-txn-ops, or more bytes than its request limit): nothing of it
// applied.
var ErrTooLarge = errors.New("state: commit too large for etcd")

// ErrConflict means a compared document changed since it was read, or
// that a commit whose answer was lost did not apply: either way nothing of
// the change was written and the caller re-plans from the fresh cache.
var ErrConflict = errors.New("state: conflict: a host changed since it was read")

// Commit applies c in one transaction: if every guard holds, all its writes
// apply. On a conflict it waits until the cache has seen the newer state and
// returns ErrConflict, so the caller can re-plan from fresh state. On
// success it waits until the cache reflects the commit. A change fenced by
// a leadership (GuardLeader, or ctx's: LeaderOf) that is lost is not
// committed: ErrNotLeader.
//
// Every commit also writes this store's commit marker (a key of its own, a
// new value each time) and requires the marker to be at the revision this
// store last saw. An attempt gets Dial.RequestTimeout (and a millisecond
// per write). When etcd's answer is lost (a member stopped answering, a
// leader failed mid-request: "request timed out"), the outcome is unknown;
// Commit then resolves it (resolve): a transaction that moves the marker on
// if it is still where the lost one required it. Once that applies, the
// lost transaction did not and never will (a request held by a frozen
// member and delivered after it resumes fails its marker compare), and the
// same change is tried again through whichever member answers; if the
// marker holds the lost commit's value, it applied. Commits of one store
// write the marker one at a time. Only when etcd never answers before ctx
// ends is the outcome unknown (an error that is not ErrConflict).
func (s *Store) Commit(ctx context.Context, c *Change) (rev int64, err error) {
	defer func() { s.observe(len(c.ops), err) }()
	leaders := c.leaders
	if l := LeaderOf(ctx); l != nil && !slices.Contains(leaders, l) {
		leaders = append(leaders[:len(leaders):len(leaders)], l)
	}
	timeout := s.attemptTimeout(len(c.ops))
	s.commitMu.Lock()
	for attempt := 1; ; attempt++ {
		token := fmt.Sprintf("%s/%d", s.id, s.commits.Add(1))
		prev := s.markerRev
		resp, err := s.commitTxn(ctx, timeout, c, leaders, prev, token)
		switch {
		case errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge):
			s.commitMu.Unlock()
			return 0, fmt.Errorf("%w: %d writes: %w", ErrTooLarge, len(c.ops)+1, err) // refused whole: nothing applied
		case err != nil:
			rev, applied, rerr := s.resolve(ctx, len(c.ops), prev, token, err)
			switch {
			case rerr != nil:
				s.commitMu.Unlock()
				return 0, rerr
			case applied:
				s.commitMu.Unlock()
				if err := s.WaitRev(ctx, rev); err != nil {
					return 0, err
				}
				return rev, nil
			case attempt == maxCommitAttempts:
				s.commitMu.Unlock()
				return 0, fmt.Errorf("state: commit of %d writes not applied: etcd did not answer %d attempts (last: %w)", len(c.ops), attempt, err)
			}
			// Certainly not applied, and never will be: the same change
			// again, its guards as they were.
			timeout *= 2
			continue
		}
		if resp.Succeeded {
			s.markerRev = resp.Header.Revision
			s.commitMu.Unlock()
			if err := s.WaitRev(ctx, resp.Header.Revision); err != nil {
				return 0, err
			}
			return resp.Header.Revision, nil
		}
		s.markerRev = 0
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			s.markerRev = kvs[0].ModRevision // moved by a lost commit applied late
		}
		s.commitMu.Unlock()
		var lost *Leadership
		for i, l := range leaders {
			if kvs := resp.Responses[1+i].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != l.rev {
				lost = l
				break
			}
		}
		if lost != nil {
			s.log.Warn("leader work not committed: this planner no longer leads", "election_key", lost.key, "writes", len(c.ops))
			lost.lose()
			return 0, ErrNotLeader
		}
		if err := s.WaitRev(ctx, resp.Header.Revision); err != nil {
			return 0, err
		}
		return 0, ErrConflict
	}
}

// maxCommitAttempts bounds the attempts of one commit that etcd never
// answered but certainly did not apply.
const maxCommitAttempts = 8

// markerGuard turns off the marker compare (a test shows a lost commit
// applying late without it).
var markerGuard = true

// commitTxn sends one attempt of c: its guards, the leaderships' and the
// marker at prev; its writes and the marker set to token; else the marker
// and the leaders' election keys, read.
func (s *Store) commitTxn(ctx context.Context, timeout time.Duration, c *Change, leaders []*Leadership, prev int64, token string) (*clientv3.TxnResponse, error) {
	cmps := c.cmps()
	if markerGuard {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.markerKey()), "=", prev))
	}
	els := []clientv3.Op{clientv3.OpGet(s.markerKey())}
	for _, l := range leaders {
		cmps = append(cmps, l.cmp())
		els = append(els, clientv3.OpGet(l.key))
	}
	ops := append(c.ops[:len(c.ops):len(c.ops)], clientv3.OpPut(s.markerKey(), token))
	actx, cancel := s.attemptContext(ctx, timeout)
	defer cancel()
	return s.cli.Txn(actx).If(cmps...).Then(ops...).Else(els...).Commit()
}

// attemptTimeout bounds one attempt of a commit of writes writes.
func (s *Store) attemptTimeout(writes int) time.Duration {
	t := s.reqTimeout
	if t <= 0 {
		t = DefaultRequestTimeout
	}
	return t + time.Duration(writes)*time.Millisecond
}

// attemptContext is ctx bounded by timeout (unbounded: an unguarded
// client, the tests' control run).
func (s *Store) attemptContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if unguarded.Load() {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// markerKey is this store's commit marker.
func (s *Store) markerKey() string { return CommitsPrefix + s.id }

// resolve finds out whether a commit whose answer was lost (it required
// the marker at prev and set it to token) applied: it moves the marker on
// if it is still at prev, through whichever member answers, until one
// does or ctx ends. Moved: the commit did not apply and never will
// (applied false). Not at prev: the marker holding token means it applied
// (its revision), anything else that it did not. The caller holds
// commitMu.
func (s *Store) resolve(ctx context.Context, writes int, prev int64, token string, cause error) (rev int64, applied bool, err error) {
	void := token + "/void"
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		actx, cancel := s.attemptContext(ctx, s.attemptTimeout(0))
		resp, err := s.cli.Txn(actx).If(clientv3.Compare(clientv3.ModRevision(s.markerKey()), "=", prev)).
			Then(clientv3.OpPut(s.markerKey(), void)).Else(clientv3.OpGet(s.markerKey())).Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				s.markerRev = resp.Header.Revision
				s.log.Warn("commit answer lost; it did not apply and never will", "writes", writes, "err", cause)
				return 0, false, nil
			}
			s.markerRev = 0
			var have string
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
				s.markerRev, have = kvs[0].ModRevision, string(kvs[0].Value)
			}
			applied := have == token
			s.log.Warn("commit answer lost; outcome read back", "writes", writes, "applied", applied, "err", cause)
			if applied {
				return s.markerRev, true, nil
			}
			// Another value (this resolve's own move, its answer lost
			// too): the commit required prev and cannot apply.
			return 0, false, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, fmt.Errorf("state: commit %d writes: %w (outcome unknown: etcd did not answer again before %v)", writes, cause, ctx.Err())
		case <-time.After(wait):
		}
	}
}
