package main

import (
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"

	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestExamplesDecode: each example services file in docs/examples decodes
// to the services it describes.
func TestExamplesDecode(t *testing.T) {
	tests := []struct {
		file     string
		services []string
		notes    []string
	}{
		{"services.yaml", []string{"cache", "web"}, nil},
		{"compose.yaml", []string{"api", "db"}, []string{"compose: ignored top-level keys: name, volumes",
			"compose: api: ignored keys: depends_on"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			want, notes, err := decodeServicesFile(data)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, w := range want {
				names = append(names, w.Deploy.Service)
			}
			if !slices.Equal(names, tt.services) {
				t.Errorf("services %v, want %v", names, tt.services)
			}
			if !slices.Equal(notes, tt.notes) {
				t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(tt.notes, "\n"))
			}
		})
	}
}

// TestComposeMapping: a compose service's keys become a deploy's fields.
func TestComposeMapping(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := decodeServicesFile(data)
	if err != nil {
		t.Fatal(err)
	}
	api, db := want[0].Deploy, want[1].Deploy
	if api.Count != 2 || api.Cpu != "0.5" || api.MemoryBytes != 128<<20 || !slices.Equal(api.Command, []string{"sleep", "infinity"}) || !slices.Equal(api.Env, []string{"LOG=info"}) || api.Bind {
		t.Errorf("api = %v", api)
	}
	if db.Count != 1 || db.Cpu != "1" || db.MemoryBytes != 1<<30 || db.MemorySoftBytes != 512<<20 || !slices.Equal(db.Env, []string{"POSTGRES_PASSWORD=example"}) {
		t.Errorf("db = %v", db)
	}
	// Ports, volumes and the restart policy.
	if got := portsLine(api.Ports); got != "p8080=8080:8080" || api.GetContainer().GetRestart() != "unless-stopped" {
		t.Errorf("api: ports %q, restart %q; want p8080=8080:8080 and unless-stopped", got, api.GetContainer().GetRestart())
	}
	if got := db.GetContainer().GetVolumes(); !slices.Equal(got, []string{"db:/var/lib/postgresql/data"}) {
		t.Errorf("db: volumes %q", got)
	}
}

// TestComposePortsAndVolumes: each compose port and volume form maps to
// pinfold's or is named as skipped.
func TestComposePortsAndVolumes(t *testing.T) {
	ports, skipped := composePorts([]byte(`["80", "8080:80", "9000:9000/tcp", "127.0.0.1:81:81", "53:53/udp", "7000-7001:7000-7001", {"target": 443, "published": 8443}, "80"]`))
	if want := []string{"p80:80", "p80-2=8080:80", "p9000=9000:9000", "p443=8443:443", "p80-3:80"}; !slices.Equal(ports, want) {
		t.Errorf("ports %q, want %q", ports, want)
	}
	if len(skipped) != 3 {
		t.Errorf("skipped %q, want the host address, the UDP port and the range", skipped)
	}
	vols, skipped := composeVolumes([]byte(`["/srv/data:/data", "cache:/cache:ro", "./rel:/x", "/anon", {"type": "bind", "source": "/etc/app", "target": "/etc/app", "read_only": true}, {"type": "tmpfs", "target": "/t"}]`))
	if want := []string{"/srv/data:/data", "cache:/cache:ro", "/etc/app:/etc/app:ro"}; !slices.Equal(vols, want) {
		t.Errorf("volumes %q, want %q", vols, want)
	}
	if len(skipped) != 3 {
		t.Errorf("skipped %q, want the relative path, the anonymous volume and the tmpfs", skipped)
	}
	for raw, want := range map[string]string{`{"condition": "on-failure", "max_attempts": 3}`: "on-failure:3", `{"condition": "any"}`: "always", `{"condition": "none"}`: ""} {
		if got, _ := composeRestartPolicy([]byte(raw)); got != want {
			t.Errorf("restart_policy %s = %q, want %q", raw, got, want)
		}
	}
}

