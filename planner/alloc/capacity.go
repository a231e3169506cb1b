package alloc

import (
	"fmt"
	"slices"
	"sort"
)

// This file counts. It works on free-piece values only (never on which CPU
// holds them), which keeps capacity fast, and place.go consumes exactly the
// same multiset of values when it picks concrete CPUs. That equivalence is
// what makes capacity exact: placing capacity-many instances always succeeds.
//
// Within one CPU set (a NUMA node, or the whole host for cross-node plans):
//  1. Classify each CPU with free pieces v > 0: "whole-capable" when v is a
//     positive multiple of ShareBase (it can give v/ShareBase whole CPUs, to
//     different instances), otherwise "fragmented" (it only gives fragments,
//     as in Eru: an oversold CPU at 270 of 300 gives fragments only).
//  2. For n instances of X whole CPUs plus a fragment of F pieces, convert the
//     fewest whole-capable CPUs into fragment CPUs (smallest v first) so that
//     fragments suffice: Σ floor(v/F) over fragmented and converted CPUs >= n,
//     within the MaxFragmentCores allowance.
//  3. The rest must give n×X whole CPUs to n instances, X distinct CPUs each:
//     possible exactly when Σ min(v/ShareBase, n) >= n×X.
//  4. Feasibility is monotone in n, so the set's capacity is the largest
//     feasible n (binary search), capped by memory.
// That is seed 004's max over A+B of min(A/X, B×P/Y), with existing fragments
// counted per CPU, and never below Eru's count for the same input.

// shape is a request in the engine's units.
type shape struct {
	sb  int   // pieces per CPU
	x   int   // whole CPUs per instance
	f   int   // fragment pieces per instance (0 for integer requests)
	mem int64 // memory bytes per instance
	// cores: whole physical cores only (cores.go)
	cores bool
}

func shapeOf(p Params, r Request) shape {
	return shape{sb: p.ShareBase, x: r.Pieces / p.ShareBase, f: r.Pieces % p.ShareBase, mem: r.MemoryBytes, cores: r.WholeCores && r.Bind}
}

// counter holds one CPU set's classified values.
type counter struct {
	s       shape
	whole   []int // free pieces of whole-capable CPUs, ascending (conversion order)
	prefix  []int // prefix[j] = Σ floor(whole[i]/f) for i < j (fragments from j conversions)
	frag    []int // free pieces of fragmented CPUs
	eFrags  int   // Σ floor(frag[i]/f)
	convMax int   // conversions allowed in this set
	slots   int   // Σ whole[i]/sb
	single  bool  // every whole-capable CPU gives exactly one whole CPU (not oversold)
}

// newCounter classifies values; conv is the host's remaining conversion
// allowance (-1: no cap). values is not modified.
func newCounter(s shape, values []int, conv int) *counter {
	c := &counter{s: s, single: true}
	for _, v := range values {
		switch {
		case v <= 0:
		case v%s.sb == 0:
			c.whole = append(c.whole, v)
			c.slots += v / s.sb
			if v != s.sb {
				c.single = false
			}
		default:
			c.frag = append(c.frag, v)
			if s.f > 0 {
				c.eFrags += v / s.f
			}
		}
	}
	slices.Sort(c.whole)
	c.convMax = len(c.whole)
	if conv >= 0 {
		c.convMax = min(c.convMax, conv)
	}
	if s.f > 0 {
		c.prefix = make([]int, len(c.whole)+1)
		for i, v := range c.whole {
			c.prefix[i+1] = c.prefix[i] + v/s.f
		}
	}
	return c
}

// conversions returns the fewest whole-capable CPUs to convert so that n
// fragments exist, or false when the allowance cannot give enough.
func (c *counter) conversions(n int) (int, bool) {
	if c.s.f == 0 || n <= c.eFrags {
		return 0, true
	}
	need := n - c.eFrags
	j := sort.SearchInts(c.prefix, need)
	if j > c.convMax {
		return 0, false
	}
	return j, true
}

// wholeFits reports whether whole[j:] can give n instances X distinct CPUs each.
func (c *counter) wholeFits(n, j int) bool {
	need := n * c.s.x
	if need == 0 {
		return true
	}
	if c.single {
		return len(c.whole)-j >= need
	}
	sum := 0
	for _, v := range c.whole[j:] {
		sum += min(v/c.s.sb, n)
		if sum >= need {
			return true
		}
	}
	return false
}

func (c *counter) feasible(n int) (int, bool) {
	j, ok := c.conversions(n)
	if !ok {
		return 0, false
	}
	return j, c.wholeFits(n, j)
}

