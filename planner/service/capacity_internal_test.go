package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/planfile"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestCapacityEqualsDeploy: one randomized scenario set (fixed seeds, so a
// failure repeats) through capacity, plan (the hosts exported as a plan
// file), deploy and the audit: with buffers or
// overbooking, constraints, anti-affinity, max per host, bound and
// memory-first requests over hosts already partly used, a capacity of N
// means a plan and a deploy of N+1 are refused, N succeed, and the audit
// (Verify) then finds nothing wrong. Before one capacity function,
// capacity ignored the buffer, overbooking, constraints and max per host
// (a host with a 0.5 CPU buffer: capacity 71, deploy 31), and the audit
// flagged what overbooked placement did (CPU 0 oversold: 150 of 100).
func TestCapacityEqualsDeploy(t *testing.T) {
	hosts := []string{"a", "b", "c"}
	f := newHealFixture(t, hosts...)
	for _, h := range []string{"a", "b"} {
		if _, err := f.SetHost(f.ctx, SetHostRequest{Name: h, SetProperties: map[string]placement.Value{"disk": placement.Str("ssd")}}); err != nil {
			t.Fatal(err)
		}
	}
	settings := []placement.Settings{
		{},
		{Buffer: map[string]float64{"cpu": 0.2}},
		{Buffer: map[string]float64{"cpu": 0.5, "memory": 0.3}},
		{Overbooking: map[string]float64{"cpu": 0.5}},
		{Overbooking: map[string]float64{"cpu": 0.5, "memory": 0.25}},
	}
	checked, deployed, wholeCores := 0, 0, 0
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 17))
		ps := settings[rng.IntN(len(settings))]
		if _, err := f.SetPlacementSettings(f.ctx, ps); err != nil {
			t.Fatal(err)
		}
		// Background load: a few services of random sizes.
		var background []string
		for i := range rng.IntN(4) {
			name := fmt.Sprintf("bg%d-%d", seed, i)
			r := DeployRequest{Service: name, Count: 1 + rng.IntN(3), Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: []int{30, 100, 170, 250}[rng.IntN(4)], Bind: rng.IntN(3) > 0, Memory: int64(1+rng.IntN(3)) << 30}}}
			if _, err := f.Deploy(f.ctx, r); err == nil {
				background = append(background, name)
			}
		}
		req := DeployRequest{Service: fmt.Sprintf("probe%d", seed), UseBuffer: rng.IntN(3) == 0, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: []int{50, 100, 150, 250, 370}[rng.IntN(5)], Bind: rng.IntN(4) > 0, Memory: []int64{256 << 20, 1 << 30, 3 << 30}[rng.IntN(3)]}, Scheduling: model.Scheduling{MaxPerHost: rng.IntN(3)}}}
		if rng.IntN(5) == 0 { // whole physical cores (the Laptop fixture: 2 threads a core)
			req.WholeCores, req.Bind, req.Pieces = true, true, []int{100, 200, 400}[rng.IntN(3)]
		}
		switch rng.IntN(4) {
		case 0:
			req.Rules.Constraint = `disk == "ssd"`
		case 1:
			if len(background) > 0 {
				req.Rules.AntiAffinity.Hard = []string{background[0]}
			}
		}
		name := fmt.Sprintf("seed %d: %+v with settings %+v", seed, req, ps)
		caps, err := f.Capacity(req)
		if err != nil {
			t.Fatalf("%s: capacity: %v", name, err)
		}
		n := 0
		for _, c := range caps {
			n += c.Count
		}
		// plan: the same hosts exported as a plan file, planned offline.
		if got, err := planOffline(f, req, n+1); err == nil {
			t.Errorf("%s: capacity %d, but plan placed %d", name, n, got)
		}
		if n > 0 {
			if got, err := planOffline(f, req, n); err != nil || got != n {
				t.Errorf("%s: capacity %d, but plan placed %d: %v", name, n, got, err)
			}
		}
		if n+1 <= MaxDeployCount {
			over := req
			over.Count = n + 1
			if _, err := f.Deploy(f.ctx, over); CodeOf(err) != Exhausted {
				t.Errorf("%s: capacity %d (%v), but a deploy of %d = %v; want it refused", name, n, caps, n+1, err)
			}
		}
		if n > 0 {
			req.Count = n
			ins, err := f.Deploy(f.ctx, req)
			if err != nil || len(ins) != n {
				t.Errorf("%s: capacity %d (%v), but a deploy of %d = %d instances, %v", name, n, caps, n, len(ins), err)
			}
			deployed++
			if req.WholeCores {
				wholeCores++
				checkWholeCores(t, f, name, ins)
			}
		}
		if bad := Verify(f.st, 100); len(bad) > 0 {
			t.Errorf("%s: the audit flags what placement did: %v", name, bad)
		}
		checked++
		for _, svc := range append(background, req.Service) {
			if _, err := f.Remove(f.ctx, svc); err != nil && CodeOf(err) != NotFound {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d scenarios, %d with a deploy of the full capacity, %d of them whole cores", checked, deployed, wholeCores)
	if wholeCores == 0 {
		t.Errorf("no whole-cores deploy among the scenarios: draw more")
	}
	_ = state.Event{} // keeps the import for the fixture
}

// planOffline plans count instances of r against the planner's hosts
// exported as a plan file (what `pinfold plan export` writes and `pinfold
// plan` reads), through the file's own decoding and placement.Plan.
func planOffline(f healFixture, r DeployRequest, count int) (int, error) {
	file := planfile.Export(f.params, f.st.PlacementSettings(), f.st.SchedulablePlacement().Hosts)
	cpu := planfile.CPUAmount(float64(r.Pieces) / 100)
	bind := r.Bind
	file.Request = &planfile.Request{Service: r.Service, Count: count, CPU: &cpu, Bind: &bind, MemoryBytes: r.Memory, Scheduling: model.Scheduling{Strategy: "auto", MaxPerHost: r.MaxPerHost},
		Rules:     model.Rules{Constraint: r.Rules.Constraint, Affinity: r.Rules.Affinity, AntiAffinity: r.Rules.AntiAffinity},
		UseBuffer: r.UseBuffer, WholeCores: r.WholeCores}
	b, err := json.Marshal(file)
	if err != nil {
		return 0, err
	}
	in, err := planfile.Decode(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("the exported file does not decode: %w", err)
	}
	res, err := placement.Plan(in.Params, in.Settings, in.Hosts, *in.Request)
	if err != nil {
		return 0, err
	}
	return len(res.Placements), nil
}

// checkWholeCores: each whole-cores instance holds both threads of every
// core it is on, and no other instance holds a piece of them.
func checkWholeCores(t *testing.T, f healFixture, name string, ins []model.Instance) {
	t.Helper()
	tp := topologytest.Laptop().Topology()
	for _, in := range ins {
		if !in.WholeCores {
			t.Errorf("%s: instance %s not marked whole cores", name, in.ID)
		}
		v, _ := f.Host(in.Host)
		for id := range in.CPUs {
			c, _ := tp.CPU(id)
			for s := range c.Siblings.All() {
				if in.CPUs[s] != 100 || v.Alloc.Used[s] != 100 {
					t.Errorf("%s: instance %s on CPU %d: sibling %d holds %d of its pieces, %d in all", name, in.ID, id, s, in.CPUs[s], v.Alloc.Used[s])
				}
			}
		}
	}
}

// TestAuditAcceptsOverbooking: with CPU overbooking 0.5, a replacement
// (use the buffer) may put a fragment on CPUs others hold whole; the audit
// accepts up to the overbooked capacity, and flags beyond it.
func TestAuditAcceptsOverbooking(t *testing.T) {
	f := newHealFixture(t, "a")
	if _, err := f.Deploy(f.ctx, DeployRequest{Service: "whole", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 800, Bind: true, Memory: gib}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SetPlacementSettings(f.ctx, placement.Settings{Overbooking: map[string]float64{"cpu": 0.5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Deploy(f.ctx, DeployRequest{Service: "frag", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: gib}}}); CodeOf(err) != Exhausted {
		t.Fatalf("a normal deploy onto a full host = %v, want no room", err)
	}
	ins, err := f.Deploy(f.ctx, DeployRequest{Service: "frag", Count: 1, UseBuffer: true, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: gib}}})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.Host("a")
	for id := range ins[0].CPUs {
		if v.Alloc.Used[id] <= v.Host.CPUs[id] {
			t.Fatalf("CPU %d holds %d of %d: the fragment did not overbook it", id, v.Alloc.Used[id], v.Host.CPUs[id])
		}
	}
	if bad := Verify(f.st, 100); len(bad) > 0 {
		t.Errorf("the audit flags the overbooked placement: %v", bad)
	}
	// Without the overbooking the same store is oversold, and said so.
	if _, err := f.SetPlacementSettings(f.ctx, placement.Settings{}); err != nil {
		t.Fatal(err)
	}
	if bad := Verify(f.st, 100); len(bad) != 1 || !strings.Contains(bad[0], "oversold: 150 of 100") {
		t.Errorf("audit without overbooking = %v, want CPU oversold 150 of 100", bad)
	}
}

// TestPiecesPerCPUProperty: over random share bases and pieces per CPU, a
// host registers exactly when its pieces per CPU plan whole CPUs the way
// it says (at most the share base, or a multiple of it), and then a
// 1-CPU bound instance's capacity on the empty host is every CPU's whole
// CPUs (none below the share base), and a deploy of it succeeds.
func TestPiecesPerCPUProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, sb := range []int{10, 100, 1000} {
		st := memStore(t, state.Config{ShareBase: sb, MaxFragmentCores: -1})
		s := New(st, nil)
		for i := range 12 {
			ppc := 1 + rng.IntN(4*sb)
			if i%3 == 0 {
				ppc = sb * (1 + rng.IntN(4))
			}
			name := fmt.Sprintf("h%d-%d", sb, i)
			_, err := s.RegisterHost(t.Context(), RegisterHostRequest{Name: name, Topology: topologytest.Laptop().Topology(),
				Settings: state.CapacitySettings{PiecesPerCPU: ppc, MemoryShare: 1}})
			ok := ppc <= sb || ppc%sb == 0
			if ok != (err == nil) {
				t.Errorf("share base %d, %d pieces per CPU: registration %v; want accepted %v", sb, ppc, err, ok)
				continue
			}
			if err != nil {
				if !strings.Contains(err.Error(), "multiple of it") {
					t.Errorf("share base %d, %d pieces: %v; want the reason", sb, ppc, err)
				}
				continue
			}
			caps, err := s.Capacity(DeployRequest{Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: sb, Bind: true, Memory: 8 << 20}}})
			if err != nil {
				t.Fatal(err)
			}
			want := 8 * (ppc / sb) // Laptop: 8 CPUs
			if got := caps[name].Count; got != want {
				t.Errorf("share base %d, %d pieces per CPU: capacity %d for 1 CPU, want %d", sb, ppc, got, want)
			}
			if want > 0 {
				if _, err := s.Deploy(t.Context(), DeployRequest{Service: "p" + name, Count: want, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Rules: model.Rules{Constraint: `HostName == "` + name + `"`}, Size: model.Size{Pieces: sb, Bind: true, Memory: 8 << 20}, Scheduling: model.Scheduling{MaxPerHost: want}}}); err != nil {
					t.Errorf("share base %d, %d pieces per CPU: deploy of the capacity %d: %v", sb, ppc, want, err)
				}
			}
			if _, err := s.SetEnabled(t.Context(), name, false); err != nil { // the next host is measured alone
				t.Fatal(err)
			}
		}
	}
}

