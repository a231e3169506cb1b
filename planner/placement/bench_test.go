package placement

import (
	"fmt"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// benchHosts is n hosts of 64 CPUs and 256 GiB with properties, spread
// over 10 data centers × 4 racks and 5 upgrade domains.
func benchHosts(n int) []*Host {
	hs := make([]*Host, n)
	for i := range hs {
		r := &alloc.Host{Name: fmt.Sprintf("h%05d", i), MemoryBytes: 256 << 30, Instances: map[string]int{}}
		for c := range 64 {
			r.CPUs = append(r.CPUs, alloc.CPU{ID: cpuset.CPUID(c), Capacity: 100})
		}
		hs[i] = &Host{Name: r.Name, Resources: r, FaultDomain: fmt.Sprintf("fd:/dc%d/rack%d", i%10, i/10%4), UpgradeDomain: fmt.Sprintf("UD%d", i%5),
			Properties: map[string]Value{"HasSSD": BoolVal(i%2 == 0), "Gen": IntVal(int64(i % 7))}, LoadAvg: float64(i%13) / 4}
	}
	return hs
}

// BenchmarkPlanWithRules: 50 instances under a constraint, load_avg
// ranking and the adaptive domain rule, over 1,000 hosts.
func BenchmarkPlanWithRules(b *testing.B) {
	hs := benchHosts(1000)
	r := Request{Request: alloc.Request{Service: "db", Count: 50, Pieces: 170, Bind: true, MemoryBytes: 4 << 30},
		Constraint: "HasSSD == true && Gen >= 2", Policy: LoadAvg}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Plan(params, Settings{Buffer: map[string]float64{"cpu": 0.1}}, hs, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanNoRules: the same hosts without rules or domains: the
// placement layer's overhead over the allocation engine alone.
func BenchmarkPlanNoRules(b *testing.B) {
	hs := benchHosts(1000)
	for _, h := range hs {
		h.FaultDomain, h.UpgradeDomain = "", ""
	}
	r := Request{Request: alloc.Request{Service: "db", Count: 50, Pieces: 170, Bind: true, MemoryBytes: 4 << 30}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Plan(params, Settings{}, hs, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConstraintMatch: one parsed constraint against one host.
func BenchmarkConstraintMatch(b *testing.B) {
	e, err := Parse("((OneProperty < 100) || ((AnotherProperty == false) && (OneProperty >= 100))) && Color in (red green blue)")
	if err != nil {
		b.Fatal(err)
	}
	props := map[string]Value{"OneProperty": IntVal(150), "AnotherProperty": BoolVal(false), "Color": Str("green")}
	for b.Loop() {
		if !e.Match(props) {
			b.Fatal("no match")
		}
	}
}
