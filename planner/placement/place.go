package placement

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/pinfold/pinfold/planner/alloc"
)

// softAffinity places on the hosts that satisfy the soft affinity rules if
// they can take the request, else on all of left (the rules give way).
func softAffinity(p alloc.Params, s Settings, r Request, left []*Host, adj map[string]*alloc.Host, room map[string]int, why map[string]string, rank map[string]int,
	res *Result, relax bool) (*Result, error) {
	has := func(h *Host, svc string) bool { return h.Resources.Instances[svc] > 0 }
	// Soft affinity gives way only when nothing else is left.
	softAff := func(h *Host) bool {
		for _, svc := range r.Affinity.Soft {
			if !has(h, svc) {
				return false
			}
		}
		for _, svc := range r.AntiAffinity.Soft {
			if has(h, svc) {
				return false
			}
		}
		return true
	}
	allowed := left
	if len(r.Affinity.Soft)+len(r.AntiAffinity.Soft) > 0 {
		var pref []*Host
		for _, h := range left {
			if softAff(h) {
				pref = append(pref, h)
			}
		}
		if len(pref) > 0 && !relax {
			if out, err := place(p, s, r, pref, adj, room, why, rank, res); err == nil {
				return out, nil
			}
		}
		res.Violations = append(res.Violations, Violation{Rule: RuleAffinity, Detail: "soft affinity gave way: the hosts that satisfy it cannot take the request"})
	}
	return place(p, s, r, allowed, adj, room, why, rank, res)
}

// place runs the domain rules (when the hosts have domains) and the
// allocation engine on hosts, which are ranked; room, when set, caps each
// host, for the reason why says (the engine's refusal names it).
func place(p alloc.Params, s Settings, r Request, hosts []*Host, adj map[string]*alloc.Host, room map[string]int, why map[string]string, rank map[string]int,
	res *Result) (*Result, error) {
	out := *res
	out.Violations = slices.Clone(res.Violations)
	out.Eliminations = slices.Clone(res.Eliminations)
	ah := make([]*alloc.Host, len(hosts))
	for i, h := range hosts {
		ah[i] = resources(adj, h)
	}
	req := r.Request
	req.Rank = rank
	if room != nil {
		req.Limit, req.LimitWhy = map[string]int{}, map[string]string{}
		for _, h := range hosts {
			req.Limit[h.Name], req.LimitWhy[h.Name] = room[h.Name], why[h.Name]
		}
	}
	if c := staticCap(r); c >= 0 {
		// Two new instances on one host would hold one static port.
		if req.Limit == nil {
			req.Limit, req.LimitWhy = map[string]int{}, map[string]string{}
		}
		for _, h := range hosts {
			if l, ok := req.Limit[h.Name]; !ok || l > c {
				req.Limit[h.Name], req.LimitWhy[h.Name] = c, "static port"
			}
		}
	}
	spread, _ := ParseSpread(string(r.DomainSpread))
	domains := spread != SpreadOff && slices.ContainsFunc(hosts, func(h *Host) bool { return h.FaultDomain != "" || h.UpgradeDomain != "" })
	if domains && room != nil {
		// Capacity binds before the domains: when the hosts left cannot
		// take the count at all, no spread can, and the engine's refusal
		// (how many each host takes, and what runs out) is the reason.
		total := 0
		for _, h := range hosts {
			total += room[h.Name]
		}
		domains = total >= r.Count
	}
	if domains && r.Strategy != alloc.Each && r.Strategy != alloc.Fill {
		fixed, used, vio, err := domainCounts(s, r, hosts, room, spread)
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) {
				pe.Eliminations = append(slices.Clone(out.Eliminations), pe.Eliminations...)
			}
			return nil, err
		}
		req.Fixed, out.Spread = fixed, used
		out.Violations = append(out.Violations, vio...)
	}
	ar, err := alloc.PlanValid(p, ah, req)
	if err != nil {
		var ae *alloc.Error
		if errors.As(err, &ae) && ae.Code != alloc.CodeInvalid {
			e := &Error{Message: ae.Message, Eliminations: out.Eliminations, Alloc: ae}
			if !slices.ContainsFunc(e.Eliminations, func(x Elimination) bool { return x.Rule == RuleCapacity }) {
				full := []string{}
				for _, h := range hosts {
					if alloc.HostCapacity(p, resources(adj, h), r.Request).Count == 0 {
						full = append(full, h.Name)
					}
				}
				e.Eliminations = append(e.Eliminations, Elimination{Rule: RuleCapacity, Hosts: full})
			}
			return nil, e
		}
		return nil, &Error{Invalid: true, Message: err.Error(), Alloc: ae}
	}
	// Report capacity as the rules allow it (the CPU buffer caps hosts
	// through Limit, which the engine's raw capacity does not show).
	ar.TotalCapacity = 0
	for name, c := range ar.Capacity {
		if l, ok := req.Limit[name]; ok && l < c {
			ar.Capacity[name] = l
		}
		ar.TotalCapacity += ar.Capacity[name]
	}
	if err := assignPorts(r, hosts, ar); err != nil {
		return nil, &Error{Message: err.Error(), Eliminations: out.Eliminations}
	}
	out.Result = ar
	return &out, nil
}

