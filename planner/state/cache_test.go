package state

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// kv is one key as the watch delivers it: its value (nil: deleted).
type kv struct {
	key string
	val any
}

// del is the deletion of key.
func del(key string) kv { return kv{key: key} }

// feed applies kvs to c at revisions 1, 2, … after c.rev and returns the
// last effect.
func feed(t *testing.T, c *cache, kvs ...kv) effect {
	t.Helper()
	var e effect
	for _, x := range kvs {
		c.rev++
		if x.val == nil {
			e = c.apply(x.key, nil, c.rev, true)
			continue
		}
		b, ok := x.val.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(x.val); err != nil {
				t.Fatal(err)
			}
		}
		e = c.apply(x.key, b, c.rev, false)
	}
	return e
}

func testHost(name string) Host {
	return Host{Name: name, Topology: topologytest.Laptop().Topology(), CPUs: map[cpuset.CPUID]int{0: 100, 1: 100}, MemoryBytes: 1 << 30}
}

func testInstance(host, id, svc string) model.Instance {
	return model.Instance{ID: id, Host: host, Service: svc}
}

func TestCache_HostState(t *testing.T) {
	agent := func(h Host, protocol int) Host { h.Agent, h.Protocol = true, protocol; return h }
	disabled := testHost("h")
	disabled.Disabled = true
	maint := testHost("h")
	maint.MaintenanceUntil = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		host  Host
		live  bool
		state string // HostView.State
	}{
		{"by hand, no heartbeat", testHost("h"), false, "up"},
		{"agent, live", agent(testHost("h"), model.Protocol), true, "up"},
		{"agent, no heartbeat", agent(testHost("h"), model.Protocol), false, "down"},
		{"agent of another protocol, live", agent(testHost("h"), model.Protocol+1), true, "protocol"},
		{"disabled, live", agent(disabled, model.Protocol), true, "disabled"},
		{"maintenance, live", agent(maint, model.Protocol), true, "maintenance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(model.Protocol)
			feed(t, c, kv{HostKey("h"), tt.host})
			if tt.live {
				feed(t, c, kv{LiveKey("h"), Metrics{Load1: 2}})
			}
			v, ok := c.host("h")
			if !ok || v.State() != tt.state {
				t.Fatalf("host(h) = state %q (found %v), want %q", v.State(), ok, tt.state)
			}
			up := tt.state == "up"
			if got := slices.Contains(c.schedNames(), "h"); got != up {
				t.Errorf("schedNames() = %v; h in it %v, want %v", c.schedNames(), got, up)
			}
			if got := c.unschedulable()[tt.state]; up == slices.Contains(got, "h") {
				t.Errorf("unschedulable() = %v, want h under %q: %v", c.unschedulable(), tt.state, !up)
			}
			if tt.live && (v.Metrics == nil || v.Metrics.Load1 != 2) {
				t.Errorf("host(h).Metrics = %+v, want the heartbeat's (load1 2)", v.Metrics)
			}
		})
	}
}

