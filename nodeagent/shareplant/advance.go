package shareplant

import (
	"math"
	"slices"
	"time"
)

// recompute sets every runnable thread's rate: its share of its CPU down
// the group hierarchy, each group's entity on a CPU weighing what
// calc_group_shares gives it: weight × local / (the group's average load
// on the other CPUs + local), local being the group's load on that CPU,
// the larger of now's and the average (runAvg).
func (p *Plant) recompute() {
	if !p.dirty {
		return
	}
	ng, nc := len(p.groups), p.ncpu
	if len(p.load) != ng*nc {
		p.load, p.ew, p.avg = make([]float64, ng*nc), make([]float64, ng*nc), make([]float64, ng*nc)
	}
	clear(p.load)
	clear(p.ew)
	clear(p.avg)
	p.throttles()
	blocked := p.blk
	for _, t := range p.threads {
		t.rate = 0
		if !t.sleeping && !blocked[t.g] {
			p.load[int(t.g)*nc+t.cpu] += taskWeight
		}
		p.avg[int(t.g)*nc+t.cpu] += taskWeight * p.runAvg(t)
	}
	for _, g := range p.order { // children before parents
		tot := 0.0
		for c := range nc {
			tot += p.avg[g*nc+c]
		}
		gr := p.groups[g]
		for c := range nc {
			i, j := g*nc+c, int(gr.parent)*nc+c
			if l := p.load[i]; l > 0 {
				local := max(l, p.avg[i])
				w := max(gr.weight*local/(tot-p.avg[i]+local), minShare)
				p.ew[i] = w
				p.load[j] += w
			}
			if a := p.avg[i]; a > 0 { // the entity's average load in its parent
				p.avg[j] += gr.weight * a / tot
			}
		}
	}
	if p.packed {
		for c := range nc {
			p.load[c] += taskWeight
		}
	}
	for _, t := range p.threads {
		if t.sleeping || blocked[t.g] {
			continue
		}
		c := t.cpu
		r := taskWeight / p.load[int(t.g)*nc+c]
		for g := t.g; g != Root; g = p.groups[g].parent {
			r *= p.ew[int(g)*nc+c] / p.load[int(p.groups[g].parent)*nc+c]
		}
		t.rate = r
	}
	p.dirty = false
}

// runTarget is what t's runnable average tends to now: 1 while it is
// runnable (running or waiting), 0 asleep.
func (t *thread) runTarget() float64 {
	if t.sleeping {
		return 0
	}
	return 1
}

// runAvg is thread t's runnable average, the PELT signal its load counts
// with (load_avg = weight × runnable average, kernel/sched/pelt.c).
func (p *Plant) runAvg(t *thread) float64 {
	if p.instantLoads {
		if t.sleeping || p.blk[t.g] {
			return 0
		}
		return 1
	}
	return t.ravg
}

// averaging reports whether some thread's average still moves (so the
// group weights do too): not when every one sits at its target, as busy
// threads do.
func (p *Plant) averaging() bool {
	if p.instantLoads {
		return false
	}
	for _, t := range p.threads {
		if !p.blk[t.g] && math.Abs(t.ravg-t.runTarget()) > 1e-3 {
			return true
		}
	}
	return false
}

// pull lets every idle CPU pull a queued thread (from a queue with two or
// more runnable threads) from the busiest queue it may take one from,
// until no idle CPU can.
func (p *Plant) pull() {
	if p.packed {
		return
	}
	p.throttles()
	if len(p.busy) != p.ncpu {
		p.busy, p.nextBal = make([]bool, p.ncpu), make([]float64, p.ncpu)
	}
	for {
		nr := make([]int, p.ncpu)
		for _, t := range p.threads {
			if p.runnable(t) {
				nr[t.cpu]++
			}
		}
		idle, queued := make([]bool, p.ncpu), false
		anyIdle := false
		for c, k := range nr {
			idle[c] = k == 0
			anyIdle = anyIdle || k == 0
			queued = queued || k > 1
		}
		if !anyIdle || !queued {
			p.balanced(nr, queued)
			return
		}
		pulled := false
		for _, c := range p.rng.Perm(p.ncpu) {
			if !idle[c] || !p.mayBalance(c) {
				continue
			}
			busiest, cands := 1, []*thread(nil)
			for _, t := range p.threads {
				if !p.runnable(t) || nr[t.cpu] < 2 || p.allowed(t)&(1<<c) == 0 {
					continue
				}
				switch {
				case nr[t.cpu] > busiest:
					busiest, cands = nr[t.cpu], []*thread{t}
				case nr[t.cpu] == busiest && cands != nil && cands[0].cpu == t.cpu:
					cands = append(cands, t)
				}
			}
			if len(cands) == 0 {
				continue
			}
			t := cands[p.rng.IntN(len(cands))]
			nr[t.cpu]--
			t.cpu = c
			nr[c]++
			idle[c] = false
			pulled = true
			p.dirty = true
		}
		if !pulled {
			p.balanced(nr, queued)
			return
		}
	}
}

// mayBalance reports whether idle CPU c balances now: it has just gone
// idle (sched_balance_newidle), or its periodic idle balance is due.
func (p *Plant) mayBalance(c int) bool {
	if p.eagerPull || p.busy[c] {
		return true
	}
	return p.now >= p.balanceDue(c)-eps
}

// balanceDue is when idle CPU c next balances: the first tick at or after
// its next balance time, or after now when that has passed.
func (p *Plant) balanceDue(c int) float64 {
	return ceilTick(max(p.nextBal[c], p.now))
}

func ceilTick(t float64) float64 { return math.Ceil(t/tickPeriod-eps) * tickPeriod }

