package service

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
)

// ScaleResult is what a scale did.
type ScaleResult struct {
	Added   []model.Instance
	Removed []string
	Count   int // the service's instances now
	// A service placed per host (each, fill): NoRoom are the hosts the
	// rules allow that had no room for one more; CappedPerHost is the
	// service's max per host when it capped the count asked (0: it did
	// not).
	NoRoom        []string
	CappedPerHost int
	// Preempted are the instances of lower-priority services the scale's
	// deploy stopped to make room (DeployResult.Preempted).
	Preempted []Victim
}

// Scale sets the number of service's instances to count: it deploys the
// missing ones through placement with the service's spec, size and rules,
// or removes the worst placed first (worstFirst). An instance and the one
// replacing it (a move in flight) count once. A resize, replace or other
// scale committed between its read and its deploy makes it read again:
// the added instances have the service's size then, and two scales to N
// leave N. For a service of strategy each or fill, count is per host, as
// its deploy's was (perHost).
func (s *Service) Scale(ctx context.Context, service string, count int) (ScaleResult, error) {
	if err := state.ValidateServiceName(service); err != nil {
		return ScaleResult{}, errf(Invalid, "service: %w", err)
	}
	if count < 0 || count > MaxDeployCount {
		return ScaleResult{}, errf(Invalid, "count = %d: want 0..%d", count, MaxDeployCount)
	}
	for attempt := 1; ; attempt++ {
		d, ok := s.st.Service(service)
		if !ok {
			return ScaleResult{}, errf(NotFound, "service %q is not deployed: deploy it first (scale keeps its spec, size and rules)", service)
		}
		ins := s.st.ServiceInstances(service)
		have := countInstances(ins)
		svc := d.Value
		r := DeployRequest{Service: service, Deploy: svc.Deploy, recorded: svc.Strategy, scale: &scaleRead{record: svc, have: have}}
		// Per host, the service's max per host caps the count (a host
		// above it, from before the record's cap, comes down to it).
		each, capped := count, 0
		if svc.MaxPerHost > 0 && count > svc.MaxPerHost && perHost(svc.Strategy) {
			each, capped = svc.MaxPerHost, svc.MaxPerHost
		}
		switch {
		case perHost(svc.Strategy) && fewestPerHost(ins) >= each:
			// Every host holding instances holds each or more: a scale
			// down, the excess of each host going, with no placement (a
			// host the rules would not take now keeps each).
			res, err := s.scaleDown(ctx, service, perHostExcess(each))
			res.CappedPerHost = capped
			return res, err
		case perHost(svc.Strategy):
			// Fill tops every host the rules allow up to each, all or
			// nothing, and leaves those holding each or more; the excess
			// goes after, so that a refused top-up changes nothing.
			r.Count, r.Strategy = each, string(alloc.Fill)
		case count == have:
			return ScaleResult{Count: have}, nil
		case count < have:
			return s.scaleDown(ctx, service, totalExcess(count))
		default:
			r.Count, r.Strategy = count-have, string(oneMore(alloc.Strategy(svc.Strategy)))
		}
		// Scale is idempotent by its count: the deploy it makes records
		// nothing under the caller's request ID (a deploy's record there
		// would answer a later deploy with this one's instances).
		res, err := s.DeployWithRules(withoutRequest(ctx), r)
		if errors.Is(err, errScaleChanged) {
			// A resize, replace or another scale came after the read
			// above: read again, once the cache holds it. The change may
			// be one planned before this deploy in the same commit group,
			// which is still committing: an empty request is planned
			// after that group committed and the cache reflects it.
			if attempt < scaleAttempts {
				if err := s.pipe.do(ctx, func(reader) (*state.Change, error) { return new(state.Change), nil }); err != nil {
					return ScaleResult{}, err
				}
				continue
			}
			return ScaleResult{}, errf(Conflicted, "service %q: %v %d times in a row (other scales, resizes or replaces); nothing was added: run scale again", service, err, attempt)
		}
		if err != nil {
			return ScaleResult{}, err
		}
		if !perHost(svc.Strategy) {
			return ScaleResult{Added: res.Instances, Count: count, Preempted: res.Preempted}, nil
		}
		down, err := s.scaleDown(ctx, service, perHostExcess(each))
		if err != nil {
			return ScaleResult{Added: res.Instances, Preempted: res.Preempted}, err
		}
		return ScaleResult{Added: res.Instances, Removed: down.Removed, Count: down.Count, NoRoom: res.NoRoom, CappedPerHost: capped, Preempted: res.Preempted}, nil
	}
}

// perHost reports whether a service of strategy st counts per host: each
// and fill deploy their count on every host, and scale keeps to that.
func perHost(st string) bool {
	return alloc.Strategy(st) == alloc.Each || alloc.Strategy(st) == alloc.Fill
}

// fewestPerHost is the fewest instances one host holds of ins (a move's
// replacement counted once, with the instance it replaces); 0 for none.
func fewestPerHost(ins []state.InstanceView) int {
	per := map[string]int{}
	for _, v := range ins {
		if v.Instance.Replaces == "" {
			per[v.Instance.Host]++
		}
	}
	if len(per) == 0 {
		return 0
	}
	return slices.Min(slices.Collect(maps.Values(per)))
}

