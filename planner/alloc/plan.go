package alloc

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// Result is the outcome of Plan.
type Result struct {
	// Capacity is how many instances each host could take (before
	// max_per_host), and TotalCapacity their sum.
	Capacity      map[string]int
	TotalCapacity int
	// Placements has one entry per new instance, by host name, then in the
	// order the host's instances were planned.
	Placements []Placement
}

// MaxCount bounds the instances one request may ask for.
const MaxCount = 1_000_000

// ValidateRequest checks a request's fields against p.
func ValidateRequest(p Params, r Request) error {
	switch {
	case r.Service == "":
		return invalid("request.service", r.Service, "a service name is required")
	case r.Count < 1 && r.Strategy != Fill:
		return invalid("request.count", r.Count, "want at least 1")
	case r.Count < 0 || r.Count > MaxCount:
		return invalid("request.count", r.Count, "want 0..%d", MaxCount)
	case r.Bind && r.Pieces <= 0:
		return invalid("request.cpu", FormatPieces(r.Pieces, p.ShareBase), "a CPU-bound request needs at least 1 piece (1/%d CPU)", p.ShareBase)
	case r.MemoryBytes <= 0:
		return invalid("request.memory_bytes", r.MemoryBytes, "want more than 0 bytes")
	case r.WholeCores && (!r.Bind || r.Pieces%p.ShareBase != 0):
		return invalid("request.whole_cores", FormatPieces(r.Pieces, p.ShareBase), "whole cores need a bound request (--bind) of a whole number of CPUs")
	case r.MaxPerHost < 0:
		return invalid("request.max_per_host", r.MaxPerHost, "want 0 (no cap) or more")
	}
	if _, err := ParseStrategy("request.strategy", string(r.Strategy)); err != nil {
		return err
	}
	return nil
}

// MinFragment is the smallest fraction of a CPU, in pieces, a host can
// enforce: 1/1000 CPU, the 1 ms quota per 1 s period that is cpu.max's
// (and Docker's) smallest quota over its longest period (10 pieces with a
// share base of 10000; 1 with 1000 or less). The agent writes a fraction
// under 0.01 CPU per 1 s period, larger ones per 100 ms.
func MinFragment(shareBase int) int { return max(1, (shareBase+999)/1000) }

// Enforceable refuses CPU amounts a host could not enforce: a fraction of
// a CPU below MinFragment. The engine plans any piece count; the planner
// hands out only what hosts enforce (field names the request's field).
func Enforceable(p Params, field string, pieces int) error {
	if f := pieces % p.ShareBase; f > 0 && f < MinFragment(p.ShareBase) {
		return invalid(field, FormatPieces(pieces, p.ShareBase),
			"its fraction of a CPU, %s, is below the smallest a host can enforce, %s (cpu.max takes at least 1 ms per 1 s period): ask for a whole number of CPUs or a fraction of at least %s",
			FormatPieces(f, p.ShareBase), FormatPieces(MinFragment(p.ShareBase), p.ShareBase), FormatPieces(MinFragment(p.ShareBase), p.ShareBase))
	}
	return nil
}

// Plan decides where Count new instances of r go on hosts (already filtered
// to the hosts that may take work) and which resources each gets. It does not
// change hosts. The error is an *Error: CodeInvalid for bad input, otherwise
// it names what ran out on which hosts.
func Plan(p Params, hosts []*Host, r Request) (*Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if r.Strategy == "" {
		r.Strategy = Auto
	}
	if err := ValidateRequest(p, r); err != nil {
		return nil, err
	}
	return PlanValid(p, hosts, r)
}

// PlanValid is Plan for valid parameters and a request that passed
// ValidateRequest with its strategy set: callers that validated where the
// request entered (the planner service, the placement rules) plan without
// checking again.
func PlanValid(p Params, hosts []*Host, r Request) (*Result, error) {
	return planValid(p, hosts, r, true)
}

