package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
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

	mu      sync.Mutex
	loop    *ShareLoop
	prev    map[string]shareSample
	noPSI   bool // cpu.pressure could not be read: warned once
	lastWin map[string]ShareWindow
}

// shareSample is a member's counters at one time, in its cgroup.
type shareSample struct {
	path         cgroup.Path
	usage, stall uint64 // µs: cpu.stat usage_usec, cpu.pressure some total
	psi          bool
	at           time.Time
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

// LastWindows returns each member's last measured window.
func (e *ShareEnforcer) LastWindows() map[string]ShareWindow {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.lastWin)
}

// Tick measures the window since the last tick for every member whose
// cgroup is in paths, steps the loop and writes the weights that changed.
// It returns the first write error (the loop keeps its state: the next
// Reconcile pass writes the corrected weight again).
func (e *ShareEnforcer) Tick(ctx context.Context, members []ShareMember, paths map[string]cgroup.Path, shareBase int, now time.Time) error {
	e.mu.Lock()
	win := map[string]ShareWindow{}
	next := map[string]shareSample{}
	for _, m := range members {
		p, ok := paths[m.ID]
		if !ok {
			continue
		}
		s, err := e.sample(p, now)
		if err != nil {
			continue
		}
		next[m.ID] = s
		if w, ok := windowOf(e.prev[m.ID], s, shareBase); ok {
			win[m.ID] = w
		}
		if !s.psi && !e.noPSI {
			e.noPSI = true
			e.log.Warn("cpu.pressure is unreadable (PSI off? boot with psi=1): the share loop cannot tell a starved instance from an idle one and corrects nothing", "cgroup", p.String())
		}
	}
	e.prev, e.lastWin = next, win
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
	s := shareSample{path: p, usage: usageOf(st), at: now}
	if pr, err := e.cg.Read(p, "cpu.pressure"); err == nil {
		s.stall, s.psi = someTotal(pr)
	}
	return s, nil
}

// windowOf is the window between two samples of one cgroup (ok false when
// they are of different cgroups, too close, or the counters went back).
func windowOf(prev, now shareSample, shareBase int) (ShareWindow, bool) {
	dt := now.at.Sub(prev.at).Microseconds()
	if prev.path != now.path || prev.at.IsZero() || dt < 100_000 || now.usage < prev.usage || now.stall < prev.stall {
		return ShareWindow{}, false
	}
	w := ShareWindow{Got: int(math.Round(float64(now.usage-prev.usage) * float64(shareBase) / float64(dt)))}
	if now.psi && prev.psi {
		w.Waiting = float64(now.stall-prev.stall) / float64(dt)
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
