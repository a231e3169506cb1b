package topology_test

import (
	"testing"

	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// BenchmarkValidate8192 validates the 8,192-CPU topology topologytest.Wide.
func BenchmarkValidate8192(b *testing.B) {
	t := topologytest.Wide()
	if err := t.Validate(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := t.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
