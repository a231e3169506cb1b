package alloc

import (
	"fmt"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// Overuse is one resource a host holds past its nominal capacity: what
// only the cluster's overbooking lets placement use (a heal, a drain, a
// host's removal that found no host with room of its own).
type Overuse struct {
	// Resource is "memory", "NUMA node N memory" or "cpu".
	Resource string
	// Used and Nominal are bytes for memory, pieces for cpu (summed over
	// the CPUs held past their capacity, listed in CPUs).
	Used, Nominal int64
	CPUs          cpuset.CPUs
	// ShareBase renders cpu pieces as CPUs.
	ShareBase int
}

// String is the overuse for people: "memory 15.5 GiB/14.4 GiB",
// "cpu 2.5/2 CPUs on CPUs 3,5".
func (o Overuse) String() string {
	if o.Resource == "cpu" {
		return fmt.Sprintf("cpu %s/%s CPUs on CPUs %s", FormatPieces(int(o.Used), o.ShareBase), FormatPieces(int(o.Nominal), o.ShareBase), o.CPUs)
	}
	return fmt.Sprintf("%s %s/%s", o.Resource, FormatBytes(o.Used), FormatBytes(o.Nominal))
}

// OverNominal lists what h holds past its nominal capacity, in one order
// every time: its memory, each NUMA node's memory by ID (only where the
// host has more than one: one node's is the host's), then the CPUs whose
// pieces held exceed their capacity, together. Nothing when h is within
// it. Pure.
func OverNominal(h *Host, shareBase int) []Overuse {
	var out []Overuse
	if h.MemoryUsed > h.MemoryBytes {
		out = append(out, Overuse{Resource: "memory", Used: h.MemoryUsed, Nominal: h.MemoryBytes})
	}
	if len(h.NUMANodes) > 1 {
		for _, n := range h.NUMANodes {
			if n.MemoryUsed > n.MemoryBytes {
				out = append(out, Overuse{Resource: fmt.Sprintf("NUMA node %d memory", n.ID), Used: n.MemoryUsed, Nominal: n.MemoryBytes})
			}
		}
	}
	cpu := Overuse{Resource: "cpu", ShareBase: shareBase}
	var ids []cpuset.CPUID
	for _, c := range h.CPUs {
		if c.Used > c.Capacity {
			cpu.Used += int64(c.Used)
			cpu.Nominal += int64(c.Capacity)
			ids = append(ids, c.ID)
		}
	}
	if len(ids) > 0 {
		cpu.CPUs = cpuset.Of(ids...)
		out = append(out, cpu)
	}
	return out
}
