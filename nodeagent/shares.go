package nodeagent

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// The share loop: a closed loop that corrects how a shared CPU is split.
//
// On a real SMP kernel a static mapping of fragments to cgroup files does
// not deliver the plan in every case: with overlapping cpusets the load
// balancer has several stable equilibria (it stacks the threads of the
// instance with the lighter weight on its own whole CPU), so what an
// instance gets depends on how many threads it has and where they started
// (docs/AGENT.md, "Fragment shares on a real kernel"). The loop measures,
// every window, what each instance holding a fragment got and whether its
// threads waited for CPU, and moves cpu.weight between the instances that
// share a CPU: up for one that got less than 95 % of its plan while it
// waited, down for one that got more than its plan or stood in a starved
// neighbour's way. It never touches cpusets (another instance's whole CPUs
// stay its own) nor cpu.max (the cap at the plan stays: an instance never
// bursts above its plan into a neighbour's idle time).
//
// Bounded steps (a weight moves by at most ×1.5 or ÷1.5 a window), bounded
// range (¼× to 4× the mapped weight), a dead band (nothing changes while
// every instance is within 2.5 % of its plan, half the 5 % bound), a settle
// window after every change and after a member appears or changes (its
// first full window holds start-up transients), and a gain that halves
// whenever an instance's correction changes direction: the loop stops at
// the first weights that deliver the plan and does not oscillate around a
// knife edge. Stopping is not for good: when the loop rests with a lowered
// gain it remembers what each member got, and the gain comes back to its
// start when a member's figure moves from there by more than the bound
// (conditions changed: a neighbour's load, a re-placement) or after
// shareRecover windows in a row in which nobody needed correcting. A plant
// that flips between two states whatever the weights stays where the loop
// left it: its figures do not move, so the loop does not wake.
//
// Waiting that counts: cpu.pressure "some" also counts time a thread
// waited behind the instance's own threads and behind its own cpu.max
// (an instance with more busy threads than its plan waits all the time,
// at its cap). An instance that used its whole quota in at least
// shareThrottled of the window's cpu.max periods is at its cap: whatever
// it waited, more weight cannot give it more, so it is never starved (and
// it counts as at its plan when a neighbour starves). Below that, waiting
// while it got less than its plan is a neighbour's doing: with its
// threads on all its CPUs and no neighbour it would have reached its cap.

// shareTolerance is the enforcement bound: an instance that waited for CPU
// must get at least (1 − shareTolerance) of its plan.
const shareTolerance = 0.05

// shareDeadband is where the loop stops correcting: half the bound, so it
// settles with a margin and not on the bound's edge.
const shareDeadband = shareTolerance / 2

// shareWaiting is the fraction of a window some thread of an instance must
// have waited for CPU (cpu.pressure "some") for it to count as wanting
// more than it got.
const shareWaiting = 0.05

const (
	shareGain    = 0.5  // starting gain: weight × (1 + gain × relative deficit)
	shareMinGain = 0.02 // below this the loop rests (until shareRecover or a change)
	shareMaxStep = 1.5  // a weight changes by at most this factor a window
	shareRange   = 4.0  // a weight stays within base/shareRange .. base×shareRange
	// shareRecover is how many windows in a row with nobody to correct
	// bring a lowered gain back to shareGain.
	shareRecover = 5
	// shareThrottled is the fraction of its cpu.max periods in which an
	// instance used its whole quota from which it counts as at its cap:
	// nearly all of them (throttled in only some, it was short in the
	// others, where a neighbour may have had its CPU).
	shareThrottled = 0.9
)

// ShareMember is one instance holding a fragment of a shared CPU.
type ShareMember struct {
	ID     string
	CPU    cpuset.CPUID // the shared CPU
	Plan   int          // all its pieces: whole CPUs and the fragment
	Frag   int          // its pieces of the shared CPU
	Weight uint64       // the weight the mapping gives it: where the loop starts
}

// ShareWindow is what an instance did in one window.
type ShareWindow struct {
	Got     int     // pieces of CPU per second it used
	Waiting float64 // fraction of the window some of its threads waited for CPU
	// Throttled is the fraction of the window's cpu.max periods in which
	// it used its whole quota (cpu.stat nr_throttled / nr_periods).
	Throttled float64
}

