package placement

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestAdaptiveNeverRefusesWhatARulePlaces: over many small clusters (1–6
// hosts of 1–6 CPUs, flat or two-level fault domains, upgrade domains or
// none, instances of the service already running, the upgrade domain rule
// soft or hard), adaptive places whenever max-difference or quorum-safe
// does; it uses quorum-safe only where seed 000's conditions call for it or
// max-difference cannot place; and whatever it places keeps the rule it
// reports (issue 24: 4 instances over fd:/dc1 and fd:/dc2 were refused
// under quorum-safe although 2 + 2 is even).
func TestAdaptiveNeverRefusesWhatARulePlaces(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 2024))
	cases, mdPlaced, qsOnly := 0, 0, 0
	for i := range 2000 {
		n := 1 + rng.IntN(6)
		nfd, nud := 1+rng.IntN(3), rng.IntN(3) // nud 0: no upgrade domains
		deep := rng.IntN(3) == 0
		var hs []*Host
		for j := range n {
			fd := fmt.Sprintf("fd:/dc%d", rng.IntN(nfd))
			if deep {
				fd += fmt.Sprintf("/r%d", rng.IntN(2))
			}
			ud := ""
			if nud > 0 {
				ud = fmt.Sprintf("UD%d", rng.IntN(nud))
			}
			h := host(fmt.Sprintf("h%d", j), fd, ud)
			h.Resources = res(h.Name, 1+rng.IntN(6), 16<<10)
			if k := rng.IntN(3); k > 0 && rng.IntN(2) == 0 {
				h.Resources.Instances["svc"] = k // running, never moved
				for c := range min(k, len(h.Resources.CPUs)) {
					h.Resources.CPUs[c].Used = 100
				}
			}
			hs = append(hs, h)
		}
		s := Settings{}
		if rng.IntN(3) == 0 {
			s.Priorities = map[Rule]Priority{RuleUpgradeDomain: Hard}
		}
		count := 1 + rng.IntN(10)
		name := fmt.Sprintf("case %d: %d of svc over %s", i, count, describe(hs))
		plan := func(sp Spread) (*Result, error) {
			r := req("svc", count)
			r.DomainSpread = sp
			out, err := Plan(params, s, hs, r)
			var pe *Error
			if err != nil && (!errors.As(err, &pe) || pe.Invalid) {
				t.Fatalf("%s, %s: %v, want a placement or a refusal", name, sp, err)
			}
			return out, err
		}
		md, mdErr := plan(MaxDifference)
		qs, qsErr := plan(QuorumSafe)
		ad, adErr := plan(Adaptive)
		cases++
		if mdErr == nil {
			mdPlaced++
		}
		if mdErr != nil && qsErr == nil {
			qsOnly++
		}
		switch {
		case mdErr == nil && adErr != nil:
			t.Fatalf("%s: max_difference places %v, adaptive refuses: %v", name, perHost(md), adErr)
		case qsErr == nil && adErr != nil:
			t.Fatalf("%s: quorum_safe places %v, adaptive refuses: %v", name, perHost(qs), adErr)
		case mdErr != nil && qsErr != nil && adErr == nil:
			t.Fatalf("%s: both rules refuse, adaptive places %v", name, perHost(ad))
		case adErr != nil:
			continue
		}
		// What adaptive placed is what the rule it names places.
		want := md
		if ad.Spread == QuorumSafe {
			want = qs
			// Seed 000's conditions, over the hosts with room (a full one
			// is eliminated by capacity before the domain rules run).
			total := count
			var fds, uds []string
			for _, h := range hs {
				if h.Resources.Instances["svc"] < len(h.Resources.CPUs) {
					total += h.Resources.Instances["svc"]
					fds, uds = append(fds, h.FaultDomain), append(uds, h.UpgradeDomain)
				}
			}
			if spreadOrder(Adaptive, total, fds, uds)[0] != QuorumSafe && mdErr == nil {
				t.Fatalf("%s: adaptive chose quorum_safe where seed 000 does not and max_difference places %v", name, perHost(md))
			}
		}
		if want == nil || !maps.Equal(perHost(ad), perHost(want)) || len(ad.Violations) != len(want.Violations) {
			t.Fatalf("%s: adaptive (%s) placed %v %v, the rule alone %+v", name, ad.Spread, perHost(ad), ad.Violations, want)
		}
	}
	// The generator reaches both sides of the property.
	if mdPlaced < cases/4 || qsOnly == 0 {
		t.Fatalf("%d cases, max_difference placed %d, only quorum_safe %d: the cases do not exercise the rule", cases, mdPlaced, qsOnly)
	}
}

// describe is hs as "name(fd,ud,CPUs,running)" for failure messages.
func describe(hs []*Host) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s(%s,%s,%d CPUs,%d running)", h.Name, h.FaultDomain, h.UpgradeDomain, len(h.Resources.CPUs), h.Resources.Instances["svc"]))
	}
	return strings.Join(parts, " ")
}

