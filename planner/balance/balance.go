// Package balance proposes moves of instances between hosts that reduce
// imbalance, per resource, the way Service Fabric's Cluster Resource
// Manager balances metrics: a resource is imbalanced when the most used
// host's share of it, divided by the least used host's share, exceeds the
// balancing threshold, and only while the most used host's share is at
// least the activity threshold (a nearly idle cluster is left alone). A
// host that runs nothing (one that just joined) is the least used host and
// is filled whatever the activity threshold: below it, moves go only to
// the hosts that ran nothing when the proposal began, until the balancing
// threshold holds or no move lowers the score.
// Moves go from the most used host to the least used ones that can take the
// instance; each accepted move must lower the imbalance score (the
// variance of the hosts' shares, summed over the resources), so a proposal
// never makes the cluster less balanced. Whether a host may take an
// instance (hard placement rules, capacity, CPU layout) is the caller's:
// the Try callback. Pure: no I/O, no clock, deterministic (ties by name).
package balance

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Resources balanced.
var Resources = []string{"cpu", "memory"}

// Host is a schedulable host's capacity and use per resource.
type Host struct {
	Name     string
	Capacity map[string]int64
	Used     map[string]int64
}

// Share is the host's used share of resource r (0 when it has none).
func (h Host) Share(r string) float64 {
	if h.Capacity[r] <= 0 {
		return 0
	}
	return float64(h.Used[r]) / float64(h.Capacity[r])
}

// Item is an instance that may move: its host and what it uses. Plan
// reads Use and never writes it, so items may share one map
// (TestPlanLeavesUseAlone).
type Item struct {
	ID      string
	Service string
	Host    string
	Use     map[string]int64
}

// Options tune the balancing.
type Options struct {
	// BalancingThreshold: a resource is imbalanced while the most used
	// share / least used share exceeds it (≥ 1; 0: DefaultBalancing).
	BalancingThreshold float64
	// ActivityThreshold: nothing moves for a resource whose most used
	// share is below it (0..1; 0: DefaultActivity).
	ActivityThreshold float64
	// MaxMoves bounds the proposal (0: DefaultMaxMoves).
	MaxMoves int
}

// Defaults.
const (
	DefaultBalancing = 1.5
	DefaultActivity  = 0.1
	DefaultMaxMoves  = 10
	MaxMovesLimit    = 1000
)

