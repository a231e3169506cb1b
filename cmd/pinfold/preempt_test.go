package main

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestDeployPreemptsEndToEnd (issue 40 item 2): on two 8-CPU hosts full of
// batch work, a production deploy of 2 bound CPUs places by stopping the
// fewest batch instances (2, on the host it takes), listed in its output
// and in the events naming preemptor and victims; --dry-run names the same
// victims and changes nothing; --no-preempt fails and stops nothing.
// Control: with the service's preemption off the deploy fails.
func TestDeployPreemptsEndToEnd(t *testing.T) {
	pf := plannerCLI(t)
	topo := topologyFile(t, "laptop-i7-1185g7")
	pf.Must("host", "add", "a", "--topology", topo)
	pf.Must("host", "add", "b", "--topology", topo)
	pf.Must("deploy", "crunch", "--count", "16", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB", "--priority", "batch")
	batch := func() []string {
		t.Helper()
		var ins []instanceJSON
		if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range ins {
			if in.Service == "crunch" {
				ids = append(ids, in.ID)
			}
		}
		slices.Sort(ids)
		return ids
	}
	before := batch()
	victims := func(out string) (ids []string, host string, placedOn []string) {
		t.Helper()
		var ins []instanceJSON
		if err := json.Unmarshal([]byte(out), &ins); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, in := range ins {
			placedOn = append(placedOn, in.Host)
			for _, v := range in.Preempted {
				if v.Service != "crunch" || v.Priority != -500 {
					t.Errorf("victim %+v: want an instance of crunch at -500", v)
				}
				ids, host = append(ids, v.ID), v.Host
			}
		}
		return ids, host, placedOn
	}
	args := []string{"deploy", "web", "--image", "busybox", "--cpu", "2", "--bind", "--memory", "512MiB", "-o", "json"}
	dryIDs, _, _ := victims(pf.Must(append(args, "--dry-run")...))
	if got := batch(); !slices.Equal(got, before) {
		t.Fatalf("--dry-run stopped %d instances", len(before)-len(got))
	}
	_, text, code := pf.Run("deploy", "web", "--image", "busybox", "--cpu", "2", "--bind", "--memory", "512MiB", "--dry-run")
	if code != 0 || strings.Count(text, "would preempt crunch-") != 2 || !strings.Contains(text, "nothing was changed") {
		t.Errorf("deploy --dry-run: exit %d:\n%s\nwant 2 'would preempt' lines and nothing changed", code, text)
	}
	if _, errOut, code := pf.Run(append(args, "--no-preempt")...); code == 0 || !strings.Contains(errOut, "Elimination") {
		t.Errorf("deploy --no-preempt: exit %d: %s; want it refused with the elimination report", code, errOut)
	}
	if got := batch(); !slices.Equal(got, before) {
		t.Fatalf("--no-preempt stopped %d instances", len(before)-len(got))
	}
	ids, host, placedOn := victims(pf.Must(args...))
	if len(ids) != 2 || !slices.Equal(ids, dryIDs) || !slices.Equal(placedOn, []string{host}) {
		t.Errorf("deploy preempted %v on %s and placed on %v; want the dry run's 2 victims %v, on the host it took", ids, host, placedOn, dryIDs)
	}
	if got := batch(); len(got) != len(before)-2 || slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(got, id) }) {
		t.Errorf("crunch has %v after the deploy, want %v without %v", got, before, ids)
	}
	evs := pf.Must("events", "--service", "crunch")
	for _, id := range ids {
		if !strings.Contains(evs, id) || !strings.Contains(evs, "preempted by web") {
			t.Errorf("events of crunch:\n%s\nwant Preempted naming %s and web", evs, id)
		}
	}
}

// TestResizePreemptsEndToEnd (issue 40 item 2): a production instance
// resized by +1 CPU on a host full of batch work stops one batch instance,
// on that host only, listed in its output; --no-preempt is refused and
// stops nothing. Control: with the service's resize preemption off the
// resize is refused.
func TestResizePreemptsEndToEnd(t *testing.T) {
	pf := plannerCLI(t)
	topo := topologyFile(t, "laptop-i7-1185g7")
	pf.Must("host", "add", "a", "--topology", topo)
	pf.Must("host", "add", "b", "--topology", topo)
	var web []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("deploy", "web", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB", "-o", "json")), &web); err != nil || len(web) != 1 {
		t.Fatalf("deploy web: %v %v", err, web)
	}
	pf.Must("deploy", "crunch", "--count", "15", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB", "--priority", "batch")
	onHost := func() map[string]int {
		t.Helper()
		var ins []instanceJSON
		if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, in := range ins {
			if in.Service == "crunch" {
				n[in.Host]++
			}
		}
		return n
	}
	before := onHost()
	args := []string{"resize", web[0].ID, "--cpu", "+1", "--wait", "0"}
	if _, errOut, code := pf.Run(append(args, "--no-preempt")...); code == 0 {
		t.Errorf("resize --no-preempt: exit 0 (%s); want it refused", errOut)
	}
	if got := onHost(); !maps.Equal(got, before) {
		t.Fatalf("resize --no-preempt: crunch per host %v -> %v", before, got)
	}
	_, errOut, code := pf.Run(args...)
	if code != 0 || strings.Count(errOut, "preempted crunch-") != 1 || !strings.Contains(errOut, " on "+web[0].Host) {
		t.Fatalf("resize +1: exit %d: %s; want one 'preempted crunch-… on %s'", code, errOut, web[0].Host)
	}
	want := maps.Clone(before)
	want[web[0].Host]--
	if got := onHost(); !maps.Equal(got, want) {
		t.Errorf("crunch per host after the resize = %v, want %v (one fewer on %s only)", got, want, web[0].Host)
	}
}