// planValid is PlanValid; one says whether a one-instance request may take
// planOne's shortcut (tests compare the two).
func planValid(p Params, hosts []*Host, r Request, one bool) (*Result, error) {
	byName := func(a, b *Host) int { return cmp.Compare(a.Name, b.Name) }
	order := hosts // callers mostly pass them sorted (the store keeps them so)
	if !slices.IsSortedFunc(order, byName) {
		order = slices.Clone(hosts)
		slices.SortFunc(order, byName)
	}
	sh := shapeOf(p, r)
	per := uint64(r.Pieces)
	if !r.Bind {
		per = uint64(r.MemoryBytes)
	}
	if one && r.Count == 1 && r.Fixed == nil && (r.Strategy == Auto || r.Strategy == Global || r.Strategy == Drained) {
		if res, ok, err := planOne(p, order, sh, per, r); ok {
			return res, err
		}
	}
	res := &Result{Capacity: make(map[string]int, len(order))}
	cands := make([]*candidate, 0, len(order))
	backing := make([]candidate, len(order)) // one allocation, not one per host
	states := map[string]*hostState{}        // nil where a memo answered
	for i, h := range order {
		c, st := capacityOf(p, h, sh, r.Bind)
		if st != nil {
			states[h.Name] = st
		}
		res.Capacity[h.Name] = c.Count
		res.TotalCapacity += c.Count
		backing[i] = candidateOf(p, h, c, r)
		cands = append(cands, &backing[i])
	}
	var counts map[string]int
	if r.Fixed != nil {
		sum := 0
		for _, c := range cands {
			n := r.Fixed[c.name]
			if n > c.room {
				return nil, shortage(CodeInsufficient, fmt.Sprintf("host %s cannot take the %d instances of %s it was given", c.name, n, r.Service), []*candidate{c}, n)
			}
			sum += n
		}
		if sum != r.Count {
			return nil, invalid("request.fixed", sum, "want the counts to add up to request.count (%d)", r.Count)
		}
		counts = r.Fixed
	} else {
		var serr *Error
		if counts, serr = spread(r, per, cands); serr != nil {
			return nil, serr
		}
	}
	for _, h := range order {
		n := counts[h.Name]
		if n == 0 {
			continue
		}
		if !r.Bind {
			for range n {
				res.Placements = append(res.Placements, Placement{Host: h.Name, Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, NUMANode: -1, Memory: r.MemoryBytes, CPUQuota: r.Pieces}})
			}
			continue
		}
		st := states[h.Name]
		if st == nil {
			st = newHostState(p, h)
		}
		pl, err := st.placeHost(sh, n)
		if err != nil {
			return nil, err
		}
		res.Placements = append(res.Placements, pl...)
	}
	return res, nil
}

// candidateOf is host h, whose capacity for r is c, as the strategies see
// it before anything is placed.
func candidateOf(p Params, h *Host, c Capacity, r Request) candidate {
	// A count below 0 (a usage document gone wrong) is none: it must not
	// rank a host before the hosts without the service.
	cand := candidate{name: h.Name, cap: c, room: c.Count, existing: max(0, h.Instances[r.Service]), tie: TieKey(r.Seed, NameHash(h.Name)), rank: len(r.Rank)}
	if rk, ok := r.Rank[h.Name]; ok {
		cand.rank = rk
	}
	if l, ok := r.Limit[h.Name]; ok && l < cand.room {
		cand.room, cand.limitWhy = max(l, 0), r.LimitWhy[h.Name]
	}
	cand.free = cand.room
	if r.MaxPerHost > 0 && cand.existing+cand.room > r.MaxPerHost {
		cand.room, cand.capped = max(r.MaxPerHost-cand.existing, 0), true
	}
	if r.Strategy == Global { // only Global compares usage
		cand.used, cand.total = usage(p, h, r.Bind)
	}
	return cand
}

// planOne is PlanValid for one instance under Auto, Global or Drained:
// the host those strategies take first is the least candidate in their
// order among the hosts with room, found in one pass, without building
// every candidate or the heap (a single deploy over 10,000 hosts is the
// planner's commonest request). The result is PlanValid's, field for
// field (TestPlanOneIsTheFullPlan). ok is false when no host has room:
// the full path words that refusal.
func planOne(p Params, order []*Host, sh shape, per uint64, r Request) (res *Result, ok bool, err error) {
	res = &Result{Capacity: make(map[string]int, len(order))}
	var cand, best candidate
	var bestHost *Host
	var bestState *hostState
	order2 := &candHeap{items: []*candidate{&cand, &best}, global: r.Strategy == Global, per: per}
	for _, h := range order {
		c, st := capacityOf(p, h, sh, r.Bind)
		res.Capacity[h.Name] = c.Count
		res.TotalCapacity += c.Count
		cand = candidateOf(p, h, c, r)
		if cand.room <= 0 {
			continue
		}
		if bestHost != nil {
			before := order2.Less(0, 1) // Auto's and Global's order
			if r.Strategy == Drained {
				before = cand.free < best.free || cand.free == best.free && tieLess(&cand, &best)
			}
			if !before {
				continue
			}
		}
		best, bestHost, bestState = cand, h, st
	}
	if bestHost == nil {
		return nil, false, nil
	}
	if !r.Bind {
		res.Placements = []Placement{{Host: bestHost.Name, Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, NUMANode: -1, Memory: r.MemoryBytes, CPUQuota: r.Pieces}}}
		return res, true, nil
	}
	if bestState == nil {
		bestState = newHostState(p, bestHost)
	}
	pl, err := bestState.placeHost(sh, 1)
	if err != nil {
		return nil, true, err
	}
	res.Placements = pl
	return res, true, nil
}

// usage returns the used and total amounts Global compares: CPU pieces for
// bound requests, memory bytes for memory-first ones.
func usage(p Params, h *Host, bind bool) (used, total uint64) {
	if !bind {
		return uint64(max(h.MemoryUsed, 0)), uint64(max(h.MemoryBytes, 1))
	}
	for _, c := range h.CPUs {
		used += uint64(max(c.Used, 0))
		total += uint64(max(c.Capacity, 0))
	}
	return used, max(total, 1)
}
