package placement

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

// Rule names a placement rule, in the order rules are applied; the names
// are those of seed 001's constraint elimination sequence.
type Rule = string

const (
	RuleDisabled            Rule = "Disabled"
	RuleMaintenance         Rule = "Maintenance"
	RulePlacementConstraint Rule = "PlacementConstraint"
	RuleAffinity            Rule = "Affinity"
	RuleCapacity            Rule = "NodeCapacity"
	RuleFaultDomain         Rule = "FaultDomain"
	RuleUpgradeDomain       Rule = "UpgradeDomain"
	RulePreferredLocation   Rule = "PreferredLocation"
	// RuleDown: the host's agent is not heartbeating, or speaks another
	// protocol. The planner's schedulable index applies it before the
	// rules run (Plan never sees such hosts); it is named here so that the
	// elimination report lists it with the others.
	RuleDown Rule = "Down"
	// RuleNoAgent: the host was registered by hand, so no agent can report
	// that a new instance runs there. The service applies it to the
	// targets of a blue-green move of an instance an agent runs (a drain,
	// a rebalance); Plan never sees it.
	RuleNoAgent Rule = "NoAgent"
	// RuleOwnHost: a move or a heal never places the instance again on
	// the host it leaves. The service applies it; Plan never sees it.
	RuleOwnHost Rule = "OwnHost"
)

// Priority is how strictly a rule holds (seed 001).
type Priority int

const (
	Off          Priority = -1
	Hard         Priority = 0
	Soft         Priority = 1
	Optimization Priority = 2
)

// DefaultPriorities are seed 001's defaults. Disabled and Maintenance are
// always hard.
var DefaultPriorities = map[Rule]Priority{
	RulePlacementConstraint: Hard, RuleCapacity: Hard, RuleAffinity: Hard,
	RuleFaultDomain: Hard, RuleUpgradeDomain: Soft, RulePreferredLocation: Optimization,
}

// Host is one host as the placement rules see it.
type Host struct {
	Name          string
	Type          string           // the built-in HostType
	Properties    map[string]Value // besides HostName and HostType
	FaultDomain   string           // fd:/dc1/rack2
	UpgradeDomain string
	Disabled      bool
	Maintenance   bool // keeps its instances, receives nothing new
	LoadAvg       float64
	// Resources is the host for the allocation engine; its Instances is
	// every service's instance count there (for affinity and domains).
	Resources *alloc.Host
}

// Props returns the host's properties with the built-ins.
func (h *Host) Props() map[string]Value {
	p := make(map[string]Value, len(h.Properties)+2)
	for k, v := range h.Properties {
		p[k] = v
	}
	p["HostName"] = Str(h.Name)
	if h.Type != "" {
		p["HostType"] = Str(h.Type)
	}
	return p
}

// Affinity lists services, hard and soft.
type Affinity struct {
	Hard []string `json:"hard"`
	Soft []string `json:"soft"`
}

// Policy ranks the hosts the rules allow (seed 003).
type Policy string

const (
	NodesOrder Policy = "nodes_order" // HostsOrder first, in that order
	LoadAvg    Policy = "load_avg"    // lowest load average first
	SpreadRank Policy = "spread"      // a stable pseudo-random ranking seeded by the service name
)

// Request is an allocation request with its placement rules.
type Request struct {
	alloc.Request
	Constraint   string
	Affinity     Affinity
	AntiAffinity Affinity
	Policy       Policy
	HostsOrder   []string
	DomainSpread Spread
	// UseBuffer lets the request use the hosts' buffered capacity (it
	// replaces failed instances, or runs during an upgrade).
	UseBuffer bool
	// Ports are the ports each instance asks for (model.Spec.Ports): the
	// Ports rule eliminates hosts that cannot give them, and each
	// placement gets its host ports (Allocation.HostPorts).
	Ports []model.Port
}

// Elimination is the hosts one rule removed.
type Elimination struct {
	Rule  Rule     `json:"rule"`
	Hosts []string `json:"hosts"`
}

// Violation is a soft rule that gave way.
type Violation struct {
	Rule   Rule   `json:"rule"`
	Detail string `json:"detail"`
}

// Result is a successful placement.
type Result struct {
	*alloc.Result
	Spread       Spread        `json:"domain_spread,omitempty"` // the rule used ("" = domains not involved)
	Violations   []Violation   `json:"violations,omitempty"`
	Eliminations []Elimination `json:"eliminations"`
}

// Error is a request that cannot be placed, with the elimination report.
type Error struct {
	Invalid      bool // bad input rather than no room
	Message      string
	Eliminations []Elimination
	Alloc        *alloc.Error // what the allocation engine said, if it ran
}

func (e *Error) Error() string { return e.Message }

