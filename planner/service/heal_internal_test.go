package service

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

const gib = int64(1) << 30

// healFixture is a planner over hosts registered by hand (always up), and
// a way to turn one into an agent's host whose agent is gone (down).
type healFixture struct {
	*Service
	t   *testing.T
	ctx context.Context
}

func newHealFixture(t *testing.T, hosts ...string) healFixture {
	t.Helper()
	st := memStore(t, state.Config{ShareBase: 100, MaxFragmentCores: -1})
	f := healFixture{New(st, nil), t, context.Background()}
	for _, h := range hosts {
		if _, err := f.RegisterHost(f.ctx, RegisterHostRequest{Name: h, Topology: topologytest.Laptop().Topology(), // 8 CPUs, 16 GiB
			Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// dies re-registers host as its agent's, which never heartbeats: down.
func (f healFixture) dies(host string) {
	f.t.Helper()
	if _, err := f.RegisterHost(f.ctx, RegisterHostRequest{Name: host, Topology: topologytest.Laptop().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}, Agent: true, Protocol: model.Protocol}); err != nil {
		f.t.Fatal(err)
	}
	if v, _ := f.Host(host); v.State() != "down" {
		f.t.Fatalf("host %s is %s, want down", host, v.State())
	}
}

// agent re-registers host as its agent's, alive (a heartbeat with an
// 10-minute lease): its instances move blue-green.
func (f healFixture) agent(host string) {
	f.t.Helper()
	if _, err := f.RegisterHost(f.ctx, RegisterHostRequest{Name: host, Topology: topologytest.Laptop().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}, Agent: true, Protocol: model.Protocol}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.Heartbeat(f.ctx, host, "test", model.Protocol, 10*time.Minute, nil); err != nil {
		f.t.Fatal(err)
	}
	f.sync()
	if v, _ := f.Host(host); v.State() != "up" {
		f.t.Fatalf("host %s is %s, want up", host, v.State())
	}
}

func (f healFixture) set(host string, enabled bool) {
	f.t.Helper()
	if _, err := f.SetEnabled(f.ctx, host, enabled); err != nil {
		f.t.Fatal(err)
	}
}

// deployOn deploys r with only host enabled among all.
func (f healFixture) deployOn(host string, all []string, r DeployRequest) []model.Instance {
	f.t.Helper()
	for _, h := range all {
		f.set(h, h == host)
	}
	res, err := f.DeployWithRules(f.ctx, r)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, h := range all {
		f.set(h, true)
	}
	return res.Instances
}

// sync waits for the cache to hold every write so far (status reports
// are not read back by the writer).
func (f healFixture) sync() {
	f.t.Helper()
	if err := f.st.Sync(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

func (f healFixture) on(host string) []model.Instance {
	var out []model.Instance
	for _, v := range f.st.Instances(host) {
		out = append(out, v.Instance)
	}
	return out
}

func (f healFixture) verify() {
	f.t.Helper()
	if bad := Verify(f.st, 100); len(bad) > 0 {
		f.t.Fatalf("store invariants violated:\n%s", strings.Join(bad, "\n"))
	}
}

// TestHealAfterGrace: a dead host's instances are placed again on the other
// hosts once the grace has passed, with the same size and spec, through
// the service's rules (constraint, hard anti-affinity, max per host) and
// using the buffer; the dead host's usage is released. Before the grace, in
// maintenance, or with nowhere to go, nothing moves.
func TestHealAfterGrace(t *testing.T) {
	hosts := []string{"a", "b", "c"}
	web := DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "img:1", Command: []string{"sleep", "1"}}, Size: model.Size{Pieces: 150, Bind: true, Memory: gib, MemorySoft: gib / 2}}}
	for _, tc := range []struct {
		name  string
		setup func(f healFixture) DeployRequest
		want  map[string]int // instances of web per host after healing
	}{
		{"no rules: spread over the others", func(f healFixture) DeployRequest { return web }, map[string]int{"b": 1, "c": 1}},
		{"constraint: only the matching host", func(f healFixture) DeployRequest {
			for _, h := range []string{"a", "c"} {
				if _, err := f.SetHost(f.ctx, SetHostRequest{Name: h, SetProperties: map[string]placement.Value{"disk": placement.Str("ssd")}}); err != nil {
					t.Fatal(err)
				}
			}
			r := web
			r.Rules.Constraint = `disk == "ssd"`
			return r
		}, map[string]int{"c": 2}},
		{"hard anti-affinity: not beside db", func(f healFixture) DeployRequest {
			f.deployOn("b", hosts, DeployRequest{Service: "db", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "db"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
			r := web
			r.Rules.AntiAffinity.Hard = []string{"db"}
			return r
		}, map[string]int{"c": 2}},
		{"max per host 1: not beside the one on b", func(f healFixture) DeployRequest {
			r := web
			r.Count, r.MaxPerHost = 1, 1
			f.deployOn("b", hosts, r)
			return r
		}, map[string]int{"c": 1}},
		{"the buffer is used (normal placement could not)", func(f healFixture) DeployRequest {
			// b and c take 5.5 of 8 CPUs; a 0.5 buffer leaves 4 for normal
			// placement, the total 8 for replacing failed instances.
			for _, h := range []string{"b", "c"} {
				f.deployOn(h, hosts, DeployRequest{Service: "fill-" + h, Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "f"}, Size: model.Size{Pieces: 550, Bind: true, Memory: gib}}})
			}
			if _, err := f.SetPlacementSettings(f.ctx, placement.Settings{Buffer: map[string]float64{"cpu": 0.5}}); err != nil {
				t.Fatal(err)
			}
			r := web
			r.Count = 1
			return r
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHealFixture(t, hosts...)
			r := tc.setup(f)
			before := map[string]bool{}
			for _, h := range []string{"b", "c"} {
				for _, in := range f.on(h) {
					before[in.ID] = true
				}
			}
			old := f.deployOn("a", hosts, r)
			f.dies("a")
			if tc.name == "the buffer is used (normal placement could not)" {
				if _, err := f.Deploy(f.ctx, DeployRequest{Service: "probe", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "p"}, Size: model.Size{Pieces: 150, Bind: true, Memory: gib}}}); CodeOf(err) != Exhausted {
					t.Fatalf("a normal deploy of the same size = %v, want no room (the buffer holds)", err)
				}
			}
			tr := newTracker()
			t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			grace := f.st.PlacementSettings().Grace()
			f.tick(f.ctx, tr, t0)
			f.tick(f.ctx, tr, t0.Add(grace-time.Second))
			if got := len(f.on("a")); got != len(old) {
				t.Fatalf("before the grace: %d instances on a, want %d (nothing moved)", got, len(old))
			}
			f.tick(f.ctx, tr, t0.Add(grace))
			if got := f.on("a"); len(got) != 0 {
				t.Fatalf("after the grace: %v still on a", got)
			}
			per := map[string]int{}
			for _, h := range []string{"b", "c"} {
				for _, in := range f.on(h) {
					if in.Service != "web" || before[in.ID] {
						continue
					}
					per[h]++
					o := old[0]
					if in.Pieces() != o.Pieces() || in.Bind != o.Bind || in.Memory != o.Memory || in.MemorySoft != o.MemorySoft ||
						in.Image != o.Image || !slices.Equal(in.Command, o.Command) || in.Generation != 1 || slices.ContainsFunc(old, func(x model.Instance) bool { return x.ID == in.ID }) {
						t.Errorf("healed %+v, want a new instance like %+v", in, o)
					}
				}
			}
			for h, n := range tc.want {
				if per[h] != n {
					t.Errorf("web per host after healing = %v, want %v", per, tc.want)
					break
				}
			}
			if per["b"]+per["c"] != len(old) {
				t.Errorf("web per host after healing = %v, want %d in all", per, len(old))
			}
			if v, _ := f.Host("a"); v.Alloc.MemoryUsed != 0 || len(v.Alloc.Used) != 0 {
				t.Errorf("the dead host's usage after healing = %+v, want released", v.Alloc)
			}
			f.verify()
		})
	}
}

