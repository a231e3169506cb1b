package alloc_test

import (
	"fmt"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// TestOverNominal: what a host holds past its nominal capacity, named with
// used/nominal: the host's memory, a NUMA node's (only with more than
// one), the CPUs held past their pieces together; nothing at or under
// capacity.
func TestOverNominal(t *testing.T) {
	t.Parallel()
	const gib = int64(1) << 30
	cpus := func(used ...int) []alloc.CPU {
		var out []alloc.CPU
		for i, u := range used {
			out = append(out, alloc.CPU{ID: cpuset.CPUID(i), Capacity: 100, Used: u})
		}
		return out
	}
	for _, tt := range []struct {
		name string
		host alloc.Host
		want string
	}{
		{"empty", alloc.Host{MemoryBytes: 16 * gib, CPUs: cpus(0, 0)}, "[]"},
		{"full to the byte and the piece", alloc.Host{MemoryBytes: 16 * gib, MemoryUsed: 16 * gib, CPUs: cpus(100, 100)}, "[]"},
		{"memory past it (issue 38: small)", alloc.Host{MemoryBytes: 15461882265, MemoryUsed: 31 * gib / 2, CPUs: cpus(40, 0)},
			"[memory 15.5 GiB/14.4 GiB]"},
		{"one NUMA node is the host's", alloc.Host{MemoryBytes: 8 * gib, MemoryUsed: 9 * gib,
			NUMANodes: []alloc.NUMANode{{ID: 0, MemoryBytes: 8 * gib, MemoryUsed: 9 * gib}}}, "[memory 9 GiB/8 GiB]"},
		{"a NUMA node past it, the host within", alloc.Host{MemoryBytes: 16 * gib, MemoryUsed: 9 * gib,
			NUMANodes: []alloc.NUMANode{{ID: 0, MemoryBytes: 8 * gib, MemoryUsed: 9 * gib}, {ID: 1, MemoryBytes: 8 * gib}}},
			"[NUMA node 0 memory 9 GiB/8 GiB]"},
		{"CPUs past their pieces, together", alloc.Host{MemoryBytes: gib, CPUs: cpus(100, 150, 20, 125)}, "[cpu 2.75/2 CPUs on CPUs 1,3]"},
		{"all of it", alloc.Host{MemoryBytes: gib, MemoryUsed: 2 * gib, CPUs: cpus(101),
			NUMANodes: []alloc.NUMANode{{ID: 0, MemoryBytes: gib / 2, MemoryUsed: gib}, {ID: 1, MemoryBytes: gib / 2, MemoryUsed: gib}}},
			"[memory 2 GiB/1 GiB NUMA node 0 memory 1 GiB/512 MiB NUMA node 1 memory 1 GiB/512 MiB cpu 1.01/1 CPUs on CPUs 0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmt.Sprint(alloc.OverNominal(&tt.host, 100)); got != tt.want {
				t.Errorf("OverNominal = %s, want %s", got, tt.want)
			}
		})
	}
}
