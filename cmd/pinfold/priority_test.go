package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPriorityEndToEnd: a service's priority goes from deploy's
// --priority through the wire into the stored record and back (apply's
// diff reads the record); a services file and a compose file say it with
// the same key the record has (priority, x-pinfold-priority), so one that
// matches changes nothing and one that differs is named; a bad value is
// refused before anything changes (exit 2). The option touched no code
// of the services file, the compose reader, the diff or the plan file:
// they read model.Scheduling by its json tags.
func TestPriorityEndToEnd(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	pf.Must("deploy", "batchy", "--image", "busybox", "--memory", "64MiB", "--cpu", "0.5", "--priority", "batch")
	// A deploy adds instances as the service is: another priority is
	// refused, not written over the running instances' (new-user trial).
	if _, errOut, code := pf.Run("deploy", "batchy", "--image", "busybox", "--memory", "64MiB", "--cpu", "0.5"); code != exitBadInput ||
		!strings.Contains(errOut, `service "batchy" runs with priority batch`) {
		t.Errorf("deploy of more batchy at production: exit %d: %s; want exit 2 naming the service's priority", code, errOut)
	}
	pf.Must("deploy", "batchy", "--image", "busybox", "--memory", "64MiB", "--cpu", "0.5", "--priority", "-500")
	dir := t.TempDir()
	write := func(name, s string) string {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	same := write("same.yaml", "services:\n  batchy: {image: busybox, memory: 64MiB, cpu: 0.5, count: 2, priority: batch}\n")
	if out := pf.MustCombined("diff", "-f", same); !strings.Contains(out, "no changes") {
		t.Errorf("diff of the deployed priority:\n%s\nwant no changes", out)
	}
	compose := write("compose.yaml", "services:\n  batchy: {image: busybox, mem_limit: 64m, cpus: 0.5, deploy: {replicas: 2}, x-pinfold-priority: -500}\n")
	if out := pf.MustCombined("diff", "-f", compose); !strings.Contains(out, "no changes") {
		t.Errorf("diff of a compose file with the deployed priority:\n%s\nwant no changes", out)
	}
	other := write("other.yaml", "services:\n  batchy: {image: busybox, memory: 64MiB, cpu: 0.5, count: 2, priority: system}\n")
	if out, code := pf.Combined("diff", "-f", other); code != exitUnmet || !strings.Contains(out, "priority batch → system") {
		t.Errorf("diff of another priority: exit %d:\n%s\nwant exit 1 naming priority batch → system", code, out)
	}
	if _, errOut, code := pf.Run("deploy", "x", "--image", "busybox", "--memory", "64MiB", "--priority", "urgent"); code != exitBadInput || !strings.Contains(errOut, `--priority "urgent"`) {
		t.Errorf("deploy --priority urgent: exit %d: %s; want exit 2 naming the flag", code, errOut)
	}
	bad := write("bad.yaml", "services:\n  good: {image: busybox, memory: 64MiB}\n  z: {image: busybox, memory: 64MiB, priority: 1e9}\n")
	if _, errOut, code := pf.Run("apply", "-f", bad); code != exitBadInput || !strings.Contains(errOut, "priority") {
		t.Errorf("apply of a bad priority: exit %d: %s; want exit 2 naming priority", code, errOut)
	}
	if out := pf.Must("ps", "-o", "json"); strings.Contains(out, `"good"`) || strings.Contains(out, `"x"`) {
		t.Errorf("a refused deploy or apply left instances:\n%s", out)
	}
	// ps and host show say each instance's priority (issue 40 item 1): a
	// PRIORITY column once a service is not production, and -o json's
	// priority. Control: without the API's withPriorities all read 0.
	pf.Must("deploy", "web", "--image", "busybox", "--memory", "64MiB")
	var ins []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, in := range ins {
		got[in.Service] = in.Priority
	}
	if want := map[string]int32{"batchy": -500, "web": 0}; !maps.Equal(got, want) {
		t.Errorf("ps -o json priorities = %v, want %v", got, want)
	}
	for _, args := range [][]string{{"ps"}, {"host", "show", "a"}} {
		out := pf.Must(args...)
		if !strings.Contains(out, "PRIORITY") || !regexp.MustCompile(`batchy\s+batch\s`).MatchString(out) || !regexp.MustCompile(`web\s+production\s`).MatchString(out) {
			t.Errorf("%v: want a PRIORITY column with batch and production:\n%s", args, out)
		}
	}
}
