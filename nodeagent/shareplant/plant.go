// Package shareplant is a model of the Linux scheduler on a handful of
// CPUs, calibrated against the real-kernel tables
// (docs/AGENT.md, "The kernel model"), for driving the agent's share
// enforcement in the unit tier.
//
// It models:
//   - per-CPU run queues, each thread's CPU being hidden state the driver
//     never reads;
//   - a cgroup tree (groups with children, threaded children included),
//     each with a cpuset (effective: within its parent's), cpu.weight and
//     cpu.max quota/period;
//   - CFS group shares per CPU: a group's entity on a CPU competes by
//     weight with the sibling entities on that CPU, its weight being the
//     group's cpu.weight times the fraction of the group's load on that CPU
//     (calc_group_shares), hierarchically; within a CPU the time is shared
//     fluidly (generalised processor sharing), so a slice is not modelled;
//   - PELT load averages in those fractions: a thread's load is its weight
//     times its runnable average (running or waiting counts 1, asleep 0),
//     which halves its distance to where it is heading every 32 ms and is
//     brought up to date every 1024 µs; a sleeping thread's load stays on
//     the CPU it last ran on (blocked load) and goes with it when it wakes
//     elsewhere; a throttled group's averages stand still. A group's
//     weight on a CPU is then weight × local / (its average load on the
//     other CPUs + local), local being the larger of its load there now
//     and its average there (calc_group_shares: max(load.weight,
//     load_avg); tg->load_avg). So a group whose threads on one CPU have
//     just gone to sleep does not at once get its whole weight on another
//     (kernel/sched/pelt.c, kernel/sched/fair.c: calc_group_shares,
//     update_load_avg);
//   - cpu.max bandwidth over the whole group: a quota per period, the
//     group's threads stop on every CPU when it is spent (the throttle
//     gap) until the next period refills it;
//   - idle pulls: a CPU with nothing runnable pulls a queued thread from
//     the busiest queue the thread's cpuset and affinity allow, at the
//     moment it goes idle (sched_balance_newidle) or else at its periodic
//     idle balance: on a tick (4 ms, CONFIG_HZ=250) at least the domain's
//     weight in ms after its last one (sd->balance_interval = sd_weight,
//     kernel/sched/topology.c sd_init; an idle CPU's interval is not
//     multiplied by busy_factor, sched_balance_domains), not the moment a
//     queue forms elsewhere; busy threads are NOT pulled between busy
//     CPUs because of weight (on a mostly idle host the balancer pulls
//     only into a CPU below the domain average, which is an idle one:
//     that is what stacks threads);
//   - placement: a thread started inside a group goes to an idle allowed
//     CPU, else to the allowed CPU with the least load (loads within 25 %
//     of the least count as tied, broken by the seeded source); a thread
//     moved into a group (cgroup.threads, cgroup.procs, or its group's
//     cpuset shrinking) keeps its CPU if allowed, else goes to the allowed
//     CPU holding the fewest threads of that group (the kernel spreads
//     such migrations round-robin); a thread that wakes from sleep goes
//     to its previous CPU if idle, else a seeded idle allowed CPU, else
//     its previous CPU if allowed, else the least loaded;
//   - pressure: cpu.pressure "some" per group (its threads and its
//     descendants'): per CPU the fraction of time some runnable thread
//     waited (queued behind another, or throttled), averaged over the CPUs
//     where the group had runnable threads, as PSI aggregates;
//   - a packed host: one more busy nice-0 thread on every CPU;
//   - thread pools: the driver parks a thread (it sleeps until woken) and
//     unparks another (it wakes as from sleep), as a pool hands work from
//     one of its threads to another (Park, Unpark).
//
// It does not model: PELT in the balancer and at placement (the root
// loads there are instantaneous), periodic load balancing between busy
// CPUs, wake-affine or cache effects, SMT, NUMA, nice values,
// cpu.max.burst, cpu.idle, real-time classes, EEVDF's slices, or the
// per-CPU 5 ms bandwidth slices (throttling is exact). Time advances from
// event to event (a refill, a group spending its quota, a thread sleeping
// or waking, an idle CPU's due balance while a queue waits, and every
// 1024 µs while some runnable average still moves):
// between events every rate is constant.
//
// It is pure: no I/O, no clock; all randomness comes from the *rand.Rand
// passed to New.
package shareplant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// GroupID names a group in a Plant; Root is the root group.
type GroupID int

