package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestApplyDiff runs apply and diff against a real planner for each
// example: apply, a second apply changes nothing, diff reports none; an
// edit of count, cpu and image shows scale, resize and replace; apply;
// diff none again.
func TestApplyDiff(t *testing.T) {
	tests := []struct {
		example string
		edit    func(string) string
		service string
		want    []string // actions after the edit
	}{
		{"services.yaml", func(s string) string {
			s = strings.Replace(s, "count: 2", "count: 3", 1)
			s = strings.Replace(s, "cpu: 1.5", "cpu: 2", 1)
			return strings.Replace(s, "nginx:1.27", "nginx:1.28", 1)
		}, "web", []string{"resize", "replace", "scale"}},
		{"compose.yaml", func(s string) string {
			s = strings.Replace(s, "replicas: 2", "replicas: 3", 1)
			s = strings.Replace(s, `cpus: "0.5"`, `cpus: "0.75"`, 1)
			return strings.Replace(s, "busybox:1.36", "busybox:1.37", 1)
		}, "api", []string{"resize", "replace", "scale"}},
	}
	for _, tt := range tests {
		t.Run(tt.example, func(t *testing.T) {
			addr := startPlanner(t)
			pf := newCLI(t, addr)
			topo := topologyFile(t, "dual-xeon-gold-6230")
			pf.Must("host", "add", "a", "--topology", topo)
			pf.Must("host", "add", "b", "--topology", topo)
			// A third: the example's cache keeps off both hosts of web's
			// two instances (hard anti-affinity, deployed after web).
			pf.Must("host", "add", "c", "--topology", topo)
			src, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", tt.example))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), tt.example)
			if err := os.WriteFile(file, src, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, _, code := pf.Run("diff", "-f", file); code != exitUnmet {
				t.Errorf("diff before the first apply: exit %d, want 1 (changes)", code)
			}
			pf.Must("apply", "-f", file)
			if out := pf.Must("apply", "-f", file); !strings.Contains(out, "no changes") {
				t.Errorf("second apply:\n%s\nwant no changes", out)
			}
			if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
				t.Errorf("diff after apply:\n%s\nwant no changes", out)
			}
			if err := os.WriteFile(file, []byte(tt.edit(string(src))), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := pf.Run("diff", "-f", file, "-o", "json")
			if code != exitUnmet {
				t.Fatalf("diff after the edit: exit %d, want 1: %s%s", code, out, errOut)
			}
			var d struct {
				Changes []struct{ Service, Action, Detail string } `json:"changes"`
			}
			if err := json.Unmarshal([]byte(out), &d); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range d.Changes {
				if c.Service != tt.service {
					t.Errorf("change %+v to a service the edit did not touch", c)
				}
				got = append(got, c.Action)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("diff after the edit: %v, want %v:\n%s", got, tt.want, out)
			}
			pf.Must("apply", "-f", file)
			if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
				t.Errorf("diff after the second apply:\n%s\nwant no changes", out)
			}
			ps := pf.Must("ps", "--service", tt.service, "-o", "json")
			var ins []struct{ Image string }
			if err := json.Unmarshal([]byte(ps), &ins); err != nil {
				t.Fatal(err)
			}
			if len(ins) != 3 {
				t.Errorf("%s has %d instances after apply, want 3", tt.service, len(ins))
			}
		})
	}
}

