package service

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// The oracle of issue 39's in-place audit and health: the computations
// they replaced, over Snapshot's sorted copy, and random fleets on which
// the two must give the same answers, warnings in the same order.

// snapshotVerify is the audit as it was before ReadFleet (verbatim but
// for its name): over a copy of every instance, sorted, from Snapshot.
func snapshotVerify(snap state.Snapshot, shareBase int) []string {
	var bad []string
	ps := snap.Placement
	limit := func(resource string, capacity int64) int64 {
		o, ok := ps.Overbooking[resource]
		switch {
		case !ok:
			return capacity
		case o == -1:
			return math.MaxInt64
		}
		return int64(math.Floor(float64(capacity) * (1 + o)))
	}
	for _, v := range snap.Hosts {
		name := v.Host.Name
		sum := state.NewAlloc()
		var wholeCores []model.Instance
		for _, iv := range snap.Instances[name] {
			sum.Add(iv.Instance, +1)
			for id, p := range iv.Instance.CPUs {
				if p > shareBase {
					bad = append(bad, fmt.Sprintf("instance %s holds %d pieces of CPU %d", iv.Instance.ID, p, id))
				}
			}
			if iv.Instance.WholeCores {
				wholeCores = append(wholeCores, iv.Instance)
			}
		}
		// A whole-cores instance holds every thread of its cores, and nobody
		// else holds a piece of them.
		for _, in := range wholeCores {
			if v.Host.Topology == nil {
				continue
			}
			for _, id := range slices.Sorted(maps.Keys(in.CPUs)) {
				c, ok := v.Host.Topology.CPU(id)
				if !ok {
					continue
				}
				for sib := range c.Siblings.All() {
					if in.CPUs[sib] != shareBase || sum.Used[sib] != shareBase {
						bad = append(bad, fmt.Sprintf("host %s: whole-cores instance %s on CPU %d: sibling CPU %d holds %d of its pieces, %d in all", name, in.ID, id, sib, in.CPUs[sib], sum.Used[sib]))
					}
				}
			}
		}
		if !maps.Equal(sum.Used, v.Alloc.Used) || sum.MemoryUsed != v.Alloc.MemoryUsed || !maps.Equal(sum.NUMAUsed, v.Alloc.NUMAUsed) || !maps.Equal(sum.Instances, v.Alloc.Instances) ||
			sum.MemoryFirstQuota != v.Alloc.MemoryFirstQuota || !maps.Equal(sum.MemoryFirst, v.Alloc.MemoryFirst) || !maps.Equal(sum.WholeCores, v.Alloc.WholeCores) ||
			!maps.Equal(sum.Ports, v.Alloc.Ports) {
			bad = append(bad, fmt.Sprintf("host %s: allocation document %+v != sum of instances %+v", name, v.Alloc, sum))
		}
		// No two instances on a host hold one host port.
		for _, port := range slices.Sorted(maps.Keys(sum.Ports)) {
			if sum.Ports[port] > 1 {
				var holders []string
				for _, iv := range snap.Instances[name] {
					if slices.ContainsFunc(iv.Instance.HostPorts, func(p model.Port) bool { return p.Host == port }) {
						holders = append(holders, iv.Instance.ID)
					}
				}
				bad = append(bad, fmt.Sprintf("host %s: host port %d held by %d instances: %s", name, port, sum.Ports[port], strings.Join(holders, ", ")))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(sum.Used)) {
			if int64(sum.Used[id]) > limit("cpu", int64(v.Host.CPUs[id])) {
				bad = append(bad, fmt.Sprintf("host %s: CPU %d oversold: %d of %d pieces", name, id, sum.Used[id], v.Host.CPUs[id]))
			}
		}
		// The shared pool holds every memory-first quota on the host.
		if ah := state.AllocHost(v.Host, sum); ah.PoolFloor() > ah.SharedPool().Len()*shareBase {
			pool := ah.SharedPool()
			bad = append(bad, fmt.Sprintf("host %s: a memory-first quota of %s CPUs does not fit the shared pool of %d CPUs (%q)",
				name, alloc.FormatPieces(ah.PoolFloor(), shareBase), pool.Len(), pool.String()))
		}
		if sum.MemoryUsed > limit("memory", v.Host.MemoryBytes) {
			bad = append(bad, fmt.Sprintf("host %s: memory oversold: %d of %d", name, sum.MemoryUsed, v.Host.MemoryBytes))
		}
		for _, n := range slices.Sorted(maps.Keys(sum.NUMAUsed)) { // by ID: health lists these, the same every time
			if m := sum.NUMAUsed[n]; m > limit("memory", v.Host.NUMAMemory[n]) {
				bad = append(bad, fmt.Sprintf("host %s: NUMA node %d memory oversold: %d of %d", name, n, m, v.Host.NUMAMemory[n]))
			}
		}
	}
	return bad
}

// snapshotHealth is Health as it was before ReadFleet (verbatim but for
// its name and the audit's): over Snapshot's copy of every instance.
func (s *Service) snapshotHealth(now time.Time) []Warning {
	var out []Warning
	// One read of the fleet, at one revision, for the audit and the counts
	// below (two copies of every instance cost a second at 1,000,000).
	snap := snapshotOf(s.st)
	for _, b := range snapshotVerify(snap, s.params.ShareBase) {
		out = append(out, Warning{Kind: placement.RuleCapacity, Subject: "store", Detail: b})
	}
	// One pass over the instances: per service, per host.
	per := map[string]map[string]int{} // service → host → instances
	onHost := map[string]int{}
	for _, ins := range snap.Instances {
		for _, iv := range ins {
			in := iv.Instance
			if per[in.Service] == nil {
				per[in.Service] = map[string]int{}
			}
			per[in.Service][in.Host]++
			onHost[in.Host]++
		}
	}
	hosts := snap.Hosts
	overbooking := s.st.PlacementSettings().Overbooking
	byName := map[string]state.HostView{}
	for _, v := range hosts {
		byName[v.Host.Name] = v
		h := v.Host
		n := onHost[h.Name]
		if w, ok := overbookedWarning(v, s.params.ShareBase, overbooking); ok {
			out = append(out, w)
		}
		switch st := v.State(); {
		case st == "maintenance" && now.After(h.MaintenanceUntil) && h.Agent && !v.Live:
			out = append(out, Warning{Kind: placement.RuleMaintenance, Subject: h.Name,
				Detail: fmt.Sprintf("in maintenance past its grace (ended %s) and its agent is not back: %d instances are not running", h.MaintenanceUntil.Format(time.RFC3339), n)})
		case st == "down" && n > 0:
			out = append(out, Warning{Kind: placement.RuleDown, Subject: h.Name, Detail: fmt.Sprintf("the agent is not heartbeating: %d instances are not enforced", n)})
		}
	}
	// Without a domain on any host no service is packed (domainPacking),
	// and its room, a Capacity over every host, is not needed.
	domains := slices.ContainsFunc(hosts, func(v state.HostView) bool { return v.Host.FaultDomain != "" || v.Host.UpgradeDomain != "" })
	rooms := map[string]map[string]int{} // roomKey → roomFor: one Capacity per shape, not per service
	// Per service: constraint and domain spread.
	for _, svc := range slices.Sorted(maps.Keys(per)) {
		d, _ := s.st.Service(svc)
		if w, ok := constraintBroken(svc, d.Value.Rules, per[svc], byName); ok {
			out = append(out, w)
		}
		if d.Value.Rules.DomainSpread == string(placement.SpreadOff) {
			continue
		}
		if st := alloc.Strategy(d.Value.Strategy); st == alloc.Each || st == alloc.Fill {
			continue // their counts follow the hosts, not the domains (placement spreads neither)
		}
		if !domains {
			continue
		}
		key := roomKey(d.Value)
		room, ok := rooms[key]
		if !ok {
			room = s.roomFor(d.Value)
			rooms[key] = room
		}
		for _, w := range domainPacking(hosts, per[svc], room) {
			w.Subject = svc
			out = append(out, w)
		}
	}
	return out
}

// oracleFleet is a random fleet of laptops (seed): some with fault and
// upgrade domains, in maintenance or down, services of random sizes,
// rules and ports, an overbooking, and then the documents changed behind
// the planner's back (capacity lowered, instances written without their
// usage, over ShareBase pieces, on a taken port) so that the audit has
// something to report.
func oracleFleet(t *testing.T, seed uint64) healFixture {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 39))
	var hosts []string
	for i := range 3 + r.IntN(6) {
		hosts = append(hosts, fmt.Sprintf("h%d", i))
	}
	f := newHealFixture(t, hosts...)
	domains := r.IntN(3) > 0
	for _, h := range hosts {
		req := SetHostRequest{Name: h}
		if domains && r.IntN(4) > 0 {
			fd, ud := fmt.Sprintf("fd:/dc%d", r.IntN(3)), fmt.Sprintf("u%d", r.IntN(2))
			if r.IntN(2) == 0 {
				fd = fmt.Sprintf("fd:/dc%d/r%d", r.IntN(2), r.IntN(2))
			}
			req.FaultDomain, req.UpgradeDomain = &fd, &ud
		}
		if r.IntN(2) == 0 {
			req.SetProperties = map[string]placement.Value{"ssd": placement.BoolVal(true)}
		}
		if _, err := f.SetHost(f.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if r.IntN(2) == 0 {
		if _, err := f.SetPlacementSettings(f.ctx, placement.Settings{Overbooking: map[string]float64{"memory": 0.2}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 + r.IntN(5) {
		req := DeployRequest{Service: fmt.Sprintf("s%d", i), Count: 1 + r.IntN(6), Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
			Size: model.Size{Pieces: []int{10, 50, 100, 200}[r.IntN(4)], Memory: int64(1+r.IntN(4)) * gib / 4}}}
		if r.IntN(4) == 0 {
			req.Deploy.Size.Bind = true
		}
		if r.IntN(3) == 0 {
			req.Deploy.Rules.Constraint = "ssd == true"
		}
		if r.IntN(5) == 0 {
			req.Deploy.Rules.DomainSpread = string(placement.SpreadOff)
		}
		_, _ = f.Deploy(f.ctx, req) // a full fleet or an unmatched constraint refuses: fine
	}
	// Behind the planner's back.
	var c state.Change
	for _, v := range f.Hosts() {
		ins := f.st.Instances(v.Host.Name)
		switch r.IntN(6) {
		case 0: // capacity lowered under its instances
			h := v.Host
			h.CPUs, h.NUMAMemory = maps.Clone(h.CPUs), maps.Clone(h.NUMAMemory)
			for id := range h.CPUs {
				if r.IntN(2) == 0 {
					h.CPUs[id] = r.IntN(100)
				}
			}
			for n := range h.NUMAMemory {
				h.NUMAMemory[n] = 1 << 20
			}
			if r.IntN(2) == 0 { // over nominal, under an overbooking of 0.2
				h.MemoryBytes = v.Alloc.MemoryUsed * 9 / 10
			}
			if r.IntN(2) == 0 {
				h.Properties = nil // constraints no longer matched
			}
			c.PutHost(h)
		case 1: // instances written without their usage: over ShareBase, on one port
			for k := range 2 + r.IntN(3) {
				in := model.Instance{ID: fmt.Sprintf("x-%s-%d", v.Host.Name, k), Host: v.Host.Name, Service: "s0", Spec: model.Spec{Image: "i"}}
				in.CPUs = map[cpuset.CPUID]int{cpuset.CPUID(r.IntN(8)): 100 + r.IntN(3)*60, cpuset.CPUID(r.IntN(8)): 40}
				in.HostPorts = []model.Port{{Host: 8080 + r.IntN(2), Container: 80}}
				in.WholeCores = r.IntN(3) == 0
				c.PutInstance(in)
			}
		case 2: // down, holding its instances
			if len(ins) > 0 {
				f.dies(v.Host.Name)
			}
		}
	}
	if _, err := f.st.Commit(f.ctx, &c); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestReadFleetIsTheSnapshotComputation: on random fleets, Health and
// Verify read in place (ReadFleet) give what they gave over Snapshot's
// copy, warnings in the same order, every call (the cache's map order
// differs). The guard: enough fleets had warnings of each kind the audit
// and health give, so that equal answers are not empty ones.
func TestReadFleetIsTheSnapshotComputation(t *testing.T) {
	now := time.Now()
	kinds := map[string]int{}
	multi := 0 // hosts with two audit lines or more: their order is checked
	for seed := range uint64(60) {
		f := oracleFleet(t, seed)
		want := f.snapshotHealth(now)
		wantAudit := snapshotVerify(snapshotOf(f.st), f.params.ShareBase)
		for i := range 5 {
			if diff := cmp.Diff(want, f.Health(now)); diff != "" {
				t.Fatalf("seed %d call %d: Health (-snapshot +in place):\n%s", seed, i, diff)
			}
			if diff := cmp.Diff(wantAudit, Verify(f.st, f.params.ShareBase)); diff != "" {
				t.Fatalf("seed %d call %d: Verify (-snapshot +in place):\n%s", seed, i, diff)
			}
		}
		for _, w := range want {
			kinds[w.Kind]++
		}
		per := map[string]int{}
		for _, b := range wantAudit {
			per[strings.Fields(b)[1]]++
		}
		for _, n := range per {
			if n > 1 {
				multi++
			}
		}
	}
	t.Logf("warnings by kind over the fleets: %v; %d hosts with several audit lines", kinds, multi)
	for _, k := range []string{placement.RuleCapacity, placement.RuleDown, placement.RulePlacementConstraint, placement.RuleFaultDomain, KindOverbooked} {
		if kinds[k] < 3 {
			t.Errorf("only %d %s warnings over the fleets: the oracle checked too little", kinds[k], k)
		}
	}
	if kinds[placement.RuleCapacity] < 100 || multi < 20 {
		t.Errorf("%d audit lines, %d hosts with several: the oracle checked too little", kinds[placement.RuleCapacity], multi)
	}
}

// TestReadFleetOracleControl: the oracle above fails an audit that reports
// a host's lines in the cache's map order (no sorted second audit), and
// one that skips a host.
func TestReadFleetOracleControl(t *testing.T) {
	unsorted := func(f state.Fleet, shareBase int) []string {
		var bad []string
		for v := range f.Hosts() {
			bad = append(bad, auditHost(v, f.Instances(v.Host.Name), f.Placement(), shareBase, nil)...)
		}
		return bad
	}
	skipLast := func(f state.Fleet, shareBase int) []string {
		var bad []string
		var last string
		for v := range f.Hosts() {
			last = v.Host.Name
		}
		for v := range f.Hosts() {
			if v.Host.Name != last {
				bad = append(bad, auditHost(v, f.Instances(v.Host.Name), f.Placement(), shareBase, nil)...)
			}
		}
		return bad
	}
	for name, wrong := range map[string]func(state.Fleet, int) []string{"map order": unsorted, "a host skipped": skipLast} {
		caught := false
		for seed := uint64(0); seed < 60 && !caught; seed++ {
			f := oracleFleet(t, seed)
			want := snapshotVerify(snapshotOf(f.st), f.params.ShareBase)
			for range 20 {
				var got []string
				f.st.ReadFleet(func(fl state.Fleet) { got = wrong(fl, f.params.ShareBase) })
				if !slices.Equal(got, want) {
					caught = true
					break
				}
			}
		}
		if !caught {
			t.Errorf("%s: the oracle's fleets never tell it from the snapshot audit", name)
		}
	}
}

// TestShortcutsAreTheEngineView: poolShort and mayBeOverNominal, which
// spare the audit and health an engine view (AllocHost) a host, against
// that view, on the oracle fleets' hosts under random usage: poolShort
// equal to the view's pool check, and mayBeOverNominal false only where
// OverNominal over the view is empty. The guard: both answers of each
// were seen often enough. The control: a pool check that forgets the
// legacy quota, and a nominal check of host memory only,
// each told apart. (The laptops isolate no CPU: the isolated check is
// the fleet oracle's only, through the audit.)
func TestShortcutsAreTheEngineView(t *testing.T) {
	viewShort := func(h state.Host, a state.Alloc, shareBase int) bool {
		ah := state.AllocHost(h, a)
		return ah.PoolFloor() > ah.SharedPool().Len()*shareBase
	}
	r := rand.New(rand.NewPCG(39, 2))
	seen := map[string]int{}
	wrongPool := func(h state.Host, a state.Alloc, shareBase int) bool {
		a.MemoryFirstQuota = 0 // the legacy quota forgotten
		return poolShort(h, a, shareBase)
	}
	wrongNominal := func(v state.HostView) bool { return v.Alloc.MemoryUsed > v.Host.MemoryBytes }
	caughtPool, caughtNominal := false, false
	for seed := range uint64(20) {
		f := oracleFleet(t, seed)
		for _, v := range f.Hosts() {
			for range 50 {
				a := state.NewAlloc()
				for id := range v.Host.CPUs {
					if r.IntN(3) == 0 {
						a.Used[id] = []int{0, 50, 100, 150}[r.IntN(4)]
					}
				}
				switch r.IntN(3) {
				case 0:
					a.MemoryFirst = map[int]int{r.IntN(8) * 100: r.IntN(2), r.IntN(4) * 100: 1}
				case 1: // a usage document from before the counts by quota
					a.MemoryFirst, a.MemoryFirstQuota = nil, r.IntN(10)*100
				}
				a.MemoryUsed = r.Int64N(2 * max(v.Host.MemoryBytes, 1))
				for n, m := range v.Host.NUMAMemory {
					if r.IntN(2) == 0 {
						a.NUMAUsed[n] = r.Int64N(2*max(m, 1)) + 1
					}
				}
				host := v.Host
				if r.IntN(4) == 0 {
					host.Topology = nil
				}
				want := viewShort(host, a, f.params.ShareBase)
				if got := poolShort(host, a, f.params.ShareBase); got != want {
					t.Fatalf("host %s usage %+v: poolShort = %v, the engine view's pool check %v", host.Name, a, got, want)
				}
				seen[fmt.Sprintf("pool %v", want)]++
				caughtPool = caughtPool || wrongPool(host, a, f.params.ShareBase) != want
				hv := state.HostView{Host: host, Alloc: a}
				over := len(alloc.OverNominal(state.AllocHost(host, a), f.params.ShareBase)) > 0
				may := mayBeOverNominal(hv)
				if over && !may {
					t.Fatalf("host %s usage %+v: OverNominal = %v, but mayBeOverNominal false", host.Name, a, alloc.OverNominal(state.AllocHost(host, a), f.params.ShareBase))
				}
				seen[fmt.Sprintf("over %v may %v", over, may)]++
				caughtNominal = caughtNominal || (over && !wrongNominal(hv))
			}
		}
	}
	t.Logf("outcomes: %v", seen)
	for _, k := range []string{"pool true", "pool false", "over true may true", "over false may false"} {
		if seen[k] < 50 {
			t.Errorf("%q seen %d times: the oracle checked too little", k, seen[k])
		}
	}
	if !caughtPool || !caughtNominal {
		t.Errorf("control: a pool check without the legacy quota caught %v, a memory-only nominal check caught %v; want both", caughtPool, caughtNominal)
	}
}

// snapshotOf is the store's copy of the fleet, as the old path read it:
// both backends have Snapshot (the state contract test holds it equal to
// ReadFleet); the service itself no longer reads one.
func snapshotOf(st Store) state.Snapshot {
	return st.(interface{ Snapshot() state.Snapshot }).Snapshot()
}
