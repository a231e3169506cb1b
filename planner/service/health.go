package service

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// Warning is a standing rule violation (seed 001's health warnings).
type Warning struct {
	Kind    string `json:"kind"`    // NodeCapacity, Overbooked, PlacementConstraint, FaultDomain, UpgradeDomain, Maintenance, Down
	Subject string `json:"subject"` // a host or a service
	Detail  string `json:"detail"`
}

// KindOverbooked is the warning of a host above its nominal capacity: it
// holds what only the overbooking allows (a heal, a drain or a host's
// removal found no host with room of its own).
const KindOverbooked = "Overbooked"

// OverNominal is what host v holds past its nominal capacity
// (alloc.OverNominal), nil when it is within it.
func OverNominal(v state.HostView, shareBase int) []alloc.Overuse {
	h := v.Resources
	if h == nil && !mayBeOverNominal(v) {
		return nil
	}
	if h == nil {
		h = state.AllocHost(v.Host, v.Alloc)
	}
	return alloc.OverNominal(h, shareBase)
}

// mayBeOverNominal is false when nothing of host v's usage (v.Alloc) is
// above its nominal capacity: host memory, each NUMA node's, each CPU's
// pieces. Then OverNominal is nil, and the engine view it would build (a
// host's CPUs sorted, its maps cloned: most of health's time per host)
// is not needed. True is only a maybe: OverNominal tells.
func mayBeOverNominal(v state.HostView) bool {
	h, a := v.Host, v.Alloc
	if a.MemoryUsed > h.MemoryBytes {
		return true
	}
	for n, used := range a.NUMAUsed {
		if used > h.NUMAMemory[n] {
			return true
		}
	}
	for id, used := range a.Used {
		if c, ok := h.CPUs[id]; ok && used > c {
			return true
		}
	}
	return false
}

// overbookedWarning warns of host v above its nominal capacity in a
// resource the cluster overbooks (overbooking: the settings'), naming
// each with used/nominal. Past the capacity of a resource it does not
// overbook, the store's audit (Verify) reports the host oversold instead.
func overbookedWarning(v state.HostView, shareBase int, overbooking map[string]float64) (Warning, bool) {
	var parts []string
	for _, o := range OverNominal(v, shareBase) {
		resource := "memory"
		if o.Resource == "cpu" {
			resource = "cpu"
		}
		if _, ok := overbooking[resource]; ok {
			parts = append(parts, o.String())
		}
	}
	if len(parts) == 0 {
		return Warning{}, false
	}
	return Warning{Kind: KindOverbooked, Subject: v.Host.Name,
		Detail: fmt.Sprintf("above its nominal capacity, using the overbooking (headroom for emergencies): %s", strings.Join(parts, ", "))}, true
}