// Root is the root cgroup: it holds every CPU, no cap.
const Root GroupID = 0

// ThreadID names a thread in a Plant.
type ThreadID int

// Duty is a thread's behaviour: it runs until it has used Run of CPU, then
// sleeps for Sleep, and so on. Sleep zero: always runnable (a busy loop).
type Duty struct {
	Run, Sleep time.Duration
}

// Busy is a thread that never sleeps.
var Busy = Duty{}

// ThreadInfo is a thread as cgroup.threads and /proc show it.
type ThreadInfo struct {
	ID       ThreadID
	Runnable bool          // wants CPU (state R), throttled or not
	CPU      time.Duration // CPU used so far (/proc's utime + stime)
}

const (
	taskWeight = 100.0 // a nice-0 thread, in cpu.weight units (1024 shares ≙ weight 100)
	minShare   = 0.2   // MIN_SHARES (2 of 1024) in cpu.weight units
	tieBand    = 1.25  // loads within this factor of the least count as tied at placement
	eps        = 1e-6  // µs
	// PELT: a runnable average halves its distance to its target every
	// 32 ms (y^32 = 1/2, LOAD_AVG_PERIOD) and is brought up to date about
	// every 1 ms (1024 µs periods, and every tick); in µs.
	peltHalfLife = 32000.0
	peltPeriod   = 1024.0
	tickPeriod   = 4000.0 // µs: CONFIG_HZ=250
)

type group struct {
	name      string
	parent    GroupID
	depth     int
	mask      uint64 // cpuset.cpus as written; 0: inherit
	weight    float64
	quota     float64 // µs a period; 0: no cap
	period    float64 // µs
	runtime   float64 // µs left this period
	refill    float64 // time of the next refill (µs)
	throttled bool
	usage     float64 // µs, own threads and descendants'
	some      float64 // µs
}

type thread struct {
	g        GroupID
	cpu      int
	affinity uint64  // 0: any
	run      float64 // µs of CPU a run phase needs; 0: busy
	sleep    float64 // µs
	work     float64 // µs left in this run phase
	sleeping bool
	wake     float64 // µs
	used     float64 // µs of CPU used so far
	rate     float64 // scratch: CPU per µs now
	ravg     float64 // PELT runnable average, 0..1 (1 at start)
}

// Plant is the modelled host. Not safe for concurrent use.
type Plant struct {
	rng     *rand.Rand
	ncpu    int
	now     float64 // µs
	packed  bool
	groups  []*group
	threads []*thread
	eff     []uint64 // effective cpuset per group
	blk     []bool   // group or an ancestor throttled
	order   []int    // groups, deeper first
	// scratch, per group×CPU
	load, ew, avg, rate []float64
	n                   []int
	stuck               []bool
	grate               []float64
	dirty               bool
	// instantLoads weighs groups by their runnable threads now, sleeping
	// ones not counted (the model before PELT): a control for the tests.
	instantLoads bool
	// idle balancing: per CPU, whether it had something runnable at the
	// last pass, and when its periodic idle balance is next due (µs).
	busy    []bool
	nextBal []float64
	// eagerPull lets every idle CPU pull at every event (the model before
	// newidle and periodic idle balancing): a control for the tests.
	eagerPull bool
}

// New returns a host of cpus CPUs (0..cpus-1) with only the root group.
func New(cpus int, rng *rand.Rand) (*Plant, error) {
	if cpus < 1 || cpus > 64 {
		return nil, fmt.Errorf("shareplant: cpus %d: want 1..64", cpus)
	}
	if rng == nil {
		return nil, fmt.Errorf("shareplant: rng: nil (pass a seeded *rand.Rand)")
	}
	p := &Plant{rng: rng, ncpu: cpus, dirty: true}
	p.groups = append(p.groups, &group{name: "/", parent: -1, weight: 100, period: 100000})
	p.topology()
	return p, nil
}

// CPUs is the host's CPU count.
func (p *Plant) CPUs() int { return p.ncpu }

// Now is the time since New.
func (p *Plant) Now() time.Duration { return time.Duration(p.now * 1000) }

// SetPacked switches the packed host on or off: one more busy nice-0
// thread, outside every group, on every CPU.
func (p *Plant) SetPacked(on bool) { p.packed, p.dirty = on, true }

