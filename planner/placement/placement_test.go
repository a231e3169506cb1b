package placement

import (
	"errors"
	"fmt"
	"github.com/pinfold/pinfold/planner/model"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
)

var params = alloc.DefaultParams()

// res is a host of cpus whole CPUs and mem MiB, without NUMA information.
func res(name string, cpus int, memMiB int64) *alloc.Host {
	h := &alloc.Host{Name: name, MemoryBytes: memMiB << 20, Instances: map[string]int{}}
	for i := range cpus {
		h.CPUs = append(h.CPUs, alloc.CPU{ID: cpuset.CPUID(i), Capacity: 100})
	}
	return h
}

func host(name, fd, ud string) *Host {
	return &Host{Name: name, FaultDomain: fd, UpgradeDomain: ud, Resources: res(name, 8, 16<<10)}
}

func req(svc string, count int) Request {
	return Request{Request: alloc.Request{Service: svc, Count: count, Pieces: 100, Bind: true, MemoryBytes: 1 << 30}}
}

func perHost(r *Result) map[string]int {
	m := map[string]int{}
	for _, p := range r.Placements {
		m[p.Host]++
	}
	return m
}

// seedLayout is seed 000's FD×UD table: N1–N5 on the diagonal, then N6
// (FD0/UD1), N7 (FD1/UD2), N8 (FD2/UD3).
func seedLayout(n int) []*Host {
	at := [][2]int{{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {0, 1}, {1, 2}, {2, 3}}
	var hs []*Host
	for i := range n {
		hs = append(hs, host(fmt.Sprintf("N%d", i+1), fmt.Sprintf("fd:/FD%d", at[i][0]), fmt.Sprintf("UD%d", at[i][1])))
	}
	return hs
}

// domainCountsOf tallies a placement by fault and upgrade domain.
func domainCountsOf(hs []*Host, got map[string]int) (fd, ud map[string]int) {
	fd, ud = map[string]int{}, map[string]int{}
	for _, h := range hs {
		fd[h.FaultDomain] += got[h.Name]
		ud[h.UpgradeDomain] += got[h.Name]
	}
	return fd, ud
}

func spreadOf(m map[string]int) int {
	lo, hi := 1<<30, 0
	for _, v := range m {
		lo, hi = min(lo, v), max(hi, v)
	}
	return hi - lo
}

// TestSeedMaxDifference: 6 hosts on 5 FD × 5 UD, 5 instances under the
// max-difference rule: N1–N5 take one each, N6 is never used, whatever
// the preferred order.
func TestSeedMaxDifference(t *testing.T) {
	t.Parallel()
	hs := seedLayout(6)
	for _, order := range [][]string{nil, {"N6", "N1", "N2", "N3", "N4", "N5"}, {"N6", "N5", "N4", "N3", "N2", "N1"}, {"N2", "N6"}} {
		r := req("svc", 5)
		r.DomainSpread, r.Policy, r.HostsOrder = MaxDifference, NodesOrder, order
		out, err := Plan(params, Settings{}, hs, r)
		if err != nil {
			t.Fatalf("order %v: %v", order, err)
		}
		want := map[string]int{"N1": 1, "N2": 1, "N3": 1, "N4": 1, "N5": 1}
		if got := perHost(out); !maps.Equal(got, want) {
			t.Errorf("order %v: placed %v, want %v (N6 never used)", order, got, want)
		}
	}
	// Every preference order of the six hosts: N6 is never used.
	var perm func(names []string, k int)
	perms := 0
	perm = func(names []string, k int) {
		if k == len(names) {
			perms++
			r := req("svc", 5)
			r.DomainSpread, r.Policy, r.HostsOrder = MaxDifference, NodesOrder, names
			out, err := Plan(params, Settings{}, hs, r)
			if err != nil || perHost(out)["N6"] != 0 {
				t.Fatalf("order %v: N6 used or error %v", names, err)
			}
			return
		}
		for i := k; i < len(names); i++ {
			names[k], names[i] = names[i], names[k]
			perm(names, k+1)
			names[k], names[i] = names[i], names[k]
		}
	}
	perm([]string{"N1", "N2", "N3", "N4", "N5", "N6"}, 0)
	if perms != 720 {
		t.Fatalf("%d orders tried", perms)
	}
}

// TestSeedAdaptive: with 8 hosts the adaptive rule switches to quorum-safe
// (5 instances, 5 FDs, 5 UDs, 8 ≤ 25 hosts), so N6–N8 become usable; with 4
// instances, or with N1 gone (4 UDs), it is max-difference again.
func TestSeedAdaptive(t *testing.T) {
	t.Parallel()
	hs := seedLayout(8)
	r := req("svc", 5)
	r.Policy, r.HostsOrder = NodesOrder, []string{"N6", "N7", "N8"}
	out, err := Plan(params, Settings{}, hs, r)
	if err != nil {
		t.Fatal(err)
	}
	got := perHost(out)
	if out.Spread != QuorumSafe || got["N6"] != 1 || got["N7"] != 1 || got["N8"] != 1 {
		t.Errorf("adaptive with 8 hosts: %s, placed %v; want quorum_safe using N6, N7 and N8", out.Spread, got)
	}
	fd, ud := domainCountsOf(hs, got)
	for d, n := range fd {
		if n > 2 {
			t.Errorf("quorum-safe: %s holds %d of 5 (a majority)", d, n)
		}
	}
	for d, n := range ud {
		if n > 2 {
			t.Errorf("quorum-safe: %s holds %d of 5 (a majority)", d, n)
		}
	}
	// Under max-difference the same preference cannot use N6–N8 for 5.
	r.DomainSpread = MaxDifference
	out, err = Plan(params, Settings{}, hs, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := perHost(out); got["N6"]+got["N7"]+got["N8"] != 0 {
		t.Errorf("max-difference with 8 hosts placed %v; N6–N8 must stay unused", got)
	}
	// 4 instances: not divisible by 5 → max-difference.
	r = req("svc", 4)
	r.Policy, r.HostsOrder = NodesOrder, []string{"N6", "N7", "N8"}
	out, err = Plan(params, Settings{}, hs, r)
	if err != nil {
		t.Fatal(err)
	}
	fd, ud = domainCountsOf(hs, perHost(out))
	if out.Spread != MaxDifference || spreadOf(fd) > 1 || spreadOf(ud) > 1 || len(fd) != 5 {
		t.Errorf("4 instances: %s, FD %v UD %v; want max_difference", out.Spread, fd, ud)
	}
	// N1 removed: UD0 disappears, 5 is not divisible by 4 UDs → max-difference;
	// FD0 then has only N6, FD3 only N4: both used (the seed's R1 lands on N4).
	hs7 := hs[1:]
	out, err = Plan(params, Settings{}, hs7, req("svc", 5))
	if err != nil {
		t.Fatal(err)
	}
	got = perHost(out)
	fd, ud = domainCountsOf(hs7, got)
	if out.Spread != MaxDifference || spreadOf(fd) != 0 || spreadOf(ud) > 1 || got["N4"] != 1 || got["N6"] != 1 {
		t.Errorf("without N1: %s, placed %v, FD %v UD %v", out.Spread, got, fd, ud)
	}
}

// TestDomainsHierarchyAndPriorities: fault domains are compared level by
// level; the upgrade domain rule is soft by default and gives way (reported),
// the fault domain rule is hard and fails with an elimination report.
func TestDomainsHierarchyAndPriorities(t *testing.T) {
	t.Parallel()
	hs := []*Host{host("a", "fd:/dc1/r1", "UD1"), host("b", "fd:/dc1/r2", "UD1"), host("c", "fd:/dc2/r1", "UD1"), host("d", "fd:/dc2/r2", "UD2")}
	out, err := Plan(params, Settings{}, hs, req("svc", 2))
	if err != nil {
		t.Fatal(err)
	}
	got := perHost(out)
	if got["a"]+got["b"] != 1 || got["c"]+got["d"] != 1 {
		t.Errorf("2 instances over dc1 and dc2: %v, want one in each data center", got)
	}
	// 3 instances, 2 data centers, 4 racks: racks 1 each, DCs 2/1; UD1 has
	// 3 hosts, UD2 1: counts 2/1 fit max-difference.
	out, err = Plan(params, Settings{}, hs, req("svc", 3))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Violations) != 0 {
		t.Errorf("3 instances: violations %v", out.Violations)
	}
	// One UD holds everything (a single domain is not a spread): no
	// violation under either rule.
	hs2 := []*Host{host("a", "fd:/dc1", "UD1"), host("b", "fd:/dc2", "UD1"), host("c", "fd:/dc3", "UD2")}
	hs2[2].Resources = res("c", 0, 0) // full: UD2 has no usable host
	out, err = Plan(params, Settings{}, hs2, req("svc", 2))
	if err != nil || len(out.Violations) != 0 {
		t.Errorf("one usable UD: %v, violations %v", err, out)
	}
	// The fault domain rule forces b (dc2 is behind), which packs UD1 while
	// UD2 (d) has room: the soft UD rule gives way, and says so.
	hs3 := []*Host{host("a", "fd:/dc1", "UD1"), host("b", "fd:/dc2", "UD1"), host("d", "fd:/dc1", "UD2")}
	hs3[0].Resources.Instances["svc"] = 1
	out, err = Plan(params, Settings{}, hs3, req("svc", 1))
	if err != nil {
		t.Fatalf("soft UD: %v", err)
	}
	if got := perHost(out); got["b"] != 1 || len(out.Violations) != 1 || out.Violations[0].Rule != RuleUpgradeDomain {
		t.Errorf("placed %v, violations %v; want b with UpgradeDomain given way", got, out.Violations)
	}
	// With the UD rule hard it cannot be placed; the report names it.
	_, err = Plan(params, Settings{Priorities: map[Rule]Priority{RuleUpgradeDomain: Hard}}, hs3, req("svc", 1))
	var pe *Error
	if !errors.As(err, &pe) || !hasRule(pe.Eliminations, RuleUpgradeDomain) {
		t.Errorf("UD hard: err = %v, want an elimination by UpgradeDomain", err)
	}
	// Quorum-safe, 4 over 2 FDs × 2 UDs on 2 hosts: no FD may hold 2 of 4,
	// so only 2 fit: the hard FD rule refuses, with the report.
	hs4 := []*Host{host("a", "fd:/dc1", "UD1"), host("b", "fd:/dc2", "UD2")}
	qs4 := req("svc", 4)
	qs4.DomainSpread = QuorumSafe
	_, err = Plan(params, Settings{}, hs4, qs4)
	if !errors.As(err, &pe) || pe.Invalid || !hasRule(pe.Eliminations, RuleFaultDomain) {
		t.Fatalf("err = %v, want an elimination by FaultDomain", err)
	}
	// FD soft: it packs, and says so.
	out, err = Plan(params, Settings{Priorities: map[Rule]Priority{RuleFaultDomain: Soft}}, hs4, qs4)
	if err != nil || !slices.ContainsFunc(out.Violations, func(v Violation) bool { return v.Rule == RuleFaultDomain }) {
		t.Errorf("FD soft: %v %v", err, out)
	}
	// With the domain rules off, it places.
	if _, err := Plan(params, Settings{Priorities: map[Rule]Priority{RuleFaultDomain: Off, RuleUpgradeDomain: Off}}, hs4, qs4); err != nil {
		t.Errorf("domains off: %v", err)
	}
	// Adaptive (seed 000's conditions pick quorum-safe here) falls back to
	// max-difference, which places 2 + 2, without a violation (issue 24).
	out, err = Plan(params, Settings{}, hs4, req("svc", 4))
	if err != nil || out.Spread != MaxDifference || len(out.Violations) != 0 || !maps.Equal(perHost(out), map[string]int{"a": 2, "b": 2}) {
		t.Errorf("adaptive, 4 over 2 FDs: %v %+v; want max_difference placing 2 + 2", err, out)
	}
}

func hasRule(es []Elimination, r Rule) bool {
	return slices.ContainsFunc(es, func(e Elimination) bool { return e.Rule == r && len(e.Hosts) > 0 })
}

// TestSeedAffinity reproduces seed 003's affinity tables on n1, n2 (svc1
// is the other service; the policy is nodes_order).
func TestSeedAffinity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		svc1On    []string // hosts where svc1 runs
		order     []string
		aff, anti model.Affinity
		want      string // host the instance lands on; "" = not placed
		violation bool
	}{
		{"hard affinity follows svc1", []string{"n1"}, []string{"n2", "n1"}, model.Affinity{Hard: []string{"svc1"}}, model.Affinity{}, "n1", false},
		{"hard affinity, svc1 down everywhere", nil, []string{"n1", "n2"}, model.Affinity{Hard: []string{"svc1"}}, model.Affinity{}, "", false},
		{"hard anti-affinity avoids svc1", []string{"n1"}, []string{"n1", "n2"}, model.Affinity{}, model.Affinity{Hard: []string{"svc1"}}, "n2", false},
		{"hard anti-affinity, svc1 everywhere", []string{"n1", "n2"}, []string{"n1", "n2"}, model.Affinity{}, model.Affinity{Hard: []string{"svc1"}}, "", false},
		{"soft affinity follows svc1", []string{"n1"}, []string{"n2", "n1"}, model.Affinity{Soft: []string{"svc1"}}, model.Affinity{}, "n1", false},
		{"soft affinity, svc1 down: best effort by order", nil, []string{"n2", "n1"}, model.Affinity{Soft: []string{"svc1"}}, model.Affinity{}, "n2", true},
		{"soft anti-affinity avoids svc1", []string{"n1"}, []string{"n1", "n2"}, model.Affinity{}, model.Affinity{Soft: []string{"svc1"}}, "n2", false},
		{"soft anti-affinity, svc1 everywhere: best effort", []string{"n1", "n2"}, []string{"n1", "n2"}, model.Affinity{}, model.Affinity{Soft: []string{"svc1"}}, "n1", true},
	}
	for _, tt := range tests {
		hs := []*Host{host("n1", "", ""), host("n2", "", "")}
		for _, h := range hs {
			if slices.Contains(tt.svc1On, h.Name) {
				h.Resources.Instances["svc1"] = 1
			}
		}
		r := req("svc2", 1)
		r.Policy, r.HostsOrder, r.Affinity, r.AntiAffinity = NodesOrder, tt.order, tt.aff, tt.anti
		out, err := Plan(params, Settings{}, hs, r)
		if tt.want == "" {
			var pe *Error
			if !errors.As(err, &pe) || !hasRule(pe.Eliminations, RuleAffinity) {
				t.Errorf("%s: err = %v, want an elimination by Affinity", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := out.Placements[0].Host; got != tt.want {
			t.Errorf("%s: placed on %s, want %s", tt.name, got, tt.want)
		}
		if v := slices.ContainsFunc(out.Violations, func(v Violation) bool { return v.Rule == RuleAffinity }); v != tt.violation {
			t.Errorf("%s: affinity violation reported = %v, want %v", tt.name, v, tt.violation)
		}
	}
}

// TestSeedConstraintAndElimination: seed 000's constraint on seed 000's
// properties, and the elimination report in rule order when nothing fits.
func TestSeedConstraintAndElimination(t *testing.T) {
	t.Parallel()
	n1 := host("n1", "", "")
	n1.Type, n1.Properties = "NodeType01", map[string]Value{"HasSSD": BoolVal(true), "NodeColor": Str("green"), "SomeProperty": IntVal(5)}
	n2 := host("n2", "", "")
	n2.Properties = map[string]Value{"HasSSD": BoolVal(false), "SomeProperty": IntVal(9)}
	n3 := host("n3", "", "") // no properties
	r := req("svc", 2)
	r.Constraint = "HasSSD == true && SomeProperty >= 4"
	out, err := Plan(params, Settings{}, []*Host{n1, n2, n3}, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := perHost(out); !maps.Equal(got, map[string]int{"n1": 2}) {
		t.Errorf("placed %v, want both on n1", got)
	}
	if e := out.Eliminations[2]; e.Rule != RulePlacementConstraint || !slices.Equal(e.Hosts, []string{"n2", "n3"}) {
		t.Errorf("elimination %+v, want PlacementConstraint [n2 n3]", e)
	}
	r.Constraint = "NodeType == NodeType01"
	if out, err := Plan(params, Settings{}, []*Host{n1, n2, n3}, r); err != nil || perHost(out)["n1"] != 2 {
		t.Errorf("NodeType == NodeType01: %v", err)
	}

	// Nothing fits: every rule's eliminations, in order.
	d, m, c, full := host("d", "", ""), host("m", "", ""), host("c", "", ""), host("f", "", "")
	d.Disabled, m.Maintenance = true, true
	c.Properties = map[string]Value{"HasSSD": BoolVal(false)}
	full.Properties = map[string]Value{"HasSSD": BoolVal(true)}
	full.Resources = res("f", 0, 1024)
	r = req("svc", 1)
	r.Constraint = "HasSSD == true"
	_, err = Plan(params, Settings{}, []*Host{d, m, c, full}, r)
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := []Elimination{{Rule: RuleDisabled, Hosts: []string{"d"}}, {Rule: RuleMaintenance, Hosts: []string{"m"}},
		{Rule: RulePlacementConstraint, Hosts: []string{"c"}}, {Rule: RuleAffinity, Hosts: []string{}}, {Rule: RuleCapacity, Hosts: []string{"f"}}}
	if fmt.Sprint(pe.Eliminations) != fmt.Sprint(want) {
		t.Errorf("eliminations = %v, want %v", pe.Eliminations, want)
	}
	if rep := Report(pe.Eliminations); !strings.Contains(rep, "PlacementConstraint  1 eliminated: c") {
		t.Errorf("report:\n%s", rep)
	}
	// A soft placement constraint gives way and says so.
	_, err = Plan(params, Settings{Priorities: map[Rule]Priority{RulePlacementConstraint: Soft}}, []*Host{c, host("g", "", "")}, r)
	if err != nil {
		t.Errorf("soft constraint: %v", err)
	}
	// Several soft rules give way one at a time, the last applied first:
	// when the buffer alone was in the way, the constraint still holds.
	both := Settings{Priorities: map[Rule]Priority{RulePlacementConstraint: Soft, RuleCapacity: Soft}, Buffer: map[string]float64{"memory": 0.5}}
	ssd := host("ssd", "", "")
	ssd.Properties = map[string]Value{"HasSSD": BoolVal(true)}
	ssd.Resources = res("ssd", 8, 1536) // 768 MiB outside the buffer, 1.5 GiB with it
	out, err = Plan(params, both, []*Host{ssd, host("plain", "", "")}, r)
	if err != nil || out.Placements[0].Host != "ssd" || len(out.Violations) != 1 || out.Violations[0].Rule != RuleCapacity {
		t.Errorf("buffer in the way: %v, %v; want ssd with only Capacity given way", out, err)
	}
	ssd.Resources = res("ssd", 8, 512) // too small even with its buffer
	out, err = Plan(params, both, []*Host{ssd, host("plain", "", "")}, r)
	if err != nil || out.Placements[0].Host != "plain" || !slices.ContainsFunc(out.Violations, func(v Violation) bool { return v.Rule == RulePlacementConstraint }) {
		t.Errorf("ssd too small: %v, %v; want plain with PlacementConstraint given way", out, err)
	}
	// Bad constraint: an invalid error naming the column.
	r.Constraint = "HasSSD = true"
	if _, err := Plan(params, Settings{}, []*Host{n1}, r); !errors.As(err, &pe) || !pe.Invalid || !strings.Contains(err.Error(), "column 8") {
		t.Errorf("bad constraint: %v", err)
	}
}

// TestSeedBufferAndOverbooking: seed 000's arithmetic. With capacity 100
// and a 20% buffer, normal placement uses 80 and replacements 100; with 20%
// overbooking, normal placement uses 100 and replacements 120.
func TestSeedBufferAndOverbooking(t *testing.T) {
	t.Parallel()
	// count is the most instances one request can place (binary search).
	count := func(s Settings, useBuffer bool, r Request, h *alloc.Host) int {
		t.Helper()
		lo, hi := 0, 2000
		for lo < hi {
			mid := (lo + hi + 1) / 2
			r.Count, r.UseBuffer, r.Strategy = mid, useBuffer, alloc.Auto
			if _, err := Plan(params, s, []*Host{{Name: h.Name, Resources: h}}, r); err == nil {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo
	}
	mem := Request{Request: alloc.Request{Service: "m", Pieces: 1, MemoryBytes: 1 << 20}} // memory-first, 1 MiB
	cpu := Request{Request: alloc.Request{Service: "c", Pieces: 20, Bind: true, MemoryBytes: 1 << 20}}
	memHost := res("h", 4, 100)
	cpuHost := res("h", 10, 1<<20)
	// The hosts carry capacity memos, as the planner's cached hosts do: the
	// buffered and overbooked copies must not answer from them.
	memHost.Memo, cpuHost.Memo = alloc.NewCapacityMemo(), alloc.NewCapacityMemo()
	for _, tt := range []struct {
		name         string
		s            Settings
		r            Request
		h            *alloc.Host
		normal, full int
	}{
		{"memory buffer 20%", Settings{Buffer: map[string]float64{"memory": 0.2}}, mem, memHost, 80, 100},
		{"memory overbooking 20%", Settings{Overbooking: map[string]float64{"memory": 0.2}}, mem, memHost, 100, 120},
		{"cpu buffer 20% (0.2-CPU instances)", Settings{Buffer: map[string]float64{"cpu": 0.2}}, cpu, cpuHost, 40, 50},
		{"cpu overbooking 20%", Settings{Overbooking: map[string]float64{"cpu": 0.2}}, cpu, cpuHost, 50, 60},
	} {
		if n := count(tt.s, false, tt.r, tt.h); n != tt.normal {
			t.Errorf("%s: normal placement takes %d, want %d", tt.name, n, tt.normal)
		}
		if n := count(tt.s, true, tt.r, tt.h); n != tt.full {
			t.Errorf("%s: with the buffer usable takes %d, want %d", tt.name, n, tt.full)
		}
	}
	for _, s := range []Settings{
		{Buffer: map[string]float64{"cpu": 0.1}, Overbooking: map[string]float64{"cpu": 0.1}},
		{Buffer: map[string]float64{"disk": 0.1}},
		{Buffer: map[string]float64{"memory": 1}},
		{Overbooking: map[string]float64{"memory": -2}},
		{Priorities: map[Rule]Priority{"Gravity": 0}},
		{Priorities: map[Rule]Priority{RuleAffinity: 3}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("settings %+v accepted", s)
		}
	}
	if err := (Settings{Overbooking: map[string]float64{"memory": -1}}).Validate(); err != nil {
		t.Errorf("unlimited overbooking refused: %v", err)
	}
}

// TestPolicies: nodes_order, load_avg and spread rank the allowed hosts;
// spread is stable for a service name.
func TestPolicies(t *testing.T) {
	t.Parallel()
	mk := func() []*Host {
		var hs []*Host
		for i, l := range []float64{0.9, 0.1, 0.5, 0.3} {
			h := host(fmt.Sprintf("h%d", i+1), "", "")
			h.LoadAvg = l
			hs = append(hs, h)
		}
		return hs
	}
	first := func(r Request) string {
		out, err := Plan(params, Settings{}, mk(), r)
		if err != nil {
			t.Fatal(err)
		}
		return out.Placements[0].Host
	}
	r := req("web", 1)
	r.Policy, r.HostsOrder = NodesOrder, []string{"h3", "h1"}
	if got := first(r); got != "h3" {
		t.Errorf("nodes_order [h3 h1]: %s", got)
	}
	r.Policy, r.HostsOrder = LoadAvg, nil
	if got := first(r); got != "h2" {
		t.Errorf("load_avg: %s, want h2 (0.1)", got)
	}
	r.Policy = SpreadRank
	a, b := first(r), first(r)
	if a != b {
		t.Errorf("spread is not stable: %s then %s", a, b)
	}
	seen := map[string]bool{}
	for i := range 20 {
		r.Service = fmt.Sprintf("svc%d", i)
		seen[first(r)] = true
	}
	if len(seen) < 3 {
		t.Errorf("spread over 20 services used only %v as first host", seen)
	}
	r.Policy = "random"
	if _, err := Plan(params, Settings{}, mk(), r); err == nil {
		t.Errorf("unknown policy accepted")
	}
}

// TestSeedPriorities: seed 001's default priorities, and its example of
// making affinity soft so that it gives way to capacity.
func TestSeedPriorities(t *testing.T) {
	t.Parallel()
	want := map[Rule]Priority{"PlacementConstraint": 0, "NodeCapacity": 0, "Affinity": 0, "FaultDomain": 0, "UpgradeDomain": 1, "PreferredLocation": 2}
	if !maps.Equal(DefaultPriorities, want) {
		t.Errorf("defaults = %v, want seed 001's %v", DefaultPriorities, want)
	}
	n1, n2 := host("n1", "", ""), host("n2", "", "")
	n1.Resources.Instances["svc1"] = 1
	n1.Resources.CPUs = nil // full
	r := req("svc2", 1)
	r.Affinity = model.Affinity{Hard: []string{"svc1"}}
	var pe *Error
	if _, err := Plan(params, Settings{}, []*Host{n1, n2}, r); !errors.As(err, &pe) || !hasRule(pe.Eliminations, RuleAffinity) || !hasRule(pe.Eliminations, RuleCapacity) {
		t.Errorf("hard affinity to a full host: %v, want eliminations by Affinity and NodeCapacity", err)
	}
	out, err := Plan(params, Settings{Priorities: map[Rule]Priority{RuleAffinity: Soft}}, []*Host{n1, n2}, r)
	if err != nil {
		t.Fatalf("soft affinity: %v", err)
	}
	if out.Placements[0].Host != "n2" || !slices.ContainsFunc(out.Violations, func(v Violation) bool { return v.Rule == RuleAffinity }) {
		t.Errorf("soft affinity: placed on %s, violations %v; want n2 with Affinity given way", out.Placements[0].Host, out.Violations)
	}
}
