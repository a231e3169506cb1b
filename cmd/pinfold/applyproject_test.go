package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes src to dir/name (dirs made as needed) and returns its
// path.
func writeFile(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// psImages is each service's images as ps -o json lists them, joined by
// spaces in ps order.
func psImages(t *testing.T, pf *cli) map[string]string {
	t.Helper()
	var ins []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, in := range ins {
		out[in.Service] = strings.TrimSpace(out[in.Service] + " " + in.Image)
	}
	return out
}

// TestApplyLeavesAnotherProjectsService (issue 39 item 1): project wp's
// db was replaced by another compose project's db of the same name (diff:
// replace db: image mariadb:10.11 → mariadb:11; apply and apply
// --recreate did it, and the record's source became other). diff and
// apply now refuse the whole file before any change, naming the service
// and its project; a service deployed by hand is still adopted.
// Control: without servicesfile.Foreign in diffServices, diff exits 1
// (replace db) and apply replaces db's image: the test fails.
func TestApplyLeavesAnotherProjectsService(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	dir := t.TempDir()
	pf.Must("apply", "-f", writeFile(t, dir, "wp/compose.yaml", "services:\n  db: {image: 'mariadb:10.11', mem_limit: 16m}\n"))
	pf.Must("deploy", "hand", "--image", "busybox:1", "--memory", "16MiB")
	for _, tt := range []struct {
		name, file string
	}{
		{"name: other", writeFile(t, dir, "x/compose.yaml", "name: other\nservices:\n  db: {image: 'mariadb:11', mem_limit: 16m}\n  web: {image: 'nginx:1', mem_limit: 16m}\n")},
		{"directory other", writeFile(t, dir, "other/compose.yaml", "services:\n  db: {image: 'mariadb:11', mem_limit: 16m}\n  web: {image: 'nginx:1', mem_limit: 16m}\n")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, args := range [][]string{{"diff", "-f", tt.file}, {"apply", "-f", tt.file}, {"apply", "-f", tt.file, "--recreate"}} {
				_, errOut, code := pf.Run(args...)
				if want := "services.db: of project wp, not other: apply leaves another project's services"; code != exitBadInput || !strings.Contains(errOut, want) || !strings.Contains(errOut, "nothing was changed") {
					t.Errorf("pinfold %v: exit %d: %s\nwant exit %d, %q and nothing was changed", args, code, errOut, exitBadInput, want)
				}
			}
			if got := psImages(t, pf); got["db"] != "mariadb:10.11" || got["web"] != "" {
				t.Errorf("after the refused applies: images %v, want db at mariadb:10.11 and no web (the whole file refused)", got)
			}
		})
	}
	// By hand (source ""): adopted.
	adopt := writeFile(t, dir, "other/compose.yaml", "services:\n  hand: {image: 'busybox:2', mem_limit: 16m}\n")
	pf.Must("apply", "-f", adopt)
	if got := psImages(t, pf); got["hand"] != "busybox:2" {
		t.Errorf("apply of a service deployed by hand: images %v, want hand replaced to busybox:2", got)
	}
	// A replace does not record a source: hand stays by hand, which any
	// project may still apply.
	pf.Must("diff", "-f", writeFile(t, dir, "wp/compose.yaml", "services:\n  db: {image: 'mariadb:10.11', mem_limit: 16m}\n  hand: {image: 'busybox:2', mem_limit: 16m}\n"))
}

// TestApplyProjectIsTheFilesDirectory (issue 39 item 2): a services file
// without project: took its project from the file's name, so every
// services.yaml shared project services and wiki's --prune removed
// blog's services; every -f - shared project stdin. The default is now
// the directory's name, as compose's; -f - --prune without a named
// project is refused, changing nothing.
// Control: with defaultProject back to the file's name, the prune of
// wiki/services.yaml removes blog's services and the test fails.
func TestApplyProjectIsTheFilesDirectory(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	dir := t.TempDir()
	svc := func(name string) string { return "  " + name + ": {image: busybox, memory: 16MiB}\n" }
	wiki := writeFile(t, dir, "wiki/services.yaml", "services:\n"+svc("wiki")+svc("wiki-db"))
	pf.Must("apply", "-f", wiki)
	pf.Must("apply", "-f", writeFile(t, dir, "blog/services.yaml", "services:\n"+svc("blog")))
	writeFile(t, dir, "wiki/services.yaml", "services:\n"+svc("wiki"))
	pf.Must("apply", "-f", wiki, "--prune")
	if got := strings.Join(psServices(t, pf), " "); got != "blog wiki" {
		t.Errorf("after apply --prune of wiki/services.yaml: services %s, want blog wiki (blog's left, wiki-db removed)", got)
	}
	for _, tt := range []struct {
		name, stdin string
		args        []string
		code        int
		want        string
	}{
		{"stdin prune unnamed", "services:\n" + svc("piped"), []string{"apply", "-f", "-", "--prune"}, exitBadInput, "--prune needs the project named in the file (project: NAME at the top)"},
		{"stdin compose prune unnamed", "services:\n  piped: {image: busybox, mem_limit: 16m}\n", []string{"diff", "-f", "-", "--prune"}, exitBadInput, "(name: NAME at the top)"},
		{"stdin prune named", "project: blog\nservices:\n" + svc("blog") + svc("piped"), []string{"apply", "-f", "-", "--prune"}, 0, ""},
		{"stdin unnamed without prune", "services:\n" + svc("piped2"), []string{"apply", "-f", "-"}, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, tt.stdin, append(tt.args, pf.flags...)...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("pinfold %v < %q: exit %d: %s\nwant exit %d and %q", tt.args, tt.stdin, code, errOut, tt.code, tt.want)
			}
		})
	}
	if got := strings.Join(psServices(t, pf), " "); got != "blog piped piped2 wiki" {
		t.Errorf("after the piped applies: services %s, want blog piped piped2 wiki (the refused prune changed nothing)", got)
	}
}

