package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinfold/pinfold/cgroup"
)

// ShareEnforcer runs the share loop (ShareLoop) against the kernel: every
// window it reads each member's cpu.stat usage and cpu.pressure, steps the
// loop, and writes the cpu.weight values that changed. The agent runs one
// every second; the kernel tier's share sweep runs the same one.
type ShareEnforcer struct {
	cg  cgroupWriter
	log *slog.Logger

	mu    sync.Mutex
	loop  *ShareLoop
	prev  map[string]shareSample
	noPSI bool // cpu.pressure could not be read: warned once
}

// shareSample is a member's counters at one time: cpu.stat's usage (its
// container is the cgroup's path), nr_periods and nr_throttled, and
// cpu.pressure's "some" total in µs.
type shareSample struct {
	cpu                cpuSample
	periods, throttled uint64
	stall              uint64
	psi                bool
}

// NewShareEnforcer returns an enforcer writing through cg.
func NewShareEnforcer(cg cgroupWriter, log *slog.Logger) *ShareEnforcer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ShareEnforcer{cg: cg, log: log, loop: NewShareLoop(), prev: map[string]shareSample{}}
}

// Weights returns the loop's corrected weights by instance ID.
func (e *ShareEnforcer) Weights() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loop.Weights()
}

// Tick measures the window since the last tick for every member whose
// cgroup is in paths, steps the loop and writes the weights that changed.
// It returns the first write error (the loop keeps its state: the next
// Reconcile pass writes the corrected weight again).
func (e *ShareEnforcer) Tick(ctx context.Context, members []ShareMember, paths map[string]cgroup.Path, shareBase int, now time.Time) error {
	next := map[string]shareSample{}
	for _, m := range members {
		if p, ok := paths[m.ID]; ok {
			if s, err := e.sample(p, now); err == nil {
				next[m.ID] = s
			}
		}
	}
	e.mu.Lock()
	win := map[string]ShareWindow{}
	for id, s := range next {
		if w, ok := windowOf(e.prev[id], s, shareBase); ok {
			win[id] = w
		}
		if !s.psi && !e.noPSI {
			e.noPSI = true
			e.log.Warn("cpu.pressure is unreadable (PSI off? boot with psi=1): the share loop cannot tell a starved instance from an idle one and corrects nothing", "cgroup", s.cpu.container)
		}
	}
	e.prev = next
	changed := e.loop.Step(members, win)
	e.mu.Unlock()
	var first error
	for _, id := range slices.Sorted(maps.Keys(changed)) {
		p, ok := paths[id]
		if !ok {
			continue
		}
		if err := e.cg.Apply(ctx, cgroup.Spec{Path: p, CPUWeight: changed[id]}); err != nil && first == nil {
			first = fmt.Errorf("share loop: cpu.weight of %s: %w", id, err)
		}
		e.log.Debug("share loop", "instance", id, "cpu_weight", changed[id], "window", win[id])
	}
	return first
}

func (e *ShareEnforcer) sample(p cgroup.Path, now time.Time) (shareSample, error) {
	st, err := e.cg.Read(p, "cpu.stat")
	if err != nil {
		return shareSample{}, err
	}
	s := shareSample{cpu: cpuSample{container: p.String(), usageUsec: usageOf(st), at: now}}
	if n, ok := statField(st, "nr_periods"); ok {
		s.periods = uint64(n)
	}
	if n, ok := statField(st, "nr_throttled"); ok {
		s.throttled = uint64(n)
	}
	if pr, err := e.cg.Read(p, "cpu.pressure"); err == nil {
		s.stall, s.psi = someTotal(pr)
	}
	return s, nil
}

// windowOf is the window between two samples of one cgroup (ok false when
// piecesPerSecond cannot tell: other cgroups, too close, counters back).
func windowOf(prev, now shareSample, shareBase int) (ShareWindow, bool) {
	got, ok := piecesPerSecond(prev.cpu, now.cpu, shareBase)
	if !ok {
		return ShareWindow{}, false
	}
	w := ShareWindow{Got: got}
	if now.periods > prev.periods && now.throttled >= prev.throttled {
		w.Throttled = min(1, float64(now.throttled-prev.throttled)/float64(now.periods-prev.periods))
	}
	if now.psi && prev.psi && now.stall >= prev.stall {
		w.Waiting = float64(now.stall-prev.stall) / float64(now.cpu.at.Sub(prev.cpu.at).Microseconds())
	}
	return w, true
}

// someTotal is the "some" line's total= (µs) of a PSI file.
func someTotal(psi string) (uint64, bool) {
	for line := range strings.Lines(psi) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "some ")
		if !ok {
			continue
		}
		for f := range strings.FieldsSeq(rest) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				n, err := strconv.ParseUint(v, 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}
