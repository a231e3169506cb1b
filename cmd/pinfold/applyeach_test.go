package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestApplyRestoresPerHostCount (issue 39 item 3): diff and apply never
// compared the count of an each or fill service (compose deploy.mode:
// global): after scale --count 0 diff said same and apply did nothing.
// They now compare per host and make a scale step; the deploy line says
// "1 per host", not "1 instance".
// Control: with diffService's per-host branch taken out (no scale for
// each and fill, as before), diff says same after the scale to 0 and the
// test fails; with describeDeploy's per-host wording taken out, the
// deploy row fails.
func TestApplyRestoresPerHostCount(t *testing.T) {
	pf := plannerCLI(t)
	for _, h := range []string{"a", "b", "c"} {
		pf.Must("host", "add", h, "--topology", laptopTopology)
	}
	file := writeFile(t, t.TempDir(), "mon/compose.yaml",
		"services:\n  node-exporter: {image: 'prom/node-exporter:1', mem_limit: 16m, cpus: 0.1, deploy: {mode: global}}\n")
	for _, tt := range []struct {
		name  string
		scale string // the scale before the diff ("": none)
		code  int
		want  string // diff's line
	}{
		{"new", "", exitUnmet, "deploy   node-exporter: 1 per host × prom/node-exporter:1"},
		{"applied", "-", 0, "same     node-exporter"},
		{"scaled to 0", "0", exitUnmet, "scale    node-exporter: count per host 0 → 1"},
		{"scaled to 2", "2", exitUnmet, "scale    node-exporter: count per host 2 → 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			switch tt.scale {
			case "":
			case "-":
				if _, errOut, code := pf.Run("apply", "-f", file); code != 0 {
					t.Fatalf("apply: exit %d: %s", code, errOut)
				}
			default:
				if _, errOut, code := pf.Run("scale", "node-exporter", "--count", tt.scale); code != 0 {
					t.Fatalf("scale --count %s: exit %d: %s", tt.scale, code, errOut)
				}
			}
			out, errOut, code := pf.Run("diff", "-f", file)
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Errorf("diff after %q: exit %d: %s%s\nwant exit %d and %q", tt.scale, code, out, errOut, tt.code, tt.want)
			}
			if tt.code == 0 {
				return
			}
			if _, errOut, code := pf.Run("apply", "-f", file); code != 0 {
				t.Errorf("apply: exit %d: %s", code, errOut)
			}
			if per := perHostOf(t, pf, "node-exporter"); len(per) != 3 || per["a"] != 1 || per["b"] != 1 || per["c"] != 1 {
				t.Errorf("after apply: per host %v, want 1 on each of a, b, c", per)
			}
			if out, errOut, code := pf.Run("diff", "-f", file); code != 0 {
				t.Errorf("diff after apply: exit %d: %s%s, want no changes", code, out, errOut)
			}
		})
	}
}

// perHostOf is how many instances of service each host runs (ps -o json).
func perHostOf(t *testing.T, pf *cli, service string) map[string]int {
	t.Helper()
	var ins []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "--service", service, "-o", "json")), &ins); err != nil {
		t.Fatalf("ps -o json: %v", err)
	}
	n := map[string]int{}
	for _, in := range ins {
		n[in.Host]++
	}
	return n
}