// TestFinePiecesEnforceable: the planner hands out every fraction a host
// can enforce and none below: with a share base of 1000 every piece (0.001
// CPU: 1 ms per 1 s period, the smallest cpu.max quota Docker and the
// kernel take) is planned, 0.005 CPU included; with 10000 a fraction below
// 0.001 is refused with the reason, at deploy and at resize.
func TestFinePiecesEnforceable(t *testing.T) {
	for _, tc := range []struct {
		sb, pieces int
		bind       bool
		ok         bool
	}{
		{1000, 1005, true, true}, {1000, 5, true, true}, {1000, 1, false, true}, {1000, 9, false, true}, {1000, 2000, true, true},
		{10000, 10005, true, false}, {10000, 5, true, false}, {10000, 9, false, false}, {10000, 10, false, true}, {10000, 10010, true, true},
	} {
		t.Run(fmt.Sprintf("base %d, %d pieces", tc.sb, tc.pieces), func(t *testing.T) {
			st := memStore(t, state.Config{ShareBase: tc.sb, MaxFragmentCores: -1})
			s := New(st, nil)
			if _, err := s.RegisterHost(t.Context(), RegisterHostRequest{Name: "h", Topology: topologytest.Laptop().Topology(), Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
				t.Fatal(err)
			}
			_, err := s.Deploy(t.Context(), DeployRequest{Service: "s", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: tc.pieces, Bind: tc.bind, Memory: gib}}})
			switch {
			case tc.ok && err != nil:
				t.Errorf("deploy: %v", err)
			case !tc.ok && (CodeOf(err) != Invalid || !strings.Contains(err.Error(), "below the smallest a host can enforce, 0.001")):
				t.Errorf("deploy = %v, want refused naming 0.001", err)
			}
			if tc.ok && tc.pieces > tc.sb && tc.pieces%tc.sb > 0 {
				// 1.005 - 0.003 = 1.002 at base 1000; 1.001 - 0.0005 = 1.0005 at 10000.
				delta := map[int]int{1000: 3, 10000: 5}[tc.sb]
				_, err := s.Resize(t.Context(), ResizeRequest{Target: "s", CPUDelta: -delta})
				if wantOK := tc.sb <= 1000; (err == nil) != wantOK || err != nil && !strings.Contains(err.Error(), "below the smallest") {
					t.Errorf("resize by -%s = %v, want accepted %v", alloc.FormatPieces(delta, tc.sb), err, wantOK)
				}
			}
		})
	}
}

