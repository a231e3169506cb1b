package servicesfile

import (
	"os"
	"path/filepath"
	"slices"
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
		{"compose.yaml", []string{"api", "db"}, []string{"compose: ignored top-level keys: volumes",
			"compose: api: ignored keys: depends_on"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			want, notes, err := Decode(data)
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
	want, _, err := Decode(data)
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
	vols, skipped, err := composeVolumes("services.web.volumes", []byte(`["/srv/data:/data", "cache:/cache:ro", "/anon", {"type": "bind", "source": "/etc/app", "target": "/etc/app", "read_only": true}, {"type": "tmpfs", "target": "/t"}]`))
	if want := []string{"/srv/data:/data", "cache:/cache:ro", "/etc/app:/etc/app:ro"}; err != nil || !slices.Equal(vols, want) {
		t.Errorf("volumes %q, %v; want %q", vols, err, want)
	}
	if len(skipped) != 2 {
		t.Errorf("skipped %q, want the anonymous volume and the tmpfs", skipped)
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
	want, _, err := Decode([]byte("services:\n  web: {image: a, memory: 64MiB, ports: [http=8080, admin], volumes: [/srv:/srv:ro], restart: always, labels: {team: x}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := want[0].Deploy
	if portsLine(d.Ports) != "http=8080 admin" || !slices.Equal(d.GetContainer().GetVolumes(), []string{"/srv:/srv:ro"}) || d.GetContainer().GetRestart() != "always" || d.GetContainer().GetLabels()["team"] != "x" {
		t.Errorf("deploy = %v", d)
	}
	tests := []struct{ name, file, want string }{
		{"port out of range", "services:\n  web: {image: a, memory: 64MiB, ports: [http=70000]}\n", "services.web.ports"},
		{"relative volume", "services:\n  web: {image: a, memory: 64MiB, volumes: [x:y]}\n", `services.web: volume "x:y"`},
		{"unknown restart", "services:\n  web: {image: a, memory: 64MiB, restart: sometimes}\n", "services.web:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Decode([]byte(tt.file)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode(%q) = %v, want an error containing %q", tt.file, err, tt.want)
			}
		})
	}
}

// TestServicesFileBadInput: bad files are refused naming the service and
// the field path, and no service is returned when any is invalid.
// TestServicesFileQuotedBoolWords: a key YAML 1.1 would read as a bool is
// taken as written once quoted (a service named y), and a plain true is
// the name true, as written.
func TestServicesFileQuotedBoolWords(t *testing.T) {
	want, _, err := Decode([]byte("services:\n  \"y\": {image: a, memory: 64MiB, labels: {'on': x}}\n  true: {image: a, memory: 64MiB}\n"))
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
		// Issue 39 item 6: the path was services.memory. (a trailing dot).
		{"key indented as a service", "services:\n  web:\n    image: a\n  memory: 64MiB\n", `services.memory: a string where a map is wanted`},
		{"list indented as a service", "services:\n  web: {image: a, memory: 64MiB}\n  env: [A=1]\n", `services.env: an array where a map is wanted`},
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
			want, _, err := Decode([]byte(tt.file))
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
