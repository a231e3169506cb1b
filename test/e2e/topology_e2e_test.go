//go:build linux && e2e

package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/test/testenv"
)

func pinfold(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	bin := os.Getenv("PINFOLD_BIN")
	if bin == "" {
		t.Fatalf("e2e tier: PINFOLD_BIN is not set (hack/test.sh builds bin/pinfold and sets it)")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestE2ETopologyAndPlanOnGuest: the built binary discovers the guest's two
// NUMA nodes, and a plan against that very topology packs 1.5-CPU instances
// NUMA-locally, one per node, then one across nodes.
func TestE2ETopologyAndPlanOnGuest(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireNUMANodes(t, 2)
	out, errOut, code := pinfold(t, "", "topology", "-o", "json")
	if code != 0 {
		t.Fatalf("pinfold topology: exit %d: %s", code, errOut)
	}
	var top struct {
		NUMANodes []struct {
			ID          int    `json:"id"`
			CPUs        string `json:"cpus"`
			MemoryBytes int64  `json:"memory_bytes"`
		} `json:"numa_nodes"`
		Online string `json:"online"`
	}
	if err := json.Unmarshal([]byte(out), &top); err != nil || len(top.NUMANodes) != 2 {
		t.Fatalf("topology JSON = %s (%v), want 2 NUMA nodes", out, err)
	}
	// A plan file built from the discovered host: 100 pieces per CPU.
	var cpus []string
	online, err := cpuset.ParseCPUs(top.Online)
	if err != nil {
		t.Fatal(err)
	}
	for id := range online.All() {
		cpus = append(cpus, fmt.Sprintf("%q: 100", fmt.Sprint(id)))
	}
	plan := fmt.Sprintf(`{"hosts": [{"name": "guest", "capacity": {"cpus": {%s}, "memory_bytes": %d},
	  "numa_nodes": [{"id": 0, "cpus": %q, "memory_bytes": %d}, {"id": 1, "cpus": %q, "memory_bytes": %d}],
	  "topology": %s}],
	 "request": {"service": "web", "count": 100, "cpu": 1.5, "memory_bytes": 67108864}}`,
		strings.Join(cpus, ", "), top.NUMANodes[0].MemoryBytes+top.NUMANodes[1].MemoryBytes,
		top.NUMANodes[0].CPUs, top.NUMANodes[0].MemoryBytes, top.NUMANodes[1].CPUs, top.NUMANodes[1].MemoryBytes, out)
	out, errOut, code = pinfold(t, plan, "plan", "-f", "-", "-o", "json")
	if code != 1 {
		t.Fatalf("100 × 1.5 CPU on %s: exit %d, want 1 (they cannot fit): %s %s", top.Online, code, out, errOut)
	}
	plan = strings.Replace(plan, `"count": 100`, `"count": 2`, 1)
	out, errOut, code = pinfold(t, plan, "plan", "-f", "-", "-o", "json")
	if code != 0 {
		t.Fatalf("pinfold plan: exit %d: %s", code, errOut)
	}
	var res struct {
		Placements []struct {
			NUMANode int            `json:"numa_node"`
			CPUs     map[string]int `json:"cpus"`
		} `json:"placements"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Placements) != 2 {
		t.Fatalf("plan JSON = %s (%v)", out, err)
	}
	// Each placement lies inside one NUMA node (node 0 first: it is packed
	// before node 1 is used).
	for i, p := range res.Placements {
		if p.NUMANode < 0 || p.NUMANode >= len(top.NUMANodes) {
			t.Fatalf("placement %d is not NUMA-local: %+v", i, p)
		}
		node := cpuset.MustParseCPUs(top.NUMANodes[p.NUMANode].CPUs)
		for id := range p.CPUs {
			var c int
			fmt.Sscan(id, &c)
			if !node.Contains(cpuset.CPUID(c)) {
				t.Errorf("placement %d on NUMA node %d uses CPU %d outside it (%s)", i, p.NUMANode, c, node)
			}
		}
	}
	if res.Placements[0].NUMANode != 0 {
		t.Errorf("the first placement went to NUMA node %d, want 0 (lowest ID first)", res.Placements[0].NUMANode)
	}
	t.Logf("guest plan: %v", res.Placements)
}
