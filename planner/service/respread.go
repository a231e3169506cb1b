package service

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// respreadTries bounds the placements one service's repair tries in a
// round: the instances of its most loaded hosts first.
const respreadTries = 8

// respread proposes moves that repair the domain spread Health warns of
// (issue 38 item 5: after a drain and its cancel, health said "FaultDomain
// web … dc1 4, dc2 0" and rebalance moved only for CPU and memory). For
// each service (by name) whose instances domainPacking finds packed, an
// instance of its most loaded host is placed again with that host
// skipped, by the rules a deploy uses (the domain spread rule picks a
// light domain); the move is kept when it narrows the service's spread
// (domainTree.gap), and the service is left when none of respreadTries
// candidates does or health has nothing more to say of it. At most limit
// moves with the done ones before them; the pending moves are laid over
// pend as they are kept.
func (s *Service) respread(ctx context.Context, pend *state.Pending, limit, done int, moveLocal bool) []RebalanceMove {
	views := s.st.Hosts()
	if !slices.ContainsFunc(views, func(v state.HostView) bool { return v.Host.FaultDomain != "" || v.Host.UpgradeDomain != "" }) {
		// No host has a domain: domainPacking finds nothing packed for any
		// service, so there is nothing to read (every instance, each
		// service's room over every host: most of a dry run at 1,000,000
		// instances). TestRespreadWithoutDomains.
		return nil
	}
	return s.respreadOver(ctx, pend, views, limit, done, moveLocal)
}

// respreadOver is respread over views (s.st.Hosts()), read in full.
func (s *Service) respreadOver(ctx context.Context, pend *state.Pending, views []state.HostView, limit, done int, moveLocal bool) []RebalanceMove {
	onHost := map[string]map[string]int{} // service → host → instances
	for _, ph := range pend.SchedulablePlacement().Hosts {
		for _, v := range pend.Instances(ph.Name) {
			in := v.Instance
			if onHost[in.Service] == nil {
				onHost[in.Service] = map[string]int{}
			}
			onHost[in.Service][in.Host]++
		}
	}
	var out []RebalanceMove
	for _, svc := range slices.Sorted(maps.Keys(onHost)) {
		d, ok := pend.Service(svc)
		if !ok || d.Value.Rules.DomainSpread == string(placement.SpreadOff) {
			continue
		}
		if st := alloc.Strategy(d.Value.Strategy); st == alloc.Each || st == alloc.Fill {
			continue // as Health: their counts follow the hosts
		}
		room := s.roomFor(d.Value)
		counts := onHost[svc]
		for done+len(out) < limit && ctx.Err() == nil && len(domainPacking(views, counts, room)) > 0 {
			m, ok := s.respreadOne(pend, views, svc, counts, moveLocal)
			if !ok {
				break
			}
			counts[m.From]--
			counts[m.To]++
			out = append(out, m)
		}
	}
	return out
}

// respreadOne tries the instances of svc on its most loaded hosts (by
// count, then name; instances by ID), at most respreadTries, and keeps
// the first placement that narrows the spread.
func (s *Service) respreadOne(pend *state.Pending, views []state.HostView, svc string, counts map[string]int, moveLocal bool) (RebalanceMove, bool) {
	gap := domainTreeOf(views, counts, nil).gap()
	hosts := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
	tries := 0
	for _, h := range hosts {
		for _, v := range pend.Instances(h) {
			in := v.Instance
			if in.Service != svc || in.Replaces != "" || !moveLocal && in.HostLocal() != "" {
				continue
			}
			if tries++; tries > respreadTries {
				return RebalanceMove{}, false
			}
			c := new(state.Change)
			to, _, err := s.placeLike(pend, in, in.Host, "", "", true, false, c)
			if err != nil {
				continue
			}
			after := maps.Clone(counts)
			after[in.Host]--
			after[to.Host]++
			if domainTreeOf(views, after, nil).gap() >= gap {
				continue
			}
			release(pend, v, c, nil)
			pend.Add(c)
			return RebalanceMove{Instance: in.ID, Service: svc, From: in.Host, To: to.Host,
				Why: fmt.Sprintf("domain spread: %s's instances narrowed from a gap of %d to %d between domains", svc, gap, domainTreeOf(views, after, nil).gap())}, true
		}
	}
	return RebalanceMove{}, false
}
