package placement

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Spread is how a service's instances are spread over fault and upgrade
// domains (seed 000).
type Spread string

const (
	// Adaptive is max-difference, switching to quorum-safe when the
	// service's instance count is divisible by the number of fault domains
	// and by the number of upgrade domains, and there are no more hosts
	// than fault domains × upgrade domains (Service Fabric ≥ 6.2 default),
	// and falling back to the other rule when the one chosen cannot place:
	// adaptive refuses only what both rules refuse.
	Adaptive Spread = "adaptive"
	// MaxDifference: at every domain level, the service's instance counts
	// of any two domains with usable hosts differ by at most one.
	MaxDifference Spread = "max_difference"
	// QuorumSafe: no single domain holds a majority of the instances: at
	// most ceil(T/2)-1 of T (at least 1).
	QuorumSafe Spread = "quorum_safe"
	// SpreadOff ignores domains.
	SpreadOff Spread = "off"
)

// ParseSpread accepts a spread name; "" means Adaptive.
func ParseSpread(s string) (Spread, error) {
	switch Spread(s) {
	case "":
		return Adaptive, nil
	case Adaptive, MaxDifference, QuorumSafe, SpreadOff:
		return Spread(s), nil
	}
	return "", fmt.Errorf("domain_spread = %q: want adaptive, max_difference, quorum_safe or off", s)
}

// FaultLevels splits a hierarchical fault domain "fd:/dc1/rack2" into its
// levels: ["dc1", "dc1/rack2"]. The "fd:" prefix is optional.
func FaultLevels(fd string) []string {
	fd = strings.Trim(strings.TrimPrefix(fd, "fd:"), "/")
	if fd == "" {
		return nil
	}
	parts := strings.Split(fd, "/")
	out := make([]string, len(parts))
	for i := range parts {
		out[i] = strings.Join(parts[:i+1], "/")
	}
	return out
}

// ValidateFaultDomain checks a fault domain's syntax.
func ValidateFaultDomain(fd string) error {
	if fd == "" {
		return nil
	}
	rest, ok := strings.CutPrefix(fd, "fd:/")
	if !ok {
		return fmt.Errorf("fault domain %q: want fd:/LEVEL[/LEVEL…], e.g. fd:/dc1/rack2", fd)
	}
	if len(fd) > 253 {
		return fmt.Errorf("fault domain: %d bytes: want at most 253", len(fd))
	}
	for _, p := range strings.Split(rest, "/") {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, " \t\r\n\x00") {
			return fmt.Errorf("fault domain %q: level %q: want a name (not empty, . or .., no blanks)", fd, p)
		}
	}
	return nil
}

// domainHost is one host as the domain rules see it.
type domainHost struct {
	name     string
	fault    []string // FaultLevels of its fault domain; nil: none
	upgrade  string
	existing int // the service's instances already there
	room     int // new instances it can take
}

// The fault domain tree (seed 000): a domain's children are its
// sub-domains and the hosts directly in it (a host is the finest fault
// domain); a host without a fault domain is a top-level domain of its own
// (it shares no declared failure with any other host). Upgrade domains are
// flat: one level of tags under a root of their own; the hosts without one
// share the tag "".
//
// The rules, over the final counts (pinfold never moves running
// instances, so they constrain only where new ones go):
//
//   - max-difference: for any two children X and Y of one parent, if X
//     receives new instances and Y still has room after them, X ends at
//     most one above Y. Only siblings are compared: the two hosts of a
//     data center are not held to the counts of a data center of one host;
//   - quorum-safe: a domain that receives new instances and does not hold
//     every host ends with at most max(1, ceil(T/2)-1) of the service's T
//     instances, a host with at most ceil(T/hosts) as well.

// search finds how many new instances each host gets (k in all). The
// hosts are in rank order, and the result is the best-ranked valid
// distribution: at each parent, the child holding the best-ranked host
// gets as many as the rule allows, then the next. Max-difference over the
// fault domain tree alone (or the upgrade domains alone) is exact: it
// places whenever some distribution within the rooms keeps the rule.
// With both, the tree's answer is taken when it keeps the upgrade domain
// rule too, and otherwise a depth-first search places instance by
// instance within a step budget; quorum-safe is that depth-first search
// (its limits only grow tighter, so it is exact for fault domains alone).
// ok is false when no distribution exists or the search budget ran out.
func search(hosts []domainHost, k int, quorum, withFD, withUD bool) (counts []int, ok bool) {
	n := len(hosts)
	if n == 0 {
		return nil, k == 0
	}
	if withUD && len(uniq(upgrades(hosts))) < 2 {
		withUD = false // a single upgrade domain constrains nothing
	}
	gs := buildGroups(hosts, withFD, withUD)
	if quorum {
		return gs.dfs(hosts, k, true)
	}
	t := buildTree(hosts, k, withFD, withUD && !withFD)
	if t.feas.has(k) {
		counts = make([]int, n)
		t.assign(k, counts)
		if !withFD || !withUD || gs.holds(hosts, counts) {
			return counts, true
		}
	} else if !withFD || !withUD {
		return nil, false
	}
	return gs.dfs(hosts, k, false)
}

