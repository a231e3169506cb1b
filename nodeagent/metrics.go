package nodeagent

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// metricsEvery is how often metrics are sent even when nothing moved.
const metricsEvery = 30 * time.Second

// HostMetrics measures the host's load average and memory with gopsutil.
func HostMetrics(ctx context.Context) (*pinfoldv1.HostMetrics, error) {
	l, err := load.AvgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	m, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return nil, err
	}
	return &pinfoldv1.HostMetrics{Load1: l.Load1, Load5: l.Load5, Load15: l.Load15, MemTotalBytes: m.Total, MemAvailableBytes: m.Available}, nil
}

// MetricsChanged reports whether m differs from what was last sent enough to
// be worth a write: load1 by 0.25 (or 10%), available memory by 5% of total.
func MetricsChanged(sent, m *pinfoldv1.HostMetrics) bool {
	if sent == nil {
		return m != nil
	}
	if m == nil {
		return false
	}
	dl := math.Abs(m.Load1 - sent.Load1)
	if dl >= 0.25 && dl >= 0.1*sent.Load1 {
		return true
	}
	dm := math.Abs(float64(m.MemAvailableBytes) - float64(sent.MemAvailableBytes))
	return m.MemTotalBytes != sent.MemTotalBytes || dm >= 0.05*float64(m.MemTotalBytes)
}

// observed reads what the kernel holds for a running container:
// memory.current, cpu.weight and cpu.stat's usage_usec (0 when unreadable).
func (a *Agent) observed(c docker.Container) (memCurrent int64, weight, usageUsec uint64) {
	p, err := cgroup.ParsePath(c.CgroupPath)
	if err != nil {
		return 0, 0, 0
	}
	if s, err := a.cg.Read(p, "memory.current"); err == nil {
		memCurrent, _ = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	}
	if s, err := a.cg.Read(p, "cpu.weight"); err == nil {
		weight, _ = strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	}
	if s, err := a.cg.Read(p, "cpu.stat"); err == nil {
		usageUsec = usageOf(s)
	}
	return memCurrent, weight, usageUsec
}

// usageOf is cpu.stat's usage_usec (0 when absent).
func usageOf(cpuStat string) uint64 {
	for line := range strings.Lines(cpuStat) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// cpuWindow is the shortest span the CPU an instance got is measured over:
// passes can follow each other within a few hundred milliseconds (a pass
// that acted is followed at once), where the clock's jitter against the
// read is a large part of the span (a busy loop bound to one CPU read 1.17
// in the TCG guest once steady passes became cheap).
const cpuWindow = time.Second

// cpuSample is a container's cpu.stat usage_usec at a time.
type cpuSample struct {
	container string
	usageUsec uint64
	at        time.Time
}

// piecesPerSecond is the CPU a container used between two samples of it,
// in pieces of shareBase (ok false when they are not of one container, or
// too close in time to tell).
func piecesPerSecond(prev, now cpuSample, shareBase int) (int, bool) {
	dt := now.at.Sub(prev.at)
	if prev.container == "" || prev.container != now.container || dt < 100*time.Millisecond || now.usageUsec < prev.usageUsec {
		return 0, false
	}
	cpus := float64(now.usageUsec-prev.usageUsec) / float64(dt.Microseconds())
	return int(math.Round(cpus * float64(shareBase))), true
}

// cpuMoved reports whether the CPU a container gets moved enough since it
// was last sent to be sent again: by 5 % of a CPU and 5 % of the figure
// (the enforcement target's tolerance), so a steady load does not write to
// etcd on every pass.
func cpuMoved(sent, now, shareBase int) bool {
	d := now - sent
	if d < 0 {
		d = -d
	}
	return d*20 >= shareBase && d*20 >= sent
}

// memoryMoved reports whether memory use moved enough since it was last
// sent to be sent again. Growth counts from 1 MiB and 1%: the planner
// refuses a shrink below the last figure it has, so that figure must never
// lag far behind real use. A drop counts from 1 MiB and 10%: a stale high
// figure only makes that guard stricter, and churn would cost etcd writes.
func memoryMoved(sent, now int64) bool {
	d := now - sent
	if d >= 0 {
		return d >= 1<<20 && d*100 >= sent
	}
	return -d >= 1<<20 && -d*10 >= sent
}

// refusal tells a host's refusal (invalid resources, the engine or the
// kernel saying no) from a transient failure (engine unreachable, timeout),
// which is retried rather than rolled back.
func refusal(err error) bool {
	if docker.IsTransient(err) || errors.Is(err, docker.ErrNotFound) {
		return false
	}
	var de *docker.Error
	var ce *cgroup.ApplyError
	var se *ShrinkError
	return errors.As(err, &de) || errors.As(err, &ce) || errors.As(err, &se)
}