// TestHealWaitsAndStays: a host in maintenance is not healed; an instance
// with nowhere to go stays on the dead host (nothing else changes) and
// moves once a host can take it; a host that comes back is left alone.
func TestHealWaitsAndStays(t *testing.T) {
	hosts := []string{"a", "b"}
	f := newHealFixture(t, hosts...)
	big := f.deployOn("a", hosts, DeployRequest{Service: "big", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 700, Bind: true, Memory: gib}}})
	f.deployOn("b", hosts, DeployRequest{Service: "fill", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 400, Bind: true, Memory: gib}}})
	f.dies("a")
	if _, err := f.SetMaintenance(f.ctx, "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	now := time.Now()
	f.tick(f.ctx, tr, now)
	f.tick(f.ctx, tr, now.Add(10*time.Minute))
	if len(f.on("a")) != 1 {
		t.Fatalf("a host in maintenance was healed")
	}
	if _, err := f.SetMaintenance(f.ctx, "a", -1); err != nil {
		t.Fatal(err)
	}
	before, _ := f.Host("b")
	f.tick(f.ctx, tr, now.Add(20*time.Minute))
	f.tick(f.ctx, tr, now.Add(30*time.Minute))
	if got := f.on("a"); len(got) != 1 || got[0].ID != big[0].ID {
		t.Fatalf("with no room elsewhere: on a %v, want %s to stay", got, big[0].ID)
	}
	if after, _ := f.Host("b"); after.AllocRev != before.AllocRev {
		t.Errorf("a heal that could not place changed b's usage")
	}
	if _, err := f.Remove(f.ctx, "fill"); err != nil {
		t.Fatal(err)
	}
	f.tick(f.ctx, tr, now.Add(31*time.Minute))
	if got := f.on("b"); len(got) != 1 || got[0].Service != "big" || len(f.on("a")) != 0 {
		t.Errorf("once b had room: on b %v, on a %v; want big healed onto b", got, f.on("a"))
	}
	f.verify()
}