// ShareMembers lists the bound instances that hold a fragment of a CPU
// another bound instance also holds a fragment of, with the weights Map
// gives them, ordered by shared CPU, then ID. Pure.
func ShareMembers(h Host, desired []model.Instance, scheme Scheme) []ShareMember {
	byCPU := map[cpuset.CPUID][]ShareMember{}
	for _, in := range desired {
		if !in.Bind {
			continue
		}
		for id, p := range in.CPUs {
			if p < h.ShareBase {
				byCPU[id] = append(byCPU[id], ShareMember{ID: in.ID, CPU: id, Plan: in.Pieces(), Frag: p,
					Weight: Map(h, in, scheme, h.CPUs).CPUWeight})
			}
		}
	}
	var out []ShareMember
	for _, id := range slices.Sorted(maps.Keys(byCPU)) {
		ms := byCPU[id]
		if len(ms) < 2 {
			continue
		}
		slices.SortFunc(ms, func(a, b ShareMember) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, ms...)
	}
	return out
}

// ShareLoop is the loop's state: the weights it holds, the direction each
// member was last corrected in, and per shared CPU its gain, how many
// windows to let settle, how many windows in a row needed no correction,
// and, while it rests with a lowered gain, what each member got when it
// came to rest. It does no I/O; the agent feeds it windows.
type ShareLoop struct {
	members map[string]ShareMember
	weights map[string]uint64
	dir     map[string]int
	gain    map[cpuset.CPUID]float64
	settle  map[cpuset.CPUID]int
	calm    map[cpuset.CPUID]int
	rest    map[cpuset.CPUID]map[string]int
}

// NewShareLoop returns a loop that holds no corrections.
func NewShareLoop() *ShareLoop {
	return &ShareLoop{members: map[string]ShareMember{}, weights: map[string]uint64{}, dir: map[string]int{},
		gain: map[cpuset.CPUID]float64{}, settle: map[cpuset.CPUID]int{}, calm: map[cpuset.CPUID]int{},
		rest: map[cpuset.CPUID]map[string]int{}}
}

// Weights returns the corrected cpu.weight of each member (a copy): the
// agent writes these instead of the mapped ones.
func (l *ShareLoop) Weights() map[string]uint64 { return maps.Clone(l.weights) }

// Step takes the members as they are now and each one's last window
// (members without a window are left as they are) and returns the
// weights that changed. A member that is new, or whose plan or mapped
// weight changed, starts again from its mapped weight, and its group's
// gain is reset; the window it comes with (from before the change, or
// none) and the first full window after it are not acted on.
func (l *ShareLoop) Step(members []ShareMember, win map[string]ShareWindow) map[string]uint64 {
	changed := map[string]uint64{}
	seen := map[string]bool{}
	groups := map[cpuset.CPUID][]ShareMember{}
	fresh := map[cpuset.CPUID]bool{}
	for _, m := range members {
		seen[m.ID] = true
		groups[m.CPU] = append(groups[m.CPU], m)
		if old, ok := l.members[m.ID]; !ok || old != m {
			l.members[m.ID], l.weights[m.ID], l.dir[m.ID] = m, m.Weight, 0
			l.gain[m.CPU], l.settle[m.CPU], l.calm[m.CPU] = shareGain, 1, 0
			delete(l.rest, m.CPU)
			fresh[m.CPU] = true
			changed[m.ID] = m.Weight
		}
	}
	for id, m := range l.members {
		if !seen[id] {
			delete(l.members, id)
			delete(l.weights, id)
			delete(l.dir, id)
			if len(groups[m.CPU]) == 0 {
				delete(l.gain, m.CPU)
				delete(l.settle, m.CPU)
				delete(l.calm, m.CPU)
				delete(l.rest, m.CPU)
			}
		}
	}
	for _, cpu := range slices.Sorted(maps.Keys(groups)) {
		if fresh[cpu] {
			continue // settle stays 1: the next window is the first full one
		}
		if l.settle[cpu] > 0 {
			l.settle[cpu]--
			continue
		}
		for id, w := range l.correct(cpu, groups[cpu], win) {
			changed[id] = w
		}
	}
	return changed
}

// atCap reports whether an instance used its whole quota in nearly all the
// window's cpu.max periods: its threads waited behind its own cap.
func atCap(w ShareWindow) bool { return w.Throttled >= shareThrottled }

