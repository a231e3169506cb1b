package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/model"
)

// threadedWriter is what the split scheme needs of the cgroup tree beyond
// cgroupWriter (cgroup.Manager has it): threaded children of a container's
// cgroup, and moving threads between them.
type threadedWriter interface {
	ApplyThreaded(ctx context.Context, s cgroup.Spec) error
	RemoveThreaded(ctx context.Context, p cgroup.Path) error
	MoveThread(p cgroup.Path, tid int) error
	Threads(p cgroup.Path) ([]int, error)
}

// threadStat is what the split sweep reads of a thread: whether it is
// runnable (state R) and the CPU time it has used, in clock ticks (utime +
// stime).
type threadStat struct {
	Runnable bool
	Ticks    uint64
}

// threadRunnable reads thread tid's threadStat; ok is false when the
// thread is gone.
type threadRunnable func(tid int) (st threadStat, ok bool)

// statThread parses /proc/<tid>/stat: "tid (comm) S … utime stime …",
// where comm may hold blanks and parentheses, so the fields are counted
// from the last ")" (the state is field 3, utime and stime 14 and 15).
// A stat too short for the times, or with times that are not numbers,
// gives the state with no ticks. It reads the bytes as they are (the
// sweep reads thousands a second: no copy, no allocation).
func statThread[S ~string | ~[]byte](stat S) (threadStat, bool) {
	i := len(stat) - 1
	for i >= 0 && stat[i] != ')' {
		i--
	}
	if i < 0 {
		return threadStat{}, false
	}
	var st threadStat
	var times [2]uint64
	timesOK := 0
	field := 0
	for j := i + 1; j < len(stat); {
		if stat[j] == ' ' || stat[j] == '\t' || stat[j] == '\n' {
			j++
			continue
		}
		k := j
		for k < len(stat) && stat[k] != ' ' && stat[k] != '\t' && stat[k] != '\n' {
			k++
		}
		switch field {
		case 0:
			st.Runnable = k-j == 1 && stat[j] == 'R'
		case 11, 12:
			if v, ok := parseDecimal(stat[j:k]); ok {
				times[field-11] = v
				timesOK++
			}
		}
		field++
		if field > 12 {
			break
		}
		j = k
	}
	if field == 0 {
		return threadStat{}, false
	}
	if timesOK == 2 {
		st.Ticks = times[0] + times[1]
	}
	return st, true
}