// TestDrainMovesBlueGreen: a drained host's instances get replacements on
// other hosts; each old instance goes only once its replacement reports
// running; a replacement its host refused (health gate) is removed and the
// old one stays; the drain ends with the host empty and disabled.
func TestDrainMovesBlueGreen(t *testing.T) {
	hosts := []string{"a", "b"}
	f := newHealFixture(t, hosts...)
	for _, h := range hosts {
		f.agent(h) // moves off an agent's host go to agents' hosts
	}
	old := f.deployOn("a", hosts, DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 120, Bind: true, Memory: gib}}})
	if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Host("a"); !v.Host.Disabled || !v.Host.Draining {
		t.Fatalf("after drain: %+v, want disabled and draining", v.Host)
	}
	tr := newTracker()
	now := time.Now()
	f.tick(f.ctx, tr, now)
	news := f.on("b")
	if len(news) != 2 || len(f.on("a")) != 2 {
		t.Fatalf("after the first tick: on b %v, on a %v; want two replacements and the two old ones", news, f.on("a"))
	}
	for _, n := range news {
		if n.Replaces == "" || n.Pieces() != 120 {
			t.Errorf("replacement %+v: want Replaces set and 1.2 CPUs", n)
		}
	}
	if m := f.st.Moving(); len(m) != 2 || m[0].Instance.ID != news[0].ID || m[1].Instance.ID != news[1].ID {
		t.Errorf("the moves index holds %v, want the two replacements", m)
	}
	f.tick(f.ctx, tr, now.Add(time.Second))
	if len(f.on("a")) != 2 {
		t.Fatalf("an old instance went before its replacement ran")
	}
	// One replacement runs; the other's host refused it (health gate).
	if err := f.ReportStatus(f.ctx, "b", news[0].ID, model.Status{State: "running", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.ReportStatus(f.ctx, "b", news[1].ID, model.Status{State: "pending", Refused: 1, Error: "health gate failed"}); err != nil {
		t.Fatal(err)
	}
	f.sync()
	f.tick(f.ctx, tr, now.Add(2*time.Second))
	onA := f.on("a")
	if len(onA) != 1 || onA[0].ID != news[1].Replaces {
		t.Fatalf("after one ran and one was refused: on a %v, want only %s", onA, news[1].Replaces)
	}
	if b := f.on("b"); len(b) != 1 || b[0].ID != news[0].ID || b[0].Replaces != "" {
		t.Fatalf("on b %+v, want only %s, its move finished", b, news[0].ID)
	}
	if m := f.st.Moving(); len(m) != 0 {
		t.Errorf("the moves index still holds %v after both moves settled", m)
	}
	// Not moved again before the back-off.
	f.tick(f.ctx, tr, now.Add(3*time.Second))
	if len(f.on("b")) != 1 {
		t.Fatalf("an aborted move was retried at once")
	}
	// The planner restarts (a new service and tracker over the same store:
	// its memory, the back-off included, is lost): the drain goes on from
	// the host's document and moves the instance again.
	f.Service, tr = New(f.st, nil), newTracker()
	f.tick(f.ctx, tr, now.Add(4*time.Second))
	var again model.Instance
	for _, in := range f.on("b") {
		if in.Replaces != "" {
			again = in
		}
	}
	if again.ID == "" {
		t.Fatalf("no new move after the restart: on b %v", f.on("b"))
	}
	if err := f.ReportStatus(f.ctx, "b", again.ID, model.Status{State: "running", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	f.sync()
	f.tick(f.ctx, tr, now.Add(5*time.Second))
	f.tick(f.ctx, tr, now.Add(6*time.Second))
	v, _ := f.Host("a")
	if len(f.on("a")) != 0 || v.Host.Draining || !v.Host.Disabled {
		t.Errorf("after the drain: on a %v, host %+v; want empty, disabled, not draining", f.on("a"), v.Host)
	}
	if got := countInstances(f.st.ServiceInstances("web")); got != len(old) {
		t.Errorf("web has %d instances after the drain, want %d", got, len(old))
	}
	f.verify()
}

func TestJudgeMove(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	n := state.InstanceView{Instance: model.Instance{ID: "n", Replaces: "o", Generation: 1}}
	with := func(st *model.Status) state.InstanceView { v := n; v.Status = st; return v }
	up := state.HostView{Host: state.Host{Name: "b", Agent: true}, Live: true}
	down := state.HostView{Host: state.Host{Name: "b", Agent: true}}
	for _, tc := range []struct {
		name     string
		n        state.InstanceView
		host     state.HostView
		hostOK   bool
		deadline time.Time
		want     moveOutcome
	}{
		{"no report yet", n, up, true, time.Time{}, moveWait},
		{"running its generation", with(&model.Status{State: "running", Generation: 1}), up, true, time.Time{}, moveFinish},
		{"running with an error", with(&model.Status{State: "running", Generation: 1, Error: "x"}), up, true, time.Time{}, moveWait},
		{"refused: health gate", with(&model.Status{State: "pending", Refused: 1}), up, true, time.Time{}, moveAbort},
		{"exited", with(&model.Status{State: "exited", Generation: 1}), up, true, time.Time{}, moveAbort},
		{"host down", n, down, true, time.Time{}, moveAbort},
		{"host gone", n, up, false, time.Time{}, moveAbort},
		{"past the deadline, not healthy yet", n, up, true, now.Add(-time.Second), moveFinish},
		{"before the deadline", n, up, true, now.Add(time.Second), moveWait},
	} {
		if got := judgeMove(tc.n, tc.host, tc.hostOK, now, tc.deadline); got != tc.want {
			t.Errorf("%s: judgeMove = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestScale: up through placement with the service's size and rules;
// down worst placed first (a disabled host's, then the most crowded host's).
func TestScale(t *testing.T) {
	hosts := []string{"a", "b", "c"}
	f := newHealFixture(t, hosts...)
	f.deployOn("a", hosts, DeployRequest{Service: "web", Count: 3, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: gib}}})
	f.deployOn("b", hosts, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: gib}}})
	lone := f.deployOn("c", hosts, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: gib}}})
	f.set("c", false)
	res, err := f.Scale(f.ctx, "web", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 3 || res.Removed[0] != lone[0].ID {
		t.Errorf("removed %v, want 3 starting with %s (on the disabled host)", res.Removed, lone[0].ID)
	}
	if a, b := len(f.on("a")), len(f.on("b")); a != 1 || b != 1 {
		t.Errorf("after scaling to 2: a %d, b %d; want 1 and 1 (the crowded host shrinks first)", a, b)
	}
	f.set("c", true)
	res, err = f.Scale(f.ctx, "web", 4)
	if err != nil || len(res.Added) != 2 || res.Count != 4 {
		t.Fatalf("scale up to 4 = %+v, %v", res, err)
	}
	for _, in := range res.Added {
		if in.Pieces() != 50 || in.Memory != gib || in.Image != "i" {
			t.Errorf("added %+v, want the service's size and image", in)
		}
	}
	if _, err := f.Scale(f.ctx, "nope", 1); CodeOf(err) != NotFound {
		t.Errorf("scale of an unknown service = %v, want not found", err)
	}
	if _, err := f.Scale(f.ctx, "web", -1); CodeOf(err) != Invalid {
		t.Errorf("scale to -1 = %v, want invalid", err)
	}
	f.verify()
}

