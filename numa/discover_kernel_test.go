//go:build linux && kernel

package numa_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/numa"
	"github.com/pinfold/pinfold/test/testenv"
)

// TestKernelDiscoverGuest discovers the QEMU guest's real /sys: 2 NUMA nodes
// of PINFOLD_VM_CPUS_PER_NODE CPUs and about PINFOLD_VM_MEM_PER_NODE MiB each,
// SLIT 10/21.
func TestKernelDiscoverGuest(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireNUMANodes(t, 2)
	spec := os.Getenv("PINFOLD_VM_CPUS_PER_NODE") // "N" or "N0,N1"
	n0, _ := strconv.Atoi(strings.Split(spec, ",")[0])
	n1, _ := strconv.Atoi(spec[strings.LastIndex(spec, ",")+1:])
	cpn := []int{n0, n1}
	mpn, _ := strconv.Atoi(os.Getenv("PINFOLD_VM_MEM_PER_NODE"))
	if n0 == 0 || n1 == 0 || mpn == 0 {
		t.Fatalf("PINFOLD_VM_CPUS_PER_NODE=%q/MEM_PER_NODE not set: not in the pinfold guest", spec)
	}
	top, err := numa.DiscoverHost()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.NUMANodes) != 2 || len(top.CPUs) != n0+n1 {
		t.Fatalf("guest: %d NUMA nodes, %d CPUs; want 2 and %d", len(top.NUMANodes), len(top.CPUs), n0+n1)
	}
	for i, n := range top.NUMANodes {
		if n.CPUs.Len() != cpn[i] {
			t.Errorf("NUMA node %d CPUs %s, want %d CPUs", n.ID, n.CPUs, cpn[i])
		}
		// The kernel keeps some memory for itself: expect 80..100% of the node.
		if lo, hi := int64(mpn)<<20*8/10, int64(mpn)<<20; n.MemoryBytes < lo || n.MemoryBytes > hi {
			t.Errorf("NUMA node %d memory %d bytes, want %d..%d", n.ID, n.MemoryBytes, lo, hi)
		}
		if d := n.Distances[top.NUMANodes[1-i].ID]; d != 21 {
			t.Errorf("distance %d→other = %d, want 21", n.ID, d)
		}
	}
	t.Logf("guest topology: online %s, node0 %s (%d MiB), node1 %s (%d MiB), source %s",
		top.Online, top.NUMANodes[0].CPUs, top.NUMANodes[0].MemoryBytes>>20, top.NUMANodes[1].CPUs, top.NUMANodes[1].MemoryBytes>>20, top.NUMASource)
}
