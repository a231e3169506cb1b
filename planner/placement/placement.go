package placement

import (
	"cmp"
	"errors"
	"fmt"
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
	// NoAgent: registered by hand, no agent reports what runs there (no
	// rule of Plan reads it: the service keeps a blue-green move's new
	// instance off such hosts, RuleNoAgent).
	NoAgent bool
	LoadAvg float64
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
	Affinity     model.Affinity
	AntiAffinity model.Affinity
	Policy       Policy
	HostsOrder   []string
	DomainSpread Spread
	// UseBuffer lets the request use the hosts' buffered capacity (it
	// replaces failed instances, or runs during an upgrade).
	UseBuffer bool
	// NominalFirst: the request moves existing work (a heal, a drain, a
	// host's removal). With UseBuffer it uses the overbooking only when
	// no host has room within its nominal capacity for it: placement
	// first runs without the overbooking (the buffer usable, the soft
	// rules giving way as ever), then, when that fails, with it
	// (Result.Overbooked says so).
	NominalFirst bool
	// Priority is the service's (model.Scheduling.Priority): which comes
	// first when room is short.
	Priority model.Priority
	// Ports are the ports each instance asks for (model.Spec.Ports): the
	// Ports rule eliminates hosts that cannot give them, and each
	// placement gets its host ports (Allocation.HostPorts).
	Ports []model.Port
}

// NewRequest is what placing count instances of service, wanted as d,
// asks of placement: d's size, strategy ("" is auto), max per host, rules
// and ports. It is the one place a deploy's vocabulary (model.Deploy)
// becomes a placement request: deploy, capacity, health, the heal, drain
// and move paths, the plan file and the services file all build theirs
// here. The caller sets what is not the service's own: Seed, UseBuffer.
func NewRequest(service string, count int, d model.Deploy) Request {
	st := alloc.Strategy(d.Strategy)
	if st == "" {
		st = alloc.Auto
	}
	return Request{Request: alloc.Request{Service: service, Count: count, Pieces: d.Pieces, Bind: d.Bind, WholeCores: d.WholeCores,
		MemoryBytes: d.Memory, Strategy: st, MaxPerHost: d.MaxPerHost},
		Constraint: d.Rules.Constraint, Affinity: d.Rules.Affinity, AntiAffinity: d.Rules.AntiAffinity, Policy: Policy(d.Rules.Policy),
		HostsOrder: d.Rules.HostsOrder, DomainSpread: Spread(d.Rules.DomainSpread), Ports: d.Ports, Priority: d.Priority}
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
	// Overbooked: a NominalFirst request found no room within the hosts'
	// nominal capacity and was placed with the overbooking.
	Overbooked bool `json:"overbooked,omitempty"`
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
// nothing is checked again, in any of the tries. A NominalFirst request
// that may use the overbooking is planned twice at most: within the
// hosts' nominal capacity first, with the overbooking only when that
// fails (overbooking is headroom for emergencies: work that moves uses
// normal room first).
func PlanValid(p alloc.Params, s Settings, hosts []*Host, r Request) (*Result, error) {
	if !r.NominalFirst || !r.UseBuffer || len(s.Overbooking) == 0 {
		return planRelaxing(p, s, hosts, r)
	}
	nominal := s
	nominal.Overbooking = nil
	res, err := planRelaxing(p, nominal, hosts, r)
	var pe *Error
	if err == nil || !errors.As(err, &pe) || pe.Invalid {
		return res, err
	}
	res, err = planRelaxing(p, s, hosts, r)
	if err != nil {
		return nil, err
	}
	res.Overbooked = true
	return res, nil
}

// planRelaxing is one placement under s: the rules as they are, then the
// rules that are not hard giving way one at a time (Plan).
func planRelaxing(p alloc.Params, s Settings, hosts []*Host, r Request) (*Result, error) {
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