// TestSharedPoolNeverSqueezed: the shared pool a memory-first instance's
// quota was placed against never shrinks below that quota: bound deploys
// and resizes that would take it are refused (capacity says so first),
// and the pool the planner sends the agent is the one it counted. Before,
// a 3-CPU quota was left with a 2-CPU pool after a bound deploy of 6 CPUs
// on the 8-CPU host, with nothing refused.
func TestSharedPoolNeverSqueezed(t *testing.T) {
	f := newHealFixture(t, "a")
	mf, err := f.Deploy(f.ctx, DeployRequest{Service: "mf", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 300, Memory: gib}}})
	if err != nil {
		t.Fatal(err)
	}
	one := DeployRequest{Service: "b", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: 256 << 20}}}
	caps, err := f.Capacity(one)
	if err != nil {
		t.Fatal(err)
	}
	if caps["a"].Count != 5 {
		t.Errorf("bound 1-CPU capacity = %d, want 5 (8 CPUs, 3 kept for the 3-CPU quota)", caps["a"].Count)
	}
	six := one
	six.Pieces = 600
	if _, err := f.Deploy(f.ctx, six); CodeOf(err) != Exhausted {
		t.Errorf("a bound deploy of 6 CPUs beside a 3-CPU memory-first quota = %v, want refused", err)
	}
	five := one
	five.Pieces = 450
	ins, err := f.Deploy(f.ctx, five)
	if err != nil {
		t.Fatalf("a bound deploy of 4.5 CPUs: %v", err)
	}
	v, _ := f.Host("a")
	if pool := state.SharedPool(v.Host, v.Alloc); pool.Len() != 3 {
		t.Errorf("shared pool %s after the bound deploy, want 3 CPUs", pool)
	}
	if _, err := f.Resize(f.ctx, ResizeRequest{Target: ins[0].ID, CPUDelta: 100}); err == nil {
		t.Errorf("a bound resize into the pool was accepted")
	}
	// The memory-first instance may grow into the pool, and then it is kept.
	if _, err := f.Resize(f.ctx, ResizeRequest{Target: mf[0].ID, CPUDelta: -100}); err != nil {
		t.Fatalf("memory-first resize to 2 CPUs: %v", err)
	}
	if _, err := f.Resize(f.ctx, ResizeRequest{Target: ins[0].ID, CPUDelta: 50}); err != nil {
		t.Errorf("a bound resize to 5 CPUs once the quota is 2: %v", err)
	}
	if bad := Verify(f.st, 100); len(bad) > 0 {
		t.Errorf("audit: %v", bad)
	}
	// Gone with the last memory-first instance.
	if _, err := f.Remove(f.ctx, "mf"); err != nil {
		t.Fatal(err)
	}
	if caps, _ := f.Capacity(one); caps["a"].Count != 3 {
		t.Errorf("bound capacity after the memory-first instance left = %d, want 3", caps["a"].Count)
	}
}