// correct is one window's correction of the group sharing cpu.
func (l *ShareLoop) correct(cpu cpuset.CPUID, group []ShareMember, win map[string]ShareWindow) map[string]uint64 {
	// Woken: what a member gets moved by more than the bound since the
	// loop came to rest, so the gain it lowered no longer applies.
	if rest := l.rest[cpu]; rest != nil {
		for _, m := range group {
			w, ok := win[m.ID]
			r, rok := rest[m.ID]
			if ok && rok && math.Abs(float64(w.Got-r)) > shareTolerance*float64(m.Plan) {
				l.wake(cpu, group)
				break
			}
		}
	}
	// deficit > 0: got less than planned while waiting; < 0: got more.
	deficit := map[string]float64{}
	worst := 0.0
	for _, m := range group {
		w, ok := win[m.ID]
		if !ok || m.Plan <= 0 || m.Frag <= 0 {
			continue
		}
		short := float64(m.Plan-w.Got) / float64(m.Plan)
		switch {
		case short > shareDeadband && w.Waiting >= shareWaiting && !atCap(w):
			// Relative to the fragment, which is what the weight splits.
			deficit[m.ID] = math.Min(float64(m.Plan-w.Got)/float64(m.Frag), 1)
		case -short > shareDeadband:
			deficit[m.ID] = math.Max(float64(m.Plan-w.Got)/float64(m.Frag), -1)
		}
		worst = math.Max(worst, deficit[m.ID])
	}
	if len(deficit) == 0 {
		if l.calm[cpu]++; l.calm[cpu] >= shareRecover && l.gain[cpu] < shareGain {
			l.wake(cpu, group)
		}
		l.rested(cpu, group, win)
		return nil
	}
	l.calm[cpu] = 0
	if l.gain[cpu] < shareMinGain {
		l.rested(cpu, group, win)
		return nil
	}
	g := l.gain[cpu]
	out := map[string]uint64{}
	flipped := false
	for _, m := range group {
		d, ok := deficit[m.ID]
		if w, won := win[m.ID]; !ok && worst > 0 && won && (float64(w.Got) >= 0.99*float64(m.Plan) || atCap(w)) {
			// At its plan (or its cap) while a neighbour starves: it
			// yields a little weight, half of what the worst-off gains.
			d = -worst / 2
		}
		if d == 0 {
			continue
		}
		f := math.Min(math.Max(1+g*d, 1/shareMaxStep), shareMaxStep)
		next := uint64(math.Round(float64(l.weights[m.ID]) * f))
		lo := max(1, uint64(math.Round(float64(m.Weight)/shareRange)))
		hi := min(10000, uint64(math.Round(float64(m.Weight)*shareRange)))
		next = min(max(next, lo), hi)
		if next == l.weights[m.ID] {
			continue
		}
		dir := 1
		if next < l.weights[m.ID] {
			dir = -1
		}
		if l.dir[m.ID] != 0 && l.dir[m.ID] != dir {
			flipped = true
		}
		l.dir[m.ID], l.weights[m.ID] = dir, next
		out[m.ID] = next
	}
	if flipped {
		l.gain[cpu] = g / 2
	}
	if len(out) > 0 {
		l.settle[cpu] = 1
		delete(l.rest, cpu)
		return out
	}
	l.rested(cpu, group, win)
	return nil
}

// rested notes, the first window the group changed nothing with a lowered
// gain, what each member got: the figures that wake it.
func (l *ShareLoop) rested(cpu cpuset.CPUID, group []ShareMember, win map[string]ShareWindow) {
	if l.gain[cpu] >= shareGain || l.rest[cpu] != nil {
		return
	}
	r := map[string]int{}
	for _, m := range group {
		if w, ok := win[m.ID]; ok {
			r[m.ID] = w.Got
		}
	}
	l.rest[cpu] = r
}

// wake brings the group's gain back to its start and forgets the
// directions its members were corrected in.
func (l *ShareLoop) wake(cpu cpuset.CPUID, group []ShareMember) {
	l.gain[cpu], l.calm[cpu] = shareGain, 0
	delete(l.rest, cpu)
	for _, m := range group {
		l.dir[m.ID] = 0
	}
}
