package service

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestHealthFlagsOversoldCPUs (issue 36 AG1): a host record whose CPUs or
// NUMA nodes offer less than its instances hold, as an old planner, an
// agent's registration before AG1 or a store edited by hand could have
// left it, is a health warning naming the host, the CPU and both piece
// counts; hosts by name, then CPUs and NUMA nodes by ID, the same every
// time. Before the lines are written the store is healthy.
func TestHealthFlagsOversoldCPUs(t *testing.T) {
	f := newHealFixture(t, "h1", "h2")
	// Full hosts: every laptop CPU held whole (16 instances, at most 8 a
	// host), then the Xeon's CPUs on both NUMA nodes (60 of its 80 CPUs,
	// the laptops disabled meanwhile).
	if _, err := f.Deploy(f.ctx, DeployRequest{Service: "web", Count: 16, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib / 2}, Scheduling: model.Scheduling{MaxPerHost: 8}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.RegisterHost(f.ctx, RegisterHostRequest{Name: "x", Topology: topologytest.DualXeonGold6230().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, enabled := range []bool{false, true} {
		for _, h := range []string{"h1", "h2"} {
			if _, err := f.SetEnabled(f.ctx, h, enabled); err != nil {
				t.Fatal(err)
			}
		}
		if !enabled {
			if _, err := f.Deploy(f.ctx, DeployRequest{Service: "db", Count: 60, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := f.Health(time.Now()); len(got) != 0 {
		t.Fatalf("Health before the store is changed = %v, want none", got)
	}
	// The records as written behind the planner's back.
	var c state.Change
	lower := func(name string, change func(*state.Host)) {
		v, ok := f.Host(name)
		if !ok {
			t.Fatalf("host %s is not registered", name)
		}
		h := v.Host
		h.CPUs, h.NUMAMemory = maps.Clone(h.CPUs), maps.Clone(h.NUMAMemory)
		change(&h)
		c.GuardHost(name, v.HostRev)
		c.PutHost(h)
	}
	lower("h2", func(h *state.Host) { h.CPUs[3], h.CPUs[1] = 90, 50 })
	lower("h1", func(h *state.Host) { h.CPUs[5] = 99 })
	v, _ := f.Host("x")
	if len(v.Alloc.NUMAUsed) < 2 {
		t.Fatalf("host x holds memory on NUMA nodes %v, want both", slices.Sorted(maps.Keys(v.Alloc.NUMAUsed)))
	}
	lower("x", func(h *state.Host) {
		for n := range h.NUMAMemory {
			h.NUMAMemory[n] = 1 << 20
		}
	})
	if _, err := f.st.Commit(f.ctx, &c); err != nil {
		t.Fatal(err)
	}
	var want []Warning
	for _, d := range []string{
		"host h1: CPU 5 oversold: 100 of 99 pieces",
		"host h2: CPU 1 oversold: 100 of 50 pieces",
		"host h2: CPU 3 oversold: 100 of 90 pieces",
		numaLine("x", 0, v.Alloc.NUMAUsed[0]),
		numaLine("x", 1, v.Alloc.NUMAUsed[1]),
	} {
		want = append(want, Warning{Kind: placement.RuleCapacity, Subject: "store", Detail: d})
	}
	for i := range 20 { // map order differs between runs; the answer may not
		if diff := cmp.Diff(want, f.Health(time.Now())); diff != "" {
			t.Fatalf("Health (call %d) (-want +got):\n%s", i, diff)
		}
	}
}

func numaLine(host string, n cpuset.NUMANodeID, used int64) string {
	return fmt.Sprintf("host %s: NUMA node %d memory oversold: %d of %d", host, n, used, 1<<20)
}
