package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// memoryFirstKeep is what bound placement leaves free on a host for its
// memory-first instances (alloc.Host.KeptPool): the CPUs of the shared
// pool kept for the largest memory-first quota. Capacity and deploy do not
// count them, so a host shows more free CPUs than a bound deploy can use.
type memoryFirstKeep struct {
	CPUs      cpuset.CPUs // the kept CPUs; exact where the topology is known (isolated CPUs are no pool)
	Count     int
	Largest   int // the largest memory-first quota, in pieces
	shareBase int32
}

// keptForMemoryFirstAll is memoryFirstKeep for the hosts named in hosts
// that keep any CPU: from the host list and the instances (no topologies,
// so the count is bounded by the planner's pool size).
func keptForMemoryFirstAll(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, hosts map[string]int32) (map[string]memoryFirstKeep, error) {
	hl, err := allHosts(ctx, cl)
	if err != nil {
		return nil, err
	}
	var withQuotas []*pinfoldv1.Host
	for _, h := range hl {
		if _, ok := hosts[h.Name]; ok && h.MemoryFirstQuotaPieces > 0 {
			withQuotas = append(withQuotas, h)
		}
	}
	out := map[string]memoryFirstKeep{}
	if len(withQuotas) == 0 {
		return out, nil
	}
	quota := map[string]bool{}
	for _, h := range withQuotas {
		quota[h.Name] = true
	}
	var il []*pinfoldv1.Instance // those of the hosts with quotas
	err = eachInstancePage(ctx, cl, "", "", func(page []*pinfoldv1.Instance) {
		for _, in := range page {
			if quota[in.Host] {
				il = append(il, in)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	for _, h := range withQuotas {
		if k := keptForMemoryFirst(h, il); k.Count > 0 {
			out[h.Name] = k
		}
	}
	return out, nil
}

// keptForMemoryFirst computes memoryFirstKeep from a host and its
// instances (others' instances are ignored) with the engine's own rule.
func keptForMemoryFirst(h *pinfoldv1.Host, ins []*pinfoldv1.Instance) memoryFirstKeep {
	sb := int(h.ShareBase)
	ah := alloc.Host{Name: h.Name, MemoryFirst: map[int]int{}}
	for _, id := range slices.Sorted(maps.Keys(h.CapacityCpus)) {
		ah.CPUs = append(ah.CPUs, alloc.CPU{ID: cpuset.CPUID(id), Capacity: int(h.CapacityCpus[id]), Used: int(h.UsedCpus[id])})
	}
	for _, in := range ins {
		if !in.Bind && in.Host == h.Name {
			ah.MemoryFirst[int(in.CpuQuotaPieces)]++
		}
	}
	if len(h.TopologyJson) > 0 {
		var t topology.Topology
		if json.Unmarshal(h.TopologyJson, &t) == nil {
			ah.Topology = &t
		}
	}
	k := memoryFirstKeep{Largest: ah.PoolFloor(), CPUs: ah.KeptPool(sb), shareBase: h.ShareBase}
	k.Count = k.CPUs.Len()
	if sb > 0 && ah.Topology == nil {
		// Without the topology the pool may count isolated CPUs: the
		// planner's pool size bounds what can be kept.
		k.Count = min(k.Count, int(h.SharedPoolPieces)/sb)
	}
	return k
}

// explain says what the reserve is, where free CPUs are shown.
func (k memoryFirstKeep) explain() string {
	cpus := "CPUs"
	if k.Count == 1 {
		cpus = "CPU"
	}
	return fmt.Sprintf("%d free %s kept for the largest memory-first quota (%s CPUs): bound instances are not placed there, and capacity does not count them",
		k.Count, cpus, cpuAmount(int64(k.Largest), k.shareBase))
}
