package state

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// contractStore is what the contract tests hold Store and Memory to: the
// service's view of a store (planner/service.Store) and the few calls
// beside it that other callers make (the simulation's ExpireLive).
type contractStore interface {
	Config() Config
	Healthy() bool
	Rev() int64
	WaitRev(ctx context.Context, rev int64) error
	Sync(ctx context.Context) error
	Host(name string) (HostView, bool)
	Hosts() []HostView
	HostsAfter(after string, limit int) ([]HostView, bool)
	Instance(id string) (InstanceView, bool)
	Instances(host string) []InstanceView
	InstancesAfter(host, service string, after InstanceRef, limit int) ([]InstanceView, bool)
	ServiceInstances(service string) []InstanceView
	Moving() []InstanceView
	Service(name string) (Doc[Service], bool)
	Request(id string) (Request, bool)
	PlacementSettings() placement.Settings
	Schedulable() []HostView
	Unschedulable() map[string][]string
	SchedulablePlacement() *Placed
	Snapshot() Snapshot
	ReadFleet(fn func(Fleet))
	Pending() *Pending
	WatchHost(ctx context.Context, host string, send func(rev int64) error) error
	Commit(ctx context.Context, c *Change) (int64, error)
	Heartbeat(ctx context.Context, host string, value []byte, ttl time.Duration) error
	ExpireLive(ctx context.Context, host string) error
	PutStatus(ctx context.Context, host, id string, st model.Status) error
	Lead(ctx context.Context, id string, ttl time.Duration, lead func(context.Context) error) error
	NewEventID(t time.Time, seq int64) string
	PutEvents(ctx context.Context, evs []Event) error
	Events(ctx context.Context, after string, limit, scan int, keep func(Event) bool) ([]Event, error)
	LatestEvents(ctx context.Context, limit, scan int, keep func(Event) bool) ([]Event, error)
	PruneEvents(ctx context.Context, keep int, before time.Time) (int, error)
	PruneRequests(ctx context.Context, before time.Time) (int, error)
	ObserveCommits(f func(writes int, outcome string))
}

var (
	_ contractStore = (*Store)(nil)
	_ contractStore = (*Memory)(nil)
)

var contractConfig = Config{ShareBase: 100, MaxFragmentCores: -1}

// contractBackends are the stores the contract holds: each opens an empty
// store for one case.
func contractBackends(t *testing.T) []struct {
	name string
	open func(t *testing.T) contractStore
} {
	return []struct {
		name string
		open func(t *testing.T) contractStore
	}{
		{"etcd", etcdBackend(t)},
		{"memory", func(t *testing.T) contractStore {
			m, err := NewMemory(contractConfig, model.Protocol)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			return m
		}},
	}
}

// etcdBackend starts one embedded member for every case (started on first
// use): each case wipes the keys and opens a store of its own.
func etcdBackend(t *testing.T) func(t *testing.T) contractStore {
	var cu string
	return func(ct *testing.T) contractStore {
		ct.Helper()
		if cu == "" {
			pu := freeURL(t)
			cu = freeURL(t)
			e, err := StartEmbedded(EmbedConfig{Name: "c", Dir: filepath.Join(t.TempDir(), "etcd"), ClientURL: cu, PeerURL: pu, LogLevel: "fatal", UnsafeNoFsync: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu}, DialTimeout: 5 * time.Second})
		if err != nil {
			ct.Fatal(err)
		}
		defer cli.Close()
		ctx := context.Background()
		for _, p := range []string{Prefix, EventsPrefix} {
			if _, err := cli.Delete(ctx, p, clientv3.WithPrefix()); err != nil {
				ct.Fatal(err)
			}
		}
		s, err := Open(ctx, Dial{Endpoints: []string{cu}}, contractConfig, model.Protocol, nil)
		if err != nil {
			ct.Fatal(err)
		}
		ct.Cleanup(s.Close)
		return s
	}
}