// Report renders the elimination sequence for people, one rule a line.
func Report(elims []Elimination) string {
	var b strings.Builder
	for _, e := range elims {
		hosts := "-"
		if len(e.Hosts) > 0 {
			hosts = strings.Join(e.Hosts, " ")
		}
		fmt.Fprintf(&b, "  %-20s %d eliminated: %s\n", e.Rule, len(e.Hosts), hosts)
	}
	return b.String()
}

// Plan applies the rules in order, ranks what is left, and lets the
// allocation engine place the request on it. When that fails, the rules
// that are not hard give way one at a time until the plan holds (seed 001:
// such a rule yields only when nothing else is left, and the priorities
// are the order in which rules give way): the optimization ones first,
// then the soft ones, each the last applied first (capacity's buffer, then
// affinity, then the placement constraint); the result lists what gave
// way. It is pure.
func Plan(p alloc.Params, s Settings, hosts []*Host, r Request) (*Result, error) {
	if err := p.Validate(); err != nil {
		return nil, &Error{Invalid: true, Message: err.Error()}
	}
	if err := s.Validate(); err != nil {
		return nil, &Error{Invalid: true, Message: err.Error()}
	}
	if r.Strategy == "" {
		r.Strategy = alloc.Auto
	}
	if err := alloc.ValidateRequest(p, r.Request); err != nil {
		return nil, &Error{Invalid: true, Message: err.Error()}
	}
	if err := r.Validate(); err != nil {
		return nil, &Error{Invalid: true, Message: err.Message}
	}
	return PlanValid(p, s, hosts, r)
}

// PlanValid is Plan for valid parameters, settings and a request that
// passed Request.Validate and alloc.ValidateRequest with its strategy set:
// nothing is checked again, in any of the tries.
func PlanValid(p alloc.Params, s Settings, hosts []*Host, r Request) (*Result, error) {
	res, err := plan(p, s, hosts, r, nil)
	var pe *Error
	if err == nil || !errors.As(err, &pe) || pe.Invalid {
		return res, err
	}
	relaxed := map[Rule]bool{}
	for _, prio := range []Priority{Optimization, Soft} {
		for _, rule := range []Rule{RuleCapacity, RuleAffinity, RulePlacementConstraint} {
			if s.priority(rule) != prio {
				continue
			}
			relaxed[rule] = true
			if res2, err2 := plan(p, s, hosts, r, relaxed); err2 == nil {
				return res2, nil
			}
		}
	}
	return nil, err
}

// sieve applies rules to the hosts left, recording what each eliminated
// and which soft rules gave way.
type sieve struct {
	left    []*Host
	res     *Result
	relaxed map[Rule]bool
}

// elim keeps the hosts keep accepts and records the rest under rule.
func (v *sieve) elim(rule Rule, keep func(*Host) bool) {
	var kept []*Host
	e := Elimination{Rule: rule, Hosts: []string{}}
	for _, h := range v.left {
		if keep(h) {
			kept = append(kept, h)
		} else {
			e.Hosts = append(e.Hosts, h.Name)
		}
	}
	v.res.Eliminations = append(v.res.Eliminations, e)
	v.left = kept
}

// soft applies a rule that gives way when it would leave no host, or,
// when relaxing, whenever it would eliminate any.
func (v *sieve) soft(rule Rule, prio Priority, keep func(*Host) bool, detail string) {
	if prio == Off {
		return
	}
	before := v.left
	v.elim(rule, keep)
	if prio >= Soft && len(before) > 0 && (len(v.left) == 0 || v.relaxed[rule] && len(v.left) < len(before)) {
		v.left = before
		v.res.Eliminations[len(v.res.Eliminations)-1].Hosts = []string{}
		v.res.Violations = append(v.res.Violations, Violation{Rule: rule, Detail: detail})
	}
}

func (v *sieve) fail(format string, args ...any) error {
	return &Error{Message: fmt.Sprintf(format, args...), Eliminations: v.res.Eliminations}
}

// hardAffinity accepts the hosts that run every service r must be with and
// none it must not be with.
func hardAffinity(r Request) func(*Host) bool {
	return func(h *Host) bool {
		for _, svc := range r.Affinity.Hard {
			if h.Resources.Instances[svc] == 0 {
				return false
			}
		}
		for _, svc := range r.AntiAffinity.Hard {
			if h.Resources.Instances[svc] > 0 {
				return false
			}
		}
		return true
	}
}

