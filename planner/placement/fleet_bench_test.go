package placement

import (
	"fmt"
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

// BenchmarkMoveOn10kHosts (issue 38): one instance of existing work placed
// again (a heal's or a drain's request: UseBuffer) over 10,000 hosts under
// a memory overbooking of 0.2, nominal-first or not, with nominal room
// left on every host (one plan either way) and with none (nominal-first
// plans twice: the first fails over every host).
func BenchmarkMoveOn10kHosts(b *testing.B) {
	s := Settings{Overbooking: map[string]float64{"memory": 0.2}}
	for _, full := range []bool{false, true} {
		for _, nominalFirst := range []bool{false, true} {
			b.Run(fmt.Sprintf("nominal_full=%t/nominal_first=%t", full, nominalFirst), func(b *testing.B) {
				hs := benchHosts(10000)
				for _, h := range hs {
					h.FaultDomain, h.UpgradeDomain = "", ""
					if full {
						h.Resources.MemoryUsed = h.Resources.MemoryBytes
					}
				}
				r := Request{Request: alloc.Request{Service: "web", Count: 1, Pieces: 10, Bind: true, MemoryBytes: 64 << 20, Strategy: alloc.Auto, Seed: 12345},
					UseBuffer: true, NominalFirst: nominalFirst}
				b.ReportAllocs()
				for b.Loop() {
					r.Seed++
					res, err := PlanValid(params, s, hs, r)
					if err != nil || res.Overbooked != (full && nominalFirst) {
						b.Fatalf("placed %+v, %v; want overbooked %t", res, err, full && nominalFirst)
					}
				}
			})
		}
	}
}