// balanced records the pass: which CPUs are busy, and for each idle CPU
// that balanced when due, when it balances next.
func (p *Plant) balanced(nr []int, queued bool) {
	interval := ceilTick(float64(p.ncpu) * 1000)
	for c, k := range nr {
		if k == 0 && queued && p.now >= p.balanceDue(c)-eps {
			p.nextBal[c] = p.now + interval
		}
		p.busy[c] = k > 0
	}
}

// nextBalance is the earliest due balance of an idle CPU while some queue
// waits (whether that CPU may take one of its threads is not checked), or
// +Inf.
func (p *Plant) nextBalance() float64 {
	if p.eagerPull || p.packed || len(p.busy) != p.ncpu {
		return math.Inf(1)
	}
	nr := make([]int, p.ncpu)
	for _, t := range p.threads {
		if p.runnable(t) {
			nr[t.cpu]++
		}
	}
	if slices.Max(nr) < 2 {
		return math.Inf(1)
	}
	next := math.Inf(1)
	for c, k := range nr {
		if k == 0 {
			next = min(next, p.balanceDue(c))
		}
	}
	return next
}

// Advance runs the host for d (d <= 0: nothing; time never goes back).
func (p *Plant) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	end := p.now + float64(d.Microseconds())
	for {
		p.events()
		p.pull()
		p.recompute()
		next := end
		for _, gr := range p.groups {
			if gr.quota > 0 {
				next = min(next, gr.refill)
			}
		}
		grate := p.groupRates()
		for g, gr := range p.groups {
			if gr.quota > 0 && !gr.throttled && grate[g] > 0 {
				next = min(next, p.now+gr.runtime/grate[g])
			}
		}
		for _, t := range p.threads {
			switch {
			case t.sleeping:
				next = min(next, t.wake)
			case t.run > 0 && t.rate > 0:
				next = min(next, p.now+t.work/t.rate)
			}
		}
		if b := p.nextBalance(); b > p.now+eps {
			next = min(next, b)
		}
		tick := false
		if p.now+peltPeriod < next && p.averaging() {
			next, tick = p.now+peltPeriod, true
		}
		dt := max(next-p.now, 0)
		p.accumulate(dt, grate)
		p.now = next
		p.dirty = p.dirty || tick
		if p.now >= end-eps {
			p.now = end
			p.events() // what is due at the end is done before the driver acts
			p.pull()
			return
		}
	}
}

// groupRates is each group's CPU use per µs now, its descendants' included.
func (p *Plant) groupRates() []float64 {
	if len(p.grate) != len(p.groups) {
		p.grate = make([]float64, len(p.groups))
	}
	out := p.grate
	clear(out)
	for _, t := range p.threads {
		out[t.g] += t.rate
	}
	for _, g := range p.order { // children before parents
		out[p.groups[g].parent] += out[g]
	}
	return out
}

// events handles what is due now: refills, spent quotas, sleeps, wakes.
func (p *Plant) events() {
	for _, gr := range p.groups {
		if gr.quota <= 0 {
			continue
		}
		for gr.refill <= p.now+eps {
			gr.runtime, gr.throttled = gr.quota, false
			gr.refill += gr.period
			p.dirty = true
		}
		if !gr.throttled && gr.runtime <= eps {
			gr.throttled, p.dirty = true, true
		}
	}
	for _, t := range p.threads {
		switch {
		case t.sleeping && t.wake <= p.now+eps:
			t.sleeping, t.work = false, t.run
			t.cpu = p.wakeCPU(t)
			p.dirty = true
		case !t.sleeping && t.run > 0 && t.work <= eps:
			t.sleeping, t.wake = true, p.now+t.sleep
			p.dirty = true
		}
	}
}

// accumulate runs dt µs at the current rates: usage, quotas, work, and
// pressure.
func (p *Plant) accumulate(dt float64, grate []float64) {
	if dt <= 0 {
		return
	}
	for g, gr := range p.groups {
		gr.usage += grate[g] * dt
		if gr.quota > 0 && !gr.throttled {
			gr.runtime -= grate[g] * dt
		}
	}
	y := math.Exp2(-dt / peltHalfLife)
	for _, t := range p.threads {
		if !p.blk[t.g] { // a throttled hierarchy's averages stand still
			b := t.runTarget()
			t.ravg = b + (t.ravg-b)*y
		}
		if !t.sleeping {
			t.used += t.rate * dt
		}
		if t.run > 0 && !t.sleeping {
			t.work -= t.rate * dt
		}
	}
	// Pressure: per group and CPU, how many of its (subtree's) threads
	// are runnable there, whether one is throttled, and the lone one's rate.
	ng, nc := len(p.groups), p.ncpu
	if len(p.n) != ng*nc {
		p.n, p.stuck, p.rate = make([]int, ng*nc), make([]bool, ng*nc), make([]float64, ng*nc)
	}
	n, stuck, rate := p.n, p.stuck, p.rate
	clear(n)
	clear(stuck)
	for _, t := range p.threads {
		if t.sleeping {
			continue
		}
		i := int(t.g)*nc + t.cpu
		n[i]++
		rate[i] = t.rate
		stuck[i] = stuck[i] || p.blk[t.g]
	}
	for _, g := range p.order { // children before parents
		for c := range nc {
			i, j := g*nc+c, int(p.groups[g].parent)*nc+c
			if n[i] > 0 {
				n[j] += n[i]
				rate[j] = rate[i]
				stuck[j] = stuck[j] || stuck[i]
			}
		}
	}
	for g, gr := range p.groups {
		present, some := 0, 0.0
		for c := range nc {
			i := g*nc + c
			switch {
			case n[i] == 0:
				continue
			case stuck[i] || n[i] > 1:
				some++
			default:
				some += 1 - min(rate[i], 1)
			}
			present++
		}
		if present > 0 {
			gr.some += dt * some / float64(present)
		}
	}
}