// TestDiffSaysWhatPruneDoesWithEachKept (issue 39 item 4): plain diff
// said "keep big: not in the file, left alone (--prune removes it)" of a
// service deployed by hand, which --prune never removes (with --prune the
// line contradicted the note). Each keep line now says whose the service
// is and what --prune does with it, with or without --prune.
// Control: with the sources read only under --prune (as before), plain
// diff calls hand's and mine's services deployed by hand and the test
// fails; with the old keep line, every row fails.
func TestDiffSaysWhatPruneDoesWithEachKept(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	pf.Must("deploy", "big", "--image", "busybox", "--memory", "16MiB")
	dir := t.TempDir()
	svc := func(name string) string { return "  " + name + ": {image: busybox, memory: 16MiB}\n" }
	pf.Must("apply", "-f", writeFile(t, dir, "theirs/services.yaml", "services:\n"+svc("other")))
	mine := writeFile(t, dir, "mine/services.yaml", "services:\n"+svc("web")+svc("gone"))
	pf.Must("apply", "-f", mine)
	writeFile(t, dir, "mine/services.yaml", "services:\n"+svc("web"))
	for _, args := range [][]string{{"diff", "-f", mine}, {"diff", "-f", mine, "--prune"}} {
		out, _, _ := pf.Run(args...)
		for _, want := range []string{
			"keep     big: not in the file, left alone: deployed by hand: --prune leaves it",
			"keep     other: not in the file, left alone: of project theirs, not mine: --prune leaves it",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("pinfold %v:\n%s\nwant %q", args, out, want)
			}
		}
		want := "keep     gone: not in the file, left alone: of project mine: --prune removes it"
		if len(args) == 4 {
			want = "remove   gone: not in the file"
		}
		if !strings.Contains(out, want) {
			t.Errorf("pinfold %v:\n%s\nwant %q", args, out, want)
		}
	}
}

// TestApplyJSONOfARefusedFile (issue 39 item 6): apply -o json of a file
// refused before any step printed nothing on stdout, while a step the
// planner refused has a document (applied, refused). A refused file now
// has one too: no changes, nothing applied, the refusal of action check.
// Control: with refusedFile returning err alone, stdout is empty and
// every row fails.
func TestApplyJSONOfARefusedFile(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	dir := t.TempDir()
	pf.Must("apply", "-f", writeFile(t, dir, "wp/compose.yaml", "services:\n  db: {image: 'mariadb:10.11', mem_limit: 16m}\n"))
	for _, tt := range []struct {
		name, file, want string
	}{
		{"a bad value", writeFile(t, dir, "a/services.yaml", "services:\n  web: {image: a, memory: 64MiB, cpu: abc}\n"), `services.web.cpu: "abc" is not a number`},
		{"the planner's check", writeFile(t, dir, "b/services.yaml", "services:\n  hz: {image: a, memory: 64MiB, health: {http: abc}}\n"), `services.hz.health.http: "abc"`},
		{"another project's service", writeFile(t, dir, "c/compose.yaml", "services:\n  db: {image: 'mariadb:11', mem_limit: 16m}\n"), "services.db: of project wp, not c"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := pf.Run("apply", "-f", tt.file, "-o", "json")
			var doc struct {
				Changes []any    `json:"changes"`
				Applied []string `json:"applied"`
				Refused []struct {
					Action, Error string
				} `json:"refused"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitBadInput {
				t.Fatalf("apply -o json: exit %d, stdout %q (%v), stderr %s; want exit 2 and one document", code, out, err, errOut)
			}
			if doc.Changes == nil || len(doc.Changes) != 0 || doc.Applied == nil || len(doc.Applied) != 0 || len(doc.Refused) != 1 ||
				doc.Refused[0].Action != "check" || !strings.Contains(doc.Refused[0].Error, tt.want) {
				t.Errorf("apply -o json: %s\nwant no changes, applied [], one refusal of action check containing %q", out, tt.want)
			}
		})
	}
}

// TestApplyRefusesABadProjectName: name: "" fell back to the default
// project (the directory's) and name: "..." or "-x" were recorded as
// projects; each is refused now, exit 2 naming the key, nothing deployed.
// Control: without projectNameWhy in servicesfile.Project, the applies
// exit 0 and deploy web.
func TestApplyRefusesABadProjectName(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	dir := t.TempDir()
	for _, tt := range []struct{ name, want string }{
		{`""`, `name: "": an empty name`},
		{`"..."`, `name: "...": want lower-case letters, digits, '-' and '_', starting with a letter or digit`},
		{`"-x"`, `name: "-x": want lower-case letters`},
	} {
		file := writeFile(t, dir, "p/compose.yaml", "name: "+tt.name+"\nservices:\n  web: {image: 'busybox:1', mem_limit: 16m}\n")
		if errOut := pf.Fails(exitBadInput, "apply", "-f", file); !strings.Contains(errOut, tt.want) || !strings.Contains(errOut, "nothing was changed") {
			t.Errorf("apply of name: %s: %q, want %q and nothing was changed", tt.name, errOut, tt.want)
		}
	}
	if got := psImages(t, pf); len(got) != 0 {
		t.Errorf("after the refused applies: images %v, want none", got)
	}
}
