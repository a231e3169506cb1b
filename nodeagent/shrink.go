package nodeagent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/cgroup"
)

// Memory shrink guided by pressure.
//
// Lowering memory.max below what a container uses makes the kernel reclaim
// at once and OOM-kill when it cannot. Instead the agent steps memory.high
// down towards the target (the kernel reclaims and, past it, throttles the
// container's allocations) while memory.pressure stays low; once
// memory.current is at the target, the caller sets memory.max. If the
// pressure stays high (the memory is hot: reclaiming it stalls the
// container) or the deadline passes (it cannot be reclaimed at all, such
// as tmpfs without swap), memory.high goes back to what it was and the
// shrink is refused: the agent reports the refusal, and the planner rolls
// the allocation back and shows why.

// ShrinkOptions tunes a shrink.
type ShrinkOptions struct {
	// Every is how long each memory.high step is held before memory.pressure
	// is read; default 250ms.
	Every time.Duration
	// Deadline bounds the whole shrink; default 30s.
	Deadline time.Duration
	// MaxStall is the largest fraction of a step some task of the container
	// may stall on memory (memory.pressure "some") without counting as
	// pressure; default 0.10. Two steps in a row above it in which
	// memory.current did not drop by 1 MiB end the shrink: reclaim stalls
	// a container for a moment even when the memory goes (page cache), but
	// stalling without progress means the memory is in use.
	MaxStall float64
}

func (o ShrinkOptions) withDefaults() ShrinkOptions {
	if o.Every <= 0 {
		o.Every = 250 * time.Millisecond
	}
	if o.Deadline <= 0 {
		o.Deadline = 30 * time.Second
	}
	if o.MaxStall <= 0 {
		o.MaxStall = 0.10
	}
	return o
}

// ShrinkError is a shrink that was given up: memory.high is back to what it
// was. It is a refusal (the planner rolls the resize back).
type ShrinkError struct {
	Target, Current int64 // bytes: asked for, in use when it stopped
	Reason          string
}

func (e *ShrinkError) Error() string {
	return fmt.Sprintf("memory shrink to %s stopped with %s in use: %s; memory.high restored", fmtMiB(e.Target), fmtMiB(e.Current), e.Reason)
}

func fmtMiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// nextHigh is the next memory.high step: a quarter of the way from what is
// in use (or the current memory.high, if lower) down to the target, at
// least 4 MiB, never below the target. Small steps keep the container's
// use close to memory.high, where the kernel throttles allocations least.
// Pure.
func nextHigh(current, high, target int64) int64 {
	from := min(current, high)
	step := max((from-target)/4, 4<<20)
	return max(from-step, target)
}

// ShrinkMemory lowers group p's memory use to target, guided by its
// memory.pressure (see ShrinkOptions). On success memory.high is left at
// target: the caller sets memory.max to it, then lifts memory.high. On a
// *ShrinkError memory.high holds its old value again.
func ShrinkMemory(ctx context.Context, cg cgroupWriter, p cgroup.Path, target int64, o ShrinkOptions) error {
	o = o.withDefaults()
	old, err := cg.Read(p, "memory.high")
	if err != nil {
		return err
	}
	oldHigh := cgroup.Max
	if v := strings.TrimSpace(old); v != "max" {
		if oldHigh, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("memory shrink: %s memory.high = %q: %w", p, old, err)
		}
	}
	readInt := func(file string) (int64, error) {
		s, err := cg.Read(p, file)
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	}
	stallOf := func() (uint64, bool) {
		s, err := cg.Read(p, "memory.pressure")
		if err != nil {
			return 0, false
		}
		return someTotal(s)
	}
	giveUp := func(cur int64, reason string) error {
		// Restore with a fresh context: the shrink's may be what ended.
		if err := cg.Apply(context.WithoutCancel(ctx), cgroup.Spec{Path: p, MemoryHigh: &oldHigh}); err != nil {
			return fmt.Errorf("memory shrink stopped (%s) and memory.high was not restored: %w", reason, err)
		}
		return &ShrinkError{Target: target, Current: cur, Reason: reason}
	}
	deadline := time.Now().Add(o.Deadline)
	high := oldHigh
	if high == cgroup.Max {
		high = 1<<63 - 1
	}
	over, progressFrom := 0, int64(0)
	// holding: the use was at or below the target at the last look, and
	// memory.high has been held at the target since. Done only after a
	// whole period there without stalling: a use that dipped for a moment
	// (a program that frees memory and faults it in again) is throttled
	// at memory.high as soon as it grows again, and memory.max set at the
	// dip would kill it later (the kernel tier once caught the hot
	// container between two allocations: 38 MiB, then 16, "done").
	holding := false
	for {
		cur, err := readInt("memory.current")
		if err != nil {
			return giveUp(0, "memory.current unreadable: "+err.Error())
		}
		if cur <= target && holding {
			return nil
		}
		if time.Now().After(deadline) {
			return giveUp(cur, fmt.Sprintf("the deadline %s passed (the memory could not be reclaimed)", o.Deadline))
		}
		if cur <= target {
			holding, high = true, target
		} else {
			holding, high = false, nextHigh(cur, high, target)
		}
		if err := cg.Apply(ctx, cgroup.Spec{Path: p, MemoryHigh: &high}); err != nil {
			return giveUp(cur, "memory.high "+strconv.FormatInt(high, 10)+": "+err.Error())
		}
		s0, psi := stallOf()
		t0 := time.Now()
		select {
		case <-time.After(o.Every):
		case <-ctx.Done():
			return giveUp(cur, ctx.Err().Error())
		}
		s1, psi1 := stallOf()
		if !psi || !psi1 || s1 < s0 {
			continue // no PSI: the deadline alone bounds the shrink
		}
		stall := float64(s1-s0) / float64(time.Since(t0).Microseconds())
		if stall <= o.MaxStall {
			over = 0
			continue
		}
		holding = false // stalled at the target: the memory is in use
		if over == 0 {
			progressFrom = cur
		}
		if over++; over < 2 {
			continue
		}
		now, _ := readInt("memory.current")
		if progressFrom-now >= 1<<20 {
			over = 0 // stalled, but the memory goes: reclaim is working
			continue
		}
		return giveUp(now, fmt.Sprintf("memory.pressure: the container stalled %.0f%% of the time at memory.high %s and its use did not drop (the memory is in use)",
			stall*100, fmtMiB(high)))
	}
}
