package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	// --dry-run: the new size and the victim, nothing changed; the
	// resize then stops that very instance.
	var dry []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must(append(args, "--dry-run", "-o", "json")...)), &dry); err != nil || len(dry) != 1 ||
		dry[0].ID != web[0].ID || dry[0].CPUPlanned != "2" || len(dry[0].Preempted) != 1 || dry[0].Preempted[0].Host != web[0].Host {
		t.Fatalf("resize --dry-run -o json: %v %+v; want %s at 2 CPUs with one victim on %s", err, dry, web[0].ID, web[0].Host)
	}
	if _, text, code := pf.Run(append(args, "--dry-run")...); code != 0 || strings.Count(text, "would preempt "+dry[0].Preempted[0].ID) != 1 || !strings.Contains(text, "nothing was changed") {
		t.Errorf("resize --dry-run: exit %d:\n%s\nwant 'would preempt %s' and nothing changed", code, text, dry[0].Preempted[0].ID)
	}
	if got := onHost(); !maps.Equal(got, before) {
		t.Fatalf("resize --dry-run: crunch per host %v -> %v", before, got)
	}
	var now []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "--service", "web", "-o", "json")), &now); err != nil || len(now) != 1 || now[0].CPUPlanned != "1" {
		t.Errorf("after resize --dry-run web is %v %+v; want it at 1 CPU still", err, now)
	}
	_, errOut, code := pf.Run(args...)
	if code != 0 || strings.Count(errOut, "preempted crunch-") != 1 || !strings.Contains(errOut, " on "+web[0].Host) {
		t.Fatalf("resize +1: exit %d: %s; want one 'preempted crunch-… on %s'", code, errOut, web[0].Host)
	}
	if !strings.Contains(errOut, "preempted "+dry[0].Preempted[0].ID+" ") {
		t.Errorf("resize +1 stopped another instance than its dry run named (%s): %s", dry[0].Preempted[0].ID, errOut)
	}
	want := maps.Clone(before)
	want[web[0].Host]--
	if got := onHost(); !maps.Equal(got, want) {
		t.Errorf("crunch per host after the resize = %v, want %v (one fewer on %s only)", got, want, web[0].Host)
	}
}

