package preempt

import (
	"cmp"
	"slices"

	"github.com/pinfold/pinfold/planner/model"
)

// Candidate is an instance running on a host, as preemption sees it.
type Candidate struct {
	ID       string
	Service  string
	Priority model.Priority
	// NeverPreempted: its service may never be preempted
	// (model.Scheduling.NeverPreempted); never a victim.
	NeverPreempted bool
}

// Host is a host and every instance on it; Choose keeps only those of
// strictly lower priority than the request's that may be preempted.
type Host struct {
	Name      string
	Instances []Candidate
}

// Fits reports whether the request fits host once the instances ids
// (sorted) have stopped there. Choose assumes that stopping more instances
// never makes a fitting request stop fitting (monotone); with a Fits that
// is not, the choice still fits but may not be the smallest.
type Fits func(host string, ids []string) bool

// Choice is the instances to stop on one host, sorted by ID.
type Choice struct {
	Host    string
	Victims []Candidate
	// Exact: the search proved no smaller set (nor one of lower
	// priorities) fits on this host; false when the search ran out of
	// budget and fell back to a greedy set from which no single victim
	// can be spared.
	Exact bool
}

// DefaultBudget bounds the Fits calls one host's exact search may make
// (all sets of up to 3 of 28 candidates, or 2 of 90).
const DefaultBudget = 4096

// MaxPriority is the highest priority among c's victims (MinPriority-1
// when there are none).
func (c Choice) MaxPriority() model.Priority {
	m := model.MinPriority - 1
	for _, v := range c.Victims {
		m = max(m, v.Priority)
	}
	return m
}

// IDs is c's victims' IDs, sorted.
func (c Choice) IDs() []string {
	ids := make([]string, len(c.Victims))
	for i, v := range c.Victims {
		ids[i] = v.ID
	}
	return ids
}

// Compare orders choices, better first:
//  1. the lower highest victim priority (stop batch work before
//     production work whenever that is enough);
//  2. the fewer victims;
//  3. the victims' sorted IDs, compared as strings one by one;
//  4. the host name.
func Compare(a, b Choice) int {
	if c := cmp.Compare(a.MaxPriority(), b.MaxPriority()); c != 0 {
		return c
	}
	if c := cmp.Compare(len(a.Victims), len(b.Victims)); c != 0 {
		return c
	}
	if c := slices.Compare(a.IDs(), b.IDs()); c != 0 {
		return c
	}
	return cmp.Compare(a.Host, b.Host)
}

// Choose returns, across hosts, the best choice (Compare) of instances of
// priority strictly below prio, none never preempted, whose removal makes the request fit; false
// when no host has one. A host where the request fits as it is comes out
// with no victims. budget bounds each host's Fits calls (<= 0:
// DefaultBudget).
func Choose(hosts []Host, prio model.Priority, fits Fits, budget int) (Choice, bool) {
	var best Choice
	found := false
	for _, h := range hosts {
		c, ok := OnHost(h, prio, fits, budget)
		if ok && (!found || Compare(c, best) < 0) {
			best, found = c, true
		}
	}
	return best, found
}

// OnHost is Choose on one host (a resize: the instance stays where it is).
//
// The search, with the candidates sorted by priority then ID:
//  1. if the request fits with no victim, there is none;
//  2. for each priority level L below prio, lowest first: if it does not
//     fit with every candidate of priority <= L gone, try the next level
//     (no subset of them fits, by monotony);
//  3. otherwise the sets of those candidates are tried by size, 1 first,
//     and within a size in order of their sorted IDs: the first that fits
//     is the answer, and its highest priority is L;
//  4. when the Fits calls of step 3 pass budget, the answer is greedy:
//     every candidate of priority <= L, then each one dropped from the set,
//     highest priority and ID first, whenever the rest still fits.
func OnHost(h Host, prio model.Priority, fits Fits, budget int) (Choice, bool) {
	if budget <= 0 {
		budget = DefaultBudget
	}
	if fits(h.Name, nil) {
		return Choice{Host: h.Name, Exact: true}, true
	}
	var cands []Candidate
	for _, c := range h.Instances {
		if c.Priority < prio && !c.NeverPreempted {
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
	})
	for end := 0; end < len(cands); {
		level := cands[end].Priority
		for end < len(cands) && cands[end].Priority == level {
			end++
		}
		allowed := slices.Clone(cands[:end])
		slices.SortFunc(allowed, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
		if !fits(h.Name, idsOf(allowed)) {
			continue
		}
		if set, ok := smallest(h.Name, allowed, fits, budget); ok {
			return Choice{Host: h.Name, Victims: set, Exact: true}, true
		}
		return Choice{Host: h.Name, Victims: greedy(h.Name, allowed, fits)}, true
	}
	return Choice{}, false
}

// smallest tries allowed's subsets (sorted by ID) by size, then in
// lexicographic order of their IDs, and returns the first that fits;
// false once it has made budget Fits calls without one.
func smallest(host string, allowed []Candidate, fits Fits, budget int) ([]Candidate, bool) {
	n := len(allowed)
	calls := 0
	for k := 1; k < n; k++ {
		idx := make([]int, k) // the current k-combination, ascending
		for i := range idx {
			idx[i] = i
		}
		for {
			if calls++; calls > budget {
				return nil, false
			}
			set := make([]Candidate, k)
			for i, j := range idx {
				set[i] = allowed[j]
			}
			if fits(host, idsOf(set)) {
				return set, true
			}
			// The next combination in lexicographic order.
			i := k - 1
			for i >= 0 && idx[i] == n-k+i {
				i--
			}
			if i < 0 {
				break
			}
			idx[i]++
			for j := i + 1; j < k; j++ {
				idx[j] = idx[j-1] + 1
			}
		}
	}
	return allowed, true // every one (it fits: OnHost checked)
}

// greedy starts from allowed (which fits) and drops each candidate,
// highest priority then highest ID first, whenever the rest still fits.
func greedy(host string, allowed []Candidate, fits Fits) []Candidate {
	order := slices.Clone(allowed)
	slices.SortFunc(order, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(b.ID, a.ID))
	})
	set := slices.Clone(allowed)
	for _, c := range order {
		without := slices.DeleteFunc(slices.Clone(set), func(x Candidate) bool { return x.ID == c.ID })
		if fits(host, idsOf(without)) {
			set = without
		}
	}
	return set
}

func idsOf(cs []Candidate) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}
