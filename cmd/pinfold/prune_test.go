package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/servicesfile"
)

// TestApplyPruneOwnsItsProject (issue 38 item 3): apply records the file's
// project as each service's source, and --prune removes only that
// project's services: a service deployed by hand and another compose
// project's (name: shop2) are left, and diff --prune says so (it removed
// every service not in the file: 223 instances in one run). A prune of
// more than 10 instances asks for --yes and changes nothing without it.
// Control: with Compare pruning whatever the source, the first prune
// removes hand and b1 and the test fails.
func TestApplyPruneOwnsItsProject(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	pf.Must("deploy", "hand", "--image", "busybox", "--memory", "64MiB")
	dir := t.TempDir()
	file := func(name, src string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	svc := func(name string, count int) string {
		return "  " + name + ": {image: busybox, memory: 16MiB, count: " + itoa(count) + "}\n"
	}
	pf.Must("apply", "-f", file("shop.yaml", "project: shopa\nservices:\n"+svc("a1", 1)+svc("a2", 1)))
	pf.Must("apply", "-f", file("compose.yaml", "name: shop2\nservices:\n  b1: {image: busybox, mem_limit: 16m}\n"))
	less := file("less.yaml", "project: shopa\nservices:\n"+svc("a1", 1))
	var d servicesfile.Diff
	out, _, _ := pf.Run("diff", "-f", less, "--prune", "-o", "json")
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("diff --prune -o json: %v\n%s", err, out)
	}
	if len(d.Steps) != 1 || d.Steps[0].Action != "remove" || d.Steps[0].Service != "a2" || !slices.Equal(d.LeftAlone, []string{"b1", "hand"}) ||
		!strings.Contains(strings.Join(d.Notes, "\n"), "b1: of project shop2, not shopa") || !strings.Contains(strings.Join(d.Notes, "\n"), "hand: deployed by hand") {
		t.Errorf("diff --prune of project shopa: %+v\nwant remove a2 only, b1 and hand left alone with why", d)
	}
	pf.Must("apply", "-f", less, "--prune")
	if got := psServices(t, pf); !slices.Equal(got, []string{"a1", "b1", "hand"}) {
		t.Errorf("after apply --prune of shopa: services %v, want a1 b1 hand", got)
	}
	// More than 10 instances: --yes.
	pf.Must("apply", "-f", file("bulk.yaml", "project: bulk\nservices:\n"+svc("bulk", 12)))
	other := file("bulk2.yaml", "project: bulk\nservices:\n"+svc("small", 1))
	if _, errOut, code := pf.Run("apply", "-f", other, "--prune"); code != exitUnmet || !strings.Contains(errOut, "would remove 12 instances of 1 service (bulk)") || !strings.Contains(errOut, "--yes") {
		t.Errorf("apply --prune of 12 instances without --yes: exit %d: %s; want exit 1 asking for --yes", code, errOut)
	}
	if got := psServices(t, pf); !slices.Contains(got, "bulk") || slices.Contains(got, "small") {
		t.Errorf("a refused prune changed the cluster: %v", got)
	}
	pf.Must("apply", "-f", other, "--prune", "--yes")
	if got := psServices(t, pf); slices.Contains(got, "bulk") || !slices.Contains(got, "small") {
		t.Errorf("apply --prune --yes: services %v, want bulk removed and small deployed", got)
	}
}

// psServices is the services ps -o json lists, sorted, each once.
func psServices(t *testing.T, pf *cli) []string {
	t.Helper()
	var ins []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range ins {
		if !slices.Contains(out, in.Service) {
			out = append(out, in.Service)
		}
	}
	slices.Sort(out)
	return out
}
