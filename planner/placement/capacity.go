package placement

import (
	"fmt"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
)

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
