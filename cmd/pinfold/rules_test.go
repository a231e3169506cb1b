package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPlacementCLI: host properties and domains, a constrained deploy, the
// elimination report of one that cannot be placed, maintenance, settings
// and health, through the CLI against a real planner.
func TestPlacementCLI(t *testing.T) {
	addr := startPlanner(t)
	topo := topologyFile(t, "laptop-i7-1185g7")
	var (
		out, errOut string
		code        int
	)
	pf := newCLI(t, addr)
	for i, h := range []string{"a", "b", "c"} {
		pf.Must("host", "add", h, "--topology", topo)
		ssd := []string{"true", "false", "true"}[i]
		pf.Must("host", "set", h, "--property", "HasSSD="+ssd, "--property", "NodeColor=green", "--fault-domain", "fd:/dc"+string(rune('1'+i)),
			"--upgrade-domain", "UD"+string(rune('1'+i)), "--host-type", "NodeType01")
	}
	var h hostJSON
	if err := json.Unmarshal([]byte(pf.Must("host", "show", "a", "-o", "json")), &h); err != nil || h.Properties["HasSSD"] != "true" || h.FaultDomain != "fd:/dc1" || h.HostType != "NodeType01" {
		t.Errorf("host show a: %+v (%v)", h, err)
	}
	// Bad input: exit 2, nothing changed.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"host", "set", "a", "--property", "HostName=x"}, "built in"},
		{[]string{"host", "set", "a", "--property", "novalue"}, "want KEY=VALUE"},
		{[]string{"host", "set", "a", "--fault-domain", "rack1"}, `fault domain "rack1"`},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--constraint", "HasSSD = true"}, "column 8"},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--placement-policy", "random"}, `placement_policy = "random": want nodes_order, load_avg or spread`},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--hosts-order", "a,b"}, "only with placement_policy nodes_order"},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--count", "0"}, "request.count = 0: want at least 1"},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--strategy", "random"}, `strategy = "random"`},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--domain-spread", "wide"}, `domain_spread = "wide"`},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--count", "4294967297"}, `"4294967297" for "--count" flag`},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--health-tcp", "4294967376"}, "value out of range"},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--max-per-host", "4294967296"}, "value out of range"},
		{[]string{"host", "add", "z", "--topology", "/dev/zero"}, "larger than 16 MiB"},
		{[]string{"host", "set", "a", "--host-type", strings.Repeat("t", 64)}, "want at most 63 bytes"},
		{[]string{"host", "maintenance", "a"}, "--grace"},
		{[]string{"settings", "--buffer", "cpu=0.2", "--overbooking", "cpu=0.1"}, "never both"},
		{[]string{"settings", "--priority", "Gravity=1"}, "unknown rule"},
		{[]string{"settings", "--priority", "Affinity=0.5"}, "want RULE=P"},
		{[]string{"host", "maintenance", "a", "--grace", "500ms"}, "want at least 1s"},
		{[]string{"host", "maintenance", "a", "--grace", "10m", "--off"}, "--grace and --off exclude each other"},
		{[]string{"deploy", "x", "--image", "i", "--memory", "1GiB", "--cpu", "1.5", "--bind", "--whole-cores"}, `whole_cores = "1.5": whole cores need a bound request`},
	} {
		_, errOut, code := pf.Run(tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("pinfold %v: exit %d, %q; want exit 2 with %q", tc.args, code, errOut, tc.want)
		}
	}
	if h2 := pf.Must("host", "show", "a", "-o", "json"); !strings.Contains(h2, `"fault_domain": "fd:/dc1"`) {
		t.Errorf("bad input changed host a:\n%s", h2)
	}
	// A constrained deploy lands on the SSD hosts only.
	pf.Must("deploy", "db", "--image", "i", "--count", "2", "--cpu", "1", "--bind", "--memory", "1GiB", "--constraint", "HasSSD == true && NodeType == NodeType01")
	var list []instanceJSON
	_ = json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &list)
	for _, in := range list {
		if in.Host == "b" {
			t.Errorf("db placed on b (no SSD)")
		}
	}
	// Whole cores: capacity counts free sibling pairs (laptop: 2 threads a
	// core), a deploy of it gets whole pairs, one more is refused.
	var room struct {
		Total int `json:"total_capacity"`
	}
	_ = json.Unmarshal([]byte(pf.Must("capacity", "--cpu", "2", "--bind", "--whole-cores", "--memory", "256MiB", "-o", "json")), &room)
	if room.Total < 1 {
		t.Fatalf("whole-cores capacity %d", room.Total)
	}
	pf.Must("deploy", "wc", "--image", "i", "--count", fmt.Sprint(room.Total), "--cpu", "2", "--bind", "--whole-cores", "--memory", "256MiB")
	list = nil
	_ = json.Unmarshal([]byte(pf.Must("ps", "--service", "wc", "-o", "json")), &list)
	for _, in := range list {
		pair := slices.Sorted(maps.Keys(in.CPUs))
		if !in.WholeCores || len(pair) != 2 || pair[1] != fmt.Sprint(mustAtoi(t, pair[0])+4) { // laptop siblings: i and i+4
			t.Errorf("whole-cores instance %s: whole_cores %v on CPUs %v, want one sibling pair", in.ID, in.WholeCores, pair)
		}
	}
	if len(list) != room.Total {
		t.Errorf("whole-cores deploy placed %d, capacity said %d", len(list), room.Total)
	}
	if _, errOut, code := pf.Run("deploy", "wc", "--image", "i", "--cpu", "2", "--bind", "--whole-cores", "--memory", "256MiB"); code != 1 {
		t.Errorf("whole-cores deploy beyond capacity: exit %d %s; want 1", code, errOut)
	}
	if _, errOut, code := pf.Run("resize", list[0].ID, "--cpu", "+1", "--wait", "0"); code != 1 || !strings.Contains(errOut, "whole cores: 3 CPUs is not a multiple of its 2 threads per core") {
		t.Errorf("whole-cores resize to 3 CPUs on 2-thread cores: exit %d %s; want 1 with the reason", code, errOut)
	}
	pf.Must("remove", "wc")
	// Nothing matches: exit 1 with the elimination sequence.
	pf.Must("host", "disable", "c")
	pf.Must("host", "maintenance", "b", "--grace", "10m")
	_, errOut, code = pf.Run("deploy", "web", "--image", "i", "--cpu", "1", "--bind", "--memory", "1GiB", "--constraint", "NodeColor == blue")
	for _, want := range []string{"Elimination sequence", "Disabled             1 eliminated: c", "Maintenance          1 eliminated: b", "PlacementConstraint  1 eliminated: a"} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("unplaceable deploy: exit %d, want %q in:\n%s", code, want, errOut)
		}
	}
	if out := pf.Must("host", "list"); !strings.Contains(out, "maintenance") || !strings.Contains(out, "fd:/dc2") {
		t.Errorf("host list:\n%s", out)
	}
	pf.Must("host", "maintenance", "b", "--off")
	pf.Must("host", "enable", "c")
	// Settings round trip.
	pf.Must("settings", "--buffer", "cpu=0.25", "--priority", "UpgradeDomain=0")
	if s := pf.Must("settings"); !strings.Contains(s, "buffer 25%") || !strings.Contains(s, "UpgradeDomain priority        0 (hard, set)") {
		t.Errorf("settings:\n%s", s)
	}
	// Health: a loses its SSD while db runs there.
	if out, _, code := pf.Run("health"); code != 0 || !strings.Contains(out, "healthy") {
		t.Errorf("health before: exit %d\n%s", code, out)
	}
	pf.Must("host", "set", "a", "--property", "HasSSD=false")
	out, _, code = pf.Run("health", "-o", "json")
	if code != 1 || !strings.Contains(out, `"kind": "PlacementConstraint"`) || !strings.Contains(out, `"subject": "db"`) {
		t.Errorf("health after a host change: exit %d\n%s", code, out)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
