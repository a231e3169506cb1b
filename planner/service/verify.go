package service

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
)

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Verify re-checks the store's invariants from its documents, read at one
// revision (state.Snapshot): every host's allocation document equals the
// sum of its instances, no CPU holds more pieces than its capacity, memory
// (host and NUMA node) is not oversold, and no instance gets more than
// ShareBase pieces of one CPU, the shared pool holds the largest
// memory-first quota, a whole-cores instance shares no core, and no two
// instances on a host hold one host port. It returns
// every violation found, in one order every time: hosts by name, CPUs and
// NUMA nodes by ID (health lists them). Capacity is the overbooked one where the cluster's
// settings overbook a resource (what a replacement may use: placement's
// adjust): what placement did is never flagged.
func Verify(st Store, shareBase int) []string {
	return verify(st.Snapshot(), shareBase) // one revision: usage and instances committed together are read together
}

// verify is Verify on the snapshot snap.
func verify(snap state.Snapshot, shareBase int) []string {
	var bad []string
	ps := snap.Placement
	limit := func(resource string, capacity int64) int64 {
		o, ok := ps.Overbooking[resource]
		switch {
		case !ok:
			return capacity
		case o == -1:
			return math.MaxInt64
		}
		return int64(math.Floor(float64(capacity) * (1 + o)))
	}
	for _, v := range snap.Hosts {
		name := v.Host.Name
		sum := state.NewAlloc()
		var wholeCores []model.Instance
		for _, iv := range snap.Instances[name] {
			sum.Add(iv.Instance, +1)
			for id, p := range iv.Instance.CPUs {
				if p > shareBase {
					bad = append(bad, fmt.Sprintf("instance %s holds %d pieces of CPU %d", iv.Instance.ID, p, id))
				}
			}
			if iv.Instance.WholeCores {
				wholeCores = append(wholeCores, iv.Instance)
			}
		}
		// A whole-cores instance holds every thread of its cores, and nobody
		// else holds a piece of them.
		for _, in := range wholeCores {
			if v.Host.Topology == nil {
				continue
			}
			for _, id := range slices.Sorted(maps.Keys(in.CPUs)) {
				c, ok := v.Host.Topology.CPU(id)
				if !ok {
					continue
				}
				for sib := range c.Siblings.All() {
					if in.CPUs[sib] != shareBase || sum.Used[sib] != shareBase {
						bad = append(bad, fmt.Sprintf("host %s: whole-cores instance %s on CPU %d: sibling CPU %d holds %d of its pieces, %d in all", name, in.ID, id, sib, in.CPUs[sib], sum.Used[sib]))
					}
				}
			}
		}
		if !maps.Equal(sum.Used, v.Alloc.Used) || sum.MemoryUsed != v.Alloc.MemoryUsed || !maps.Equal(sum.NUMAUsed, v.Alloc.NUMAUsed) || !maps.Equal(sum.Instances, v.Alloc.Instances) ||
			sum.MemoryFirstQuota != v.Alloc.MemoryFirstQuota || !maps.Equal(sum.MemoryFirst, v.Alloc.MemoryFirst) || !maps.Equal(sum.WholeCores, v.Alloc.WholeCores) ||
			!maps.Equal(sum.Ports, v.Alloc.Ports) {
			bad = append(bad, fmt.Sprintf("host %s: allocation document %+v != sum of instances %+v", name, v.Alloc, sum))
		}
		// No two instances on a host hold one host port.
		for _, port := range slices.Sorted(maps.Keys(sum.Ports)) {
			if sum.Ports[port] > 1 {
				var holders []string
				for _, iv := range snap.Instances[name] {
					if slices.ContainsFunc(iv.Instance.HostPorts, func(p model.Port) bool { return p.Host == port }) {
						holders = append(holders, iv.Instance.ID)
					}
				}
				bad = append(bad, fmt.Sprintf("host %s: host port %d held by %d instances: %s", name, port, sum.Ports[port], strings.Join(holders, ", ")))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(sum.Used)) {
			if int64(sum.Used[id]) > limit("cpu", int64(v.Host.CPUs[id])) {
				bad = append(bad, fmt.Sprintf("host %s: CPU %d oversold: %d of %d pieces", name, id, sum.Used[id], v.Host.CPUs[id]))
			}
		}
		// The shared pool holds every memory-first quota on the host.
		if ah := state.AllocHost(v.Host, sum); ah.PoolFloor() > ah.SharedPool().Len()*shareBase {
			pool := ah.SharedPool()
			bad = append(bad, fmt.Sprintf("host %s: a memory-first quota of %s CPUs does not fit the shared pool of %d CPUs (%q)",
				name, alloc.FormatPieces(ah.PoolFloor(), shareBase), pool.Len(), pool.String()))
		}
		if sum.MemoryUsed > limit("memory", v.Host.MemoryBytes) {
			bad = append(bad, fmt.Sprintf("host %s: memory oversold: %d of %d", name, sum.MemoryUsed, v.Host.MemoryBytes))
		}
		for _, n := range slices.Sorted(maps.Keys(sum.NUMAUsed)) { // by ID: health lists these, the same every time
			if m := sum.NUMAUsed[n]; m > limit("memory", v.Host.NUMAMemory[n]) {
				bad = append(bad, fmt.Sprintf("host %s: NUMA node %d memory oversold: %d of %d", name, n, m, v.Host.NUMAMemory[n]))
			}
		}
	}
	return bad
}