func (p *Plant) group(g GroupID) (*group, error) {
	if g < 0 || int(g) >= len(p.groups) {
		return nil, fmt.Errorf("shareplant: group %d: no such group", g)
	}
	return p.groups[g], nil
}

func (p *Plant) thread(t ThreadID) (*thread, error) {
	if t < 0 || int(t) >= len(p.threads) {
		return nil, fmt.Errorf("shareplant: thread %d: no such thread", t)
	}
	return p.threads[t], nil
}

// NewGroup creates a child of parent named name (weight 100, no cap,
// the parent's CPUs).
func (p *Plant) NewGroup(parent GroupID, name string) (GroupID, error) {
	pg, err := p.group(parent)
	if err != nil {
		return 0, fmt.Errorf("shareplant: new group %q: parent: %w", name, err)
	}
	p.groups = append(p.groups, &group{name: name, parent: parent, depth: pg.depth + 1, weight: 100, period: 100000})
	p.topology()
	p.dirty = true
	return GroupID(len(p.groups) - 1), nil
}

// SetCPUs writes g's cpuset.cpus (empty: inherit the parent's). Threads on
// a CPU no longer allowed move as if moved into the group.
func (p *Plant) SetCPUs(g GroupID, cpus cpuset.CPUs) error {
	gr, err := p.group(g)
	if err != nil {
		return fmt.Errorf("shareplant: cpuset.cpus: %w", err)
	}
	if g == Root {
		return fmt.Errorf("shareplant: cpuset.cpus of the root group: read-only")
	}
	if ids := cpus.Slice(); len(ids) > 0 && int(ids[len(ids)-1]) >= p.ncpu {
		return fmt.Errorf("shareplant: cpuset.cpus %q of %s: CPU %d: the host has %d", cpus, gr.name, ids[len(ids)-1], p.ncpu)
	}
	gr.mask = maskOf(cpus)
	p.topology()
	for _, t := range p.threads {
		if p.inSubtree(t.g, g) && p.allowed(t)&(1<<t.cpu) == 0 {
			t.cpu = p.spread(t, t.g)
		}
	}
	p.dirty = true
	return nil
}

// SetWeight writes g's cpu.weight (1..10000).
func (p *Plant) SetWeight(g GroupID, w uint64) error {
	gr, err := p.group(g)
	if err != nil {
		return fmt.Errorf("shareplant: cpu.weight: %w", err)
	}
	if w < 1 || w > 10000 {
		return fmt.Errorf("shareplant: cpu.weight %d of %s: want 1..10000", w, gr.name)
	}
	gr.weight, p.dirty = float64(w), true
	return nil
}

// SetMax writes g's cpu.max: quota per period (quota 0: "max", no cap).
// The new quota starts a new period now.
func (p *Plant) SetMax(g GroupID, quota, period time.Duration) error {
	gr, err := p.group(g)
	if err != nil {
		return fmt.Errorf("shareplant: cpu.max: %w", err)
	}
	if g == Root {
		return fmt.Errorf("shareplant: cpu.max of the root group: read-only")
	}
	if period < time.Millisecond || period > time.Second {
		return fmt.Errorf("shareplant: cpu.max period %v of %s: want 1ms..1s", period, gr.name)
	}
	if quota != 0 && quota < time.Millisecond {
		return fmt.Errorf("shareplant: cpu.max quota %v of %s: want 0 (max) or at least 1ms", quota, gr.name)
	}
	gr.quota, gr.period = float64(quota.Microseconds()), float64(period.Microseconds())
	gr.runtime, gr.refill, gr.throttled = gr.quota, p.now+gr.period, false
	p.dirty = true
	return nil
}

// Spawn starts a thread inside g (it writes itself into g before it
// runs): an idle allowed CPU, else the least loaded.
func (p *Plant) Spawn(g GroupID, d Duty) (ThreadID, error) {
	if _, err := p.group(g); err != nil {
		return 0, fmt.Errorf("shareplant: spawn: %w", err)
	}
	if d.Run < 0 || d.Sleep < 0 || (d.Sleep > 0 && d.Run <= 0) {
		return 0, fmt.Errorf("shareplant: spawn: duty %v run / %v sleep: want both zero (busy) or both positive", d.Run, d.Sleep)
	}
	t := &thread{ravg: 1, g: g, run: float64(d.Run.Microseconds()), sleep: float64(d.Sleep.Microseconds())}
	if d.Sleep == 0 {
		t.run = 0
	}
	t.work = t.run
	t.cpu = p.place(t)
	p.threads = append(p.threads, t)
	p.dirty = true
	return ThreadID(len(p.threads) - 1), nil
}