// TestServicesFileContainerAndPorts: a pinfold services file's ports and
// container settings reach the deploy, checked as deploy checks its flags.
func TestServicesFileContainerAndPorts(t *testing.T) {
	want, _, err := decodeServicesFile([]byte("services:\n  web: {image: a, memory: 64MiB, ports: [http=8080, admin], volumes: [/srv:/srv:ro], restart: always, labels: {team: x}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := want[0].Deploy
	if portsLine(d.Ports) != "http=8080 admin" || !slices.Equal(d.GetContainer().GetVolumes(), []string{"/srv:/srv:ro"}) || d.GetContainer().GetRestart() != "always" || d.GetContainer().GetLabels()["team"] != "x" {
		t.Errorf("deploy = %v", d)
	}
	for file, msg := range map[string]string{
		"services:\n  web: {image: a, memory: 64MiB, ports: [http=70000]}\n": "services.web.ports",
		"services:\n  web: {image: a, memory: 64MiB, volumes: [x:y]}\n":      `services.web: volume "x:y"`,
		"services:\n  web: {image: a, memory: 64MiB, restart: sometimes}\n":  "services.web:",
	} {
		if _, _, err := decodeServicesFile([]byte(file)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error containing %q", file, err, msg)
		}
	}
}

// TestServicesFileBadInput: bad files are refused naming the service and
// the field path, and no service is returned when any is invalid.
// TestServicesFileQuotedBoolWords: a key YAML 1.1 would read as a bool is
// taken as written once quoted (a service named y), and a plain true is
// the name true, as written.
func TestServicesFileQuotedBoolWords(t *testing.T) {
	want, _, err := decodeServicesFile([]byte("services:\n  \"y\": {image: a, memory: 64MiB, labels: {'on': x}}\n  true: {image: a, memory: 64MiB}\n"))
	if err != nil || len(want) != 2 || want[0].Deploy.Service != "true" || want[1].Deploy.Service != "y" || want[1].Deploy.Container.GetLabels()["on"] != "x" {
		t.Fatalf("decode = %+v, %v; want services true and y, y with label on=x", want, err)
	}
}

func TestServicesFileBadInput(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"unknown key", "services:\n  web: {image: a, memory: 64MiB, imag: b}\n", `services.web: unknown key "imag"`},
		{"cpu not a number", "services:\n  web: {image: a, memory: 64MiB, cpu: abc}\n", `services.web.cpu: "abc" is not a number`},
		{"bad memory", "services:\n  web: {image: a, memory: lots}\n", `services.web.memory: "lots" is not a size`},
		{"no memory", "services:\n  web: {image: a}\n", `services.web.memory: missing`},
		{"no image", "services:\n  web: {memory: 64MiB}\n", `services.web.image: missing`},
		{"count type", "services:\n  web: {image: a, memory: 64MiB, count: many}\n", `services.web.count: a string where a whole number is wanted`},
		{"image read as a bool", "services:\n  web: {image: y, memory: 64MiB}\n", `services.web.image: a bool where a string is wanted (YAML read the value as a bool: quote it)`},
		{"image read as a number", "services:\n  web: {image: 1.5, memory: 64MiB}\n", `services.web.image: a number where a string is wanted (YAML read the value as a number: quote it)`},
		{"negative count", "services:\n  web: {image: a, memory: 64MiB, count: -1}\n", `services.web.count: -1`},
		{"cpu read as a bool", "services:\n  web: {image: a, memory: 64MiB, cpu: yes}\n", `services.web.cpu: a bool where a number or a string is wanted`},
		{"memory a list", "services:\n  web: {image: a, memory: [1]}\n", `services.web.memory: an array where a number or a string is wanted`},
		{"command of numbers", "services:\n  web: {image: a, memory: 64MiB, command: [1]}\n", `services.web.command: an array where a list of words or a string is wanted`},
		{"env of numbers", "services:\n  web: {image: a, memory: 64MiB, env: [1, 2]}\n", `services.web.env: an array where a list of K=V or a map of K: V is wanted`},
		{"image a list", "services:\n  web: {image: [a], memory: 64MiB}\n", `services.web.image: an array where a string is wanted`},
		{"bad strategy", "services:\n  web: {image: a, memory: 64MiB, strategy: some}\n", `services.web.strategy: "some"`},
		{"two probes", "services:\n  web: {image: a, memory: 64MiB, health: {tcp: 1, http: 2/}}\n", `services.web.health: want exactly one`},
		{"bad service name", "services:\n  a.b: {image: a, memory: 64MiB}\n", `services.a.b:`},
		{"one bad of two", "services:\n  a: {image: a, memory: 64MiB}\n  b: {image: a, memory: 64MiB, cpu: x}\n", `services.b.cpu`},
		{"top-level key", "services: {web: {image: a, memory: 64MiB, cpu: 1}}\nextra: 1\n", `unknown top-level key "extra"`},
		{"no services", "web: {}\n", `no services key`},
		{"compose memory", "services:\n  web: {image: a, environment: [A=1]}\n", `services.web.deploy.resources.limits.memory: missing`},
		{"compose cpus", "services:\n  web: {image: a, deploy: {resources: {limits: {cpus: x, memory: 64M}}}}\n", `services.web.deploy.resources.limits.cpus: "x" is not a number`},
		{"compose top-level cpus", "services:\n  web: {image: a, cpus: x, mem_limit: 64m}\n", `services.web.cpus: "x" is not a number`},
		{"compose mem_limit", "services:\n  web: {image: a, cpus: 1, mem_limit: 1x}\n", `services.web.mem_limit: "1x"`},
		{"compose mem_reservation", "services:\n  web: {image: a, mem_limit: 64m, mem_reservation: 1x}\n", `services.web.mem_reservation: "1x"`},
		{"service twice", "services:\n  web: {image: a, memory: 64MiB}\n  web: {image: b, memory: 64MiB}\n", `line 3: key "web" already set in map`},
		{"key in another case", "services:\n  web: {Image: a, memory: 64MiB}\n", `services.web: unknown key "Image"`},
		// A key of a nested map is named in that map, with its keys.
		{"unknown health key", "services:\n  hz: {image: a, memory: 64MiB, health: {http: 80/, tmeout: 3s}}\n",
			`services.hz.health: unknown key "tmeout" (known: cmd, http, tcp, timeout)`},
		{"health key in another case", "services:\n  hz: {image: a, memory: 64MiB, health: {http: 80/, Timeout: 3s}}\n",
			`services.hz.health: unknown key "Timeout" (known: cmd, http, tcp, timeout)`},
		{"bad constraint", "services:\n  web: {image: a, memory: 64MiB, constraint: \"(((\"}\n", `services.web.constraint: "(((": column`},
		{"bad network", "services:\n  web: {image: a, memory: 64MiB, network: \"container:foo\"}\n", `services.web.network:`},
		{"bad policy", "services:\n  web: {image: a, memory: 64MiB, placement_policy: weird}\n", `services.web.placement_policy: "weird"`},
		{"bad spread", "services:\n  web: {image: a, memory: 64MiB, domain_spread: weird}\n", `services.web.domain_spread: "weird"`},
		{"self anti-affinity", "services:\n  web: {image: a, memory: 64MiB, anti_affinity: [web]}\n", `services.web.anti_affinity: "web"`},
		{"compose variable", "services:\n  web: {image: \"${IMG:-nginx}\", deploy: {resources: {limits: {memory: 64M}}}}\n", `services.web.image: "${IMG:-nginx}": pinfold does not fill in compose variables`},
		{"service name read as a bool", "services:\n  web: {image: a, memory: 64MiB}\n  y: {image: a, memory: 64MiB}\n",
			`line 3: services.y: the key y is read as the bool true by YAML 1.1, as services files are read (a service would be named "true"): quote it, "y"`},
		{"label key read as a bool", "services:\n  web: {image: a, memory: 64MiB, labels: {Off: x}}\n", `line 2: services.web.labels.Off: the key Off is read as the bool false`},
		{"compose service read as a bool", "services:\n  no: {image: a, deploy: {resources: {limits: {memory: 64M}}}}\n", `services.no: the key no is read as the bool false`},
		{"compose build only", "services:\n  web: {build: ., deploy: {resources: {limits: {memory: 64M}}}}\n", `services.web.image: missing`},
		// Refused before anything is applied (issue 36: apply deployed
		// the file's other services first).
		{"service named like an instance", "services:\n  aaa-ok: {image: a, memory: 64MiB}\n  web-0123456789: {image: a, memory: 64MiB}\n",
			`services.web-0123456789: service name "web-0123456789": ends like an instance ID`},
		{"compose service named like an instance", "services:\n  web-0123456789: {image: a, deploy: {resources: {limits: {memory: 64M}}}}\n",
			`ends like an instance ID`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, _, err := decodeServicesFile([]byte(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) || want != nil {
				t.Errorf("decode = %v, %v; want an error containing %q and no services", want, err, tt.want)
			}
		})
	}
}