// max returns the set's capacity capped at limit, and the conversions it needs.
func (c *counter) max(limit int) (n, j int) {
	hi := limit
	if c.s.x > 0 {
		hi = min(hi, c.slots/c.s.x)
	}
	if c.s.f > 0 {
		hi = min(hi, c.eFrags+c.prefix[c.convMax])
	}
	if hi <= 0 {
		return 0, 0
	}
	if j, ok := c.feasible(hi); ok {
		return hi, j
	}
	lo := 0 // feasible
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if _, ok := c.feasible(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	j, _ = c.conversions(lo)
	return lo, j
}

// consumption is how placements inside a NUMA node consume its CPUs. It
// changes only what is left for the cross-node phase, so capacity tries
// each and placement follows the one that places most.
type consumption struct {
	// fragmentedFirst drains the CPUs that were already fragmented (each
	// smallest first) before the converted ones (smallest first), as Eru
	// does: a converted CPU keeps a multiple of the share base more often,
	// which gives the cross-node phase a whole CPU (research/eru.md §1.2).
	// Otherwise best fit: the CPU with the fewest free pieces that holds a
	// fragment, fragmented and converted alike.
	fragmentedFirst bool
	// drainWhole takes whole CPUs from the oversold CPUs with the fewest
	// free pieces first (Eru's "more-loaded cores first"), which keeps
	// other CPUs intact; otherwise from those with the most. It matters
	// only when a CPU gives more than one whole CPU.
	drainWhole bool
	// topo places fragments by topology (place.go); set only where no
	// later phase reads what is left, so capacity never looks at it.
	topo bool
}

// consumptions are the ones capacity tries, in order (the first wins ties).
var consumptions = []consumption{{}, {fragmentedFirst: true}, {drainWhole: true}, {fragmentedFirst: true, drainWhole: true}}

// residual returns the free values left after n instances with j
// conversions, consuming them exactly as place.go does; false when
// draining whole CPUs cannot give n instances X distinct CPUs each.
func (c *counter) residual(n, j int, how consumption) ([]int, bool) {
	out := make([]int, 0, len(c.whole)+len(c.frag))
	// Fragments: fragmented CPUs and the j converted ones.
	pool := make([]int, 0, len(c.frag)+j)
	pool = append(pool, c.frag...)
	if how.fragmentedFirst {
		slices.Sort(pool)
		pool = append(pool, c.whole[:j]...) // ascending already
	} else {
		pool = append(pool, c.whole[:j]...)
		slices.Sort(pool)
	}
	left := n
	if c.s.f == 0 {
		left = 0
	}
	for i, v := range pool {
		if left == 0 {
			break
		}
		if t := min(v/c.s.f, left); t > 0 {
			pool[i] -= t * c.s.f
			left -= t
		}
	}
	out = append(out, pool...)
	rest := slices.Clone(c.whole[j:])
	if c.single {
		used := n * c.s.x
		out = append(out, rest[min(used, len(rest)):]...)
		return out, true
	}
	// Whole CPUs: n rounds of the X CPUs with the most (or, draining, the
	// fewest) free pieces that still hold a whole CPU.
	for range n {
		if how.drainWhole {
			slices.Sort(rest)
			took := 0
			for i := 0; i < len(rest) && took < c.s.x; i++ {
				if rest[i] >= c.s.sb {
					rest[i] -= c.s.sb
					took++
				}
			}
			if took < c.s.x {
				return nil, false
			}
			continue
		}
		slices.SortFunc(rest, func(a, b int) int { return b - a })
		for i := 0; i < c.s.x && i < len(rest); i++ {
			rest[i] -= c.s.sb
		}
	}
	return append(out, rest...), true
}

// Capacity is how many instances of a request one host can take.
type Capacity struct {
	Host  string
	Count int
	// CPUCount and MemoryCount are what CPU alone and memory alone would
	// allow; the smaller one names what runs out first.
	CPUCount, MemoryCount int
	// For a memory-first request: its CPU quota and the host's shared pool
	// (the CPUs no instance holds pieces of), in pieces; the quota must fit
	// the pool, as the cpuset the agent gives the instance is the pool.
	MemoryFirst bool
	Quota, Pool int
	sb          int
	// cores: a whole-cores request of x CPUs that no core size of the
	// host divides (its cores have threads CPUs each): it never fits there.
	cores struct{ x, threads int }
}

// Why says, for people, what bounds the count: Limit, and for a
// memory-first request whose quota does not fit the shared pool, both.
func (c Capacity) Why() string {
	if c.cores.threads > 0 {
		return fmt.Sprintf("whole cores: %d CPUs is not a multiple of its %d threads per core", c.cores.x, c.cores.threads)
	}
	if c.MemoryFirst && c.CPUCount == 0 && c.sb > 0 {
		return fmt.Sprintf("quota %s CPUs > shared pool %s CPUs", FormatPieces(c.Quota, c.sb), FormatPieces(c.Pool, c.sb))
	}
	return c.Limit()
}

// Limit names the resource that bounds the count: "cpu", "memory", "numa"
// (both would allow more, the NUMA layout does not) or "" when unbounded.
func (c Capacity) Limit() string {
	switch {
	case c.CPUCount <= c.MemoryCount && c.CPUCount == c.Count:
		return "cpu"
	case c.MemoryCount == c.Count:
		return "memory"
	default:
		return "numa"
	}
}

// unlimited stands for "no bound" in counts; far above any real capacity.
const unlimited = 1 << 40

// HostCapacity counts how many instances of r host h can take.
func HostCapacity(p Params, h *Host, r Request) Capacity {
	c, _ := capacityOf(p, h, shapeOf(p, r), r.Bind)
	return c
}

func (s *hostState) capacity(sh shape, bind bool) Capacity {
	c := Capacity{Host: s.h.Name, MemoryCount: int(min(s.memFree/sh.mem, unlimited)), sb: sh.sb}
	if !bind {
		c.CPUCount = unlimited
		c.MemoryFirst, c.Quota, c.Pool = true, sh.x*sh.sb+sh.f, s.poolPieces()
		if c.Quota > c.Pool {
			c.CPUCount = 0
		}
		c.Count = min(c.CPUCount, c.MemoryCount)
		return c
	}
	if sh.cores {
		c.Count, _ = s.runCores(sh, unlimited, sh.mem, false)
		c.CPUCount, _ = s.runCores(sh, unlimited, 0, false)
		if c.CPUCount == 0 {
			c.cores.x, c.cores.threads = sh.x, s.coreSizeNotDividing(sh.x)
		}
		return c
	}
	c.Count, s.how = s.bindCapacity(sh, sh.mem)
	s.howFor, s.howSet = sh, true
	c.CPUCount, _ = s.bindCapacity(sh, 0)
	return c
}

// bindCapacity runs the phases of a CPU-bind plan on values: each NUMA node in
// ascending ID order with its own memory, then the whole host (cross-node)
// with what is left. mem 0 ignores memory. It returns the count and the
// consumption that gives it (the NUMA phase's consumption decides what the
// cross-node phase finds).
func (s *hostState) bindCapacity(sh shape, mem int64) (int, consumption) {
	memN := func(free int64) int {
		if mem == 0 {
			return unlimited
		}
		return int(min(free/mem, unlimited))
	}
	if len(s.sets) == 0 {
		n, _ := newCounter(sh, s.values(s.all), s.convAllowance).max(memN(s.memFree))
		return n, consumption{}
	}
	type phase struct {
		c    *counter
		n, j int
	}
	memLeft := s.memFree
	conv := s.convAllowance
	local := 0
	phases := make([]phase, len(s.sets))
	for i, set := range s.sets {
		c := newCounter(sh, s.values(set), conv)
		n, j := c.max(memN(min(s.numaFree[i], memLeft)))
		phases[i] = phase{c, n, j}
		local += n
		memLeft -= int64(n) * mem
		if conv >= 0 {
			conv -= j
		}
	}
	// An alternative is tried only where it can differ: fragmentedFirst
	// where a NUMA node converted CPUs beside fragmented ones, drainWhole
	// where a CPU gives more than one whole CPU.
	oversold, mixed := false, false
	for _, ph := range phases {
		oversold = oversold || !ph.c.single
		mixed = mixed || ph.n > 0 && ph.j > 0 && len(ph.c.frag) > 0
	}
	best, bestHow := -1, consumption{}
	for _, how := range consumptions {
		if how.fragmentedFirst && (sh.f == 0 || !mixed) || how.drainWhole && (!oversold || sh.x == 0) {
			continue // the same as one tried already
		}
		var rest []int
		ok := true
		for _, ph := range phases {
			r, fits := ph.c.residual(ph.n, ph.j, how)
			rest, ok = append(rest, r...), ok && fits
		}
		if !ok {
			continue
		}
		n, _ := newCounter(sh, rest, conv).max(memN(memLeft))
		if local+n > best {
			best, bestHow = local+n, how
		}
	}
	return best, bestHow
}