// contractHost is a laptop-shaped host named name (an agent's when agent).
func contractHost(t *testing.T, name string, agent bool) Host {
	t.Helper()
	h, err := NewHost(name, topologytest.Laptop().Topology(), contractConfig, CapacitySettings{MemoryShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.Agent = agent
	if agent {
		h.Protocol = model.Protocol
	}
	return h
}

// mustCommit commits c and fails the test on an error.
func mustCommit(t *testing.T, st contractStore, c *Change) int64 {
	t.Helper()
	rev, err := st.Commit(context.Background(), c)
	if err != nil {
		t.Fatalf("Commit(%d writes) = %v", c.Len(), err)
	}
	return rev
}

// putHosts registers hosts by hand (guarded: new), in one commit.
func putHosts(t *testing.T, st contractStore, names ...string) int64 {
	t.Helper()
	var c Change
	for _, n := range names {
		c.GuardHost(n, 0)
		c.PutHost(contractHost(t, n, false))
	}
	return mustCommit(t, st, &c)
}

func contractInstance(host, id, svc string) model.Instance {
	return model.Instance{ID: id, Host: host, Service: svc, Spec: model.Spec{Image: "busybox"}}
}

// TestStoreContract runs one set of cases against the etcd-backed Store
// and the in-memory Memory: the same calls must give the same answers.
func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, st contractStore)
	}{
		{"a commit is in the cache when it returns", func(t *testing.T, st contractStore) {
			rev := putHosts(t, st, "h1")
			v, ok := st.Host("h1")
			if !ok || v.HostRev != rev || st.Rev() < rev {
				t.Fatalf("after a commit at %d: Host(h1) = rev %d, found %v; Rev() = %d", rev, v.HostRev, ok, st.Rev())
			}
			if v.AllocRev != 0 || v.Alloc.Used == nil {
				t.Errorf("Host(h1) without usage = %+v at %d, want an empty usage at revision 0", v.Alloc, v.AllocRev)
			}
		}},
		{"a stale guard conflicts and writes nothing", func(t *testing.T, st contractStore) {
			rev := putHosts(t, st, "h1")
			h := contractHost(t, "h1", false)
			h.Disabled = true
			var c Change
			c.GuardHost("h1", rev)
			c.PutHost(h)
			mustCommit(t, st, &c)
			var stale Change
			stale.GuardHost("h1", rev) // read before the change above
			stale.PutService(Service{Name: "web"})
			if _, err := st.Commit(ctx, &stale); !errors.Is(err, ErrConflict) || errors.Is(err, ErrNotLeader) {
				t.Fatalf("Commit guarded at a stale revision = %v, want ErrConflict", err)
			}
			if _, ok := st.Service("web"); ok {
				t.Errorf("the conflicting change's service was written")
			}
		}},
		{"guard 0: the document must not exist", func(t *testing.T, st contractStore) {
			putHosts(t, st, "h1")
			var c Change
			c.GuardHost("h1", 0)
			c.PutHost(contractHost(t, "h1", false))
			if _, err := st.Commit(ctx, &c); !errors.Is(err, ErrConflict) {
				t.Fatalf("Commit guarded new on an existing host = %v, want ErrConflict", err)
			}
		}},
		{"deleted documents leave the cache", func(t *testing.T, st contractStore) {
			putHosts(t, st, "h1", "h2")
			var c Change
			c.DeleteHost("h1")
			mustCommit(t, st, &c)
			if _, ok := st.Host("h1"); ok {
				t.Errorf("Host(h1) found after DeleteHost")
			}
			if got := names(st.Hosts()); !slices.Equal(got, []string{"h2"}) {
				t.Errorf("Hosts() = %v, want [h2]", got)
			}
		}},
		{"heartbeats make an agent's host schedulable", func(t *testing.T, st contractStore) {
			var c Change
			c.PutHost(contractHost(t, "h1", true))
			mustCommit(t, st, &c)
			if got := st.Unschedulable()["down"]; !slices.Equal(got, []string{"h1"}) {
				t.Fatalf("Unschedulable()[down] before a heartbeat = %v, want [h1]", got)
			}
			if err := st.Heartbeat(ctx, "h1", []byte(`{"load1":3}`), 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := st.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			v, _ := st.Host("h1")
			if got := names(st.Schedulable()); !slices.Equal(got, []string{"h1"}) || !v.Live || v.Metrics == nil || v.Metrics.Load1 != 3 {
				t.Fatalf("after a heartbeat: Schedulable() = %v, Host(h1) live %v metrics %+v; want [h1], live, load1 3", got, v.Live, v.Metrics)
			}
			if p := st.SchedulablePlacement(); len(p.Hosts) != 1 || p.Hosts[0].Name != "h1" || p.Hosts[0].LoadAvg != 3 {
				t.Errorf("SchedulablePlacement() = %d hosts, want h1 with load 3", len(p.Hosts))
			}
			if err := st.ExpireLive(ctx, "h1"); err != nil {
				t.Fatal(err)
			}
			if err := st.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := names(st.Schedulable()); len(got) != 0 {
				t.Errorf("after the heartbeat expired: Schedulable() = %v, want none", got)
			}
		}},
		{"a request ID commits once", func(t *testing.T, st contractStore) {
			first := Request{Method: "Deploy", Time: time.Unix(1000, 0).UTC(), Instances: []string{"a"}}
			var c Change
			c.PutRequest("r1", first)
			mustCommit(t, st, &c)
			var again Change
			again.PutRequest("r1", Request{Method: "Deploy", Time: time.Unix(2000, 0).UTC()})
			if _, err := st.Commit(ctx, &again); !errors.Is(err, ErrConflict) {
				t.Fatalf("a second commit of request r1 = %v, want ErrConflict", err)
			}
			if got, ok := st.Request("r1"); !ok || !got.Time.Equal(first.Time) || !slices.Equal(got.Instances, first.Instances) {
				t.Errorf("Request(r1) = %+v, %v; want the first %+v", got, ok, first)
			}
			n, err := st.PruneRequests(ctx, time.Unix(1500, 0))
			if err != nil || n != 1 {
				t.Fatalf("PruneRequests(before 1500) = %d, %v; want 1", n, err)
			}
			if err := st.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if _, ok := st.Request("r1"); ok {
				t.Errorf("Request(r1) found after it was pruned")
			}
		}},
		{"instances: indexes, statuses and moves", func(t *testing.T, st contractStore) {
			putHosts(t, st, "h1", "h2")
			moved := contractInstance("h2", "b", "web")
			moved.Replaces = "a"
			var c Change
			c.PutInstance(contractInstance("h1", "a", "web"))
			c.PutInstance(moved)
			c.PutInstance(contractInstance("h1", "c", "db"))
			mustCommit(t, st, &c)
			if err := st.PutStatus(ctx, "h1", "a", model.Status{State: "running"}); err != nil {
				t.Fatal(err)
			}
			if err := st.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if v, ok := st.Instance("a"); !ok || v.Status == nil || v.Status.State != "running" {
				t.Errorf("Instance(a) = %+v, %v; want its status running", v, ok)
			}
			if got := ids(st.ServiceInstances("web")); !slices.Equal(got, []string{"a", "b"}) {
				t.Errorf("ServiceInstances(web) = %v, want [a b]", got)
			}
			if got := ids(st.Instances("h1")); !slices.Equal(got, []string{"a", "c"}) {
				t.Errorf("Instances(h1) = %v, want [a c]", got)
			}
			if got := ids(st.Moving()); !slices.Equal(got, []string{"b"}) {
				t.Errorf("Moving() = %v, want [b]", got)
			}
			page, more := st.InstancesAfter("", "", InstanceRef{}, 2)
			rest, more2 := st.InstancesAfter("", "", InstanceRef{page[1].Instance.Host, page[1].Instance.ID}, 2)
			if got := append(ids(page), ids(rest)...); !slices.Equal(got, []string{"a", "c", "b"}) || !more || more2 {
				t.Errorf("InstancesAfter two at a time = %v (more %v, %v), want [a c b] (true, false)", got, more, more2)
			}
			snap := st.Snapshot()
			if snap.Rev != st.Rev() || len(snap.Hosts) != 2 || len(snap.Instances["h1"]) != 2 {
				t.Errorf("Snapshot() = rev %d, %d hosts, %d instances on h1; want rev %d, 2, 2", snap.Rev, len(snap.Hosts), len(snap.Instances["h1"]), st.Rev())
			}
			// ReadFleet reads what Snapshot copies: the same revision, hosts
			// in order, and each host's instances (in any order).
			calls := 0
			st.ReadFleet(func(f Fleet) {
				calls++
				var hosts []string
				for v := range f.Hosts() {
					hosts = append(hosts, v.Host.Name)
					var got []string
					for in := range f.Instances(v.Host.Name) {
						got = append(got, in.ID)
					}
					slices.Sort(got)
					if want := ids(snap.Instances[v.Host.Name]); !slices.Equal(got, want) {
						t.Errorf("ReadFleet: Instances(%s) = %v, want %v", v.Host.Name, got, want)
					}
				}
				if f.Rev() != snap.Rev || !slices.Equal(hosts, names(snap.Hosts)) || !reflect.DeepEqual(f.Placement(), snap.Placement) {
					t.Errorf("ReadFleet: rev %d, hosts %v, placement %+v; want %d, %v, %+v", f.Rev(), hosts, f.Placement(), snap.Rev, names(snap.Hosts), snap.Placement)
				}
			})
			if calls != 1 {
				t.Errorf("ReadFleet called its function %d times, want 1", calls)
			}
		}},
		{"hosts a page at a time", func(t *testing.T, st contractStore) {
			putHosts(t, st, "c", "a", "b")
			page, more := st.HostsAfter("", 2)
			rest, more2 := st.HostsAfter("b", 2)
			if got := append(names(page), names(rest)...); !slices.Equal(got, []string{"a", "b", "c"}) || !more || more2 {
				t.Errorf("HostsAfter two at a time = %v (more %v, %v), want [a b c] (true, false)", got, more, more2)
			}
		}},
		{"pending changes are seen before they commit", func(t *testing.T, st contractStore) {
			putHosts(t, st, "h1")
			p := st.Pending()
			var c Change
			c.PutInstance(contractInstance("h1", "a", "web"))
			p.Add(&c)
			if _, ok := p.Instance("a"); !ok {
				t.Errorf("Pending.Instance(a) not found after Add")
			}
			if _, ok := st.Instance("a"); ok {
				t.Errorf("Instance(a) found before its change committed")
			}
			mustCommit(t, st, p.Change())
			if _, ok := st.Instance("a"); !ok {
				t.Errorf("Instance(a) not found after the pending change committed")
			}
		}},
		{"events: written, read a page at a time, pruned", func(t *testing.T, st contractStore) {
			var evs []Event
			for i := range 5 {
				at := time.Unix(int64(1000+i), 0).UTC()
				evs = append(evs, Event{ID: st.NewEventID(at, 0), Time: at, Kind: "Deploy", Subject: fmt.Sprint("s", i), Outcome: "ok"})
			}
			if err := st.PutEvents(ctx, evs); err != nil {
				t.Fatal(err)
			}
			first, err := st.Events(ctx, "", 2, 100, nil)
			if err != nil || len(first) != 2 {
				t.Fatalf("Events(from the oldest, 2) = %d events, %v", len(first), err)
			}
			next, _ := st.Events(ctx, first[1].ID, 10, 100, func(ev Event) bool { return ev.Subject != "s3" })
			if got := subjects(append(first, next...)); !slices.Equal(got, []string{"s0", "s1", "s2", "s4"}) {
				t.Errorf("Events two, then the rest but s3 = %v, want [s0 s1 s2 s4]", got)
			}
			latest, err := st.LatestEvents(ctx, 2, 100, func(ev Event) bool { return ev.Subject != "s4" })
			if got := subjects(latest); err != nil || !slices.Equal(got, []string{"s2", "s3"}) {
				t.Errorf("LatestEvents(2, but s4) = %v, %v; want [s2 s3], the newest two oldest first", got, err)
			}
			if few, _ := st.LatestEvents(ctx, 10, 2, nil); !slices.Equal(subjects(few), []string{"s3", "s4"}) {
				t.Errorf("LatestEvents(10, scanning 2) = %v, want [s3 s4]: the scan bound is the newest two", subjects(few))
			}
			n, err := st.PruneEvents(ctx, 2, time.Unix(1001, 0))
			if err != nil || n != 3 {
				t.Fatalf("PruneEvents(keep 2, before 1001) = %d, %v; want 3", n, err)
			}
			left, _ := st.Events(ctx, "", 10, 100, nil)
			if got := subjects(left); !slices.Equal(got, []string{"s3", "s4"}) {
				t.Errorf("events left = %v, want [s3 s4]", got)
			}
		}},
		{"a host's watcher hears of its changes", func(t *testing.T, st contractStore) {
			putHosts(t, st, "h1")
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			revs := make(chan int64, 16)
			done := make(chan error, 1)
			go func() { done <- st.WatchHost(wctx, "h1", func(rev int64) error { revs <- rev; return nil }) }()
			if rev := <-revs; rev != st.Rev() {
				t.Errorf("WatchHost's first revision = %d, want the cache's %d", rev, st.Rev())
			}
			var c Change
			c.PutInstance(contractInstance("h1", "a", "web"))
			at := mustCommit(t, st, &c)
			if rev := <-revs; rev < at {
				t.Errorf("WatchHost after an instance at %d: revision %d", at, rev)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("WatchHost after its context ended = %v, want context.Canceled", err)
			}
		}},
		{"a leadership fences commits, and ends with Lead", func(t *testing.T, st contractStore) {
			putHosts(t, st, "h1")
			var held *Leadership
			err := st.Lead(ctx, "p1", 5*time.Second, func(lctx context.Context) error {
				held = LeaderOf(lctx)
				var c Change
				c.PutService(Service{Name: "led"})
				_, err := st.Commit(lctx, &c)
				return err
			})
			if err != nil || held == nil {
				t.Fatalf("Lead = %v (leadership %v), want the fenced commit to apply", err, held)
			}
			var c Change
			c.GuardLeader(held)
			c.PutService(Service{Name: "late"})
			if _, err := st.Commit(ctx, &c); !errors.Is(err, ErrNotLeader) {
				t.Errorf("Commit fenced by a leadership given up = %v, want ErrNotLeader", err)
			}
			if _, ok := st.Service("late"); ok {
				t.Errorf("the change fenced by a leadership given up was written")
			}
		}},
		{"commits are observed with their outcome", func(t *testing.T, st contractStore) {
			var got []string
			st.ObserveCommits(func(writes int, outcome string) { got = append(got, outcome) })
			putHosts(t, st, "h1")
			var c Change
			c.GuardHost("h1", 0)
			c.PutHost(contractHost(t, "h1", false))
			_, _ = st.Commit(ctx, &c)
			if !slices.Equal(got, []string{CommitOK, CommitConflict}) {
				t.Errorf("observed outcomes = %v, want [ok conflict]", got)
			}
		}},
	}
	for _, b := range contractBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, b.open(t)) })
			}
		})
	}
}

func names(vs []HostView) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Host.Name)
	}
	return out
}

func ids(vs []InstanceView) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Instance.ID)
	}
	return out
}

func subjects(evs []Event) []string {
	out := []string{}
	for _, ev := range evs {
		out = append(out, ev.Subject)
	}
	return out
}