// TestRebalanceNeverBreaksAHardRule: every instance on one host; the
// proposal lowers the CPU ratio, never moves an instance whose constraint
// excludes the other hosts, changes nothing as a dry run, and with apply
// starts moves that keep the invariants.
func TestRebalanceNeverBreaksAHardRule(t *testing.T) {
	hosts := []string{"a", "b", "c"}
	f := newHealFixture(t, hosts...)
	for _, h := range hosts {
		f.agent(h)
	}
	if _, err := f.SetHost(f.ctx, SetHostRequest{Name: "a", SetProperties: map[string]placement.Value{"zone": placement.Str("x")}}); err != nil {
		t.Fatal(err)
	}
	pinned := f.deployOn("a", hosts, DeployRequest{Service: "pinned", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Rules: model.Rules{Constraint: `zone == "x"`}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.deployOn("a", hosts, DeployRequest{Service: "web", Count: 4, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	rev := f.st.Rev()
	res, err := f.Rebalance(f.ctx, RebalanceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f.st.Rev() != rev {
		t.Errorf("a dry run changed the store")
	}
	if len(res.Moves) == 0 || res.After["cpu"] == -1 || res.Before["cpu"] != -1 {
		t.Fatalf("rebalance = %+v, want moves taking the CPU ratio from ∞ to finite", res)
	}
	for _, m := range res.Moves {
		if m.Service == "pinned" {
			t.Errorf("move %+v breaks pinned's constraint", m)
		}
		if m.From != "a" || m.Why == "" {
			t.Errorf("move %+v: want from a, with a reason", m)
		}
	}
	// A host in maintenance (an upgrade, seed 001) is never a target.
	if _, err := f.SetMaintenance(f.ctx, "c", time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, err := f.Rebalance(f.ctx, RebalanceRequest{}); err != nil || len(res.Moves) == 0 ||
		slices.ContainsFunc(res.Moves, func(m RebalanceMove) bool { return m.To == "c" }) {
		t.Errorf("with c in maintenance: %+v, %v; want moves, none to c", res.Moves, err)
	}
	if _, err := f.SetMaintenance(f.ctx, "c", -1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Rebalance(f.ctx, RebalanceRequest{Options: balanceOptions(0.5)}); CodeOf(err) != Invalid {
		t.Errorf("balancing threshold 0.5 = %v, want invalid", err)
	}
	res, err = f.Rebalance(f.ctx, RebalanceRequest{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	moving := 0
	for _, h := range []string{"b", "c"} {
		for _, in := range f.on(h) {
			if in.Replaces != "" {
				moving++
			}
		}
	}
	if moving != len(res.Moves) || len(f.on("a")) != 6 {
		t.Errorf("after apply: %d moves in flight (want %d), %d on a (want 6 until they run)", moving, len(res.Moves), len(f.on("a")))
	}
	for _, in := range pinned {
		if _, ok := f.st.Instance(in.ID); !ok {
			t.Errorf("pinned %s is gone", in.ID)
		}
	}
	f.verify()
}

// TestRemoveHostPlacesElsewhere: removing a host places its instances on
// the others first; when one cannot be, the host stays (disabled).
func TestRemoveHostPlacesElsewhere(t *testing.T) {
	hosts := []string{"a", "b"}
	f := newHealFixture(t, hosts...)
	f.deployOn("a", hosts, DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	moved, err := f.RemoveHost(f.ctx, "a")
	if err != nil || len(moved) != 2 {
		t.Fatalf("RemoveHost = %v, %v; want 2 moved", moved, err)
	}
	if _, ok := f.Host("a"); ok || len(f.on("b")) != 2 {
		t.Errorf("after removing a: host still there %v, on b %d", ok, len(f.on("b")))
	}
	f.deployOn("b", []string{"b"}, DeployRequest{Service: "big", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 500, Bind: true, Memory: gib}}})
	rev := f.st.Rev()
	if _, err := f.RemoveHost(f.ctx, "b"); CodeOf(err) != Precond || !strings.Contains(err.Error(), "nothing changed") {
		t.Errorf("removing the last host with instances = %v, want a precondition failure that changed nothing", err)
	}
	if v, ok := f.Host("b"); !ok || v.Host.Disabled || len(f.on("b")) != 3 || f.st.Rev() != rev {
		t.Errorf("after a refused removal: registered %v, %+v, %d instances, revision %d → %d; want nothing changed", ok, v.Host, len(f.on("b")), rev, f.st.Rev())
	}
	f.verify()
}

func balanceOptions(threshold float64) balance.Options {
	return balance.Options{BalancingThreshold: threshold}
}

// TestEventsRecordedAndRetained: recorded events are written in the
// background, listed oldest first with filters and from a cursor; the
// retention keeps the newest N and none older than the age limit; a heal
// records what moved where.
func TestEventsRecordedAndRetained(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.RunEvents(ctx) }()
	base := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	for i := range 10 {
		svc := "web"
		if i%2 == 1 {
			svc = "db"
		}
		f.Record(state.Event{Time: base.Add(time.Duration(i) * time.Minute), Identity: "admin:alice", Kind: "Deploy", Subject: svc, Service: svc, Host: "a"})
	}
	old := f.deployOn("a", []string{"a", "b"}, DeployRequest{Service: "api", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	f.dies("a")
	tr := newTracker()
	f.tick(f.ctx, tr, time.Now())
	f.tick(f.ctx, tr, time.Now().Add(placement.DefaultDownGrace))
	var all []state.Event
	deadline := time.Now().Add(10 * time.Second)
	for len(all) < 11 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		all, _ = f.Events(f.ctx, EventQuery{})
	}
	if len(all) != 11 {
		t.Fatalf("%d events written, want 11: %+v", len(all), all)
	}
	heal := all[10]
	if heal.Kind != "Heal" || heal.Identity != "planner" || heal.Subject != old[0].ID || !strings.Contains(heal.Outcome, "placed again on b") {
		t.Errorf("the heal's event = %+v", heal)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].ID >= all[i].ID {
			t.Errorf("events out of order: %s then %s", all[i-1].ID, all[i].ID)
		}
	}
	web, _ := f.Events(f.ctx, EventQuery{Service: "web"})
	if len(web) != 5 {
		t.Errorf("--service web: %d events, want 5", len(web))
	}
	after, _ := f.Events(f.ctx, EventQuery{After: all[7].ID})
	if len(after) != 3 || after[0].ID != all[8].ID {
		t.Errorf("after %s: %d events, want 3 from %s", all[7].ID, len(after), all[8].ID)
	}
	// Age: events before base+5m go; count: the newest 3 stay.
	if n, err := f.st.PruneEvents(f.ctx, 0, base.Add(5*time.Minute)); err != nil || n != 5 {
		t.Errorf("prune by age: %d deleted, %v; want 5", n, err)
	}
	f.SetEventRetention(3, 365*24*time.Hour)
	f.pruneEvents(f.ctx, time.Now())
	left, _ := f.Events(f.ctx, EventQuery{})
	if len(left) != 3 || left[2].ID != all[10].ID || left[0].ID != all[8].ID {
		t.Errorf("after keeping 3: %+v, want the newest 3", left)
	}
	cancel()
	<-done
}