// scaleAttempts bounds how often Scale reads the service again when it
// changed between the read and the deploy (errScaleChanged).
const scaleAttempts = 8

// excess picks the instances a scale down removes from a service's
// instances (replacements of moves in flight among them) on hosts.
type excess func(ins []state.InstanceView, hosts map[string]state.HostView) []state.InstanceView

// totalExcess leaves count instances in all, the worst placed going first.
func totalExcess(count int) excess {
	return func(ins []state.InstanceView, hosts map[string]state.HostView) []state.InstanceView {
		return worstFirst(ins, hosts, countInstances(ins)-count)
	}
}

// perHostExcess leaves count instances on each host, the worst placed of
// each host going first (hosts in name order).
func perHostExcess(count int) excess {
	return func(ins []state.InstanceView, hosts map[string]state.HostView) []state.InstanceView {
		byHost := map[string][]state.InstanceView{}
		for _, v := range ins {
			byHost[v.Instance.Host] = append(byHost[v.Instance.Host], v)
		}
		var out []state.InstanceView
		for _, h := range slices.Sorted(maps.Keys(byHost)) {
			out = append(out, worstFirst(byHost[h], hosts, countInstances(byHost[h])-count)...)
		}
		return out
	}
}

// scaleDown removes the instances pick chooses (read in the plan), each
// with its replacement of a move in flight. Picking none changes nothing.
func (s *Service) scaleDown(ctx context.Context, service string, pick excess) (ScaleResult, error) {
	var removed []string
	count := 0 // the service's instances after
	err := s.pipe.do(ctx, func(rd reader) (*state.Change, error) {
		removed = nil
		ins := rd.ServiceInstances(service)
		views := map[string]state.HostView{}
		for _, v := range ins {
			if _, ok := views[v.Instance.Host]; !ok {
				views[v.Instance.Host], _ = rd.Host(v.Instance.Host)
			}
		}
		c := new(state.Change)
		allocs := map[string]state.Alloc{}
		picked := pick(ins, views) // no replacement among them (worstFirst)
		count = countInstances(ins) - len(picked)
		for _, v := range picked {
			release(rd, v, c, allocs)
			removed = append(removed, v.Instance.ID)
			if r, ok := replacementOf(rd, service, v.Instance.ID); ok {
				release(rd, r, c, allocs) // its move in flight goes with it
				removed = append(removed, r.Instance.ID)
			}
		}
		return c, nil
	})
	if err != nil {
		return ScaleResult{}, err
	}
	if len(removed) > 0 {
		s.log.Info("scaled down", "service", service, "count", count, "removed", removed)
	}
	return ScaleResult{Removed: removed, Count: count}, nil
}

// countInstances counts a service's instances, an instance being replaced
// by a move in flight and its replacement once.
func countInstances(ins []state.InstanceView) int {
	n := 0
	for _, v := range ins {
		if v.Instance.Replaces == "" {
			n++
		}
	}
	return n
}

// worstFirst picks k of a service's instances to remove (replacements of
// moves in flight left out), one at a time, each the worst placed given
// the ones picked before it: on a host that is not up, then in the fault
// domain holding most of the service, then on the host holding most of
// it, then on the host with the largest share of its CPU in use, ties by
// ID. Counting again after each pick keeps the spread: 3 + 3 scaled to 2
// leaves 1 + 1, not 2 + 0. Pure.
func worstFirst(ins []state.InstanceView, hosts map[string]state.HostView, k int) []state.InstanceView {
	perHost, perDomain := map[string]int{}, map[string]int{}
	domain := func(h string) string { return hosts[h].Host.FaultDomain }
	left := slices.DeleteFunc(slices.Clone(ins), func(v state.InstanceView) bool { return v.Instance.Replaces != "" })
	for _, v := range left {
		perHost[v.Instance.Host]++
		perDomain[domain(v.Instance.Host)]++
	}
	used := func(h string) float64 {
		v := hosts[h]
		c, u := 0, 0
		for id, p := range v.Host.CPUs {
			c += p
			u += v.Alloc.Used[id]
		}
		if c == 0 {
			return 0
		}
		return float64(u) / float64(c)
	}
	up := func(h string) int {
		if v, ok := hosts[h]; ok && v.State() == "up" {
			return 1
		}
		return 0
	}
	worse := func(a, b state.InstanceView) bool {
		ha, hb := a.Instance.Host, b.Instance.Host
		if d := up(ha) - up(hb); d != 0 {
			return d < 0
		}
		if d := perDomain[domain(hb)] - perDomain[domain(ha)]; d != 0 {
			return d < 0
		}
		if d := perHost[hb] - perHost[ha]; d != 0 {
			return d < 0
		}
		if ua, ub := used(ha), used(hb); ua != ub {
			return ua > ub
		}
		return a.Instance.ID < b.Instance.ID
	}
	var out []state.InstanceView
	for len(out) < k && len(left) > 0 {
		w := 0
		for i := range left {
			if worse(left[i], left[w]) {
				w = i
			}
		}
		v := left[w]
		out = append(out, v)
		left = slices.Delete(left, w, w+1)
		perHost[v.Instance.Host]--
		perDomain[domain(v.Instance.Host)]--
	}
	return out
}
