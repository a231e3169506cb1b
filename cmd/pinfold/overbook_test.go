package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestDrainUsesNominalRoomFirst replays issue 38's repro on a planner with
// embedded etcd: memory overbooking 0.2, host small (the laptop fixture)
// filled to 14.0 of its 14.4 GiB, six w3 instances (512 MiB) on big1, an
// empty big2. Draining big1 sent three to small (15.5 GiB/14.4 GiB) and
// three to big2, and nothing said so. Now every one goes to big2, which
// has nominal room; the overbooking is used only when no host has any
// (draining big2 with big1 disabled), and then the drain's output, its
// events, host list, host show, health and the metrics mark small; so
// does host remove's output when it needs the overbooking.
func TestDrainUsesNominalRoomFirst(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	pf.Must("settings", "--overbooking", "memory=0.2")
	pf.Must("host", "add", "big1", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	pf.Must("deploy", "w3", "--count", "6", "--cpu", "0.1", "--memory", "512MiB", "--image", "busybox")
	pf.Must("host", "add", "small", "--topology", topologyFile(t, "laptop-i7-1185g7"))
	pf.Must("host", "disable", "big1")
	pf.Must("deploy", "filler", "--count", "1", "--cpu", "0.1", "--memory", "14GiB", "--image", "busybox")
	pf.Must("host", "enable", "big1")
	pf.Must("host", "add", "big2", "--topology", topologyFile(t, "dual-epyc-7402"))
	for _, extra := range []string{"flat-vm", "ci-vm-2cpu", "smt-off-sparse"} {
		// Three more hosts of the six, disabled: they take nothing.
		pf.Must("host", "add", extra, "--topology", topologyFile(t, extra))
		pf.Must("host", "disable", extra)
	}
	on := func(service string) map[string]int {
		t.Helper()
		var ins []struct {
			Host string `json:"host"`
		}
		if err := json.Unmarshal([]byte(pf.Must("ps", "--service", service, "-o", "json")), &ins); err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, in := range ins {
			per[in.Host]++
		}
		return per
	}

	// Nominal room first: big2 has it, small has 0.4 GiB.
	out := pf.MustCombined("host", "drain", "big1")
	if per := on("w3"); per["big2"] != 6 {
		t.Errorf("after draining big1, w3 is on %v; want all 6 on big2 (nominal room) and none on small (only the overbooking's)\n%s", per, out)
	}
	if strings.Contains(out, "overbooking") {
		t.Errorf("host drain big1 says it used the overbooking; no move needed it:\n%s", out)
	}
	if h, code := pf.Combined("health"); code != 0 || !strings.Contains(h, "healthy") {
		t.Errorf("health after a drain within nominal capacity: exit %d:\n%s", code, h)
	}

	// Only the overbooking's room left: big1 disabled, big2 drained.
	out = pf.MustCombined("host", "drain", "big2")
	if per := on("w3"); per["small"] != 6 {
		t.Fatalf("after draining big2, w3 is on %v; want all 6 on small, with the overbooking\n%s", per, out)
	}
	const mark = "memory 17 GiB/14.4 GiB"
	if want := "placed on small using overbooking: " + mark; !strings.Contains(out, want) {
		t.Errorf("host drain big2 does not say %q:\n%s", want, out)
	}
	if ev := pf.Must("events", "--host", "big2"); !strings.Contains(ev, "placed on small using overbooking: memory") {
		t.Errorf("the drain's events do not say it used the overbooking:\n%s", ev)
	}
	if list := pf.Must("host", "list"); !regexp.MustCompile(`(?m)^small +up, overbooked `).MatchString(list) {
		t.Errorf("host list does not mark small:\n%s", list)
	}
	if show := pf.Must("host", "show", "small"); !strings.Contains(show, "Overbooked: above its nominal capacity, using the cluster's overbooking: "+mark) {
		t.Errorf("host show small does not say what it holds past its nominal capacity:\n%s", show)
	}
	var hj struct {
		OverNominal []string `json:"over_nominal"`
	}
	if err := json.Unmarshal([]byte(pf.Must("host", "show", "small", "-o", "json")), &hj); err != nil || len(hj.OverNominal) != 1 || hj.OverNominal[0] != mark {
		t.Errorf("host show small -o json: over_nominal = %q (%v), want [%q]", hj.OverNominal, err, mark)
	}
	h, code := pf.Combined("health")
	if code != exitUnmet || strings.Contains(h, "healthy") || !strings.Contains(h, "Overbooked") || !strings.Contains(h, "small") || !strings.Contains(h, mark) {
		t.Errorf("health with small past its nominal memory: exit %d:\n%s\nwant exit %d, an Overbooked warning naming small and %s", code, h, exitUnmet, mark)
	}
	// host remove: an instance of flat-vm fits only small's overbooking.
	pf.Must("host", "enable", "flat-vm")
	pf.Must("deploy", "fv", "--count", "1", "--cpu", "0.1", "--memory", "256MiB", "--image", "busybox")
	if out := pf.Must("host", "remove", "flat-vm"); !strings.Contains(out, "placed again on small as fv-") || !strings.Contains(out, "using overbooking: memory 17.25 GiB/14.4 GiB") {
		t.Errorf("host remove flat-vm does not say it used the overbooking on small:\n%s", out)
	}
	fams := scrape(t, "http://"+addr+"/metrics")
	if n, ok := value(fams, "pinfold_planner_hosts_over_nominal", map[string]string{"resource": "memory"}); !ok || n != 1 {
		t.Errorf("pinfold_planner_hosts_over_nominal{resource=memory} = %v (%t), want 1", n, ok)
	}
}