func upgrades(hosts []domainHost) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.upgrade
	}
	return out
}

// groups are the domains (and hosts) the depth-first search counts.
type groups struct {
	all     []*group
	of      [][]int // per host, its groups
	sibling map[string][]int
}

type group struct {
	parent             string
	count, room, hosts int
	host               bool
}

func buildGroups(hosts []domainHost, withFD, withUD bool) *groups {
	gs := &groups{of: make([][]int, len(hosts)), sibling: map[string][]int{}}
	idx := map[string]int{}
	add := func(i int, key, parent string, host bool) {
		g, ok := idx[key]
		if !ok {
			g = len(gs.all)
			idx[key] = g
			gs.all = append(gs.all, &group{parent: parent, host: host})
			gs.sibling[parent] = append(gs.sibling[parent], g)
		}
		d := gs.all[g]
		d.count += hosts[i].existing
		d.room += hosts[i].room
		d.hosts++
		gs.of[i] = append(gs.of[i], g)
	}
	for i, h := range hosts {
		if withFD {
			up := "F"
			for _, lv := range h.fault {
				add(i, "F:"+lv, up, false)
				up = "F:" + lv
			}
			add(i, "H:"+h.name, up, true)
		}
		if withUD {
			add(i, "U:"+h.upgrade, "U", false)
		}
	}
	return gs
}

// holds reports whether new counts keep max-difference over the groups.
func (gs *groups) holds(hosts []domainHost, counts []int) bool {
	n := len(gs.all)
	total, recv, left := make([]int, n), make([]bool, n), make([]bool, n)
	for i, h := range hosts {
		for _, g := range gs.of[i] {
			total[g] += h.existing + counts[i]
			recv[g] = recv[g] || counts[i] > 0
			left[g] = left[g] || counts[i] < h.room
		}
	}
	for _, sib := range gs.sibling {
		for _, x := range sib {
			for _, y := range sib {
				if recv[x] && left[y] && total[x] > total[y]+1 {
					return false
				}
			}
		}
	}
	return true
}

// dfs places instance by instance, trying hosts in rank order, with
// backtracking within a step budget. Max-difference fills like water: the
// next instance goes to a host each of whose groups is among the least
// loaded of its siblings that still have room. Quorum-safe: no group that
// receives may pass its limit (a group holding every host is exempt).
func (gs *groups) dfs(hosts []domainHost, k int, quorum bool) ([]int, bool) {
	n := len(hosts)
	total, withRoom := k, 0
	for _, h := range hosts {
		total += h.existing
		if h.room > 0 {
			withRoom++
		}
	}
	limit := make([]int, len(gs.all))
	for i, g := range gs.all {
		limit[i] = max(1, (total+1)/2-1)
		if g.host {
			limit[i] = max(1, min(limit[i], (total+withRoom-1)/max(withRoom, 1)))
		}
		if g.hosts == n {
			limit[i] = total // holds every host: exempt
		}
	}
	eligible := func(i int) bool {
		for _, gi := range gs.of[i] {
			g := gs.all[gi]
			if quorum {
				if g.count+1 > limit[gi] {
					return false
				}
				continue
			}
			for _, oi := range gs.sibling[g.parent] {
				if o := gs.all[oi]; o.room > 0 && o.count < g.count {
					return false
				}
			}
		}
		return true
	}
	counts := make([]int, n)
	budget := 200_000
	var rec func(left int) bool
	rec = func(left int) bool {
		if left == 0 {
			return true
		}
		for i := range n {
			if budget--; budget < 0 {
				return false
			}
			if counts[i] >= hosts[i].room || !eligible(i) {
				continue
			}
			counts[i]++
			for _, g := range gs.of[i] {
				gs.all[g].count, gs.all[g].room = gs.all[g].count+1, gs.all[g].room-1
			}
			if rec(left - 1) {
				return true
			}
			counts[i]--
			for _, g := range gs.of[i] {
				gs.all[g].count, gs.all[g].room = gs.all[g].count-1, gs.all[g].room+1
			}
		}
		return false
	}
	if !rec(k) {
		return nil, false
	}
	return counts, true
}