// Validate checks the options field by field.
func (o Options) Validate() error {
	switch {
	case o.BalancingThreshold != 0 && !(o.BalancingThreshold >= 1 && o.BalancingThreshold <= 1e6):
		return fmt.Errorf("balancing threshold = %v: want at least 1 (the most used host's share / the least used one's)", o.BalancingThreshold)
	case !(o.ActivityThreshold >= 0 && o.ActivityThreshold <= 1):
		return fmt.Errorf("activity threshold = %v: want 0..1 (a share of the host)", o.ActivityThreshold)
	case o.MaxMoves < 0 || o.MaxMoves > MaxMovesLimit:
		return fmt.Errorf("max moves = %d: want 0..%d", o.MaxMoves, MaxMovesLimit)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.BalancingThreshold == 0 {
		o.BalancingThreshold = DefaultBalancing
	}
	if o.ActivityThreshold == 0 {
		o.ActivityThreshold = DefaultActivity
	}
	if o.MaxMoves == 0 {
		o.MaxMoves = DefaultMaxMoves
	}
	return o
}

// Move is one proposed move and why.
type Move struct {
	Item     Item
	To       string
	Resource string // the imbalanced resource it reduces
	Why      string
}

// Try reports whether item may move to host to after the moves accepted
// so far, and if so records the move in the caller's model (the next Try
// sees it). It is called with the most promising candidates first.
type Try func(item Item, to string) bool

// Ratio is the most used share / the least used share of resource r over
// hosts: 1 when all are equal; +Inf when the least used host uses none of
// it while another uses some.
func Ratio(hosts []Host, r string) float64 {
	lo, hi := math.Inf(1), 0.0
	for _, h := range hosts {
		if h.Capacity[r] <= 0 {
			continue
		}
		s := h.Share(r)
		lo, hi = math.Min(lo, s), math.Max(hi, s)
	}
	switch {
	case hi == 0:
		return 1
	case lo == 0:
		return math.Inf(1)
	}
	return hi / lo
}

// Score is the imbalance score: the variance of the hosts' shares, summed
// over the resources. 0 means perfectly balanced.
func Score(hosts []Host) float64 {
	total := 0.0
	for _, r := range Resources {
		var xs []float64
		for _, h := range hosts {
			if h.Capacity[r] > 0 {
				xs = append(xs, h.Share(r))
			}
		}
		if len(xs) == 0 {
			continue
		}
		mean := 0.0
		for _, x := range xs {
			mean += x
		}
		mean /= float64(len(xs))
		for _, x := range xs {
			total += (x - mean) * (x - mean) / float64(len(xs))
		}
	}
	return total
}

// imbalanced is whether resource r of hosts is to be balanced under o, and
// whether only because of the hosts that ran nothing (fill: the activity
// threshold does not hold, so only they may take moves).
func imbalanced(hosts []Host, r string, o Options, fresh []bool) (ok, fill bool) {
	hi := 0.0
	for _, h := range hosts {
		hi = math.Max(hi, h.Share(r))
	}
	if hi == 0 || Ratio(hosts, r) <= o.BalancingThreshold {
		return false, false
	}
	if hi >= o.ActivityThreshold {
		return true, false
	}
	for i, f := range fresh {
		if f && hosts[i].Capacity[r] > 0 {
			return true, true
		}
	}
	return false, false
}

// empty is whether h uses none of any resource balanced (it runs nothing
// that is balanced) and has some capacity.
func empty(h Host) bool {
	some := false
	for _, r := range Resources {
		if h.Used[r] != 0 {
			return false
		}
		some = some || h.Capacity[r] > 0
	}
	return some
}

// Plan proposes at most o.MaxMoves moves that reduce imbalance, in the
// order they are to be made, and returns the hosts as they would be after
// them. hosts and items are not changed.
func Plan(hosts []Host, items []Item, o Options, try Try) ([]Move, []Host) {
	o = o.withDefaults()
	hs := make([]Host, len(hosts))
	for i, h := range hosts {
		hs[i] = Host{Name: h.Name, Capacity: h.Capacity, Used: clone(h.Used)}
	}
	slices.SortFunc(hs, func(a, b Host) int { return cmp.Compare(a.Name, b.Name) })
	index := func(name string) int {
		i, ok := slices.BinarySearchFunc(hs, name, func(h Host, n string) int { return cmp.Compare(h.Name, n) })
		if !ok {
			return -1
		}
		return i
	}
	// fresh are the hosts that run nothing: they are filled whatever the
	// activity threshold.
	fresh := make([]bool, len(hs))
	for i, h := range hs {
		fresh[i] = empty(h)
	}
	its := slices.Clone(items)
	moved := map[string]bool{}
	var out []Move
	for len(out) < o.MaxMoves {
		m, ok := next(hs, its, moved, fresh, o, index, try)
		if !ok {
			break
		}
		out = append(out, m)
	}
	return out, hs
}

// MaxTargets bounds the hosts tried per instance (the least used first), so
// that a proposal costs at most instances × MaxTargets tries of the
// caller's placement, whatever the fleet's size.
const MaxTargets = 64

// stats are a resource's Σ share and Σ share² over the hosts that have
// it, so that a move's new score is known in O(1).
type stats struct {
	n      float64
	s1, s2 float64
}

func statsOf(hs []Host, r string) stats {
	var st stats
	for _, h := range hs {
		if h.Capacity[r] > 0 {
			x := h.Share(r)
			st.n++
			st.s1 += x
			st.s2 += x * x
		}
	}
	return st
}

func (st stats) variance() float64 {
	if st.n == 0 {
		return 0
	}
	m := st.s1 / st.n
	return st.s2/st.n - m*m
}

// moved is st after it's use leaves from and joins to.
func (st stats) moved(from, to Host, it Item, r string) stats {
	shareAfter := func(h Host, d int64) float64 {
		if h.Capacity[r] <= 0 {
			return 0
		}
		return float64(h.Used[r]+d) / float64(h.Capacity[r])
	}
	for _, c := range []struct {
		h Host
		d int64
	}{{from, -it.Use[r]}, {to, it.Use[r]}} {
		if c.h.Capacity[r] <= 0 {
			continue
		}
		old, nw := c.h.Share(r), shareAfter(c.h, c.d)
		st.s1 += nw - old
		st.s2 += nw*nw - old*old
	}
	return st
}

// next finds and applies the next move: for each imbalanced resource (in
// Resources order), from the most used host, the largest item first, to
// the least used hosts first (at most MaxTargets; below the activity
// threshold, only the hosts that ran nothing), the first that lowers the
// score and that try accepts.
func next(hs []Host, its []Item, moved map[string]bool, fresh []bool, o Options, index func(string) int, try Try) (Move, bool) {
	for _, r := range Resources {
		ok, fill := imbalanced(hs, r, o, fresh)
		if !ok {
			continue
		}
		// targets: every host but the most used (the first by name among
		// equals), least used first, ties by name (hs is sorted by name);
		// below the activity threshold only the hosts that ran nothing.
		from := 0
		for i := range hs {
			if hs[i].Share(r) > hs[from].Share(r) {
				from = i
			}
		}
		targets := make([]int, 0, len(hs))
		for i := range hs {
			if i != from && (!fill || fresh[i]) {
				targets = append(targets, i)
			}
		}
		slices.SortStableFunc(targets, func(a, b int) int { return cmp.Compare(hs[a].Share(r), hs[b].Share(r)) })
		var cands []int
		for i, it := range its {
			if it.Host == hs[from].Name && !moved[it.ID] && it.Use[r] > 0 {
				cands = append(cands, i)
			}
		}
		slices.SortStableFunc(cands, func(a, b int) int {
			return cmp.Or(cmp.Compare(its[b].Use[r], its[a].Use[r]), cmp.Compare(its[a].ID, its[b].ID))
		})
		per := map[string]stats{}
		before := 0.0
		for _, res := range Resources {
			per[res] = statsOf(hs, res)
			before += per[res].variance()
		}
		for _, ci := range cands {
			it := its[ci]
			for _, to := range targets[:min(len(targets), MaxTargets)] {
				if hs[to].Share(r) >= hs[from].Share(r) {
					break
				}
				after := 0.0
				for _, res := range Resources {
					after += per[res].moved(hs[from], hs[to], it, res).variance()
				}
				if after < before-1e-12 && try(it, hs[to].Name) {
					shift(&hs[from], &hs[to], it, +1)
					moved[it.ID] = true
					cause := fmt.Sprintf("most/least used %s, threshold %g", ratioText(hs, r, from, to, it), o.BalancingThreshold)
					if fill {
						cause = fmt.Sprintf("%s ran nothing: a new host is filled below the activity threshold %g too", hs[to].Name, o.ActivityThreshold)
					}
					why := fmt.Sprintf("%s: %s uses %.0f%%, %s %.0f%% (%s); score %.4f → %.4f",
						r, hs[from].Name, 100*shareBefore(hs[from], it, r, +1), hs[to].Name, 100*shareBefore(hs[to], it, r, -1),
						cause, before, after)
					its[ci].Host = hs[to].Name
					return Move{Item: it, To: hs[to].Name, Resource: r, Why: why}, true
				}
			}
		}
	}
	return Move{}, false
}

// shift moves it's use from one host to the other (sign -1 undoes it).
func shift(from, to *Host, it Item, sign int64) {
	for r, u := range it.Use {
		from.Used[r] -= sign * u
		to.Used[r] += sign * u
	}
}

// shareBefore is h's share of r before it moved (h now holds the move).
func shareBefore(h Host, it Item, r string, sign int64) float64 {
	if h.Capacity[r] <= 0 {
		return 0
	}
	return float64(h.Used[r]+sign*it.Use[r]) / float64(h.Capacity[r])
}

// ratioText is the ratio of r before the move, "∞: NAME uses none" when
// the least used host (the first by name) uses none.
func ratioText(hs []Host, r string, from, to int, it Item) string {
	shift(&hs[from], &hs[to], it, -1)
	defer shift(&hs[from], &hs[to], it, +1)
	v := Ratio(hs, r)
	if math.IsInf(v, 1) {
		for _, h := range hs {
			if h.Capacity[r] > 0 && h.Used[r] == 0 {
				return fmt.Sprintf("∞: %s uses none", h.Name)
			}
		}
	}
	return fmt.Sprintf("%.2f", v)
}

func clone(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
