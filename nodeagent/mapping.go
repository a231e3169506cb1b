package nodeagent

import (
	"maps"
	"slices"

	"github.com/pinfold/pinfold/cgroup"
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
	// SchemeSplit: the container's cgroup as SchemeCapped, and, for an
	// instance holding a fragment and at least one whole CPU, two threaded
	// child cgroups under it: "pinfold-whole" on the whole CPUs and
	// "pinfold-frag" on the shared CPU with cpu.max = the fragment. The
	// agent keeps runnable threads in both (SplitSweep), so the caps on
	// the shared CPU sum to at most one CPU wherever the load balancer
	// puts threads (docs/AGENT.md, "Threaded split").
	SchemeSplit Scheme = "split"
)

// DefaultScheme is the scheme with the best worst case across the workload
// matrix (package workload) on a real 16-CPU kernel (Linux 6.18, 2026-11-28,
// docs/AGENT.md "The workload matrix"): capped, with the share loop
// correcting its weights, gave every instance at least 90.2 % of
// min(plan, demand) in every row (threads started in the final cpuset;
// threads forced onto a whole CPU stay there: docs/AGENT.md); split gave a Go program with default
// GOMAXPROCS, a thread pool and short-lived processes 58.7 % (its threaded
// children narrow every thread's affinity to one CPU, so Go's runtime drops
// GOMAXPROCS to 1), and breaks `docker top` and containers that make their
// own cgroups. Capped keeps the container's cgroup a plain domain: a
// workload sees cpuset = whole ∪ shared (⌈plan⌉ CPUs) and cpu.max = its
// plan. Split stays as --fragment-scheme split, exact for many busy
// threads (C-like workers) where capped gives the smaller instance 88-92 %.
const DefaultScheme = SchemeCapped

// Schemes lists the fragment schemes.
var Schemes = []Scheme{SchemeQuota, SchemeWeight, SchemeCapped, SchemeSplit}

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
	case SchemeWeight, SchemeCapped, SchemeSplit:
		w.CPUWeight = 100
		if frag > 0 {
			w.CPUWeight = uint64(max(1, frag*100/sb))
			if scheme != SchemeWeight {
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

// Split is the split scheme's plan for an instance's threaded children.
type Split struct {
	Whole  cpuset.CPUs // "pinfold-whole"'s cpuset: the whole CPUs
	Shared cpuset.CPUs // "pinfold-frag"'s cpuset: the shared CPU
	Frag   int         // pieces of the shared CPU: "pinfold-frag"'s cpu.max
}

// SplitOf is in's split under scheme: ok only for SchemeSplit and a bound
// instance holding a fragment and at least one whole CPU (a fragment alone
// is exact with the container's cpuset and cpu.max: no children). It is
// pure.
func SplitOf(h Host, in model.Instance, scheme Scheme) (Split, bool) {
	if scheme != SchemeSplit || !in.Bind || h.ShareBase <= 0 {
		return Split{}, false
	}
	var whole, shared []cpuset.CPUID
	frag := 0
	for id, p := range in.CPUs {
		switch {
		case p >= h.ShareBase:
			whole = append(whole, id)
		case p > 0:
			shared, frag = append(shared, id), p
		}
	}
	if len(whole) == 0 || len(shared) != 1 {
		return Split{}, false
	}
	return Split{Whole: cpuset.Of(whole...), Shared: cpuset.Of(shared...), Frag: frag}, true
}

// Specs are the two children's cgroup specs under the container's cgroup
// p: "pinfold-whole" (no cap of its own), then "pinfold-frag".
func (s Split) Specs(p cgroup.Path, shareBase int) ([2]cgroup.Spec, error) {
	whole, err := p.Child(SplitWholeName)
	if err != nil {
		return [2]cgroup.Spec{}, err
	}
	frag, err := p.Child(SplitFragName)
	if err != nil {
		return [2]cgroup.Spec{}, err
	}
	q, per := docker.QuotaFor(s.Frag, shareBase)
	return [2]cgroup.Spec{
		{Path: whole, CPUs: cgroup.CPUsOf(s.Whole), CPUMax: &cgroup.CPUMax{Quota: cgroup.Max}},
		{Path: frag, CPUs: cgroup.CPUsOf(s.Shared), CPUMax: &cgroup.CPUMax{Quota: max(q, docker.MinQuota), Period: uint64(per)}},
	}, nil
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
