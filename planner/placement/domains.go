package placement

import (
	"fmt"
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

// domainHost is one host as the domain rule sees it.
type domainHost struct {
	name     string
	levels   []string // domain keys this host belongs to, one per rule level
	existing int      // the service's instances already there
	room     int      // new instances it can take
}

// faultKeys returns a host's domain keys at each of depth fault levels
// ("L1:dc1", "L2:dc1/r1"); a shallower path repeats its last level, and a
// host without a fault domain is in the domain "" of every level.
func faultKeys(fd string, depth int) []string {
	lv := FaultLevels(fd)
	out := make([]string, depth)
	for i := range depth {
		k := ""
		if i < len(lv) {
			k = lv[i]
		} else if len(lv) > 0 {
			k = lv[len(lv)-1]
		}
		out[i] = fmt.Sprintf("L%d:%s", i+1, k)
	}
	return out
}

// search finds how many new instances each host gets (k in all), trying
// hosts in the given order first, so the result is the best-ranked valid
// distribution (depth-first, with backtracking, within a step budget). The
// rules only constrain where new instances go (pinfold never moves running
// ones):
//
//   - max-difference: each new instance goes to a host whose domain is, at
//     every level, among the least loaded domains that still have room, so
//     a receiving domain never ends more than one above a domain with
//     usable hosts;
//   - quorum-safe: a domain that receives new instances ends with at most
//     ceil(T/2)-1 of the T instances (at least 1); a level with a single
//     domain is not checked, and a host (the finest fault domain) takes at
//     most ceil(T/hosts with room).
//
// ok is false when no distribution exists or the search budget ran out.
func search(hosts []domainHost, k int, quorum bool) (counts []int, ok bool) {
	n := len(hosts)
	if n == 0 {
		return nil, k == 0
	}
	total := k
	for _, h := range hosts {
		total += h.existing
	}
	nl := len(hosts[0].levels)
	doms := make([]map[string]*dom, nl)
	for l := range nl {
		doms[l] = map[string]*dom{}
		for _, h := range hosts {
			d := doms[l][h.levels[l]]
			if d == nil {
				d = &dom{}
				doms[l][h.levels[l]] = d
			}
			d.count += h.existing
			d.room += h.room
		}
	}
	limit := make([]int, nl) // quorum-safe: most a receiving domain may hold
	for l := range nl {
		limit[l] = max(1, (total+1)/2-1)
		if strings.HasPrefix(hosts[0].levels[l], "H:") {
			withRoom := 0
			for _, d := range doms[l] {
				if d.room > 0 {
					withRoom++
				}
			}
			limit[l] = max(1, min(limit[l], (total+withRoom-1)/max(withRoom, 1)))
		}
	}
	// eligible: may the next instance go to host h? Max-difference fills
	// like water: at every level h's domain must be at the lowest count
	// among the domains that still have room. Quorum-safe: no domain that
	// receives may pass its limit (levels with a single domain exempt).
	eligible := func(h *domainHost) bool {
		for l := range nl {
			d := doms[l][h.levels[l]]
			if quorum {
				if len(doms[l]) > 1 && d.count+1 > limit[l] {
					return false
				}
				continue
			}
			for _, o := range doms[l] {
				if o.room > 0 && o.count < d.count {
					return false
				}
			}
		}
		return true
	}
	counts = make([]int, n)
	budget := 200_000
	var dfs func(left int) bool
	dfs = func(left int) bool {
		if left == 0 {
			return true
		}
		for i := range n {
			if budget--; budget < 0 {
				return false
			}
			h := &hosts[i]
			if counts[i] >= h.room || !eligible(h) {
				continue
			}
			counts[i]++
			for l := range nl {
				d := doms[l][h.levels[l]]
				d.count, d.room = d.count+1, d.room-1
			}
			if dfs(left - 1) {
				return true
			}
			counts[i]--
			for l := range nl {
				d := doms[l][h.levels[l]]
				d.count, d.room = d.count-1, d.room+1
			}
		}
		return false
	}
	if !dfs(k) {
		return nil, false
	}
	return counts, true
}

type dom struct{ count, room int }

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