// tnode is a node of the tree the exact max-difference search walks.
type tnode struct {
	kids []*tnode // by their best-ranked host
	host int      // a leaf's host; -1 for a domain
	free bool     // children not compared (no rule at this parent)
	best int      // the best-ranked host under it
	e, r int      // existing instances and room under it
	k    int      // the instances to place in all
	feas spans    // the new counts its subtree can take under the rule
}

// buildTree is the fault domain tree (fd), or the upgrade domains as one
// level (ud), or, with neither, the hosts under a root with no rule; with
// the feasible new counts of every node computed bottom-up.
func buildTree(hosts []domainHost, k int, fd, ud bool) *tnode {
	root := &tnode{host: -1, free: !fd && !ud, k: k}
	domains := map[string]*tnode{}
	child := func(parent *tnode, key string, free bool) *tnode {
		d := domains[key]
		if d == nil {
			d = &tnode{host: -1, free: free, best: len(hosts), k: k}
			domains[key] = d
			parent.kids = append(parent.kids, d)
		}
		return d
	}
	for i, h := range hosts {
		at := root
		if fd {
			for _, lv := range h.fault {
				at = child(at, "F:"+lv, false)
			}
		} else if ud {
			at = child(at, "U:"+h.upgrade, true)
		}
		at.kids = append(at.kids, &tnode{host: i, best: i, e: h.existing, r: h.room, k: k})
	}
	root.fill()
	return root
}

// fill computes best, e, r and feas bottom-up. At a parent with the rule,
// the children's new counts c keep max-difference iff for some level m,
// every child with room left ends at or above m and every receiving child
// ends at or below m+1 (m: the least a child with room left ends with, or
// unbounded when every child ends full); for one m, each child's counts
// allowed form an interval, so the parent's are a union of sums.
func (t *tnode) fill() {
	if t.host >= 0 {
		t.feas = spans{{0, min(t.r, t.k)}}
		return
	}
	t.best = math.MaxInt
	lo, hi := math.MaxInt, 0
	for _, c := range t.kids {
		c.fill()
		t.best, t.e, t.r = min(t.best, c.best), t.e+c.e, t.r+c.r
		lo, hi = min(lo, c.e), max(hi, c.e+min(c.r, t.k))
	}
	slices.SortFunc(t.kids, func(a, b *tnode) int { return a.best - b.best })
	if t.free {
		t.feas = spans{{0, 0}}
		for _, c := range t.kids {
			t.feas = t.feas.add(c.feas, t.k)
		}
		return
	}
	for m := lo; m <= hi+1; m++ {
		t.feas = t.feas.union(t.levelSum(m))
	}
}

// levelSum is t.level(m).sum(t.k), without building the sets where every
// child's counts are one interval (the common case).
func (t *tnode) levelSum(m int) spans {
	acc := span{0, 0}
	for _, c := range t.kids {
		if len(c.feas) != 1 {
			return t.level(m).sum(t.k)
		}
		lo, hi := bounds(c, m)
		lo, hi = max(lo, c.feas[0].lo), min(hi, c.feas[0].hi)
		if lo > hi || acc.lo+lo > t.k {
			return nil
		}
		acc = span{acc.lo + lo, min(t.k, acc.hi+hi)}
	}
	return spans{acc}
}

// bounds is the interval of new counts child c may take at level m.
func bounds(c *tnode, m int) (lo, hi int) {
	lo, hi = max(0, m-c.e), min(c.r, m+1-c.e)
	switch {
	case c.r < lo:
		lo, hi = c.r, c.r // ends full, below m
	case lo == 0:
		hi = max(hi, 0) // receives nothing, at or above m
	}
	return lo, hi
}

// level is, per child, the new counts it may take when m is the level (m
// past every child's reach: every child ends full).
func (t *tnode) level(m int) allowed {
	a := make(allowed, len(t.kids))
	for i, c := range t.kids {
		lo, hi := bounds(c, m)
		a[i] = c.feas.clip(lo, hi)
	}
	return a
}