// TestSplitWords: a command string splits like a shell's words.
func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`redis-server --save ""`, []string{"redis-server", "--save", ""}},
		{`sh -c 'echo "a b"'`, []string{"sh", "-c", `echo "a b"`}},
		{`a\ b  c`, []string{"a b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got, err := splitWords(tt.in); err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("splitWords(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := splitWords(`a "b`); err == nil {
		t.Error(`splitWords("a \"b") succeeded; want an unclosed quote error`)
	}
}

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
			pl := []string{"--planner", addr}
			run := func(args ...string) (string, string, int) {
				t.Helper()
				return runCLI(t, "", append(args, pl...)...)
			}
			must := func(args ...string) string {
				t.Helper()
				out, errOut, code := run(args...)
				if code != 0 {
					t.Fatalf("pinfold %v: exit %d: %s%s", args, code, out, errOut)
				}
				return out
			}
			topo := topologyFile(t, "dual-xeon-gold-6230")
			must("host", "add", "a", "--topology", topo)
			must("host", "add", "b", "--topology", topo)
			// A third: the example's cache keeps off both hosts of web's
			// two instances (hard anti-affinity, deployed after web).
			must("host", "add", "c", "--topology", topo)
			src, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", tt.example))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), tt.example)
			if err := os.WriteFile(file, src, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, _, code := run("diff", "-f", file); code != exitUnmet {
				t.Errorf("diff before the first apply: exit %d, want 1 (changes)", code)
			}
			must("apply", "-f", file)
			if out := must("apply", "-f", file); !strings.Contains(out, "no changes") {
				t.Errorf("second apply:\n%s\nwant no changes", out)
			}
			if out := must("diff", "-f", file); !strings.Contains(out, "no changes") {
				t.Errorf("diff after apply:\n%s\nwant no changes", out)
			}
			if err := os.WriteFile(file, []byte(tt.edit(string(src))), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := run("diff", "-f", file, "-o", "json")
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
			must("apply", "-f", file)
			if out := must("diff", "-f", file); !strings.Contains(out, "no changes") {
				t.Errorf("diff after the second apply:\n%s\nwant no changes", out)
			}
			ps := must("ps", "--service", tt.service, "-o", "json")
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
	pl := []string{"--planner", addr}
	run := func(args ...string) (string, int) {
		t.Helper()
		out, errOut, code := runCLI(t, "", append(args, pl...)...)
		return out + errOut, code
	}
	must := func(args ...string) string {
		t.Helper()
		out, code := run(args...)
		if code != 0 {
			t.Fatalf("pinfold %v: exit %d: %s", args, code, out)
		}
		return out
	}
	must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
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
	must("apply", "-f", f)
	f = write("services:\n  web: {image: busybox, memory: 64MiB, count: 2, strategy: drained, env: [A=1]}\n")
	out, code := run("apply", "-f", f)
	if code != exitUnmet || !strings.Contains(out, "strategy auto → drained") || !strings.Contains(out, "needs remove + deploy") || !strings.Contains(out, "nothing was changed") {
		t.Errorf("apply of a strategy change: exit %d:\n%s\nwant exit 1 saying it needs remove + deploy", code, out)
	}
	out, code = run("diff", "-f", f)
	if code != exitUnmet || !strings.Contains(out, "recreate web") || !strings.Contains(out, "keep     other: not in the file, left alone") {
		t.Errorf("diff: exit %d:\n%s\nwant recreate web and other left alone", code, out)
	}
	must("apply", "-f", f, "--recreate", "--prune")
	if out := must("diff", "-f", f, "--prune"); !strings.Contains(out, "no changes") {
		t.Errorf("diff after apply --recreate --prune:\n%s\nwant no changes", out)
	}
	if out := must("ps", "-o", "json"); strings.Contains(out, `"other"`) {
		t.Errorf("other is still there after --prune:\n%s", out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("services:\n  web: {image: busybox, memory: 64MiB, count: 5, strategy: drained, env: [A=1]}\n  x: {image: busybox, memory: 64MiB, cpu: abc}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = run("apply", "-f", bad)
	if code != exitBadInput || !strings.Contains(out, `services.x.cpu: "abc" is not a number`) {
		t.Errorf("apply of a file with a bad service: exit %d:\n%s\nwant exit 2 naming services.x.cpu", code, out)
	}
	if out := must("diff", "-f", f); !strings.Contains(out, "no changes") {
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
			if out, code := run(verb, "-f", bad); code != exitBadInput || !strings.Contains(out, filepath.Join(dir, tc.want)) {
				t.Errorf("%s, %s: exit %d:\n%s\nwant exit 2 with %q", tc.name, verb, code, out, filepath.Join(dir, tc.want))
			}
		}
		if out := must("diff", "-f", f); !strings.Contains(out, "no changes") {
			t.Errorf("%s: a refused file changed something:\n%s", tc.name, out)
		}
	}
}

// TestOrderDeploysAfterRuleTargets: a new service is deployed after the
// new services its hard affinity or anti-affinity names, so the rule sees
// them (a trial found cache, anti-affine to web, deployed first by name and
// web then placed beside it).
func TestOrderDeploysAfterRuleTargets(t *testing.T) {
	dep := func(name string, aff, anti []string) step {
		return step{Service: name, Action: "deploy", deploy: &pinfoldv1.DeployRequest{Service: name, AffinityHard: aff, AntiAffinityHard: anti}}
	}
	got := orderDeploys([]step{dep("aa", nil, []string{"zz"}), dep("bb", []string{"yy"}, nil), dep("cc", nil, nil), dep("yy", nil, nil), dep("zz", nil, nil)})
	var names []string
	for _, s := range got {
		names = append(names, s.Service)
	}
	if want := "zz aa yy bb cc"; strings.Join(names, " ") != want {
		t.Errorf("deploy order %v, want %s", names, want)
	}
}

// TestApplyServiceAtCountZero: a service a services file holds at count 0
// still takes a new size and image from the file: apply changes its
// record (before, the planner refused the resize and the replace with
// "service has no instances" and the file never settled), diff then says
// no changes, and the instance a later count adds has the file's size and
// image.
func TestApplyServiceAtCountZero(t *testing.T) {
	must := mustCLI(t, startPlanner(t))
	must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	file, write := webFile(t, "")
	write("busybox:1", "1", 1)
	must("apply", "-f", file)
	write("busybox:1", "1", 0)
	must("apply", "-f", file)
	write("busybox:2", "2.5", 0)
	must("apply", "-f", file)
	if out := must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Fatalf("diff after applying a new size and image at count 0:\n%s\nwant no changes", out)
	}
	write("busybox:2", "2.5", 1)
	must("apply", "-f", file)
	ins := webInstances(t, must)
	if len(ins) != 1 || ins[0].Image != "busybox:2" || ins[0].CPUPlanned != "2.5" {
		t.Errorf("web after count 0 → 1: %+v, want one instance of busybox:2 planned 2.5 CPUs", ins)
	}
	if out := must("diff", "-f", file); !strings.Contains(out, "no changes") {
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
	run, must := runAt(t, addr), mustCLI(t, addr)
	must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	file, write := webFile(t, "bind: true")
	actions := func() []string {
		t.Helper()
		out, errOut, code := run("diff", "-f", file, "-o", "json")
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
	must("apply", "-f", file)
	write("busybox:2", "60", 0)
	if got, want := actions(), []string{"scale", "resize", "replace"}; !slices.Equal(got, want) {
		t.Errorf("diff to count 0: %v, want %v", got, want)
	}
	must("apply", "-f", file)
	if out := must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Fatalf("diff after the apply to count 0:\n%s\nwant no changes", out)
	}
	// A scale up stays last: the instances it adds get the new size.
	write("busybox:3", "2", 1)
	if got, want := actions(), []string{"resize", "replace", "scale"}; !slices.Equal(got, want) {
		t.Errorf("diff to count 1: %v, want %v", got, want)
	}
	must("apply", "-f", file)
	ins := webInstances(t, must)
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
	run, must := runAt(t, addr), mustCLI(t, addr)
	must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	file, write := webFile(t, "bind: true")
	write("busybox:1", "1", 2)
	must("apply", "-f", file)
	ins := webInstances(t, must)
	if len(ins) != 2 {
		t.Fatalf("web: %+v, want 2 instances", ins)
	}
	ahead, other := ins[0], ins[1]
	must("resize", ahead.ID, "--cpu", "+1", "--wait", "0")
	gen := map[string]int64{}
	for _, in := range webInstances(t, must) {
		gen[in.ID] = in.Generation
	}
	write("busybox:1", "2", 2)
	out, _, code := run("diff", "-f", file)
	if code != exitUnmet || strings.Count(out, "resize") != 1 || !strings.Contains(out, "cpu 1 → 2 (+1); 1 instance of another size to 2 (bound), 256 MiB: "+other.ID+" (1 (bound), 256 MiB)") {
		t.Errorf("diff: exit %d:\n%s\nwant one resize of web naming %s alone as of another size", code, out, other.ID)
	}
	must("apply", "-f", file)
	for _, in := range webInstances(t, must) {
		if in.CPUPlanned != "2" {
			t.Errorf("instance %s planned %s CPUs after apply, want 2", in.ID, in.CPUPlanned)
		}
		if moved := in.Generation != gen[in.ID]; moved == (in.ID == ahead.ID) {
			t.Errorf("instance %s: generation %d → %d; want a change for %s alone (%s was at the file's size)", in.ID, gen[in.ID], in.Generation, other.ID, ahead.ID)
		}
	}
	if out := must("diff", "-f", file); !strings.Contains(out, "no changes") {
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
func webInstances(t *testing.T, must func(args ...string) string) []webInstance {
	t.Helper()
	var ins []webInstance
	if err := json.Unmarshal([]byte(must("ps", "--service", "web", "-o", "json")), &ins); err != nil {
		t.Fatal(err)
	}
	return ins
}
