package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFirstHourControlPlane replays issue 24's first repro as a user, on
// a planner with its leader's loops running: two hosts, a fill deploy, a
// drain — which made the planner panic in its commit pipeline and crash
// loop after every restart — then rebalance (which panicked in its
// handler), scale down keeping the spread, and a drain that cannot move
// saying why and exiting 1 instead of "0 of 2 instances moved" for ever.
func TestFirstHourControlPlane(t *testing.T) {
	addr := startPlanner(t)
	topo := topologyFile(t, "dual-xeon-gold-6230")
	pf := newCLI(t, addr)
	on := func(service string) map[string]int {
		t.Helper()
		var ins []struct {
			Host string `json:"host"`
		}
		if err := json.Unmarshal([]byte(pf.MustCombined("ps", "--service", service, "-o", "json")), &ins); err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, in := range ins {
			per[in.Host]++
		}
		return per
	}
	pf.Must("host", "add", "a", "--topology", topo)
	pf.Must("host", "add", "b", "--topology", topo)
	pf.Must("deploy", "f", "--count", "2", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "busybox", "--strategy", "fill")
	if out := pf.MustCombined("host", "drain", "a"); !strings.Contains(out, "host a drained: 2 instances moved") {
		t.Errorf("host drain a: %s", out)
	}
	if per := on("f"); per["a"] != 0 || per["b"] != 4 {
		t.Errorf("after draining a, f is on %v; want all 4 on b", per)
	}
	pf.Must("host", "enable", "a")
	pf.Must("rebalance", "--dry-run")
	pf.Must("rebalance", "--apply")
	pf.Must("host", "list") // the planner still answers: no panic ended it

	pf.Must("deploy", "web", "--count", "6", "--cpu", "0.5", "--bind", "--memory", "64MiB", "--image", "busybox")
	pf.Must("scale", "web", "--count", "2")
	if per := on("web"); per["a"] != 1 || per["b"] != 1 {
		t.Errorf("web scaled from 6 to 2 is on %v; want one on each host", per)
	}

	// Nowhere to go: b disabled. The drain says why, and gives up waiting
	// once the step is parked (it goes on in the background).
	pf.Must("host", "disable", "b")
	out, code := pf.Combined("host", "drain", "a")
	if code != exitUnmet || !strings.Contains(out, "stuck: drain: instance") || !strings.Contains(out, "parked") || !strings.Contains(out, "--cancel") {
		t.Errorf("a drain with nowhere to go: exit %d:\n%s\nwant exit 1 naming why it is stuck, parked, and how to stop it", code, out)
	}
	if show := pf.MustCombined("host", "show", "a"); !strings.Contains(show, "Stuck: drain: instance") {
		t.Errorf("host show a does not say why its drain is stuck:\n%s", show)
	}
	if list := pf.MustCombined("host", "list"); !strings.Contains(list, "a     disabled, drain stuck") {
		t.Errorf("host list does not say a's drain is stuck:\n%s", list)
	}
	pf.Must("host", "drain", "a", "--cancel")
	if show := pf.MustCombined("host", "show", "a"); strings.Contains(show, "Stuck:") {
		t.Errorf("after the drain was cancelled host show a still says stuck:\n%s", show)
	}
}
