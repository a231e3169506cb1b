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
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topo)
	pf.Must("host", "add", "b", "--topology", topo)
	pf.Must("host", "set", "a", "--fault-domain", "fd:/dc1")
	pf.Must("host", "set", "b", "--fault-domain", "fd:/dc2")

	dep := pf.MustCombined("deploy", "w4", "--count", "4", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "busybox")
	if !strings.Contains(dep, "max_difference") {
		t.Errorf("deploy w4 over 2 fault domains: %s; want placed under max_difference", dep)
	}
	ps := pf.MustCombined("ps")
	if strings.Count(ps, " a ") != 2 || strings.Count(ps, " b ") != 2 {
		t.Errorf("ps:\n%s\nwant 2 instances on a and 2 on b", ps)
	}

	out, errOut, code := pf.Run("deploy", "big", "--count", "200", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "busybox")
	if code != 1 || !strings.Contains(errOut, "need 200 instances of big, the hosts can take") || strings.Contains(errOut, "FaultDomain") {
		t.Errorf("deploy big --count 200 (exit %d):\n%s%s\nwant refused naming capacity, not FaultDomain", code, out, errOut)
	}

	pf.Must("host", "add", "c", "--topology", topo)
	reb := pf.MustCombined("rebalance", "--dry-run", "--max-moves", "1")
	moves := regexp.MustCompile(`(?m)^\d+\s+w4-\S+\s+w4\s+[ab]\s+c\s`).FindAllString(reb, -1)
	if !strings.Contains(reb, "→ 2.00") || strings.Contains(reb, "no move") || len(moves) != 1 {
		t.Errorf("rebalance after c joined:\n%s\nwant one move onto c", reb)
	}
}