// TestNeverPreemptedEndToEnd (issue 40, "never preempt me" for the
// highest class): deploy --never-preempted keeps it in the record, ps and
// host show say it where they say the priority, a services file
// (never_preempted) and a compose file (x-pinfold-never-preempted) that
// say it diff to no changes; a system deploy on a host full of the
// service's instances is refused, dry run too, and stops none; with a
// second host full of a preemptible production service, the same deploy
// stops one of that one's instances, never the guarded one's (the
// control: preemption itself works here). Batch or best-effort with it is
// refused (exit 2), by the flag and by a file.
func TestNeverPreemptedEndToEnd(t *testing.T) {
	pf := plannerCLI(t)
	topo := topologyFile(t, "laptop-i7-1185g7")
	pf.Must("host", "add", "a", "--topology", topo)
	pf.Must("deploy", "guard", "--count", "8", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB", "--never-preempted")
	count := func(service string) int {
		t.Helper()
		var ins []instanceJSON
		if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, in := range ins {
			if in.Service == service {
				n++
				if in.NeverPreempted != (service == "guard") {
					t.Errorf("ps -o json: %s never_preempted %t", in.ID, in.NeverPreempted)
				}
			}
		}
		return n
	}
	if n := count("guard"); n != 8 {
		t.Fatalf("guard has %d instances, want 8", n)
	}
	for _, args := range [][]string{{"ps"}, {"host", "show", "a"}} {
		if out := pf.Must(args...); !strings.Contains(out, "PRIORITY") || !regexp.MustCompile(`guard\s+production, never preempted\s`).MatchString(out) {
			t.Errorf("%s:\n%s\nwant guard's PRIORITY production, never preempted", strings.Join(args, " "), out)
		}
	}
	sys := []string{"deploy", "sys", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB", "--priority", "system"}
	for _, extra := range [][]string{{"--dry-run"}, nil} {
		if _, errOut, code := pf.Run(append(slices.Clone(sys), extra...)...); code == 0 {
			t.Errorf("%s %v on a host full of guard: exit 0 (%s); want it refused", strings.Join(sys, " "), extra, errOut)
		}
	}
	if n := count("guard"); n != 8 {
		t.Fatalf("a refused system deploy left guard %d instances, want 8", n)
	}
	dir := t.TempDir()
	write := func(name, s string) string {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	same := write("same.yaml", "services:\n  guard: {image: busybox, memory: 256MiB, cpu: 1, bind: true, count: 8, never_preempted: true}\n")
	if out := pf.MustCombined("diff", "-f", same); !strings.Contains(out, "no changes") {
		t.Errorf("diff -f same.yaml:\n%s\nwant no changes", out)
	}
	// A compose file cannot bind (its diff names that); never preempted
	// it says with x-pinfold-never-preempted, and its diff names that
	// only when the key is left out.
	for _, tt := range []struct{ key, want string }{{" x-pinfold-never-preempted: true,", ""}, {"", "never_preempted true → false"}} {
		f := write("compose.yaml", "services:\n  guard: {image: busybox, mem_limit: 256m, cpus: 1,"+tt.key+" deploy: {replicas: 8}}\n")
		out, _ := pf.Combined("diff", "-f", f)
		if strings.Contains(out, "never_preempted") != (tt.want != "") || !strings.Contains(out, tt.want) {
			t.Errorf("diff of a compose file with%q:\n%s\nwant %q named", tt.key, out, tt.want)
		}
	}
	off := write("off.yaml", "services:\n  guard: {image: busybox, memory: 256MiB, cpu: 1, bind: true, count: 8}\n")
	if out, code := pf.Combined("diff", "-f", off); code != exitUnmet || !strings.Contains(out, "never_preempted true → false") {
		t.Errorf("diff of a file without never_preempted: exit %d:\n%s\nwant exit 1 naming never_preempted true → false", code, out)
	}
	if _, errOut, code := pf.Run("deploy", "x", "--image", "busybox", "--memory", "64MiB", "--priority", "batch", "--never-preempted"); code != exitBadInput ||
		!strings.Contains(errOut, "--never-preempted with --priority batch") {
		t.Errorf("deploy --priority batch --never-preempted: exit %d: %s; want exit 2 naming both", code, errOut)
	}
	bad := write("bad.yaml", "services:\n  x: {image: busybox, memory: 64MiB, priority: best-effort, never_preempted: true}\n")
	if _, errOut, code := pf.Run("apply", "-f", bad); code != exitBadInput || !strings.Contains(errOut, "never_preempted: true: only for a priority of production (0) or higher, not best-effort") {
		t.Errorf("apply of a best-effort service never preempted: exit %d: %s; want exit 2 naming never_preempted and the priority", code, errOut)
	}
	badCompose := write("bad-compose.yaml", "services:\n  x: {image: busybox, mem_limit: 64m, x-pinfold-priority: batch, x-pinfold-never-preempted: true}\n")
	if _, errOut, code := pf.Run("apply", "-f", badCompose); code != exitBadInput || !strings.Contains(errOut, "services.x.x-pinfold-never-preempted: true: only for a priority of production (0) or higher, not batch") {
		t.Errorf("apply of a compose batch service never preempted: exit %d: %s; want exit 2 naming x-pinfold-never-preempted and the priority", code, errOut)
	}
	// The control: a host full of a preemptible production service gives
	// the system deploy its room, from that service only.
	pf.Must("host", "add", "b", "--topology", topo)
	pf.Must("deploy", "plain", "--count", "8", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB")
	out := pf.Must(append(sys, "-o", "json")...)
	var placed []instanceJSON
	if err := json.Unmarshal([]byte(out), &placed); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var victims []victimJSON
	for _, in := range placed {
		victims = append(victims, in.Preempted...)
	}
	if len(victims) != 1 || victims[0].Service != "plain" || victims[0].Host != "b" {
		t.Errorf("system deploy with plain on b: victims %+v; want one instance of plain on b", victims)
	}
	if n := count("guard"); n != 8 {
		t.Errorf("guard has %d instances after the system deploy, want 8", n)
	}
}

// TestScaleApplyPreemptEndToEnd (issue 40): scale and apply list the
// instances their deploys preempted, as deploy does: a line "preempted ID
// (service, priority P) on HOST" each, and in -o json (scale: its
// object's preempted; apply: the document's preempted); the IDs listed are
// those stopped. Control: without the lists in the scale response and in
// apply's steps, every check of a victim fails.
func TestScaleApplyPreemptEndToEnd(t *testing.T) {
	pf := plannerCLI(t)
	topo := topologyFile(t, "laptop-i7-1185g7")
	pf.Must("host", "add", "a", "--topology", topo)
	pf.Must("host", "add", "b", "--topology", topo)
	pf.Must("deploy", "web", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB")
	pf.Must("deploy", "crunch", "--count", "15", "--image", "busybox", "--cpu", "1", "--bind", "--memory", "256MiB", "--priority", "batch")
	crunch := func() []string {
		t.Helper()
		var ins []instanceJSON
		if err := json.Unmarshal([]byte(pf.Must("ps", "--service", "crunch", "-o", "json")), &ins); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range ins {
			ids = append(ids, in.ID)
		}
		slices.Sort(ids)
		return ids
	}
	stopped := func(before []string) []string {
		t.Helper()
		var gone []string
		for _, id := range before {
			if !slices.Contains(crunch(), id) {
				gone = append(gone, id)
			}
		}
		return gone
	}
	victimIDs := regexp.MustCompile(`(?m)^preempted (crunch-[0-9a-f]+) \(crunch, priority batch\) on [ab]$`)
	listed := func(text string) []string {
		var ids []string
		for _, m := range victimIDs.FindAllStringSubmatch(text, -1) {
			ids = append(ids, m[1])
		}
		slices.Sort(ids)
		return ids
	}

	before := crunch()
	_, errOut, code := pf.Run("scale", "web", "--count", "2")
	if got, gone := listed(errOut), stopped(before); code != 0 || len(gone) != 1 || !slices.Equal(got, gone) {
		t.Errorf("scale web --count 2: exit %d: %s; listed %v, stopped %v: want the one stopped listed", code, errOut, got, gone)
	}

	before = crunch()
	var scaled struct {
		Preempted []victimJSON `json:"preempted"`
	}
	if err := json.Unmarshal([]byte(pf.Must("scale", "web", "--count", "3", "-o", "json")), &scaled); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range scaled.Preempted {
		got = append(got, v.ID)
		if v.Service != "crunch" || v.Priority != -500 {
			t.Errorf("scale -o json victim %+v: want crunch at -500", v)
		}
	}
	if gone := stopped(before); len(gone) != 1 || !slices.Equal(got, gone) {
		t.Errorf("scale web --count 3 -o json: preempted %v, stopped %v: want the one stopped", got, gone)
	}

	dir := t.TempDir()
	file := func(webCount, apiCount int) string {
		f := filepath.Join(dir, "services.yaml")
		s := "services:\n" +
			"  web: {image: busybox, cpu: 1, bind: true, memory: 256MiB, count: " + strconv.Itoa(webCount) + "}\n" +
			"  crunch: {image: busybox, cpu: 1, bind: true, memory: 256MiB, priority: batch, count: " + strconv.Itoa(len(crunch())) + "}\n"
		if apiCount > 0 {
			s += "  api: {image: busybox, cpu: 1, bind: true, memory: 256MiB, count: " + strconv.Itoa(apiCount) + "}\n"
		}
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// A scale step (web 3 -> 4) and a deploy step (api, new) preempt one
	// each; crunch's count in the file is the one it has (no step).
	before = crunch()
	var doc struct {
		Applied   []string     `json:"applied"`
		Preempted []victimJSON `json:"preempted"`
	}
	out := pf.Must("apply", "-f", file(4, 1), "-o", "json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got = nil
	for _, v := range doc.Preempted {
		got = append(got, v.ID)
	}
	slices.Sort(got)
	if gone := stopped(before); len(gone) != 2 || !slices.Equal(got, gone) {
		t.Errorf("apply -o json (applied %v): preempted %v, stopped %v: want the 2 stopped", doc.Applied, got, gone)
	}
	// The text form: web 4 -> 5 its one step (the file says crunch's
	// count as it is before the apply: the diff, made first, has no step
	// for it).
	before = crunch()
	f := file(5, 1)
	_, errOut, code = pf.Run("apply", "-f", f)
	if got, gone := listed(errOut), stopped(before); code != 0 || len(gone) != 1 || !slices.Equal(got, gone) {
		t.Errorf("apply (web 4 -> 5): exit %d: %s; listed %v, stopped %v: want the one stopped listed", code, errOut, got, gone)
	}
}