// Move writes thread t into g's cgroup.threads: it keeps its CPU if g
// allows it, else goes where g's threads are fewest.
func (p *Plant) Move(id ThreadID, g GroupID) error {
	t, err := p.thread(id)
	if err != nil {
		return fmt.Errorf("shareplant: move: %w", err)
	}
	if _, err := p.group(g); err != nil {
		return fmt.Errorf("shareplant: move thread %d: %w", id, err)
	}
	if t.g == g {
		return nil
	}
	t.g = g
	if p.allowed(t)&(1<<t.cpu) == 0 {
		t.cpu = p.spread(t, g)
	}
	p.dirty = true
	return nil
}

// SetAffinity sets thread t's CPU affinity (empty: any CPU).
func (p *Plant) SetAffinity(id ThreadID, cpus cpuset.CPUs) error {
	t, err := p.thread(id)
	if err != nil {
		return fmt.Errorf("shareplant: affinity: %w", err)
	}
	t.affinity = maskOf(cpus)
	if p.allowed(t)&(1<<t.cpu) == 0 {
		t.cpu = p.spread(t, t.g)
	}
	p.dirty = true
	return nil
}

// Park puts thread t to sleep until Unpark: a pool thread with no work
// (a Go runtime thread parked on its futex, say). Parking a sleeping
// thread keeps it asleep until Unpark.
func (p *Plant) Park(id ThreadID) error {
	t, err := p.thread(id)
	if err != nil {
		return fmt.Errorf("shareplant: park: %w", err)
	}
	t.sleeping, t.wake = true, math.Inf(1)
	p.dirty = true
	return nil
}

// Unpark wakes thread t now, as a wake-up from sleep places it; its duty
// starts again. Unparking a runnable thread does nothing.
func (p *Plant) Unpark(id ThreadID) error {
	t, err := p.thread(id)
	if err != nil {
		return fmt.Errorf("shareplant: unpark: %w", err)
	}
	if !t.sleeping {
		return nil
	}
	t.sleeping, t.work = false, t.run
	t.cpu = p.wakeCPU(t)
	p.dirty = true
	return nil
}

// Usage is g's cpu.stat usage_usec (its threads' and its descendants').
func (p *Plant) Usage(g GroupID) (time.Duration, error) {
	gr, err := p.group(g)
	if err != nil {
		return 0, fmt.Errorf("shareplant: cpu.stat: %w", err)
	}
	return time.Duration(gr.usage * 1000), nil
}

// PressureSome is g's cpu.pressure "some" total: the time some runnable
// thread of g (or of a descendant) waited while not running.
func (p *Plant) PressureSome(g GroupID) (time.Duration, error) {
	gr, err := p.group(g)
	if err != nil {
		return 0, fmt.Errorf("shareplant: cpu.pressure: %w", err)
	}
	return time.Duration(gr.some * 1000), nil
}

// Threads lists the threads in g itself (cgroup.threads), by ID.
func (p *Plant) Threads(g GroupID) ([]ThreadInfo, error) {
	if _, err := p.group(g); err != nil {
		return nil, fmt.Errorf("shareplant: cgroup.threads: %w", err)
	}
	var out []ThreadInfo
	for i, t := range p.threads {
		if t.g == g {
			out = append(out, ThreadInfo{ID: ThreadID(i), Runnable: !t.sleeping, CPU: time.Duration(t.used * 1000)})
		}
	}
	return out, nil
}

// Thread is thread id as /proc shows it.
func (p *Plant) Thread(id ThreadID) (ThreadInfo, error) {
	t, err := p.thread(id)
	if err != nil {
		return ThreadInfo{}, fmt.Errorf("shareplant: /proc: %w", err)
	}
	return ThreadInfo{ID: id, Runnable: !t.sleeping, CPU: time.Duration(t.used * 1000)}, nil
}

// Placement counts g's threads (its own, not its descendants') per CPU.
// For diagnostics and tests of the model only: the agent cannot see it.
func (p *Plant) Placement(g GroupID) []int {
	out := make([]int, p.ncpu)
	for _, t := range p.threads {
		if t.g == g {
			out[t.cpu]++
		}
	}
	return out
}
