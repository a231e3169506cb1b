package shareplant

import (
	"math"
	"math/bits"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
)

func (p *Plant) inSubtree(g, top GroupID) bool {
	for ; g >= 0; g = p.groups[g].parent {
		if g == top {
			return true
		}
	}
	return false
}

func maskOf(cpus cpuset.CPUs) uint64 {
	var m uint64
	for c := range cpus.All() {
		m |= 1 << c
	}
	return m
}

// cpusOf lists the CPUs in m.
func cpusOf(m uint64) []int {
	out := make([]int, 0, bits.OnesCount64(m))
	for ; m != 0; m &= m - 1 {
		out = append(out, bits.TrailingZeros64(m))
	}
	return out
}

// topology recomputes the effective cpusets (each group's own within its
// parent's; parents come before children) and the deeper-first order.
func (p *Plant) topology() {
	p.eff = make([]uint64, len(p.groups))
	p.order = p.order[:0]
	for g, gr := range p.groups {
		if g == int(Root) {
			p.eff[g] = 1<<p.ncpu - 1
			continue
		}
		par := p.eff[gr.parent]
		if m := gr.mask & par; m != 0 {
			p.eff[g] = m
		} else {
			p.eff[g] = par
		}
		p.order = append(p.order, g)
	}
	slices.SortStableFunc(p.order, func(a, b int) int { return p.groups[b].depth - p.groups[a].depth })
	p.dirty = true
}

func (p *Plant) allowed(t *thread) uint64 {
	eff := p.eff[t.g]
	if a := eff & t.affinity; a != 0 {
		return a
	}
	return eff
}

// throttles sets blk: whether each group or an ancestor is throttled.
func (p *Plant) throttles() {
	if len(p.blk) != len(p.groups) {
		p.blk = make([]bool, len(p.groups))
	}
	for g, gr := range p.groups { // parents first
		p.blk[g] = gr.throttled || (gr.parent >= 0 && p.blk[gr.parent])
	}
}

func (p *Plant) runnable(t *thread) bool { return !t.sleeping && !p.blk[t.g] }

// rootLoad is the load on each CPU as the root run queue weighs it.
func (p *Plant) rootLoad() []float64 {
	p.recompute()
	out := make([]float64, p.ncpu)
	copy(out, p.load[:p.ncpu]) // Root is group 0
	return out
}

// idle reports per CPU whether nothing runnable is on it.
func (p *Plant) idle() []bool {
	p.throttles()
	out := make([]bool, p.ncpu)
	for c := range out {
		out[c] = !p.packed
	}
	for _, t := range p.threads {
		if p.runnable(t) {
			out[t.cpu] = false
		}
	}
	return out
}

// pick returns a seeded choice among cs (not empty).
func (p *Plant) pick(cs []int) int { return cs[p.rng.IntN(len(cs))] }

// place is where a thread started inside its group goes.
func (p *Plant) place(t *thread) int {
	allowed := p.allowed(t)
	idle := p.idle()
	var cs []int
	for _, c := range cpusOf(allowed) {
		if idle[c] {
			cs = append(cs, c)
		}
	}
	if len(cs) > 0 {
		return p.pick(cs)
	}
	return p.leastLoaded(allowed)
}

func (p *Plant) leastLoaded(allowed uint64) int {
	load := p.rootLoad()
	least := math.Inf(1)
	for _, c := range cpusOf(allowed) {
		least = min(least, load[c])
	}
	var cs []int
	for _, c := range cpusOf(allowed) {
		if load[c] <= least*tieBand+eps {
			cs = append(cs, c)
		}
	}
	return p.pick(cs)
}

// spread is where a thread moved into g goes when its CPU is not allowed:
// the allowed CPU with the fewest of g's threads.
func (p *Plant) spread(t *thread, g GroupID) int {
	n := make([]int, p.ncpu)
	for _, o := range p.threads {
		if o != t && o.g == g {
			n[o.cpu]++
		}
	}
	least := math.MaxInt
	var cs []int
	for _, c := range cpusOf(p.allowed(t)) {
		switch {
		case n[c] < least:
			least, cs = n[c], []int{c}
		case n[c] == least:
			cs = append(cs, c)
		}
	}
	return p.pick(cs)
}

// wakeCPU is where a thread waking from sleep goes.
func (p *Plant) wakeCPU(t *thread) int {
	allowed := p.allowed(t)
	idle := p.idle()
	if allowed&(1<<t.cpu) != 0 && idle[t.cpu] {
		return t.cpu
	}
	var cs []int
	for _, c := range cpusOf(allowed) {
		if idle[c] {
			cs = append(cs, c)
		}
	}
	if len(cs) > 0 {
		return p.pick(cs)
	}
	if allowed&(1<<t.cpu) != 0 {
		return t.cpu
	}
	return p.leastLoaded(allowed)
}