// TestAdaptiveSpreadTable: the cases issue 24 and seed 000 name.
func TestAdaptiveSpreadTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		hosts  []*Host
		count  int
		spread Spread
		want   map[string]int
	}{
		{name: "2 FDs, 4 instances: 2 + 2 under max-difference", hosts: []*Host{host("a", "fd:/dc1", ""), host("b", "fd:/dc2", "")},
			count: 4, spread: MaxDifference, want: map[string]int{"a": 2, "b": 2}},
		{name: "2 FDs, 2 instances: seed 000 picks quorum-safe, which holds", hosts: []*Host{host("a", "fd:/dc1", ""), host("b", "fd:/dc2", "")},
			count: 2, spread: QuorumSafe, want: map[string]int{"a": 1, "b": 1}},
		{name: "3 FDs, 6 instances: quorum-safe holds with 2 + 2 + 2", hosts: []*Host{host("a", "fd:/dc1", ""), host("b", "fd:/dc2", ""), host("c", "fd:/dc3", "")},
			count: 6, spread: QuorumSafe, want: map[string]int{"a": 2, "b": 2, "c": 2}},
		{name: "2 FDs × 2 UDs on 2 hosts, 8 instances", hosts: []*Host{host("a", "fd:/dc1", "UD1"), host("b", "fd:/dc2", "UD2")},
			count: 8, spread: MaxDifference, want: map[string]int{"a": 4, "b": 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Plan(params, Settings{}, tc.hosts, req("svc", tc.count))
			if err != nil {
				t.Fatalf("adaptive: %v", err)
			}
			if out.Spread != tc.spread || !maps.Equal(perHost(out), tc.want) || len(out.Violations) != 0 {
				t.Errorf("adaptive: %s %v %v; want %s %v without violations", out.Spread, perHost(out), out.Violations, tc.spread, tc.want)
			}
		})
	}
}

// TestCapacityBindsBeforeDomains: when the hosts left cannot take the
// count at all, the refusal names capacity (how many each host takes and
// what runs out), not a domain rule (issue 24: 200 instances over two
// 80-CPU hosts in two fault domains were refused as FaultDomain).
func TestCapacityBindsBeforeDomains(t *testing.T) {
	t.Parallel()
	big := func(name, fd, ud string) *Host {
		h := host(name, fd, ud)
		h.Resources = res(name, 80, 1<<20)
		return h
	}
	for _, tc := range []struct {
		name   string
		hosts  []*Host
		spread Spread
		max    int // max per host
		want   string
	}{
		{name: "adaptive, 2 FDs", hosts: []*Host{big("a", "fd:/dc1", ""), big("b", "fd:/dc2", "")}, want: "the hosts can take 160"},
		{name: "max-difference, 2 FDs", hosts: []*Host{big("a", "fd:/dc1", ""), big("b", "fd:/dc2", "")}, spread: MaxDifference, want: "the hosts can take 160"},
		{name: "quorum-safe, 2 FDs × 2 UDs", hosts: []*Host{big("a", "fd:/dc1", "UD1"), big("b", "fd:/dc2", "UD2")}, spread: QuorumSafe, want: "the hosts can take 160"},
		{name: "max per host binds", hosts: []*Host{big("a", "fd:/dc1", ""), big("b", "fd:/dc2", "")}, max: 50, want: "the hosts can take 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req("big", 200)
			r.DomainSpread, r.MaxPerHost = tc.spread, tc.max
			_, err := Plan(params, Settings{}, tc.hosts, r)
			var pe *Error
			if !errors.As(err, &pe) || pe.Invalid {
				t.Fatalf("err = %v, want a refusal", err)
			}
			if pe.Alloc == nil || !strings.Contains(pe.Message, tc.want) || hasRule(pe.Eliminations, RuleFaultDomain) || hasRule(pe.Eliminations, RuleUpgradeDomain) ||
				!slices.ContainsFunc(pe.Eliminations, func(e Elimination) bool { return e.Rule == RuleCapacity }) {
				t.Errorf("refusal %q, eliminations %+v; want capacity (%q) without a domain rule", pe.Message, pe.Eliminations, tc.want)
			}
		})
	}
}

// spreadTree is the fault domain tree of the usable hosts as the spread
// rules read it (docs/PLACEMENT.md): a domain's children are its
// sub-domains and the hosts directly in it; a host without a fault domain
// is a top-level domain of its own. parent maps a node ("fd:dc1/r1", or
// "host:NAME" for a host) to its parent ("" is the root); hosts maps a node
// to the hosts under it.
func spreadTree(hs []*Host) (parent map[string]string, hosts map[string][]int) {
	parent, hosts = map[string]string{}, map[string][]int{}
	for i, h := range hs {
		up := ""
		for _, lv := range FaultLevels(h.FaultDomain) {
			parent["fd:"+lv] = up
			hosts["fd:"+lv] = append(hosts["fd:"+lv], i)
			up = "fd:" + lv
		}
		parent["host:"+h.Name] = up
		hosts["host:"+h.Name] = []int{i}
	}
	return parent, hosts
}