// Health lists what holds no longer: hosts over capacity, hosts above
// their nominal capacity (the overbooking in use), instances on
// hosts their service's constraint no longer matches, services packed into
// too few fault or upgrade domains, hosts past their maintenance grace, and
// down hosts that hold instances. now is the clock (health is an edge).
func (s *Service) Health(now time.Time) []Warning {
	var out []Warning
	// One read of the fleet, at one revision, for the audit and the counts
	// below, in place: a copy of every instance (Snapshot) was half of
	// Health at 1,000,000 instances (issue 39).
	per := map[string]map[string]int{} // service → host → instances
	onHost := map[string]int{}
	var hosts []state.HostView
	var overbooking map[string]float64
	s.st.ReadFleet(func(f state.Fleet) {
		// The audit's pass over each host's instances counts them per
		// service too. Instances on a host not registered count nowhere
		// below (no host's warning, no constraint's, no domain's): the
		// audit, which reads registered hosts only, skips them.
		bad := verifyFleet(f, s.params.ShareBase, func(v state.HostView, here map[string]int) {
			hosts = append(hosts, v)
			name := v.Host.Name
			n := 0
			for svc, c := range here {
				if per[svc] == nil {
					per[svc] = map[string]int{}
				}
				per[svc][name] = c
				n += c
			}
			if n > 0 {
				onHost[name] = n
			}
		})
		for _, b := range bad {
			out = append(out, Warning{Kind: placement.RuleCapacity, Subject: "store", Detail: b})
		}
		overbooking = f.Placement().Overbooking
	})
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

// roomFor is, per host, how many more instances of the service's recorded
// shape it may take under its hard rules (Capacity), or nil when that
// cannot be told (a record Capacity refuses).
func (s *Service) roomFor(d state.Service) map[string]int {
	rooms, err := s.Capacity(DeployRequest{Service: d.Name, Deploy: d.Deploy})
	if err != nil {
		return nil
	}
	out := make(map[string]int, len(rooms))
	for h, room := range rooms {
		out[h] = room.Count
	}
	return out
}

// roomKey is what roomFor's answer depends on: the record's size and
// hard rules (Capacity reads nothing else of it), and its name only under
// a max per host (its own instances then cap a host's room).
func roomKey(d state.Service) string {
	k := struct {
		Size                   model.Size
		Constraint             string
		Affinity, AntiAffinity model.Affinity
		MaxPerHost             int
		Service                string
	}{d.Size, d.Rules.Constraint, d.Rules.Affinity, d.Rules.AntiAffinity, d.MaxPerHost, ""}
	if d.MaxPerHost > 0 {
		k.Service = d.Name
	}
	return string(mustJSON(k))
}

// domainPacking compares, as placement's max-difference rule does, the
// service's instance counts (per host in onHost) of sibling domains: the
// children of each fault domain, a host without a fault domain being a
// top-level domain of its own, and the upgrade domains. Two siblings more
// than one apart are a warning, naming their parent, when the lighter one
// could take one more (a host in it has room, per room; room nil: any
// host): a deploy leaves a domain light only where it has no room, or
// where a hard rule (a constraint) keeps the service out. Hosts that are
// not up and hold none of the service's instances do not count. Nothing
// when no host has a domain.
func domainPacking(hosts []state.HostView, onHost, room map[string]int) []Warning {
	t := domainTreeOf(hosts, onHost, room)
	fd, ud, roomy, children, withDomains := t.fd, t.ud, t.roomy, t.children, t.withDomains
	// packed: some sibling could take one more and is over one below
	// another.
	packed := func(counts map[string]int, key func(string) string) bool {
		_, hi := minMax(counts)
		for d, n := range counts {
			if hi-n > 1 && roomy[key(d)] {
				return true
			}
		}
		return false
	}
	same := func(d string) string { return d }
	if !withDomains {
		return nil
	}
	var out []Warning
	for _, parent := range slices.Sorted(maps.Keys(children)) {
		counts := map[string]int{}
		for c := range children[parent] {
			counts[c] = fd[c]
		}
		if len(counts) > 1 && packed(counts, same) {
			under := ""
			if parent != "" {
				under = " under " + parent
			}
			out = append(out, Warning{Kind: placement.RuleFaultDomain,
				Detail: fmt.Sprintf("instances packed into too few fault domains%s: %s", under, fmtCounts(counts))})
		}
	}
	if len(ud) > 1 && packed(ud, func(d string) string { return "U:" + d }) {
		out = append(out, Warning{Kind: placement.RuleUpgradeDomain, Detail: "instances packed into too few upgrade domains: " + fmtCounts(ud)})
	}
	return out
}

// domainTree is a service's instance counts per domain: per fault domain
// level (a host without a fault domain a top-level domain of its own) and
// per upgrade domain, which fault domains are children of which ("" the
// top), and whether a host in a domain may take one more (room; nil: any).
// Hosts that are not up and hold none of the instances do not count.
type domainTree struct {
	fd, ud      map[string]int
	roomy       map[string]bool            // fault path, or "U:" + upgrade domain
	children    map[string]map[string]bool // fault domain ("" = the top) → its child domains
	withDomains bool
}

func domainTreeOf(hosts []state.HostView, onHost, room map[string]int) domainTree {
	t := domainTree{fd: map[string]int{}, ud: map[string]int{}, roomy: map[string]bool{}, children: map[string]map[string]bool{}}
	for _, v := range hosts {
		h := v.Host
		n := onHost[h.Name]
		if v.State() != "up" && n == 0 {
			continue // domains without usable hosts do not count
		}
		if h.FaultDomain != "" || h.UpgradeDomain != "" {
			t.withDomains = true
		}
		levels := placement.FaultLevels(h.FaultDomain)
		if len(levels) == 0 {
			levels = []string{h.Name + " (no fault domain)"}
		}
		has := room == nil || room[h.Name] > 0
		parent := ""
		for _, lv := range levels {
			if t.children[parent] == nil {
				t.children[parent] = map[string]bool{}
			}
			t.children[parent][lv] = true
			t.fd[lv] += n
			t.roomy[lv] = t.roomy[lv] || has
			parent = lv
		}
		if h.UpgradeDomain != "" {
			t.ud[h.UpgradeDomain] += n
			t.roomy["U:"+h.UpgradeDomain] = t.roomy["U:"+h.UpgradeDomain] || has
		}
	}
	return t
}

// gap is how far the counts are from an even spread: over each set of
// sibling fault domains and over the upgrade domains, the most minus the
// least, summed (0 when no host has a domain).
func (t domainTree) gap() int {
	if !t.withDomains {
		return 0
	}
	sum := 0
	for _, kids := range t.children {
		if len(kids) > 1 {
			counts := map[string]int{}
			for c := range kids {
				counts[c] = t.fd[c]
			}
			lo, hi := minMax(counts)
			sum += hi - lo
		}
	}
	if len(t.ud) > 1 {
		lo, hi := minMax(t.ud)
		sum += hi - lo
	}
	return sum
}

// constraintBroken warns when a service's instances run on hosts that no
// longer match its placement constraint.
func constraintBroken(svc string, r model.Rules, onHosts map[string]int, byName map[string]state.HostView) (Warning, bool) {
	if r.Constraint == "" {
		return Warning{}, false
	}
	e, err := placement.Parse(r.Constraint)
	if err != nil {
		return Warning{}, false
	}
	var bad []string
	for _, h := range slices.Sorted(maps.Keys(onHosts)) {
		if v, ok := byName[h]; ok && !e.Match((&placement.Host{Name: h, Type: v.Host.Type, Properties: v.Host.Properties}).Props()) {
			bad = append(bad, h)
		}
	}
	if len(bad) == 0 {
		return Warning{}, false
	}
	return Warning{Kind: placement.RulePlacementConstraint, Subject: svc,
		Detail: fmt.Sprintf("instances on %s, which no longer match %q", strings.Join(bad, ", "), r.Constraint)}, true
}

func minMax(m map[string]int) (lo, hi int) {
	lo = -1
	for _, v := range m {
		if lo < 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	return max(lo, 0), hi
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