// parseDecimal reads an unsigned decimal number of at most 19 digits.
func parseDecimal[S ~string | ~[]byte](d S) (uint64, bool) {
	if len(d) == 0 || len(d) > 19 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(d); i++ {
		c := d[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// splitEnsure makes (or re-asserts) the threaded children of in's
// container cgroup p under the split scheme: their cpusets and caps. It
// does nothing for an instance the scheme does not split. Called after
// the container's own files were re-asserted (so the children's cpusets
// lie within the container's again), and every sweep.
func (a *Agent) splitEnsure(ctx context.Context, h Host, in model.Instance, p cgroup.Path) (err error) {
	sp, ok := SplitOf(h, in, a.cfg.Scheme)
	if !ok {
		return nil
	}
	tw, ok := a.cg.(threadedWriter)
	if !ok {
		return fmt.Errorf("fragment scheme %s: the cgroup writer cannot make threaded groups", SchemeSplit)
	}
	specs, err := sp.Specs(p, h.ShareBase)
	if err != nil {
		return err
	}
	// Counted when done (whether or not every child was made): a look for
	// leftovers that began before this cannot count as done after it.
	defer func() {
		a.mu.Lock()
		if r := a.records[in.ID]; r != nil {
			r.splitMade++
			if err == nil {
				r.splitEnsured = p.String()
			}
		}
		a.mu.Unlock()
	}()
	for _, s := range specs {
		if err := tw.ApplyThreaded(ctx, s); err != nil {
			return fmt.Errorf("split %s: %w", in.ID, err)
		}
	}
	return nil
}

// splitTick is one window of the split scheme: for every desired instance
// whose container ran at the last pass, children are made and threads
// swept (SplitSweep) where the scheme splits it, and children are torn
// down where it no longer does (the instance was resized off its fragment,
// or the agent restarted with another scheme). Errors are per instance.
func (a *Agent) splitTick(ctx context.Context) error { return a.splitPass(ctx, true) }

// splitPass is splitTick; ensure false skips re-asserting the children's
// files (the sweeps between two re-assertions: SplitEvery is shorter than
// a second, the drift repair need not be).
func (a *Agent) splitPass(ctx context.Context, ensure bool) error {
	tw, ok := a.cg.(threadedWriter)
	if !ok {
		if a.cfg.Scheme == SchemeSplit {
			return fmt.Errorf("fragment scheme %s: the cgroup writer cannot make threaded groups", SchemeSplit)
		}
		return nil
	}
	a.mu.Lock()
	h := a.host
	type job struct {
		in      model.Instance
		p       cgroup.Path
		checked bool
		made    uint64 // the record's splitMade when listed
		ensured bool   // its children made for this cgroup at least once
	}
	var jobs []job
	for _, in := range a.desired {
		if r := a.records[in.ID]; r != nil && r.cgroup != nil {
			p := r.cgroup.String()
			jobs = append(jobs, job{in: in, p: *r.cgroup, made: r.splitMade,
				checked: r.splitChecked == p && r.splitCheckedMade == r.splitMade, ensured: r.splitEnsured == p})
		}
	}
	a.mu.Unlock()
	var errs []error
	for _, j := range jobs {
		sp, split := SplitOf(h, j.in, a.cfg.Scheme)
		if !split {
			// One look per container for children left from a split: the
			// default schemes pay one read per container, once; under
			// split, once more after each time children were made.
			if j.checked {
				continue
			}
			err := a.splitTeardown(ctx, tw, j.p)
			if err == nil {
				a.mu.Lock()
				if r := a.records[j.in.ID]; r != nil && r.cgroup != nil && *r.cgroup == j.p {
					r.splitChecked, r.splitCheckedMade = j.p.String(), j.made
					r.splitEnsured = "" // split again, it makes its children anew
				}
				a.mu.Unlock()
			}
			errs = append(errs, err)
			continue
		}
		if !ensure && !j.ensured {
			// Children not made yet (a new container, or the kernel
			// refused them): the pass or the next second's sweep makes
			// them; not retried every SplitEvery.
			continue
		}
		if ensure {
			if err := a.splitEnsure(ctx, h, j.in, j.p); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		err := a.splitSweep(tw, j.in.ID, j.p, sp.Whole.Len(), float64(sp.Frag)/float64(h.ShareBase))
		if !ensure && (errors.Is(err, cgroup.ErrNoGroup) || errors.Is(err, fs.ErrNotExist)) {
			// The children are gone: the container's cgroup was made anew
			// at the same path (a restart). Not a warning four times a
			// second: the next second's sweep makes them again.
			a.mu.Lock()
			if r := a.records[j.in.ID]; r != nil && r.cgroup != nil && *r.cgroup == j.p && r.splitEnsured == j.p.String() {
				r.splitEnsured = ""
				a.log.Info("split children gone (the container's cgroup was made anew); making them again", "instance", j.in.ID, "cgroup", j.p.String())
			}
			a.mu.Unlock()
			continue
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// splitSweep lists the threads of container cgroup p and its children,
// and moves those SplitSweep says to move; frag is the instance's
// fragment of a CPU. First it reads what each child used since the last
// sweep (cpu.stat): when SplitQuiet says so, the threads are not read.
func (a *Agent) splitSweep(tw threadedWriter, id string, p cgroup.Path, whole int, frag float64) error {
	paths := map[SplitPart]cgroup.Path{SplitRoot: p}
	for part, name := range map[SplitPart]string{SplitWhole: SplitWholeName, SplitFrag: SplitFragName} {
		c, err := p.Child(name)
		if err != nil {
			return err
		}
		paths[part] = c
	}
	if a.splitQuiet(tw, id, paths, whole, frag) {
		return nil
	}
	at := a.clock()
	a.mu.Lock()
	var last map[int]uint64
	var lastAt time.Time
	if r := a.records[id]; r != nil {
		last, lastAt = r.splitTicks, r.splitTicksAt
	}
	a.mu.Unlock()
	need := busyTicks(at.Sub(lastAt), a.cfg.SplitEvery)
	ticks := map[int]uint64{}
	busy := map[int]bool{} // asleep now, but ran since the last sweep (the log's "r")
	var threads []SplitThread
	for _, part := range []SplitPart{SplitRoot, SplitWhole, SplitFrag} {
		tids, err := tw.Threads(paths[part])
		if err != nil {
			return fmt.Errorf("split %s: %w", id, err)
		}
		for _, tid := range tids {
			st, ok := a.threadState(tid)
			if !ok {
				continue // exited since the listing
			}
			ticks[tid] = st.Ticks
			runnable := st.Runnable
			if prev, seen := last[tid]; !runnable && seen && st.Ticks >= prev+need {
				runnable, busy[tid] = true, true
			}
			threads = append(threads, SplitThread{TID: tid, Runnable: runnable, In: part})
		}
	}
	a.mu.Lock()
	if r := a.records[id]; r != nil && r.cgroup != nil && *r.cgroup == p {
		r.splitTicks, r.splitTicksAt = ticks, at
	}
	a.mu.Unlock()
	moves := SplitSweep(whole, threads)
	var errs []error
	for _, t := range threads { // in listing order: deterministic
		to, ok := moves[t.TID]
		if !ok {
			continue
		}
		if err := tw.MoveThread(paths[to], t.TID); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("split %s: %w", id, err))
		}
	}
	if len(moves) > 0 && a.log.Enabled(context.Background(), slog.LevelDebug) {
		var seen, moved []string // "tid:part[R]" and "tid→part", in listing order
		for _, t := range threads {
			r := ""
			switch {
			case busy[t.TID]:
				r = "r"
			case t.Runnable:
				r = "R"
			}
			seen = append(seen, fmt.Sprintf("%d:%s%s", t.TID, t.In, r))
			if to, ok := moves[t.TID]; ok {
				moved = append(moved, fmt.Sprintf("%d→%s", t.TID, to))
			}
		}
		a.log.Debug("split sweep", "instance", id, "threads", len(threads), "moved", len(moves),
			"seen", strings.Join(seen, " "), "moves", strings.Join(moved, " "))
	}
	return errors.Join(errs...)
}

// splitUse is what a split instance's children had used at a sweep
// (cpu.stat usage_usec), how long some thread of "pinfold-whole" had
// waited for a CPU (cpu.pressure "some" total, µs; waitKnown false where
// the kernel has no pressure files: psi=0), and when.
type splitUse struct {
	at          time.Time
	whole, frag uint64
	waited      uint64
	waitKnown   bool
}

// splitQuiet reads the children's cpu.stat (and "pinfold-whole"'s
// cpu.pressure) and reports whether this sweep may skip the threads
// (SplitQuiet over the interval since the last read). Threads in the
// container's own cgroup (new ones, a docker exec) always need a sweep:
// its cgroup.threads is read first. An unreadable cpu.stat, a first read,
// a counter gone back or an interval past 4 sweeps never skips; an
// unreadable cpu.pressure only loses the skip that needs it. A skip
// forgets the threads' ticks, so the next full sweep judges them by their
// state alone (not by ticks counted since an older sweep).
func (a *Agent) splitQuiet(tw threadedWriter, id string, paths map[SplitPart]cgroup.Path, wholeCPUs int, fragCPU float64) bool {
	if own, err := tw.Threads(paths[SplitRoot]); err != nil || len(own) > 0 {
		return false
	}
	sw, errW := a.cg.Read(paths[SplitWhole], "cpu.stat")
	sf, errF := a.cg.Read(paths[SplitFrag], "cpu.stat")
	if errW != nil || errF != nil {
		return false
	}
	cur := splitUse{at: a.clock(), whole: usageOf(sw), frag: usageOf(sf)}
	if pw, err := a.cg.Read(paths[SplitWhole], "cpu.pressure"); err == nil {
		cur.waited, cur.waitKnown = pressureSome(pw)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.records[id]
	if r == nil {
		return false
	}
	prev := r.splitUse
	r.splitUse = cur
	dt := float64(cur.at.Sub(prev.at).Microseconds())
	if prev.at.IsZero() || dt <= 0 || cur.at.Sub(prev.at) > 4*a.cfg.SplitEvery || cur.whole < prev.whole || cur.frag < prev.frag {
		return false
	}
	waited := -1.0
	if cur.waitKnown && prev.waitKnown && cur.waited >= prev.waited {
		waited = float64(cur.waited-prev.waited) / dt
	}
	if !SplitQuiet(wholeCPUs, fragCPU, float64(cur.whole-prev.whole)/dt, float64(cur.frag-prev.frag)/dt, waited) {
		return false
	}
	r.splitTicks = nil
	return true
}

// pressureSome reads the "some" line's total (µs) of a cgroup's
// cpu.pressure: "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234".
func pressureSome(pressure string) (uint64, bool) {
	for line := range strings.Lines(pressure) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "some ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				n, err := strconv.ParseUint(v, 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// splitBusyTicks: a thread found asleep that used at least this many
// clock ticks of CPU (20 ms at the usual 100 a second) since the last
// sweep counts as runnable. One look at a thread's state is an instant: a
// busy goroutine of a Go program locked to its thread is preempted every
// 10 ms of running, hands its P to another thread of the runtime and
// sleeps until that one wakes it; a sweep that caught that instant moved
// the busy thread out of "pinfold-frag" and the helper in
// (TestKernelSplit's guest: b's busy thread moved to "pinfold-whole",
// asleep, found running there 18 ms later, "pinfold-frag" empty). A busy
// thread uses many ticks between two sweeps, a runtime's helper next to
// none. The price: a thread that stopped for good right after running is
// acted on one sweep later.
//
// The count is per SplitEvery: when the sweep comes less often (splitWait
// paces it to 1 % of a CPU), a thread must have used as many ticks per
// SplitEvery of the time since (busyTicks). A fixed 2 over a paced second
// counted a helper thread's 44 ms as busy and left the fragment to it
// (TestKernelSplit's guest, split+burst: a 1.057 of 1.7).
const splitBusyTicks = 2

// busyTicks is the ticks a thread found asleep must have used over since
// (the time since the last sweep) to count as runnable: splitBusyTicks
// per every of it, rounded, at least splitBusyTicks.
func busyTicks(since, every time.Duration) uint64 {
	if every <= 0 || since <= every {
		return splitBusyTicks
	}
	return uint64((int64(splitBusyTicks)*int64(since) + int64(every)/2) / int64(every)) // rounded
}

// splitTeardown moves the threads of p's children back into p (the
// container's cgroup), then removes the children. Nothing to do when
// there are none.
func (a *Agent) splitTeardown(ctx context.Context, tw threadedWriter, p cgroup.Path) error {
	for _, name := range []string{SplitFragName, SplitWholeName} {
		c, err := p.Child(name)
		if err != nil {
			return err
		}
		tids, err := tw.Threads(c)
		if errors.Is(err, cgroup.ErrNoGroup) || errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, tid := range tids {
			if err := tw.MoveThread(p, tid); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
		}
		if err := tw.RemoveThreaded(ctx, c); err != nil {
			return err
		}
		a.log.Info("split children removed", "cgroup", c.String(), "threads_moved_back", len(tids))
	}
	return nil
}
