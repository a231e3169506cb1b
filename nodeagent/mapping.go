package nodeagent

import (
	"maps"
	"slices"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// Scheme is how a CPU-bound instance's share of its fragment CPU is enforced
// (research kernel-and-libs.md §7: cpu.weight is one value for the whole
// cgroup, so weights alone do not split a shared CPU by pieces).
type Scheme string

const (
	// SchemeQuota: cpuset = the instance's CPUs, cpu.max = all its pieces
	// as CPU time (1.7 → 170000/100000), cpu.weight ∝ its pieces. The quota
	// caps the total, so with its whole CPUs saturated the instance can take
	// only its pieces of the shared CPU.
	SchemeQuota Scheme = "quota"
	// SchemeWeight: Eru's mapping: cpuset, no CFS quota, cpu.weight ∝ the
	// fragment's pieces (integer instances 100).
	SchemeWeight Scheme = "weight"
	// SchemeCapped: cpu.weight ∝ the fragment's pieces, as SchemeWeight, and
	// cpu.max = all its pieces as a cap, as SchemeQuota.
	SchemeCapped Scheme = "capped"
)

// DefaultScheme is the scheme that came closest to the plan when measured
// in the kernel tier (a 1.7/1.3 pair: it kept a fragment within 0.03 of
// the plan where weights alone overshot; docs/AGENT.md). The share loop
// (shares.go) corrects its weights from measurements.
const DefaultScheme = SchemeCapped

// Schemes lists the fragment schemes.
var Schemes = []Scheme{SchemeQuota, SchemeWeight, SchemeCapped}

// Host is what the mapping needs to know about the host.
type Host struct {
	// CPUs are the host's CPUs in the planner's capacity: online, less the
	// CPUs reserved for the system.
	CPUs cpuset.CPUs
	// Isolated are the isolcpus= CPUs: the scheduler does not balance load
	// onto them, so only instances bound to them run there.
	Isolated  cpuset.CPUs
	Mems      cpuset.Mems // NUMA nodes with memory
	ShareBase int
	// Pool is the memory-first shared pool as the planner accounts it
	// (alloc.Host.SharedPool), sent with the desired state; empty when
	// it did not send one (then pool computes the same here).
	Pool cpuset.CPUs
}

// Want is what an instance's container should have: the Docker resources
// and the cgroup files written directly (exact cpu.weight, cpu.max.burst),
// re-asserted after every Docker update.
type Want struct {
	Resources docker.Resources
	CPUWeight uint64
}

// pool is the memory-first shared pool: the planner's (Host.Pool), or,
// when it sent none, the same computed here: the host's CPUs in capacity
// that are not isolated and that no bound instance holds pieces of. If that
// leaves none, the CPUs in capacity that are not isolated; if none, all.
func pool(h Host, desired []model.Instance) cpuset.CPUs {
	if !h.Pool.IsEmpty() {
		return h.Pool
	}
	var bound []cpuset.CPUID
	for _, in := range desired {
		if !in.Bind {
			continue
		}
		for id, p := range in.CPUs {
			if p > 0 {
				bound = append(bound, id)
			}
		}
	}
	open := h.CPUs.Difference(h.Isolated)
	if open.IsEmpty() {
		return h.CPUs
	}
	if p := open.Difference(cpuset.Of(bound...)); !p.IsEmpty() {
		return p
	}
	return open
}

// Map computes what in's container should have. It is pure.
func Map(h Host, in model.Instance, scheme Scheme, sharedPool cpuset.CPUs) Want {
	sb := h.ShareBase
	r := docker.Resources{MemoryBytes: in.Memory, CPUShares: 1024}
	if in.MemorySoft >= docker.MinMemory && in.MemorySoft <= in.Memory {
		r.MemoryReservation = in.MemorySoft
	}
	w := Want{}
	if !in.Bind {
		r.CPUs, r.Mems = sharedPool, h.Mems
		r.CPUQuota, r.CPUPeriod = docker.QuotaFor(in.CPUQuota, sb)
		if r.CPUQuota > 0 && r.CPUQuota < docker.MinQuota { // the planner refuses such sizes; never ask Docker for less than it takes
			r.CPUQuota = docker.MinQuota
		}
		w.CPUWeight = weightOf(in.CPUQuota, sb)
		w.Resources = r
		return w
	}
	r.CPUs = cpuset.Of(slices.Sorted(maps.Keys(in.CPUs))...)
	r.Mems = h.Mems
	if in.NUMANode >= 0 {
		r.Mems = cpuset.Of(in.NUMANode)
	}
	total, frag := 0, 0
	for _, p := range in.CPUs {
		total += p
		if p < sb {
			frag = p
		}
	}
	switch scheme {
	case SchemeWeight, SchemeCapped:
		w.CPUWeight = 100
		if frag > 0 {
			w.CPUWeight = uint64(max(1, frag*100/sb))
			if scheme == SchemeCapped {
				r.CPUQuota, r.CPUPeriod = docker.QuotaFor(total, sb)
			}
		}
	default:
		if frag > 0 {
			r.CPUQuota, r.CPUPeriod = docker.QuotaFor(total, sb)
		}
		w.CPUWeight = weightOf(total, sb)
	}
	w.Resources = r
	return w
}

// weightOf is cpu.weight proportional to pieces: 100 per CPU, within 1..10000.
func weightOf(pieces, sb int) uint64 {
	return uint64(min(max(pieces*100/sb, 1), 10000))
}

// sameResources reports whether Docker already holds r.
func sameResources(a, b docker.Resources) bool {
	return a.CPUs.Equal(b.CPUs) && a.Mems.Equal(b.Mems) && a.CPUQuota == b.CPUQuota && a.PeriodUsec() == b.PeriodUsec() &&
		a.MemoryBytes == b.MemoryBytes && a.MemoryReservation == b.MemoryReservation
}