// assign gives the subtree c new instances (c is in t.feas): at each
// parent the lexicographically greatest counts of the children in rank
// order, over every level m.
func (t *tnode) assign(c int, counts []int) {
	if t.host >= 0 {
		counts[t.host] = c
		return
	}
	if c == 0 {
		return // nothing under it receives (counts start at 0)
	}
	var best []int
	try := func(a allowed) {
		if v, ok := a.greatest(c, t.k); ok && (best == nil || slices.Compare(v, best) > 0) {
			best = v
		}
	}
	if t.free {
		a := make(allowed, len(t.kids))
		for i, k := range t.kids {
			a[i] = k.feas
		}
		try(a)
	} else {
		lo, hi := math.MaxInt, 0
		for _, k := range t.kids {
			lo, hi = min(lo, k.e), max(hi, k.e+min(k.r, t.k))
		}
		for m := lo; m <= hi+1; m++ {
			if t.levelSum(m).has(c) {
				try(t.level(m))
			}
		}
	}
	for i, k := range t.kids {
		k.assign(best[i], counts)
	}
}

// allowed is, per child, the new counts it may take.
type allowed []spans

// sum is every total the children can take together.
func (a allowed) sum(k int) spans {
	out := spans{{0, 0}}
	for _, s := range a {
		out = out.add(s, k)
	}
	return out
}

// greatest is the lexicographically greatest choice, one count per child,
// summing to c.
func (a allowed) greatest(c, k int) ([]int, bool) {
	suf := make([]spans, len(a)+1)
	suf[len(a)] = spans{{0, 0}}
	for i := len(a) - 1; i >= 0; i-- {
		suf[i] = suf[i+1].add(a[i], k)
	}
	if !suf[0].has(c) {
		return nil, false
	}
	out := make([]int, len(a))
	for i, s := range a {
		// the largest v in s with c-v in suf[i+1]
		v := -1
		for _, x := range s {
			for _, y := range suf[i+1] {
				if l, h := max(x.lo, c-y.hi), min(x.hi, c-y.lo); l <= h {
					v = max(v, h)
				}
			}
		}
		out[i], c = v, c-v
	}
	return out, true
}

// spans is a set of counts as sorted, disjoint, non-adjacent intervals.
type spans []span

type span struct{ lo, hi int }

func (s spans) has(v int) bool {
	for _, x := range s {
		if x.lo <= v && v <= x.hi {
			return true
		}
	}
	return false
}

// clip is s within [lo, hi].
func (s spans) clip(lo, hi int) spans {
	var out spans
	for _, x := range s {
		if l, h := max(x.lo, lo), min(x.hi, hi); l <= h {
			out = append(out, span{l, h})
		}
	}
	return out
}

// add is every a+b (a in s, b in o) up to k.
func (s spans) add(o spans, k int) spans {
	var out spans
	for _, x := range s {
		for _, y := range o {
			if x.lo+y.lo <= k {
				out = append(out, span{x.lo + y.lo, min(k, x.hi+y.hi)})
			}
		}
	}
	return out.norm()
}

func (s spans) union(o spans) spans {
	if n := len(s); n > 0 && len(o) == 1 && o[0].lo >= s[n-1].lo {
		if o[0].lo <= s[n-1].hi+1 { // the common case: the levels' sums overlap
			s[n-1].hi = max(s[n-1].hi, o[0].hi)
			return s
		}
		return append(s, o[0])
	}
	return append(slices.Clone(s), o...).norm()
}

func (s spans) norm() spans {
	slices.SortFunc(s, func(a, b span) int { return a.lo - b.lo })
	var out spans
	for _, x := range s {
		if n := len(out); n > 0 && x.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, x.hi)
			continue
		}
		out = append(out, x)
	}
	return out
}

// spreadOrder is the rules a spread tries, in order. Adaptive (seed 000)
// prefers quorum-safe when the service's total instance count is divisible
// by the number of fault domains and by the number of upgrade domains and
// there are no more hosts than fault domains × upgrade domains, and
// max-difference otherwise; the other rule is the fallback, so adaptive
// places whenever either rule does.
func spreadOrder(s Spread, total int, fds, uds []string) []Spread {
	if s != Adaptive {
		return []Spread{s}
	}
	nfd, nud := len(uniq(fds)), len(uniq(uds))
	if nfd > 0 && nud > 0 && total%nfd == 0 && total%nud == 0 && len(fds) <= nfd*nud {
		return []Spread{QuorumSafe, MaxDifference}
	}
	return []Spread{MaxDifference, QuorumSafe}
}

func uniq(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