// TestSharedPoolFloorOnHostSet: taking CPUs out of a host's capacity may
// not squeeze the shared pool below a memory-first quota either.
func TestSharedPoolFloorOnHostSet(t *testing.T) {
	f := newHealFixture(t, "a")
	if _, err := f.Deploy(f.ctx, DeployRequest{Service: "mf", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 300, Memory: gib}}}); err != nil {
		t.Fatal(err)
	}
	before, _ := f.Host("a")
	_, err := f.SetHost(f.ctx, SetHostRequest{Name: "a", RemoveCPUs: cpuset.MustParseCPUs("0-5")})
	if CodeOf(err) != Precond || !strings.Contains(err.Error(), "below a memory-first quota of 3 CPUs") {
		t.Errorf("removing 6 of 8 CPUs under a 3-CPU quota = %v, want refused naming the quota", err)
	}
	if after, _ := f.Host("a"); len(after.Host.CPUs) != len(before.Host.CPUs) {
		t.Errorf("the refused change removed CPUs: %d → %d", len(before.Host.CPUs), len(after.Host.CPUs))
	}
	if _, err := f.SetHost(f.ctx, SetHostRequest{Name: "a", RemoveCPUs: cpuset.MustParseCPUs("0-4")}); err != nil {
		t.Errorf("removing 5 of 8 CPUs under a 3-CPU quota: %v", err)
	}
	if bad := Verify(f.st, 100); len(bad) > 0 {
		t.Errorf("audit: %v", bad)
	}
}