func TestCache_SchedulableFollowsHeartbeat(t *testing.T) {
	h := testHost("h1")
	h.Agent, h.Protocol = true, model.Protocol
	tests := []struct {
		name string
		kvs  []kv
		want []string
	}{
		{"registered, no heartbeat", []kv{{HostKey("h1"), h}}, []string{}},
		{"heartbeat", []kv{{HostKey("h1"), h}, {LiveKey("h1"), Metrics{}}}, []string{"h1"}},
		{"heartbeat before registration", []kv{{LiveKey("h1"), Metrics{}}, {HostKey("h1"), h}}, []string{"h1"}},
		{"heartbeat expired", []kv{{HostKey("h1"), h}, {LiveKey("h1"), Metrics{}}, del(LiveKey("h1"))}, []string{}},
		{"host deleted", []kv{{HostKey("h1"), h}, {LiveKey("h1"), Metrics{}}, del(HostKey("h1"))}, []string{}},
		{"by hand beside", []kv{{HostKey("h1"), h}, {HostKey("h0"), testHost("h0")}}, []string{"h0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(model.Protocol)
			feed(t, c, tt.kvs...)
			if got := c.schedNames(); !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("schedNames() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCache_InstanceIndexes(t *testing.T) {
	moved := testInstance("h2", "b", "web")
	moved.Replaces = "a"
	type want struct {
		web, db []string // serviceInstances' IDs
		where   map[string]string
		moving  []string
		onH1    []string // instancesOn("h1")'s IDs
	}
	tests := []struct {
		name string
		kvs  []kv
		want want
	}{
		{"one", []kv{{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}},
			want{web: []string{"a"}, where: map[string]string{"a": "h1"}, onH1: []string{"a"}}},
		{"service changed", []kv{{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}, {InstanceKey("h1", "a"), testInstance("h1", "a", "db")}},
			want{db: []string{"a"}, where: map[string]string{"a": "h1"}, onH1: []string{"a"}}},
		{"deleted", []kv{{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}, del(InstanceKey("h1", "a"))},
			want{where: map[string]string{}}},
		{"move in flight", []kv{{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}, {InstanceKey("h2", "b"), moved}},
			want{web: []string{"a", "b"}, where: map[string]string{"a": "h1", "b": "h2"}, moving: []string{"b"}, onH1: []string{"a"}}},
		{"move done", []kv{{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}, {InstanceKey("h2", "b"), moved},
			del(InstanceKey("h1", "a")), {InstanceKey("h2", "b"), testInstance("h2", "b", "web")}},
			want{web: []string{"b"}, where: map[string]string{"b": "h2"}}},
		{"undecodable value keeps the document", []kv{{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}, {InstanceKey("h1", "a"), []byte("{")}},
			want{web: []string{"a"}, where: map[string]string{"a": "h1"}, onH1: []string{"a"}}},
	}
	ids := func(vs []InstanceView) []string {
		out := []string{}
		for _, v := range vs {
			out = append(out, v.Instance.ID)
		}
		return out
	}
	orEmpty := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(model.Protocol)
			feed(t, c, tt.kvs...)
			if got := ids(c.serviceInstances("web")); !slices.Equal(got, orEmpty(tt.want.web)) {
				t.Errorf("serviceInstances(web) = %v, want %v", got, tt.want.web)
			}
			if got := ids(c.serviceInstances("db")); !slices.Equal(got, orEmpty(tt.want.db)) {
				t.Errorf("serviceInstances(db) = %v, want %v", got, tt.want.db)
			}
			if !maps.Equal(c.where, tt.want.where) {
				t.Errorf("where = %v, want %v", c.where, tt.want.where)
			}
			if got := ids(c.movingInstances()); !slices.Equal(got, orEmpty(tt.want.moving)) {
				t.Errorf("movingInstances() = %v, want %v", got, tt.want.moving)
			}
			if got := ids(c.instancesOn("h1")); !slices.Equal(got, orEmpty(tt.want.onH1)) {
				t.Errorf("instancesOn(h1) = %v, want %v", got, tt.want.onH1)
			}
			for id, h := range tt.want.where {
				if v, ok := c.instanceByID(id); !ok || v.Instance.Host != h {
					t.Errorf("instanceByID(%s) = %+v, %v; want it on %s", id, v.Instance, ok, h)
				}
			}
			// The pages' service order agrees with the index.
			var refs []string
			for _, r := range c.serviceOrder("web") {
				refs = append(refs, r.ID)
			}
			if !slices.Equal(orEmpty(refs), orEmpty(tt.want.web)) {
				t.Errorf("serviceOrder(web) = %v, want %v", refs, tt.want.web)
			}
		})
	}
}

func TestCache_Effects(t *testing.T) {
	tests := []struct {
		name string
		kv   kv
		want effect
	}{
		{"registration", kv{HostKey("h1"), testHost("h1")}, effect{host: "h1", engine: true, placed: true, marked: true}},
		{"usage", kv{AllocKey("h1"), NewAlloc()}, effect{host: "h1", engine: true, placed: true}},
		{"desired instance", kv{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}, effect{host: "h1", marked: true}},
		{"desired instance deleted", del(InstanceKey("h1", "a")), effect{host: "h1", marked: true}},
		{"observed status", kv{StatusKey("h1", "a"), model.Status{State: "running"}}, effect{}},
		{"heartbeat", kv{LiveKey("h1"), Metrics{}}, effect{host: "h1", placed: true}},
		{"heartbeat expired", del(LiveKey("h1")), effect{host: "h1", placed: true}},
		{"service", kv{ServiceKey("web"), Service{Name: "web"}}, effect{}},
		{"outside the prefix", kv{"/other/hosts/h1", testHost("h1")}, effect{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(model.Protocol)
			if got := feed(t, c, tt.kv); got != tt.want {
				t.Errorf("apply(%s) = %+v, want %+v", tt.kv.key, got, tt.want)
			}
		})
	}
}

// TestCache_WatchedRevisions: hostChange moves with a host's registration
// and its desired instances, not with its usage or statuses.
func TestCache_WatchedRevisions(t *testing.T) {
	tests := []struct {
		name  string
		kv    kv
		moves bool
	}{
		{"registration", kv{HostKey("h1"), testHost("h1")}, true},
		{"desired instance", kv{InstanceKey("h1", "a"), testInstance("h1", "a", "web")}, true},
		{"usage", kv{AllocKey("h1"), NewAlloc()}, false},
		{"status", kv{StatusKey("h1", "a"), model.Status{}}, false},
		{"heartbeat", kv{LiveKey("h1"), Metrics{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(model.Protocol)
			feed(t, c, kv{HostKey("h1"), testHost("h1")})
			before := c.hostChange["h1"]
			feed(t, c, tt.kv)
			if moved := c.hostChange["h1"] != before; moved != tt.moves {
				t.Errorf("hostChange[h1] %d → %d after %s: moved %v, want %v", before, c.hostChange["h1"], tt.kv.key, moved, tt.moves)
			}
		})
	}
}

func TestCache_HostPagesFollowTheSet(t *testing.T) {
	tests := []struct {
		name string
		kvs  []kv
		want []string
	}{
		{"added", []kv{{HostKey("b"), testHost("b")}, {HostKey("a"), testHost("a")}}, []string{"a", "b"}},
		{"removed", []kv{{HostKey("b"), testHost("b")}, {HostKey("a"), testHost("a")}, del(HostKey("a"))}, []string{"b"}},
		{"updated keeps", []kv{{HostKey("b"), testHost("b")}, {HostKey("b"), testHost("b")}}, []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(model.Protocol)
			feed(t, c, tt.kvs[0])
			c.hostsAfter("", 10) // builds the order the later keys must drop
			feed(t, c, tt.kvs[1:]...)
			var got []string
			for after, more := "", true; more; {
				var page []HostView
				page, more = c.hostsAfter(after, 1)
				for _, v := range page {
					got = append(got, v.Host.Name)
					after = v.Host.Name
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("hostsAfter a page at a time = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCache_TopologiesShared(t *testing.T) {
	c := newCache(model.Protocol)
	other := testHost("h3")
	other.Topology = topologytest.DualXeonGold6230().Topology()
	feed(t, c, kv{HostKey("h1"), testHost("h1")}, kv{HostKey("h2"), testHost("h2")}, kv{HostKey("h3"), other})
	h1, _ := c.host("h1")
	h2, _ := c.host("h2")
	h3, _ := c.host("h3")
	if h1.Host.Topology != h2.Host.Topology {
		t.Errorf("hosts h1 and h2 of one topology hold two copies")
	}
	if h1.Host.Topology == h3.Host.Topology {
		t.Errorf("hosts h1 and h3 of different topologies share one")
	}
}

func TestCache_DeriveWholeCores(t *testing.T) {
	whole := testInstance("h1", "a", "web")
	whole.WholeCores, whole.CPUs = true, map[cpuset.CPUID]int{0: 100, 4: 100}
	marked := NewAlloc()
	marked.WholeCores = map[cpuset.CPUID]int{1: 1}
	tests := []struct {
		name    string
		alloc   Alloc
		changed []string
		want    map[cpuset.CPUID]int
	}{
		{"old usage gets marks", NewAlloc(), []string{"h1"}, map[cpuset.CPUID]int{0: 1, 4: 1}},
		{"marks kept", marked, nil, map[cpuset.CPUID]int{1: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCache(model.Protocol)
			feed(t, c, kv{AllocKey("h1"), tt.alloc}, kv{InstanceKey("h1", "a"), whole})
			if got := c.deriveWholeCores(); !slices.Equal(got, tt.changed) {
				t.Errorf("deriveWholeCores() = %v, want %v", got, tt.changed)
			}
			if got := c.allocs["h1"].Value.WholeCores; !maps.Equal(got, tt.want) {
				t.Errorf("usage's whole-cores marks = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCache_HostCPUMapsInterned: hosts of one capacity share one decoded
// CPU map (10,000 identical hosts held 10,000 copies, 50 MiB), a host of
// another capacity has its own, and the table stays bounded while hosts'
// capacities change one by one.
func TestCache_HostCPUMapsInterned(t *testing.T) {
	c := newCache(model.Protocol)
	other := testHost("h3")
	other.CPUs = map[cpuset.CPUID]int{0: 100}
	feed(t, c, kv{HostKey("h1"), testHost("h1")}, kv{HostKey("h2"), testHost("h2")}, kv{HostKey("h3"), other})
	same := func(a, b string) bool {
		x, y := c.hosts[a].Value.CPUs, c.hosts[b].Value.CPUs
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	if !same("h1", "h2") {
		t.Error("two hosts of one capacity hold two maps, want one")
	}
	if same("h1", "h3") || len(c.hosts["h3"].Value.CPUs) != 1 || c.hosts["h1"].Value.CPUs[1] != 100 {
		t.Errorf("h3 (one CPU) = %v beside h1 = %v", c.hosts["h3"].Value.CPUs, c.hosts["h1"].Value.CPUs)
	}
	for i := range 1000 {
		h := testHost("h1")
		h.CPUs = map[cpuset.CPUID]int{0: 100 + i%900, 1: i}
		feed(t, c, kv{HostKey("h1"), h})
		if n := len(c.cpuMaps); n > maxCPUMaps(len(c.hosts)) {
			t.Fatalf("after %d capacity changes the table holds %d maps, want at most %d", i+1, n, maxCPUMaps(len(c.hosts)))
		}
	}
	if got := c.hosts["h1"].Value.CPUs; got[0] != 100+999%900 || got[1] != 999 {
		t.Errorf("h1 after its last change = %v", got)
	}
}
