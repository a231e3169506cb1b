package alloc_test

import (
	"fmt"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// benchHosts: n hosts of 2 NUMA nodes × 32 SMT cores (128 CPUs), 512 GiB.
func benchHosts(n int) []*alloc.Host {
	tp := topologytest.BenchHost().Topology()
	hosts := make([]*alloc.Host, n)
	for i := range hosts {
		h := topoHost(tp)
		h.Name = fmt.Sprintf("host-%05d", i)
		hosts[i] = h
	}
	return hosts
}

// BenchmarkPlan100kOn10kHosts: capacity of every host plus placement of
// 100,000 instances of 1.3 CPU bound and 1 GiB (strategy auto).
func BenchmarkPlan100kOn10kHosts(b *testing.B) {
	hosts := benchHosts(10000)
	r := alloc.Request{Service: "web", Count: 100000, Pieces: 130, Bind: true, MemoryBytes: GiB, Strategy: alloc.Auto}
	b.ReportAllocs()
	for b.Loop() {
		res, err := alloc.Plan(alloc.DefaultParams(), hosts, r)
		if err != nil || len(res.Placements) != 100000 {
			b.Fatalf("Plan: %v", err)
		}
	}
}

// BenchmarkHostCapacity128: one 128-CPU host, half used by earlier instances.
func BenchmarkHostCapacity128(b *testing.B) {
	h := benchHosts(1)[0]
	res, err := alloc.Plan(alloc.DefaultParams(), []*alloc.Host{h}, alloc.Request{Service: "x", Count: 40, Pieces: 130, Bind: true, MemoryBytes: GiB})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range res.Placements {
		h = apply(h, p)
	}
	r := alloc.Request{Service: "web", Count: 1, Pieces: 170, Bind: true, MemoryBytes: GiB}
	b.ReportAllocs()
	for b.Loop() {
		if c := alloc.HostCapacity(alloc.DefaultParams(), h, r); c.Count == 0 {
			b.Fatal("no capacity")
		}
	}
}

// BenchmarkPlanStrategies: 10,000 instances over 1,000 hosts per strategy.
func BenchmarkPlanStrategies(b *testing.B) {
	hosts := benchHosts(1000)
	for _, st := range []alloc.Strategy{alloc.Auto, alloc.Global, alloc.Drained} {
		b.Run(string(st), func(b *testing.B) {
			r := alloc.Request{Service: "web", Count: 10000, Pieces: 130, Bind: true, MemoryBytes: GiB, Strategy: st}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := alloc.Plan(alloc.DefaultParams(), hosts, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
