package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/cgroup"
)

// memGroup is a fake memory cgroup: reclaimable memory goes as soon as
// memory.high drops below use; hot memory does not, and while use is over
// memory.high the group stalls (memory.pressure grows) when hot is set.
type memGroup struct {
	mu          sync.Mutex
	high        int64 // cgroup.Max: none
	reclaimable int64
	pinned      int64 // never reclaimed (tmpfs without swap)
	stalls      bool  // over high, the group's tasks stall (they allocate)
	slow        bool  // reclaim frees only 2 MiB per memory.high write
	dip         int64 // memory.current reads this once (a use caught between two allocations), then the real use
	stallUsec   uint64
	last        time.Time
	highs       []int64
}

func (g *memGroup) current() int64 { return g.reclaimable + g.pinned }

func (g *memGroup) Apply(_ context.Context, s cgroup.Spec) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.MemoryHigh == nil {
		return fmt.Errorf("fake: only memory.high is written here")
	}
	g.high = *s.MemoryHigh
	g.highs = append(g.highs, g.high)
	if cur := g.current(); g.high != cgroup.Max && cur > g.high {
		g.reclaimable = max(g.high-g.pinned, 0)
		if g.slow {
			g.reclaimable = max(g.reclaimable, cur-g.pinned-2<<20)
		}
	}
	return nil
}

func (g *memGroup) Read(_ cgroup.Path, name string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.last.IsZero() && g.stalls && g.high != cgroup.Max && g.current() > g.high {
		g.stallUsec += uint64(now.Sub(g.last).Microseconds()) / 2 // stalled half the time
	}
	g.last = now
	switch name {
	case "memory.high":
		if g.high == cgroup.Max {
			return "max\n", nil
		}
		return fmt.Sprintln(g.high), nil
	case "memory.current":
		if d := g.dip; d > 0 {
			g.dip = 0
			return fmt.Sprintln(d), nil
		}
		return fmt.Sprintln(g.current()), nil
	case "memory.pressure":
		return fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", g.stallUsec), nil
	}
	return "", fmt.Errorf("fake: no %s", name)
}

func TestShrinkMemory(t *testing.T) {
	const MiB = 1 << 20
	opt := ShrinkOptions{Every: 5 * time.Millisecond, Deadline: 300 * time.Millisecond}
	tests := []struct {
		name   string
		g      *memGroup
		target int64
		reason string // "" = success
	}{
		{"page cache shrinks", &memGroup{high: cgroup.Max, reclaimable: 90 * MiB, pinned: 10 * MiB}, 32 * MiB, ""},
		{"already below", &memGroup{high: cgroup.Max, pinned: 10 * MiB}, 32 * MiB, ""},
		{"hot memory: pressure", &memGroup{high: cgroup.Max, reclaimable: 10 * MiB, pinned: 90 * MiB, stalls: true}, 32 * MiB, "memory.pressure"},
		// Reclaim stalls the container, but its use drops: go on.
		{"page cache, stalling", &memGroup{high: cgroup.Max, reclaimable: 90 * MiB, pinned: 10 * MiB, stalls: true, slow: true}, 32 * MiB, ""},
		{"cannot be reclaimed: deadline", &memGroup{high: 200 * MiB, pinned: 90 * MiB}, 32 * MiB, "deadline"},
		// Hot memory caught below the target for a moment (a program that
		// frees and faults in again): held at the target, it stalls. The
		// shrink said done at the dip (the kernel tier's hot container,
		// 38 → 16 MiB "done"), and memory.max set there would kill it.
		{"hot memory that dipped: pressure", &memGroup{high: cgroup.Max, pinned: 64 * MiB, stalls: true, dip: 8 * MiB}, 16 * MiB, "memory.pressure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := tt.g.high
			err := ShrinkMemory(context.Background(), tt.g, cgroup.MustParsePath("c"), tt.target, opt)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("ShrinkMemory = %v", err)
				}
				if tt.g.current() > tt.target {
					t.Errorf("memory.current %d above the target %d", tt.g.current(), tt.target)
				}
				for i := 1; i < len(tt.g.highs); i++ {
					if tt.g.highs[i] > tt.g.highs[i-1] {
						t.Errorf("memory.high went up during the shrink: %v", tt.g.highs)
					}
				}
				return
			}
			var se *ShrinkError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("ShrinkMemory = %v, want a *ShrinkError naming %q", err, tt.reason)
			}
			if !refusal(err) {
				t.Errorf("a given-up shrink is not a refusal: the planner would not roll it back")
			}
			if tt.g.high != old {
				t.Errorf("memory.high = %d after giving up, want the old %d", tt.g.high, old)
			}
			if len(tt.g.highs) < 2 {
				t.Errorf("memory.high was never stepped: %v", tt.g.highs)
			}
			t.Logf("%v", err)
		})
	}
}

func TestNextHigh(t *testing.T) {
	const MiB = 1 << 20
	for _, tt := range []struct{ cur, high, target, want int64 }{
		{100 * MiB, 1 << 62, 20 * MiB, 80 * MiB},  // a quarter of the way
		{100 * MiB, 60 * MiB, 20 * MiB, 50 * MiB}, // from high when it is lower
		{30 * MiB, 1 << 62, 20 * MiB, 26 * MiB},   // at least 4 MiB
		{21 * MiB, 1 << 62, 20 * MiB, 20 * MiB},   // not below the target
	} {
		if got := nextHigh(tt.cur, tt.high, tt.target); got != tt.want {
			t.Errorf("nextHigh(%d, %d, %d) = %d, want %d", tt.cur>>20, tt.high>>20, tt.target>>20, got>>20, tt.want>>20)
		}
	}
}