// spreadHolds is the rule's definition over the final new counts c (hosts
// with existing instances ex and room):
//
//   - max_difference: for any two children X, Y of one parent, if X
//     receives new instances and Y still has room, X ends at most one
//     above Y;
//   - quorum_safe: a domain (or host) that receives new instances and does
//     not hold every host ends with at most max(1, ceil(T/2)-1) of the T
//     instances, a host with at most ceil(T/hosts) as well.
func spreadHolds(hs []*Host, ex, room, c []int, quorum bool) bool {
	parent, under := spreadTree(hs)
	total, recv, left := map[string]int{}, map[string]bool{}, map[string]bool{}
	T := 0
	for node, idx := range under {
		for _, i := range idx {
			total[node] += ex[i] + c[i]
			recv[node] = recv[node] || c[i] > 0
			left[node] = left[node] || c[i] < room[i]
		}
	}
	for i := range hs {
		T += ex[i] + c[i]
	}
	for x, px := range parent {
		if !recv[x] {
			continue
		}
		if quorum {
			limit := max(1, (T+1)/2-1)
			if strings.HasPrefix(x, "host:") {
				limit = max(1, min(limit, (T+len(hs)-1)/len(hs)))
			}
			if len(under[x]) < len(hs) && total[x] > limit {
				return false
			}
			continue
		}
		for y, py := range parent {
			if py == px && left[y] && total[x] > total[y]+1 {
				return false
			}
		}
	}
	return true
}

// bruteSpread lists every vector of new counts (k in all, within the
// rooms) that keeps the rule.
func bruteSpread(hs []*Host, ex, room []int, k int, quorum bool) [][]int {
	var out [][]int
	c := make([]int, len(hs))
	var rec func(i, left int)
	rec = func(i, left int) {
		if i == len(hs) {
			if left == 0 && spreadHolds(hs, ex, room, c, quorum) {
				out = append(out, slices.Clone(c))
			}
			return
		}
		for v := 0; v <= min(room[i], left); v++ {
			c[i] = v
			rec(i+1, left-v)
		}
		c[i] = 0
	}
	rec(0, k)
	return out
}

// TestSpreadMatchesBruteForce: over random fault domain trees (1–8 hosts,
// 1–3 levels, some hosts without a fault domain, 1–4 CPUs of room, the
// service's instances already running on some), Plan places k instances
// under max_difference (quorum_safe) iff some vector of counts within the
// rooms keeps the rule's definition, and what it places keeps it.
// Unbalanced trees were refused (3 hosts, a and c in fd:/dc1, b in
// fd:/dc2: 6 to 10 instances refused although 7 = a2 c2 b3 holds).
func TestSpreadMatchesBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 2026))
	placed, refused := map[bool]int{}, map[bool]int{}
	for i := range 1500 {
		n := 1 + rng.IntN(8)
		depth := 1 + rng.IntN(3)
		var hs []*Host
		var ex, room []int
		for j := range n {
			fd := ""
			if rng.IntN(4) > 0 {
				for range 1 + rng.IntN(depth) {
					fd += fmt.Sprintf("/%c", 'x'+rng.IntN(2))
				}
				fd = "fd:" + fd
			}
			h := host(fmt.Sprintf("h%d", j), fd, "")
			cpus := 1 + rng.IntN(4)
			h.Resources = res(h.Name, cpus, 16<<10)
			e := 0
			if rng.IntN(3) == 0 {
				e = rng.IntN(cpus + 1)
				h.Resources.Instances["svc"] = e
				for c := range e {
					h.Resources.CPUs[c].Used = 100
				}
			}
			hs = append(hs, h)
			if e < cpus { // a full host is eliminated before the domain rules
				ex, room = append(ex, e), append(room, cpus-e)
			}
		}
		var usable []*Host
		for _, h := range hs {
			if h.Resources.Instances["svc"] < len(h.Resources.CPUs) {
				usable = append(usable, h)
			}
		}
		if !slices.ContainsFunc(usable, func(h *Host) bool { return h.FaultDomain != "" }) {
			continue // no fault domain among the usable hosts: the rule is off
		}
		roomAll := 0
		for _, r := range room {
			roomAll += r
		}
		k := 1 + rng.IntN(roomAll+1) // roomAll+1: refused for capacity
		for _, quorum := range []bool{false, true} {
			sp := MaxDifference
			if quorum {
				sp = QuorumSafe
			}
			name := fmt.Sprintf("case %d: %d of svc over %s, %s", i, k, describe(hs), sp)
			want := bruteSpread(usable, ex, room, k, quorum)
			if !quorum && k <= roomAll && len(want) == 0 {
				t.Fatalf("%s: no vector keeps max_difference although the rooms take %d", name, roomAll)
			}
			r := req("svc", k)
			r.DomainSpread = sp
			out, err := Plan(params, Settings{}, hs, r)
			var pe *Error
			if err != nil && (!errors.As(err, &pe) || pe.Invalid) {
				t.Fatalf("%s: %v, want a placement or a refusal", name, err)
			}
			if err != nil {
				refused[quorum]++
				if len(want) > 0 {
					t.Fatalf("%s: refused (%v), but %v keeps the rule", name, err, want[0])
				}
				continue
			}
			placed[quorum]++
			got := make([]int, len(usable))
			per := perHost(out)
			for j, h := range usable {
				got[j] = per[h.Name]
			}
			if len(want) == 0 || !spreadHolds(usable, ex, room, got, quorum) || len(out.Violations) > 0 {
				t.Fatalf("%s: placed %v %v, which does not keep the rule (%d vectors do)", name, per, out.Violations, len(want))
			}
		}
	}
	for _, q := range []bool{false, true} {
		if placed[q] < 100 || refused[q] < 20 { // max_difference: only for capacity
			t.Fatalf("quorum %v: %d placed, %d refused: the cases do not exercise the rule", q, placed[q], refused[q])
		}
	}
}

