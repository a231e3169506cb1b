package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const issueExample = `{"share_base": 100, "max_fragment_cores": -1,
 "hosts": [{"name": "h1",
            "capacity": {"cpus": {"0": 100, "1": 100, "2": 100, "3": 100}, "memory_bytes": 4294967296},
            "used": {"cpus": {"1": 30}, "memory_bytes": 1073741824, "numa_memory_bytes": {"0": 1073741824}},
            "numa_nodes": [{"id": 0, "cpus": "0-1", "memory_bytes": 2147483648}, {"id": 1, "cpus": "2-3", "memory_bytes": 2147483648}],
            "instances": {"web": 2}}],
 "request": {"service": "web", "count": 2, "cpu": 1.7, "bind": true, "memory_bytes": 536870912, "strategy": "auto", "max_per_host": 0}}`

func TestPlanIssueExample(t *testing.T) {
	t.Parallel()
	out, errOut, code := runCLI(t, issueExample, "plan", "-f", "-", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := `{"capacity":{"h1":2},"error":null,"placements":[{"bind":true,"cpus":{"0":100,"1":70},"host":"h1","memory_bytes":536870912,"numa_node":0},{"bind":true,"cpus":{"2":100,"3":70},"host":"h1","memory_bytes":536870912,"numa_node":1}],"total_capacity":2}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("plan -o json =\n%s\nwant\n%s", b, want)
	}
	table, _, code := runCLI(t, issueExample, "plan", "-f", "-")
	if code != 0 || !strings.Contains(table, "CPU map of h1") || !strings.Contains(table, "used 30, #1 70") {
		t.Errorf("table output (exit %d):\n%s", code, table)
	}
}

func TestPlanUnmet(t *testing.T) {
	t.Parallel()
	in := strings.Replace(issueExample, `"count": 2`, `"count": 3`, 1)
	out, errOut, code := runCLI(t, in, "plan", "-f", "-", "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errOut)
	}
	var o struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Error.Code != "insufficient_capacity" || !strings.Contains(o.Error.Message, "h1 takes 2 (cpu)") {
		t.Errorf("unmet output = %s (%v)", out, err)
	}
	table, _, code := runCLI(t, in, "plan", "-f", "-")
	if code != 1 || !strings.Contains(table, "NOT PLACED (insufficient_capacity)") {
		t.Errorf("table (exit %d):\n%s", code, table)
	}
}

func TestPlanResizeFile(t *testing.T) {
	t.Parallel()
	in := `{"hosts": [{"name": "h1", "capacity": {"cpus": {"0": 100, "1": 100, "2": 100, "3": 100}, "memory_bytes": 4294967296},
	  "used": {"cpus": {"0": 100, "1": 30}, "memory_bytes": 1073741824}}],
	 "resize": {"host": "h1", "current": {"cpus": {"0": 100, "1": 30}, "numa_node": -1, "memory_bytes": 1073741824, "bind": true},
	            "cpu_delta": 0.7, "memory_delta_bytes": 0, "bind": true}}`
	out, errOut, code := runCLI(t, in, "plan", "-f", "-", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var o struct {
		Placements []struct {
			CPUs map[string]int `json:"cpus"`
		} `json:"placements"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil || len(o.Placements) != 1 || o.Placements[0].CPUs["0"] != 100 || o.Placements[0].CPUs["1"] != 100 {
		t.Errorf("resize 1.3 + 0.7 should keep CPUs 0 and 1 whole (%v):\n%s", err, out)
	}
	// The table's CPU map shows the resized instance once, at its new size
	// (the host's use counts it before: CPU 1 showed "used 30, #1 100"
	// and -30 free), and the header the change with its sign.
	table, errOut, code := runCLI(t, in, "plan", "-f", "-")
	if code != 0 {
		t.Fatalf("table: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Resize on host h1: +0.7 CPUs", "#1 = the resized instance after the resize", "-          0    #1 100   0\n", "-          1    #1 100   0\n"} {
		if !strings.Contains(table, want) {
			t.Errorf("resize table lacks %q:\n%s", want, table)
		}
	}
	// A change off the grid of pieces is named as the file gives it, sign
	// included, with the nearest changes (it was named 0.305, unsigned).
	for delta, want := range map[string]string{
		"-0.305": "resize.cpu_delta = -0.305: not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are -0.3 and -0.31",
		"0.015":  "resize.cpu_delta = 0.015: not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are +0.01 and +0.02",
		"-0.004": "resize.cpu_delta = -0.004: less than one piece of a CPU (1 piece = 0.01 CPU at share base 100): the smallest change is -0.01",
	} {
		bad := strings.Replace(in, `"cpu_delta": 0.7`, `"cpu_delta": `+delta, 1)
		if out, errOut, code := runCLI(t, bad, "plan", "-f", "-", "-o", "json"); code != 2 || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("cpu_delta %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", delta, code, out, errOut, want)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, from, to, wantErr string
	}{
		{"negative cpu", `"cpu": 1.7`, `"cpu": -1`, "request.cpu = -1"},
		{"memory 0 with bind", `"memory_bytes": 536870912`, `"memory_bytes": 0`, "request.memory_bytes = 0"},
		{"unknown strategy", `"strategy": "auto"`, `"strategy": "random"`, `request.strategy = "random"`},
		{"cpu not in host", `"used": {"cpus": {"1": 30}`, `"used": {"cpus": {"9": 30}`, `hosts["h1"].used.cpus["9"] = 30: CPU 9 is not in the host's capacity`},
		{"used above capacity", `"used": {"cpus": {"1": 30}`, `"used": {"cpus": {"1": 130}`, `hosts["h1"].used.cpus["1"] = 130`},
		{"numa cpus outside host", `"cpus": "2-3"`, `"cpus": "2-5"`, `hosts["h1"].numa_nodes[1].cpus = "2-5"`},
		{"bad cpu list", `"cpus": "2-3"`, `"cpus": "3-2"`, `hosts["h1"].numa_nodes[1].cpus = "3-2"`},
		{"share base", `"share_base": 100`, `"share_base": 7`, "share_base = 7: want 10..10000"},
		{"unknown field", `"max_per_host": 0`, `"max_per_hots": 0`, `unknown field "max_per_hots"`},
		{"malformed json", `"count": 2,`, `"count": 2,,`, "not valid JSON (line 7)"},
		{"wrong type", `"count": 2`, `"count": "two"`, "request.count: got a JSON string, want int"},
		{"zero pieces", `"cpu": 1.7`, `"cpu": 0.001`, "request.cpu = 0.001: less than one piece of a CPU"},
		{"off the grid of pieces", `"cpu": 1.7`, `"cpu": 1.705`, "request.cpu = 1.705: not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are 1.7 and 1.71"},
		{"cpu key junk", `"0": 100, "1": 100`, `"x": 100, "1": 100`, `hosts["h1"].capacity.cpus["x"] = "x": a CPU id must be a decimal number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := strings.Replace(issueExample, tt.from, tt.to, 1)
			if in == issueExample {
				t.Fatalf("replacement %q not found", tt.from)
			}
			out, errOut, code := runCLI(t, in, "plan", "-f", "-", "-o", "json")
			if code != 2 || out != "" || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tt.wantErr)
			}
		})
	}
	_, errOut, code := runCLI(t, "", "plan", "-f", "/no/such/file.json")
	if code != 2 || !strings.Contains(errOut, `--file "/no/such/file.json"`) {
		t.Errorf("missing file: exit %d, %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "", "plan")
	if code != 2 || !strings.Contains(errOut, "--file is required") {
		t.Errorf("no file: exit %d, %s", code, errOut)
	}
}

// TestPlanPlacementRules: seed 000's 8-host FD/UD layout from
// docs/examples: adaptive spread goes quorum-safe and uses N6–N8; a
// constraint nothing can meet prints the elimination sequence.
func TestPlanPlacementRules(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/examples/plan-seed-domains.json")
	if err != nil {
		t.Fatal(err)
	}
	in := string(b)
	out, errOut, code := runCLI(t, in, "plan", "-f", "-", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var o struct {
		Spread     string `json:"domain_spread"`
		Placements []struct {
			Host string `json:"host"`
		} `json:"placements"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range o.Placements {
		used[p.Host] = true
	}
	if o.Spread != "quorum_safe" || len(o.Placements) != 5 || !used["N6"] || !used["N7"] || !used["N8"] {
		t.Errorf("plan = %s", out)
	}
	// HasSSD is true on N1, N3, N5, N7; NodeColor blue on N7, N8: nothing
	// has both, and 1 CPU on a 4-CPU host with a 25% buffer leaves 3 each.
	bad := strings.Replace(in, `"domain_spread": "adaptive"`, `"domain_spread": "adaptive", "constraint": "HasSSD == true && NodeColor == blue && SomeProperty > 7"`, 1)
	table, _, code := runCLI(t, bad, "plan", "-f", "-")
	if code != 1 || !strings.Contains(table, "Elimination sequence") || !strings.Contains(table, "PlacementConstraint  8") {
		t.Errorf("unmet constraint (exit %d):\n%s", code, table)
	}
	js, _, _ := runCLI(t, bad, "plan", "-f", "-", "-o", "json")
	if !strings.Contains(js, `"eliminations"`) || !strings.Contains(js, `"rule": "PlacementConstraint"`) {
		t.Errorf("json error without eliminations:\n%s", js)
	}
	// Bad input names the field: a constraint that does not parse, a
	// buffer and overbooking on one resource, a bad fault domain.
	for name, tc := range map[string]struct{ from, to, want string }{
		"constraint": {`"domain_spread": "adaptive"`, `"constraint": "HasSSD = true"`, `request.constraint = "HasSSD = true": column 8`},
		"both":       {`"buffer_percent": {`, `"overbooking_percent": {"cpu": 0.1}, "buffer_percent": {`, "a resource has a buffer or overbooking, never both"},
		"fd":         {`"fault_domain": "fd:/FD0"`, `"fault_domain": "rack1"`, `hosts["N1"].fault_domain = "rack1"`},
		"property": {`"SomeProperty": 1
`, `"SomeProperty": 1.5
`, `hosts["N1"].properties["SomeProperty"] = 1.5`},
		"policy": {`"placement_policy": "nodes_order"`, `"placement_policy": "random"`, `request.placement_policy = "random"`},
	} {
		_, errOut, code := runCLI(t, strings.Replace(in, tc.from, tc.to, 1), "plan", "-f", "-")
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %q; want exit 2 naming %q", name, code, errOut, tc.want)
		}
	}
}
