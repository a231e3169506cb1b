package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestFirstHourPlacement replays issue 24 as a user: two 80-CPU hosts in
// fault domains fd:/dc1 and fd:/dc2 take 4 instances 2 + 2 (adaptive falls
// back to max-difference); 200 instances are refused naming capacity, not
// FaultDomain; an empty host that joins is filled by rebalance, bounded by
// --max-moves.
func TestFirstHourPlacement(t *testing.T) {
	addr := startPlanner(t)
	topo := topologyFile(t, "dual-xeon-gold-6230")
	pl := []string{"--planner", addr}
	must := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, "", append(args, pl...)...)
		if code != 0 {
			t.Fatalf("pinfold %v: exit %d: %s", args, code, errOut)
		}
		return out + errOut
	}
	must("host", "add", "a", "--topology", topo)
	must("host", "add", "b", "--topology", topo)
	must("host", "set", "a", "--fault-domain", "fd:/dc1")
	must("host", "set", "b", "--fault-domain", "fd:/dc2")

	dep := must("deploy", "w4", "--count", "4", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "busybox")
	if !strings.Contains(dep, "max_difference") {
		t.Errorf("deploy w4 over 2 fault domains: %s; want placed under max_difference", dep)
	}
	ps := must("ps")
	if strings.Count(ps, " a ") != 2 || strings.Count(ps, " b ") != 2 {
		t.Errorf("ps:\n%s\nwant 2 instances on a and 2 on b", ps)
	}

	out, errOut, code := runCLI(t, "", append([]string{"deploy", "big", "--count", "200", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "busybox"}, pl...)...)
	if code != 1 || !strings.Contains(errOut, "need 200 instances of big, the hosts can take") || strings.Contains(errOut, "FaultDomain") {
		t.Errorf("deploy big --count 200 (exit %d):\n%s%s\nwant refused naming capacity, not FaultDomain", code, out, errOut)
	}

	must("host", "add", "c", "--topology", topo)
	reb := must("rebalance", "--dry-run", "--max-moves", "1")
	moves := regexp.MustCompile(`(?m)^\d+\s+w4-\S+\s+w4\s+[ab]\s+c\s`).FindAllString(reb, -1)
	if !strings.Contains(reb, "→ 2.00") || strings.Contains(reb, "no move") || len(moves) != 1 {
		t.Errorf("rebalance after c joined:\n%s\nwant one move onto c", reb)
	}
}