// plan is one try; the rules in relaxed give way whenever they would
// eliminate a host.
func plan(p alloc.Params, s Settings, hosts []*Host, r Request, relaxed map[Rule]bool) (*Result, error) {
	expr, _ := Parse(r.Constraint) // validated by Plan or the caller
	v := &sieve{left: slices.Clone(hosts), res: &Result{}, relaxed: relaxed}
	slices.SortFunc(v.left, func(a, b *Host) int { return cmp.Compare(a.Name, b.Name) })
	v.elim(RuleDisabled, func(h *Host) bool { return !h.Disabled })
	v.elim(RuleMaintenance, func(h *Host) bool { return !h.Maintenance })
	v.soft(RulePlacementConstraint, s.priority(RulePlacementConstraint), func(h *Host) bool { return expr.root == nil || expr.Match(h.Props()) },
		fmt.Sprintf("no host matches %q", r.Constraint))
	v.soft(RuleAffinity, s.priority(RuleAffinity), hardAffinity(r), "no host satisfies the hard affinity rules")
	if len(v.left) == 0 {
		return nil, v.fail("no host may take %s: every host was eliminated", r.Service)
	}
	if len(r.Ports) > 0 {
		v.elim(RulePorts, func(h *Host) bool { return portsFree(r, h) })
		if len(v.left) == 0 {
			return nil, v.fail("no host may take %s: %s", r.Service, portsDetail(r))
		}
		if staticCap(r) >= 0 && r.Strategy != alloc.Each && r.Strategy != alloc.Fill && len(v.left) < r.Count {
			hosts := "hosts have"
			if len(v.left) == 1 {
				hosts = "host has"
			}
			return nil, v.fail("%d instances of %s cannot be placed: a static port allows one instance per host, and %d %s %s",
				r.Count, r.Service, len(v.left), hosts, portsDetail(r)[len("no host has "):])
		}
	}
	// Capacity, under buffer and overbooking.
	capPrio := s.priority(RuleCapacity)
	useBuffer := r.UseBuffer || relaxed[RuleCapacity]
	if relaxed[RuleCapacity] && !r.UseBuffer && len(s.Buffer)+len(s.Overbooking) > 0 {
		v.res.Violations = append(v.res.Violations, Violation{Rule: RuleCapacity, Detail: "normal placement used the hosts' buffered capacity"})
	}
	spreadRule, _ := ParseSpread(string(r.DomainSpread))
	needRoom := len(s.Buffer)+len(s.Overbooking) > 0 || spreadRule != SpreadOff &&
		slices.ContainsFunc(v.left, func(h *Host) bool { return h.FaultDomain != "" || h.UpgradeDomain != "" })
	// Without buffer, overbooking or domains nothing needs each host's
	// room before the engine runs, which computes it anyway (adj stays nil:
	// each host's own resources); the capacity row of the report is worked
	// out only if the engine fails.
	var room map[string]int
	var why map[string]string
	var adj map[string]*alloc.Host
	if needRoom {
		adj, room, why = s.rooms(p, r, v.left, useBuffer)
		before := v.left
		if capPrio != Off {
			v.elim(RuleCapacity, func(h *Host) bool {
				return room[h.Name] > 0 || r.Strategy == alloc.Fill && h.Resources.Instances[r.Service] >= r.Count
			})
		}
		if len(v.left) == 0 {
			return nil, v.fail("no host has room for an instance of %s (%s CPUs, %s): %s", r.Service,
				alloc.FormatPieces(r.Pieces, p.ShareBase), alloc.FormatBytes(r.MemoryBytes), whyNot(before, why))
		}
	}
	// Rank (seed 003 policies; nodes_order is also the preferred location).
	rank := rankHosts(r, v.left)
	slices.SortStableFunc(v.left, func(a, b *Host) int { return cmp.Compare(rank[a.Name], rank[b.Name]) })
	return softAffinity(p, s, r, v.left, adj, room, why, rank, v.res, relaxed[RuleAffinity])
}

// resources is host h as the request may use it: adj's entry, or its own
// resources when nothing adjusted the hosts (adj nil).
func resources(adj map[string]*alloc.Host, h *Host) *alloc.Host {
	if adj == nil {
		return h.Resources
	}
	return adj[h.Name]
}

// rooms is, per host, its resources under the buffer and overbooking, how
// many instances of r it has room for, and what limits that. Using the
// buffer never leaves a host less room than normal placement: CPU
// overbooking makes each CPU's capacity no whole number of CPUs (125
// pieces), which gives fragments only (as in Eru), so a bound request of
// whole CPUs takes the host as normal placement sees it where that holds
// more.
func (s Settings) rooms(p alloc.Params, r Request, hosts []*Host, useBuffer bool) (adj map[string]*alloc.Host, room map[string]int, why map[string]string) {
	adj, room, why = map[string]*alloc.Host{}, map[string]int{}, map[string]string{}
	_, cpuOver := s.Overbooking["cpu"]
	for _, h := range hosts {
		ah, n, w := s.room(p, r, h, useBuffer)
		if useBuffer && cpuOver && r.Bind {
			if ah2, n2, w2 := s.room(p, r, h, false); n2 > n {
				ah, n, w = ah2, n2, w2
			}
		}
		if r.MaxPerHost > 0 && r.MaxPerHost-h.Resources.Instances[r.Service] < n {
			n, w = max(0, r.MaxPerHost-h.Resources.Instances[r.Service]), "max_per_host"
		}
		if c := staticCap(r); c >= 0 && n > c {
			n, w = c, "static port"
		}
		adj[h.Name], room[h.Name], why[h.Name] = ah, n, w
	}
	return adj, room, why
}

