package cgroup

import (
	"fmt"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// Stats is what pinfold reads back from a group.
type Stats struct {
	CPUUsageUsec, CPUThrottledUsec uint64
	CPUPeriods, CPUThrottled       uint64
	MemoryCurrent                  uint64
	// memory.events counters (hierarchical).
	MemoryEventsHigh, MemoryEventsMax, MemoryEventsOOM, MemoryEventsOOMKill uint64
}

// Stats reads cpu.stat, memory.current and memory.events of group p.
func (m *Manager) Stats(p Path) (Stats, error) {
	if !m.Exists(p) {
		return Stats{}, fmt.Errorf("cgroup: stats %s: %w", orRoot(p.String()), ErrNoGroup)
	}
	g, err := cgroup2.Load("/"+p.String(), cgroup2.WithMountpoint(m.dir))
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup: stats %s: %w", p, err)
	}
	st, err := g.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatMemoryEvents)
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup: stats %s: %w", p, err)
	}
	var s Stats
	if c := st.GetCPU(); c != nil {
		s.CPUUsageUsec, s.CPUThrottledUsec, s.CPUPeriods, s.CPUThrottled = c.UsageUsec, c.ThrottledUsec, c.NrPeriods, c.NrThrottled
	}
	if mem := st.GetMemory(); mem != nil {
		s.MemoryCurrent = mem.Usage
	}
	if e := st.GetMemoryEvents(); e != nil {
		s.MemoryEventsHigh, s.MemoryEventsMax, s.MemoryEventsOOM, s.MemoryEventsOOMKill = e.High, e.Max, e.Oom, e.OomKill
	}
	return s, nil
}