// TestSetHostLeavesTwinHosts: hosts of one capacity share one CPU map in
// the store's cache (state.cache.cpuMaps); changing one host's CPUs,
// added or removed, leaves its twin's capacity as it was.
func TestSetHostLeavesTwinHosts(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	before, _ := f.Host("b")
	want := maps.Clone(before.Host.CPUs)
	if _, err := f.SetHost(f.ctx, SetHostRequest{Name: "a", RemoveCPUs: cpuset.MustParseCPUs("0-1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SetHost(f.ctx, SetHostRequest{Name: "a", AddCPUs: map[cpuset.CPUID]int{0: 50}}); err != nil {
		t.Fatal(err)
	}
	a, _ := f.Host("a")
	b, _ := f.Host("b")
	if !maps.Equal(b.Host.CPUs, want) {
		t.Errorf("b's CPUs after a's changes = %v, want %v", b.Host.CPUs, want)
	}
	if a.Host.CPUs[0] != 50 || a.Host.CPUs[1] != 0 || len(a.Host.CPUs) != len(want)-1 {
		t.Errorf("a's CPUs = %v, want CPU 0 at 50 pieces and CPU 1 gone", a.Host.CPUs)
	}
	if bad := Verify(f.st, 100); len(bad) > 0 {
		t.Errorf("audit: %v", bad)
	}
}