// room is host h as r may use it (with the buffer or not), how many
// instances of r it has room for before max per host, and what limits
// that.
func (s Settings) room(p alloc.Params, r Request, h *Host, useBuffer bool) (*alloc.Host, int, string) {
	ah, cpuCap := s.adjust(h.Resources, useBuffer)
	c := alloc.HostCapacity(p, ah, r.Request)
	n, why := c.Count, c.Why()
	if cpuCap >= 0 && r.Bind && r.Pieces > 0 {
		used := int64(0)
		for _, c := range ah.CPUs {
			used += int64(c.Used)
		}
		if b := int(max(0, (cpuCap-used)/int64(r.Pieces))); b < n {
			n, why = b, "cpu buffer"
		}
	}
	return ah, n, why
}

// whyNot says, for the first 20 hosts, why each takes none.
func whyNot(hosts []*Host, why map[string]string) string {
	var parts []string
	for _, h := range hosts[:min(len(hosts), 20)] {
		parts = append(parts, fmt.Sprintf("%s takes 0 (%s)", h.Name, why[h.Name]))
	}
	if len(hosts) > 20 {
		parts = append(parts, fmt.Sprintf("and %d more hosts", len(hosts)-20))
	}
	return strings.Join(parts, ", ")
}

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

// HostRoom is how many instances of a request one host may take under the
// rules, and what limits it: a rule that eliminated the host (Disabled,
// Maintenance, PlacementConstraint, Affinity), or what its room runs out
// of (the allocation engine's reason, "cpu buffer", "max_per_host").
type HostRoom struct {
	Count int
	Limit string
}

// Capacity is, per host, how many instances of r it may take under the
// same rules and settings a deploy of r applies: hard rules eliminate
// hosts, the buffer or (with UseBuffer) the overbooking scale their room,
// and max per host caps it. A rule that is soft or optimization gives way
// in a deploy that needs it to (Plan), so it limits nothing here: a
// placement constraint or affinity that is not hard counts the hosts it
// does not match, a capacity rule that is not hard counts the buffer (as
// UseBuffer). No host's room is below 0, even one used past what normal
// placement may use. A deploy of the total succeeds, and one more fails,
// when the domain spread does not limit it (Capacity does not count the
// spread: it decides where instances go, not how many fit). Pure.
func Capacity(p alloc.Params, s Settings, hosts []*Host, r Request) (map[string]HostRoom, error) {
	if r.Strategy == "" {
		r.Strategy = alloc.Auto
	}
	if r.Count == 0 {
		r.Count = 1
	}
	if err := p.Validate(); err != nil {
		return nil, &Error{Invalid: true, Message: err.Error()}
	}
	if err := s.Validate(); err != nil {
		return nil, &Error{Invalid: true, Message: err.Error()}
	}
	if err := alloc.ValidateRequest(p, r.Request); err != nil {
		return nil, &Error{Invalid: true, Message: err.Error()}
	}
	if err := r.Validate(); err != nil {
		return nil, &Error{Invalid: true, Message: err.Message}
	}
	expr, _ := Parse(r.Constraint)
	out := make(map[string]HostRoom, len(hosts))
	var left []*Host
	for _, h := range hosts {
		switch {
		case h.Disabled:
			out[h.Name] = HostRoom{Limit: RuleDisabled}
		case h.Maintenance:
			out[h.Name] = HostRoom{Limit: RuleMaintenance}
		case s.priority(RulePlacementConstraint) == Hard && expr.root != nil && !expr.Match(h.Props()):
			out[h.Name] = HostRoom{Limit: RulePlacementConstraint}
		case s.priority(RuleAffinity) == Hard && !hardAffinity(r)(h):
			out[h.Name] = HostRoom{Limit: RuleAffinity}
		case len(r.Ports) > 0 && !portsFree(r, h):
			out[h.Name] = HostRoom{Limit: RulePorts}
		default:
			left = append(left, h)
		}
	}
	_, room, why := s.rooms(p, r, left, r.UseBuffer || s.priority(RuleCapacity) >= Soft)
	for _, h := range left {
		out[h.Name] = HostRoom{Count: room[h.Name], Limit: why[h.Name]}
	}
	return out, nil
}
