package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// numericStrings walks a decoded JSON document and returns the paths of
// strings that hold a number: -o json carries numbers as JSON numbers
// (docs/OPERATIONS.md). keep names the keys whose values are text that may
// look like a number (a CPU list "3", a NUMA node list "0").
func numericStrings(v any, path string, keep map[string]bool) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if keep[k] {
				continue
			}
			out = append(out, numericStrings(e, path+"."+k, keep)...)
		}
	case []any:
		for i, e := range x {
			out = append(out, numericStrings(e, path+"["+strconv.Itoa(i)+"]", keep)...)
		}
	case string:
		if _, err := strconv.ParseFloat(x, 64); err == nil {
			out = append(out, path+" = "+strconv.Quote(x))
		}
	}
	return out
}

// TestCLIJSONNumbers: every command's -o json carries numbers as numbers,
// written exactly (1.7, not 1.7000000000000002), for bound and
// memory-first instances; and what ps -o json and plan export write goes
// back into a plan file as is.
func TestCLIJSONNumbers(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	keep := map[string]bool{"cpus": true, "mems": true, "numa_nodes": true, "topology": true, "kept_for_memory_first_cpus": true}
	outputs := map[string]string{
		"deploy bound":        pf.Must("deploy", "web", "--count", "2", "--cpu", "1.7", "--bind", "--memory", "256MiB", "--image", "i", "-o", "json"),
		"deploy memory-first": pf.Must("deploy", "mf", "--count", "1", "--cpu", "0.3", "--memory", "128MiB", "--image", "i", "-o", "json"),
	}
	outputs["resize"] = pf.Must("resize", "mf", "--cpu", "+0.01", "--wait", "0", "-o", "json")
	for name, args := range map[string][]string{
		"ps":        {"ps"},
		"host list": {"host", "list"},
		"host show": {"host", "show", "h1"},
		"capacity":  {"capacity", "--cpu", "1.7", "--memory", "256MiB", "--bind"},
		"settings":  {"settings"},
		"rebalance": {"rebalance", "--dry-run"},
		"events":    {"events"},
		"scale":     {"scale", "web", "--count", "2"},
	} {
		outputs[name] = pf.Must(append(args, "-o", "json")...)
	}
	for name, out := range outputs {
		t.Run(name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if bad := numericStrings(v, name, keep); len(bad) > 0 {
				t.Errorf("numbers as strings: %s", strings.Join(bad, ", "))
			}
		})
	}

	var ins []struct {
		Service  string          `json:"service"`
		Planned  json.RawMessage `json:"cpu_planned"`
		Quota    json.RawMessage `json:"cpu_quota"`
		Got      json.RawMessage `json:"cpu_got"`
		CPUs     map[string]int  `json:"cpus"`
		NUMANode int             `json:"numa_node"`
		Memory   int64           `json:"memory_bytes"`
	}
	if err := json.Unmarshal([]byte(outputs["ps"]), &ins); err != nil || len(ins) != 3 {
		t.Fatalf("ps -o json: %v\n%s", err, outputs["ps"])
	}
	for _, in := range ins {
		want, quota := "1.7", ""
		if in.Service == "mf" {
			want, quota = "0.31", "0.31"
		}
		// No agent: the instances are pending, they got nothing measured
		// (null, as the table's "-"), not 0 CPUs.
		if string(in.Planned) != want || string(in.Got) != "null" || (quota != "" && string(in.Quota) != quota) {
			t.Errorf("%s: cpu_planned %s cpu_got %s cpu_quota %s, want %s, null and %q", in.Service, in.Planned, in.Got, in.Quota, want, quota)
		}
	}

	// ps's numbers go into a plan file as they are: a request of web's size
	// and a resize of mf from its ps entry, on the exported cluster.
	export := pf.Must("plan", "export")
	var file map[string]any
	d := json.NewDecoder(strings.NewReader(export))
	d.UseNumber()
	if err := d.Decode(&file); err != nil {
		t.Fatal(err)
	}
	var web, mf = ins[0], ins[2]
	for _, in := range ins {
		if in.Service == "mf" {
			mf = in
		} else {
			web = in
		}
	}
	file["request"] = map[string]any{"service": "web2", "count": 1, "cpu": web.Planned, "bind": true, "memory_bytes": web.Memory}
	plan := func(file map[string]any) {
		t.Helper()
		b, err := json.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runCLI(t, string(b), "plan", "-f", "-", "-o", "json")
		if code != 0 {
			t.Fatalf("plan of ps's numbers: exit %d: %s", code, errOut)
		}
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		if bad := numericStrings(v, "plan", keep); len(bad) > 0 {
			t.Errorf("plan -o json: numbers as strings: %s", strings.Join(bad, ", "))
		}
		if !bytes.Contains([]byte(out), []byte(`"error":null`)) && !bytes.Contains([]byte(out), []byte(`"error": null`)) {
			t.Errorf("plan failed:\n%s", out)
		}
	}
	plan(file)
	delete(file, "request")
	file["resize"] = map[string]any{"host": "h1", "cpu_delta": json.Number("0.5"),
		"current": map[string]any{"cpus": map[string]int{}, "bind": false, "cpu_quota": mf.Quota, "numa_node": mf.NUMANode, "memory_bytes": mf.Memory}}
	plan(file)
}