// domainCounts spreads the request over fault and upgrade domains. The
// fault domain rule (and the host itself, the finest fault domain) and the
// upgrade domain rule are checked together; if that is impossible and the
// upgrade domain rule is soft, it gives way. Adaptive tries the rule seed
// 000's conditions pick first and the other one when that cannot place,
// before any soft rule gives way: quorum-safe never refuses what
// max-difference places, and the reverse.
func domainCounts(s Settings, r Request, hosts []*Host, room map[string]int, spread Spread) (map[string]int, Spread, []Violation, error) {
	total := r.Count
	var fds, uds []string
	for _, h := range hosts {
		total += h.Resources.Instances[r.Service]
		fd := h.FaultDomain
		if fd == "" {
			fd = "host:" + h.Name // a fault domain of its own
		}
		fds = append(fds, fd)
		uds = append(uds, h.UpgradeDomain)
	}
	modes := spreadOrder(spread, total, fds, uds)
	dh := make([]domainHost, len(hosts))
	for i, h := range hosts {
		dh[i] = domainHost{name: h.Name, fault: FaultLevels(h.FaultDomain), upgrade: h.UpgradeDomain, existing: h.Resources.Instances[r.Service], room: room[h.Name]}
	}
	// first is the first of modes that places k over the hosts with
	// the given rules.
	first := func(withFD, withUD bool) (map[string]int, Spread, bool) {
		for _, m := range modes {
			counts, ok := search(dh, r.Count, m == QuorumSafe, withFD, withUD)
			if !ok {
				continue
			}
			fixed := map[string]int{}
			for i, h := range hosts {
				if counts[i] > 0 {
					fixed[h.Name] = counts[i]
				}
			}
			return fixed, m, true
		}
		return nil, "", false
	}
	name := string(modes[0])
	if len(modes) > 1 {
		name = fmt.Sprintf("%s or %s", modes[0], modes[1])
	}
	fdPrio, udPrio := s.priority(RuleFaultDomain), s.priority(RuleUpgradeDomain)
	type try struct {
		fd, ud bool
		vio    []Violation
	}
	tries := []try{{fdPrio != Off, udPrio != Off, nil}}
	if udPrio >= Soft {
		tries = append(tries, try{fdPrio != Off, false, []Violation{{Rule: RuleUpgradeDomain, Detail: fmt.Sprintf("%s could not hold: instances packed into too few upgrade domains", name)}}})
	}
	if fdPrio >= Soft {
		tries = append(tries, try{false, false, []Violation{{Rule: RuleFaultDomain, Detail: fmt.Sprintf("%s could not hold: instances packed into too few fault domains", name)}}})
	}
	for _, t := range tries {
		if fixed, m, ok := first(t.fd, t.ud); ok {
			return fixed, m, t.vio, nil
		}
	}
	// Which rule made it impossible: the fault domains alone, or with the
	// upgrade domains.
	rule := RuleUpgradeDomain
	if _, _, ok := first(fdPrio != Off, false); !ok {
		rule = RuleFaultDomain
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Name)
	}
	return nil, modes[0], nil, &Error{Message: fmt.Sprintf("%d instances of %s cannot be spread over the domains of %d hosts under the %s rule (%s)",
		r.Count, r.Service, len(hosts), name, rule), Eliminations: []Elimination{{Rule: rule, Hosts: names}}}
}

// rankHosts orders hosts by the request's policy; ties by name.
func rankHosts(r Request, hosts []*Host) map[string]int {
	order := slices.Clone(hosts)
	switch r.Policy {
	case NodesOrder:
		pos := map[string]int{}
		for i, n := range r.HostsOrder {
			if _, ok := pos[n]; !ok {
				pos[n] = i
			}
		}
		at := func(h *Host) int {
			if i, ok := pos[h.Name]; ok {
				return i
			}
			return len(r.HostsOrder)
		}
		slices.SortStableFunc(order, func(a, b *Host) int { return cmp.Compare(at(a), at(b)) })
	case LoadAvg:
		slices.SortStableFunc(order, func(a, b *Host) int { return cmp.Compare(a.LoadAvg, b.LoadAvg) })
	case SpreadRank:
		key := func(h *Host) uint64 {
			f := fnv.New64a()
			f.Write([]byte(r.Service))
			f.Write([]byte{0})
			f.Write([]byte(h.Name))
			return f.Sum64()
		}
		slices.SortStableFunc(order, func(a, b *Host) int { return cmp.Compare(key(a), key(b)) })
	default:
		return nil
	}
	rank := make(map[string]int, len(order))
	for i, h := range order {
		rank[h.Name] = i
	}
	return rank
}
