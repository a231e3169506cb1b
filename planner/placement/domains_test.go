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