// TestApplyRulesPruneBadFile: a rule change no live operation makes is
// refused by apply (exit 1, nothing changed) and made by --recreate; a
// service not in the file is left alone and said so, removed with
// --prune; a file with one invalid service changes nothing (exit 2).
func TestApplyRulesPruneBadFile(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	dir := t.TempDir()
	write := func(s string) string {
		t.Helper()
		f := filepath.Join(dir, "s.yaml")
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := write("services:\n  web: {image: busybox, memory: 64MiB, count: 2}\n  other: {image: busybox, memory: 64MiB}\n")
	pf.Must("apply", "-f", f)
	f = write("services:\n  web: {image: busybox, memory: 64MiB, count: 2, strategy: drained, env: [A=1]}\n")
	out, code := pf.Combined("apply", "-f", f)
	if code != exitUnmet || !strings.Contains(out, "strategy auto → drained") || !strings.Contains(out, "needs remove + deploy") || !strings.Contains(out, "nothing was changed") {
		t.Errorf("apply of a strategy change: exit %d:\n%s\nwant exit 1 saying it needs remove + deploy", code, out)
	}
	out, code = pf.Combined("diff", "-f", f)
	if code != exitUnmet || !strings.Contains(out, "recreate web") || !strings.Contains(out, "keep     other: not in the file, left alone") {
		t.Errorf("diff: exit %d:\n%s\nwant recreate web and other left alone", code, out)
	}
	pf.Must("apply", "-f", f, "--recreate", "--prune")
	if out := pf.MustCombined("diff", "-f", f, "--prune"); !strings.Contains(out, "no changes") {
		t.Errorf("diff after apply --recreate --prune:\n%s\nwant no changes", out)
	}
	if out := pf.MustCombined("ps", "-o", "json"); strings.Contains(out, `"other"`) {
		t.Errorf("other is still there after --prune:\n%s", out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("services:\n  web: {image: busybox, memory: 64MiB, count: 5, strategy: drained, env: [A=1]}\n  x: {image: busybox, memory: 64MiB, cpu: abc}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = pf.Combined("apply", "-f", bad)
	if code != exitBadInput || !strings.Contains(out, `services.x.cpu: "abc" is not a number`) {
		t.Errorf("apply of a file with a bad service: exit %d:\n%s\nwant exit 2 naming services.x.cpu", code, out)
	}
	if out := pf.MustCombined("diff", "-f", f); !strings.Contains(out, "no changes") {
		t.Errorf("a refused file changed something:\n%s", out)
	}
	// A CPU amount off the grid of pieces, on a service that is deployed
	// (its resize would have been rounded) or on a new one placed after a
	// change the file also makes: refused before any step, nothing changes.
	// The refusal reads as the file's other bad values do: the file, the
	// key as the file spells it (a compose file's own), "nothing was
	// changed".
	for _, tc := range []struct{ name, file, want string }{
		{"deployed service", "services:\n  web: {image: busybox, memory: 64MiB, count: 2, strategy: drained, env: [A=1], cpu: 0.505}\n",
			`grid.yaml: services.web.cpu: "0.505": not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are 0.5 and 0.51 (nothing was changed)`},
		{"new service after a resize", "services:\n  web: {image: busybox, memory: 128MiB, count: 2, strategy: drained, env: [A=1]}\n  batch: {image: busybox, memory: 64MiB, cpu: 0.001}\n",
			`grid.yaml: services.batch.cpu: "0.001": less than one piece of a CPU`},
		{"compose file", "services:\n  batch:\n    image: busybox\n    deploy: {resources: {limits: {cpus: \"0.505\", memory: 64M}}}\n",
			`grid.yaml: services.batch.deploy.resources.limits.cpus: "0.505": not a whole number of pieces`},
		// Go float syntax that is no decimal (ParseFloat reads it as 0.5).
		{"hex float", "services:\n  batch: {image: busybox, memory: 64MiB, cpu: \"0x1p-1\"}\n", `grid.yaml: services.batch.cpu: "0x1p-1" is not a number`},
	} {
		bad := filepath.Join(dir, "grid.yaml")
		if err := os.WriteFile(bad, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, verb := range []string{"apply", "diff"} {
			if out, code := pf.Combined(verb, "-f", bad); code != exitBadInput || !strings.Contains(out, filepath.Join(dir, tc.want)) {
				t.Errorf("%s, %s: exit %d:\n%s\nwant exit 2 with %q", tc.name, verb, code, out, filepath.Join(dir, tc.want))
			}
		}
		if out := pf.MustCombined("diff", "-f", f); !strings.Contains(out, "no changes") {
			t.Errorf("%s: a refused file changed something:\n%s", tc.name, out)
		}
	}
}

// TestApplyServiceAtCountZero: a service a services file holds at count 0
// still takes a new size and image from the file: apply changes its
// record (before, the planner refused the resize and the replace with
// "service has no instances" and the file never settled), diff then says
// no changes, and the instance a later count adds has the file's size and
// image.
func TestApplyServiceAtCountZero(t *testing.T) {
	pf := newCLI(t, startPlanner(t))
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	file, write := webFile(t, "")
	write("busybox:1", "1", 1)
	pf.Must("apply", "-f", file)
	write("busybox:1", "1", 0)
	pf.Must("apply", "-f", file)
	write("busybox:2", "2.5", 0)
	pf.Must("apply", "-f", file)
	if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Fatalf("diff after applying a new size and image at count 0:\n%s\nwant no changes", out)
	}
	write("busybox:2", "2.5", 1)
	pf.Must("apply", "-f", file)
	ins := webInstances(t, pf)
	if len(ins) != 1 || ins[0].Image != "busybox:2" || ins[0].CPUPlanned != "2.5" {
		t.Errorf("web after count 0 → 1: %+v, want one instance of busybox:2 planned 2.5 CPUs", ins)
	}
	if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Errorf("diff at the end:\n%s\nwant no changes", out)
	}
}

// TestApplyScaleDownFirst: a file that lowers a service's count and
// changes its size or image scales it down first, then resizes and
// replaces what is left: a size the running instances could not all take
// is applied when the file keeps none of them (before, apply resized the 2
// running instances to 60 CPUs each on an 80-CPU host, was refused, and
// the service never reached the file), and instances about to go are not
// replaced first.
func TestApplyScaleDownFirst(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	file, write := webFile(t, "bind: true")
	actions := func() []string {
		t.Helper()
		out, errOut, code := pf.Run("diff", "-f", file, "-o", "json")
		if code != exitUnmet {
			t.Fatalf("diff: exit %d, want 1 (changes): %s%s", code, out, errOut)
		}
		var d struct {
			Changes []struct{ Action string } `json:"changes"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range d.Changes {
			got = append(got, c.Action)
		}
		return got
	}
	write("busybox:1", "1", 2)
	pf.Must("apply", "-f", file)
	write("busybox:2", "60", 0)
	if got, want := actions(), []string{"scale", "resize", "replace"}; !slices.Equal(got, want) {
		t.Errorf("diff to count 0: %v, want %v", got, want)
	}
	pf.Must("apply", "-f", file)
	if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Fatalf("diff after the apply to count 0:\n%s\nwant no changes", out)
	}
	// A scale up stays last: the instances it adds get the new size.
	write("busybox:3", "2", 1)
	if got, want := actions(), []string{"resize", "replace", "scale"}; !slices.Equal(got, want) {
		t.Errorf("diff to count 1: %v, want %v", got, want)
	}
	pf.Must("apply", "-f", file)
	ins := webInstances(t, pf)
	if len(ins) != 1 || ins[0].Image != "busybox:3" || ins[0].CPUPlanned != "2" {
		t.Errorf("web after count 0 → 1: %+v, want one instance of busybox:3 planned 2 CPUs", ins)
	}
}

// TestApplyLeavesAnInstanceAtTheFileSize: an instance resized on its own
// to the size the file then gives its service is left alone by apply (its
// generation stays: its host applies nothing), and the others are brought
// to that size in one resize. Before, apply first resized it back to the
// record's size and then the whole service by the file's delta: a shrink
// and a regrow, and a memory shrink its host could refuse.
func TestApplyLeavesAnInstanceAtTheFileSize(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	file, write := webFile(t, "bind: true")
	write("busybox:1", "1", 2)
	pf.Must("apply", "-f", file)
	ins := webInstances(t, pf)
	if len(ins) != 2 {
		t.Fatalf("web: %+v, want 2 instances", ins)
	}
	ahead, other := ins[0], ins[1]
	pf.Must("resize", ahead.ID, "--cpu", "+1", "--wait", "0")
	gen := map[string]int64{}
	for _, in := range webInstances(t, pf) {
		gen[in.ID] = in.Generation
	}
	write("busybox:1", "2", 2)
	out, _, code := pf.Run("diff", "-f", file)
	if code != exitUnmet || strings.Count(out, "resize") != 1 || !strings.Contains(out, "cpu 1 → 2 (+1); 1 instance of another size to 2 (bound), 256 MiB: "+other.ID+" (1 (bound), 256 MiB)") {
		t.Errorf("diff: exit %d:\n%s\nwant one resize of web naming %s alone as of another size", code, out, other.ID)
	}
	pf.Must("apply", "-f", file)
	for _, in := range webInstances(t, pf) {
		if in.CPUPlanned != "2" {
			t.Errorf("instance %s planned %s CPUs after apply, want 2", in.ID, in.CPUPlanned)
		}
		if moved := in.Generation != gen[in.ID]; moved == (in.ID == ahead.ID) {
			t.Errorf("instance %s: generation %d → %d; want a change for %s alone (%s was at the file's size)", in.ID, gen[in.ID], in.Generation, other.ID, ahead.ID)
		}
	}
	if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Errorf("diff after apply:\n%s\nwant no changes", out)
	}
}

// webFile is a services file of one service, web, with 256 MiB and extra
// (a YAML line of web's, or ""), and its writer: image, cpu and count.
func webFile(t *testing.T, extra string) (string, func(image, cpu string, count int)) {
	file := filepath.Join(t.TempDir(), "services.yaml")
	if extra != "" {
		extra = "    " + extra + "\n"
	}
	return file, func(image, cpu string, count int) {
		t.Helper()
		src := "services:\n  web:\n    image: " + image + "\n    cpu: " + cpu + "\n" + extra + "    memory: 256MiB\n    count: " + strconv.Itoa(count) + "\n"
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// webInstance is what the apply tests read of web's instances in ps -o json.
type webInstance struct {
	ID         string      `json:"id"`
	Image      string      `json:"image"`
	CPUPlanned json.Number `json:"cpu_planned"`
	Generation int64       `json:"generation"`
}

// webInstances are web's instances as ps -o json shows them.
func webInstances(t *testing.T, pf *cli) []webInstance {
	t.Helper()
	var ins []webInstance
	if err := json.Unmarshal([]byte(pf.Must("ps", "--service", "web", "-o", "json")), &ins); err != nil {
		t.Fatal(err)
	}
	return ins
}

// TestApplyRepairsAnInstancesOwnContainerSettings: an instance given
// container settings of its own (replace INSTANCE --cap-add SYS_ADMIN
// --volume /:/host) after an apply was "same … no changes" to diff, and
// apply never repaired it. diff now names the instance and what differs,
// and apply replaces it back to the file's settings.
// Control: without containerDrift in diffService, diff says no changes
// (exit 0) and the test fails.
func TestApplyRepairsAnInstancesOwnContainerSettings(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	file, write := webFile(t, "")
	write("busybox:1", "1", 2)
	pf.Must("apply", "-f", file)
	ins := webInstances(t, pf)
	if len(ins) != 2 {
		t.Fatalf("web: %+v, want 2 instances", ins)
	}
	pf.Must("replace", ins[1].ID, "--cap-add", "SYS_ADMIN", "--volume", "/:/host", "--wait", "0")
	out, _, code := pf.Run("diff", "-f", file)
	if want := "instance " + ins[1].ID + ": volumes /:/host removed, cap_add SYS_ADMIN removed"; code != exitUnmet || !strings.Contains(out, want) || strings.Contains(out, "instance "+ins[0].ID) {
		t.Errorf("diff after replace %s --cap-add --volume: exit %d:\n%s\nwant exit %d and a replace naming %q alone", ins[1].ID, code, out, exitUnmet, want)
	}
	pf.Must("apply", "-f", file)
	if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Errorf("diff after apply:\n%s\nwant no changes (the instance's own settings replaced by the file's)", out)
	}
}
