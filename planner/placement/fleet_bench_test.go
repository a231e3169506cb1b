package placement

import (
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
)

// BenchmarkPlanOneOn10kHosts: one single-instance deploy (0.1 CPU bound,
// 64 MiB, strategy auto, no rules) over 10,000 hosts whose capacity memos
// are warm, as the planner's store keeps them: the placement CPU of one
// deploy at fleet size.
func BenchmarkPlanOneOn10kHosts(b *testing.B) {
	hs := benchHosts(10000)
	for _, h := range hs {
		h.FaultDomain, h.UpgradeDomain = "", ""
		h.Resources.Memo = alloc.NewCapacityMemo()
	}
	r := Request{Request: alloc.Request{Service: "web", Count: 1, Pieces: 10, Bind: true, MemoryBytes: 64 << 20, Strategy: alloc.Auto, Seed: 12345}}
	if _, err := Plan(params, Settings{}, hs, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Seed++
		if _, err := PlanValid(params, Settings{}, hs, r); err != nil {
			b.Fatal(err)
		}
	}
}
