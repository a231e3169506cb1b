package docker

import (
	"fmt"

	"github.com/moby/moby/api/types/container"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// MinMemory is the daemon's smallest memory limit and reservation (6 MiB).
const MinMemory = 6 << 20

// Period is the CFS period pinfold uses by default, in µs (the kernel's).
const Period = 100000

// LongPeriod is the CFS period for quotas below 1 ms per Period (under
// 0.01 CPU): the kernel and Docker refuse a quota under 1000 µs, so such a
// quota is written per second instead (0.005 CPU = 5000 µs per 1 s).
const LongPeriod = 1000000

// MinQuota is the smallest CFS quota the kernel and Docker accept, in µs.
const MinQuota = 1000

// Resources is what pinfold asks Docker to enforce for one container.
type Resources struct {
	// CPUs and Mems are the container's cpuset; both must be non-empty (the
	// daemon reads "" as "no change", so a full list is always sent).
	CPUs cpuset.CPUs
	Mems cpuset.Mems
	// CPUShares sets cpu.weight through runc's conversion, 2..262144.
	CPUShares int64
	// CPUQuota is µs of CPU time per CPUPeriod; 0 means no CFS limit.
	CPUQuota int64
	// CPUPeriod is the CFS period in µs; 0 means Period (100 ms).
	CPUPeriod int64
	// MemoryBytes is the hard limit (memory.max); no swap is allowed.
	MemoryBytes int64
	// MemoryReservation is the soft limit (memory.low); 0 means none.
	MemoryReservation int64
}

// Error names the field and value that were refused, and who refused them.
type Error struct {
	Container string
	Field     string
	Value     string
	Reason    string
	Err       error
}

func (e *Error) Error() string {
	s := "docker: "
	if e.Container != "" {
		s += "container " + short(e.Container) + ": "
	}
	if e.Field != "" {
		s += fmt.Sprintf("%s = %s: ", e.Field, e.Value)
	}
	s += e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Validate checks r against the daemon's rules, so a request Docker would
// refuse is refused before anything is sent.
func (r Resources) Validate() error {
	bad := func(field string, v any, reason string, args ...any) error {
		return &Error{Field: field, Value: fmt.Sprint(v), Reason: fmt.Sprintf(reason, args...)}
	}
	switch {
	case r.CPUs.IsEmpty():
		return bad("cpus", `""`, "a container needs at least one CPU (send the full list)")
	case r.Mems.IsEmpty():
		return bad("mems", `""`, "a container needs at least one NUMA node")
	case r.CPUShares != 0 && (r.CPUShares < 2 || r.CPUShares > 262144):
		return bad("cpu_shares", r.CPUShares, "want 2..262144")
	case r.CPUPeriod != 0 && (r.CPUPeriod < 1000 || r.CPUPeriod > LongPeriod):
		return bad("cpu_period", r.CPUPeriod, "want 1000..%d µs, or 0 for %d", LongPeriod, Period)
	case r.CPUQuota != 0 && r.CPUQuota < MinQuota:
		return bad("cpu_quota", r.CPUQuota, "want at least %d µs per %d µs period, or 0 for no limit", MinQuota, r.PeriodUsec())
	case r.MemoryBytes < MinMemory:
		return bad("memory", r.MemoryBytes, "Docker's minimum memory limit is 6 MiB (%d bytes)", MinMemory)
	case r.MemoryReservation != 0 && r.MemoryReservation < MinMemory:
		return bad("memory_reservation", r.MemoryReservation, "Docker's minimum reservation is 6 MiB")
	case r.MemoryReservation > r.MemoryBytes:
		return bad("memory_reservation", r.MemoryReservation, "above the memory limit %d", r.MemoryBytes)
	}
	return nil
}

// PeriodUsec is the CFS period r asks for, in µs.
func (r Resources) PeriodUsec() int64 {
	if r.CPUPeriod == 0 {
		return Period
	}
	return r.CPUPeriod
}

// QuotaFor is the CFS limit for pieces of shareBase pieces per CPU: per
// Period when that is at least MinQuota, else per LongPeriod (and 0
// pieces is no limit). quota < MinQuota means even LongPeriod cannot
// express it.
func QuotaFor(pieces, shareBase int) (quota, period int64) {
	if pieces <= 0 || shareBase <= 0 {
		return 0, 0
	}
	q := int64(pieces) * Period / int64(shareBase)
	if q >= MinQuota {
		return q, 0
	}
	return int64(pieces) * LongPeriod / int64(shareBase), LongPeriod
}

// resourcesFor translates r into the Engine API's fields. It is pure.
func resourcesFor(r Resources) container.Resources {
	quota := int64(-1) // "max": lifts the CFS limit on update too
	if r.CPUQuota > 0 {
		quota = r.CPUQuota
	}
	shares := r.CPUShares
	if shares == 0 {
		shares = 1024
	}
	return container.Resources{
		CpusetCpus:        r.CPUs.String(),
		CpusetMems:        r.Mems.String(),
		CPUShares:         shares,
		CPUPeriod:         r.PeriodUsec(),
		CPUQuota:          quota,
		Memory:            r.MemoryBytes,
		MemorySwap:        r.MemoryBytes, // always with Memory: no swap (moby#39541)
		MemoryReservation: r.MemoryReservation,
	}
}

// appliedFrom reads back what the daemon stored for a container.
func appliedFrom(hc *container.HostConfig) (Resources, error) {
	if hc == nil {
		return Resources{}, nil
	}
	cpus, err := cpuset.ParseCPUs(hc.CpusetCpus)
	if err != nil {
		return Resources{}, err
	}
	mems, err := cpuset.ParseMems(hc.CpusetMems)
	if err != nil {
		return Resources{}, err
	}
	quota, period := hc.CPUQuota, hc.CPUPeriod
	if quota < 0 {
		quota = 0
	}
	if period == Period || quota == 0 {
		period = 0
	}
	return Resources{CPUs: cpus, Mems: mems, CPUShares: hc.CPUShares, CPUQuota: quota, CPUPeriod: period,
		MemoryBytes: hc.Memory, MemoryReservation: hc.MemoryReservation}, nil
}

// CgroupPath is a container's cgroup relative to the cgroup2 mount for the
// daemon's cgroup driver: cgroupfs puts it at <parent|docker>/<id>, systemd
// at <parent slice|system.slice>/docker-<id>.scope.
func CgroupPath(driver, parent, id string) (string, error) {
	switch driver {
	case "cgroupfs":
		if parent == "" {
			parent = "docker"
		}
		return trimSlash(parent) + "/" + id, nil
	case "systemd":
		if parent == "" {
			parent = "system.slice"
		}
		return trimSlash(parent) + "/docker-" + id + ".scope", nil
	}
	return "", &Error{Container: id, Field: "cgroup driver", Value: fmt.Sprintf("%q", driver), Reason: "want cgroupfs or systemd"}
}

func trimSlash(s string) string {
	for len(s) > 0 && s[0] == '/' {
		s = s[1:]
	}
	return s
}
