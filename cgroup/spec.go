package cgroup

import (
	"fmt"
	"strconv"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// Max stands for the kernel's "max" (no limit) in the memory fields and in
// CPUMax.Quota.
const Max int64 = -1

// Spec is what a group should have. A nil or zero field is left as it is;
// to lift a limit set it to Max (memory) or CPUMax{Quota: Max}.
type Spec struct {
	Path Path
	// CPUs and Mems set cpuset.cpus and cpuset.mems; a non-nil empty set
	// writes "" (inherit the parent's).
	CPUs *cpuset.CPUs
	Mems *cpuset.Mems
	// CPUWeight is cpu.weight, 1..10000; 0 leaves it.
	CPUWeight uint64
	// CPUMax is cpu.max; the period is always written with the quota.
	CPUMax *CPUMax
	// CPUMaxBurst is cpu.max.burst in µs (0..quota).
	CPUMaxBurst *uint64
	// Memory limits in bytes, or Max.
	MemoryMax, MemoryHigh, MemoryLow, MemorySwapMax *int64
	MemoryOOMGroup                                  *bool
}

// CPUMax is a CFS bandwidth limit: Quota µs of CPU time per Period µs
// (Quota Max = unlimited). Period 0 means the kernel default 100000.
type CPUMax struct {
	Quota  int64
	Period uint64
}

// DefaultPeriod is the kernel's default cpu.max period in µs.
const DefaultPeriod = 100000

// Write is one interface-file write.
type Write struct{ File, Value string }

// SpecError names the Spec field and value that Plan rejected.
type SpecError struct {
	Path, File, Value, Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("cgroup: %s: %s = %q: %s", orRoot(e.Path), e.File, e.Value, e.Reason)
}

func orRoot(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

// Plan returns the writes that realise s, in the order Apply performs them:
//  1. cpuset.mems, then cpuset.cpus (mems first: memory should be placed
//     before tasks run on the new CPUs);
//  2. cpu.weight;
//  3. cpu.max, then cpu.max.burst (Apply swaps them when the kernel refuses a
//     quota below the current burst);
//  4. memory.swap.max, memory.low, memory.high, then memory.max (high before
//     max, so lowering throttles and reclaims before the hard limit can
//     OOM-kill), then memory.oom.group.
//
// It is pure and validates every range.
func Plan(s Spec) ([]Write, error) {
	var out []Write
	bad := func(file, value, reason string, args ...any) ([]Write, error) {
		return nil, &SpecError{Path: s.Path.String(), File: file, Value: value, Reason: fmt.Sprintf(reason, args...)}
	}
	if s.Mems != nil {
		out = append(out, Write{"cpuset.mems", s.Mems.String()})
	}
	if s.CPUs != nil {
		out = append(out, Write{"cpuset.cpus", s.CPUs.String()})
	}
	if s.CPUWeight != 0 {
		if s.CPUWeight > 10000 {
			return bad("cpu.weight", strconv.FormatUint(s.CPUWeight, 10), "want 1..10000")
		}
		out = append(out, Write{"cpu.weight", strconv.FormatUint(s.CPUWeight, 10)})
	}
	quota := int64(-2)
	if m := s.CPUMax; m != nil {
		period := m.Period
		if period == 0 {
			period = DefaultPeriod
		}
		v := fmt.Sprintf("%d %d", m.Quota, period)
		if period < 1000 || period > 1000000 {
			return bad("cpu.max", v, "period must be 1000..1000000 µs")
		}
		switch {
		case m.Quota == Max:
			v = fmt.Sprintf("max %d", period)
		case m.Quota < 1000:
			return bad("cpu.max", v, "quota must be at least 1000 µs, or Max")
		}
		quota = m.Quota
		out = append(out, Write{"cpu.max", v})
	}
	if b := s.CPUMaxBurst; b != nil {
		v := strconv.FormatUint(*b, 10)
		if quota >= 0 && *b > uint64(quota) {
			return bad("cpu.max.burst", v, "burst must not exceed the quota %d", quota)
		}
		out = append(out, Write{"cpu.max.burst", v})
	}
	for _, m := range []struct {
		file string
		v    *int64
	}{{"memory.swap.max", s.MemorySwapMax}, {"memory.low", s.MemoryLow}, {"memory.high", s.MemoryHigh}, {"memory.max", s.MemoryMax}} {
		if m.v == nil {
			continue
		}
		switch {
		case *m.v == Max:
			out = append(out, Write{m.file, "max"})
		case *m.v < 0:
			return bad(m.file, strconv.FormatInt(*m.v, 10), "want bytes >= 0, or Max")
		default:
			out = append(out, Write{m.file, strconv.FormatInt(*m.v, 10)})
		}
	}
	if s.MemoryOOMGroup != nil {
		v := "0"
		if *s.MemoryOOMGroup {
			v = "1"
		}
		out = append(out, Write{"memory.oom.group", v})
	}
	return out, nil
}

// Int64 returns a pointer to v, for Spec literals.
func Int64(v int64) *int64 { return &v }

// Uint64 returns a pointer to v.
func Uint64(v uint64) *uint64 { return &v }

// Bool returns a pointer to v.
func Bool(v bool) *bool { return &v }

// CPUsOf returns a pointer to c.
func CPUsOf(c cpuset.CPUs) *cpuset.CPUs { return &c }

// MemsOf returns a pointer to m.
func MemsOf(m cpuset.Mems) *cpuset.Mems { return &m }