// TestUnbalancedFaultDomains: the layouts of the report (empty 80-CPU
// hosts, 1-CPU instances, adaptive): every count up to 16 places, the
// counts of the children of each parent differ by at most one, and the
// hosts without a fault domain are top-level domains of their own. Today
// 6–10 over a, c in dc1 and b in dc2 were refused.
func TestUnbalancedFaultDomains(t *testing.T) {
	t.Parallel()
	big := func(name, fd string) *Host {
		h := host(name, fd, "")
		h.Resources = res(name, 80, 1<<20)
		return h
	}
	for _, tc := range []struct {
		name  string
		hosts []*Host
		want  map[int]map[string]int // some counts and what they place
	}{
		{name: "a, c in dc1; b in dc2", hosts: []*Host{big("a", "fd:/dc1"), big("b", "fd:/dc2"), big("c", "fd:/dc1")},
			want: map[int]map[string]int{6: {"a": 2, "c": 1, "b": 3}, 7: {"a": 2, "c": 2, "b": 3}, 10: {"a": 3, "c": 2, "b": 5}}},
		{name: "a, e in dc1/r1; c in dc1/r2; b, d in dc2/r1", hosts: []*Host{big("a", "fd:/dc1/r1"), big("b", "fd:/dc2/r1"), big("c", "fd:/dc1/r2"), big("d", "fd:/dc2/r1"), big("e", "fd:/dc1/r1")},
			want: map[int]map[string]int{6: {"a": 1, "e": 1, "c": 1, "b": 2, "d": 1}, 16: {"a": 2, "e": 2, "c": 4, "b": 4, "d": 4}}},
		{name: "a in dc1, b in dc2, c-f without", hosts: []*Host{big("a", "fd:/dc1"), big("b", "fd:/dc2"), big("c", ""), big("d", ""), big("e", ""), big("f", "")},
			want: map[int]map[string]int{5: {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, 7: {"a": 2, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}, 8: {"a": 2, "b": 2, "c": 1, "d": 1, "e": 1, "f": 1}}},
		{name: "a in dc1, b in dc2, c, d without", hosts: []*Host{big("a", "fd:/dc1"), big("b", "fd:/dc2"), big("c", ""), big("d", "")},
			want: map[int]map[string]int{8: {"a": 2, "b": 2, "c": 2, "d": 2}, 9: {"a": 3, "b": 2, "c": 2, "d": 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex, room := make([]int, len(tc.hosts)), make([]int, len(tc.hosts))
			for i := range room {
				room[i] = 80
			}
			for count := 1; count <= 16; count++ {
				out, err := Plan(params, Settings{}, tc.hosts, req("q", count))
				if err != nil {
					t.Fatalf("%d instances: %v", count, err)
				}
				per := perHost(out)
				c := make([]int, len(tc.hosts))
				for i, h := range tc.hosts {
					c[i] = per[h.Name]
				}
				if !spreadHolds(tc.hosts, ex, room, c, out.Spread == QuorumSafe) || len(out.Violations) > 0 {
					t.Errorf("%d instances: %s %v %v does not keep the rule", count, out.Spread, per, out.Violations)
				}
				if w, ok := tc.want[count]; ok && !maps.Equal(per, w) {
					t.Errorf("%d instances: %s %v, want %v", count, out.Spread, per, w)
				}
			}
		})
	}
}
