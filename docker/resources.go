package docker

import (
	"fmt"

	"github.com/moby/moby/api/types/container"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// MinMemory is the daemon's smallest memory limit and reservation (6 MiB).
const MinMemory = 6 << 20

// Period is the CFS period pinfold uses for every container, in µs.
const Period = 100000

// Resources is what pinfold asks Docker to enforce for one container.
type Resources struct {
	// CPUs and Mems are the container's cpuset; both must be non-empty (the
	// daemon reads "" as "no change", so a full list is always sent).
	CPUs cpuset.CPUs
	Mems cpuset.Mems
	// CPUShares sets cpu.weight through runc's conversion, 2..262144.
	CPUShares int64
	// CPUQuota is µs of CPU time per 100 ms period; 0 means no CFS limit.
	CPUQuota int64
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
	case r.CPUQuota != 0 && r.CPUQuota < 1000:
		return bad("cpu_quota", r.CPUQuota, "want at least 1000 µs per %d µs period, or 0 for no limit", Period)
	case r.MemoryBytes < MinMemory:
		return bad("memory", r.MemoryBytes, "Docker's minimum memory limit is 6 MiB (%d bytes)", MinMemory)
	case r.MemoryReservation != 0 && r.MemoryReservation < MinMemory:
		return bad("memory_reservation", r.MemoryReservation, "Docker's minimum reservation is 6 MiB")
	case r.MemoryReservation > r.MemoryBytes:
		return bad("memory_reservation", r.MemoryReservation, "above the memory limit %d", r.MemoryBytes)
	}
	return nil
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
		CPUPeriod:         Period,
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
	quota := hc.CPUQuota
	if quota < 0 {
		quota = 0
	}
	return Resources{CPUs: cpus, Mems: mems, CPUShares: hc.CPUShares, CPUQuota: quota,
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
