package servicesfile

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

// composeWeb is a compose file of one service web with the keys given
// (YAML flow map entries) besides its image and memory.
func composeWeb(keys string) string {
	return "services:\n  web: {image: a, mem_limit: 64m, " + keys + "}\n"
}

// TestComposeContainerKeys: each container key of a compose service
// reaches the deploy's container spec (issue 38 item 4: they were dropped
// with a note on stderr, so a hardened service ran as root with default
// capabilities and a writable root), and is no longer named as ignored.
func TestComposeContainerKeys(t *testing.T) {
	tests := []struct {
		name, keys string
		want       model.Container
	}{
		{"user", `user: "999:999"`, model.Container{User: "999:999"}},
		{"user as a number", `user: 1000`, model.Container{User: "1000"}},
		{"read_only", `read_only: true`, model.Container{ReadOnly: true}},
		{"read_only false", `read_only: false`, model.Container{}},
		{"cap_add", `cap_add: [NET_ADMIN, CAP_SYS_TIME]`, model.Container{CapAdd: []string{"NET_ADMIN", "CAP_SYS_TIME"}}},
		{"cap_drop", `cap_drop: [ALL]`, model.Container{CapDrop: []string{"ALL"}}},
		{"working_dir", `working_dir: /srv/app`, model.Container{Workdir: "/srv/app"}},
		{"labels as a list", `labels: [com.example.team=web, com.example.flag]`, model.Container{Labels: map[string]string{"com.example.team": "web", "com.example.flag": ""}}},
		{"labels as a map", `labels: {com.example.team: web, com.example.tier: 2}`, model.Container{Labels: map[string]string{"com.example.team": "web", "com.example.tier": "2"}}},
		{"logging", `logging: {driver: json-file, options: {max-size: 10m, max-file: 3}}`, model.Container{LogDriver: "json-file", LogOpts: map[string]string{"max-size": "10m", "max-file": "3"}}},
		{"logging driver only", `logging: {driver: journald}`, model.Container{LogDriver: "journald"}},
		{"unset isolation keys", `privileged: false, devices: [], pid: "", ipc: private, security_opt: [], userns_mode: ""`, model.Container{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := composeWeb(tt.keys)
			want, notes, err := Decode([]byte(file))
			if err != nil || len(want) != 1 {
				t.Fatalf("Decode(%q) = %d services, %v", file, len(want), err)
			}
			if diff := cmp.Diff(tt.want, want[0].Deploy.Model(0).Container); diff != "" {
				t.Errorf("Decode(%q): container (-want +got):\n%s", file, diff)
			}
			for _, n := range notes {
				if strings.Contains(n, "ignored") {
					t.Errorf("Decode(%q): note %q: want the key mapped, not ignored", file, n)
				}
			}
		})
	}
}

// TestComposeRefusals: a key that changes the container's isolation or
// confinement, which pinfold cannot honour, is refused naming its path
// and value, and no service is returned; so is a bad value of a mapped
// key, by its compose key.
func TestComposeRefusals(t *testing.T) {
	tests := []struct{ name, keys, want string }{
		{"privileged", `privileged: true`, `services.web.privileged: true: pinfold does not run privileged containers`},
		{"privileged not a bool", `privileged: "maybe"`, `services.web.privileged: a string where true or false is wanted`},
		{"devices", `devices: ["/dev/fuse:/dev/fuse"]`, `services.web.devices: [/dev/fuse:/dev/fuse]: pinfold passes no host devices`},
		{"pid host", `pid: host`, `services.web.pid: "host": pinfold runs each container in a PID namespace of its own`},
		{"pid of a service", `pid: "service:db"`, `services.web.pid: "service:db"`},
		{"ipc host", `ipc: host`, `services.web.ipc: "host": pinfold runs each container in an IPC namespace of its own`},
		{"userns_mode host", `userns_mode: host`, `services.web.userns_mode: "host"`},
		{"security_opt", `security_opt: ["no-new-privileges:true"]`, `services.web.security_opt: ["no-new-privileges:true"]: pinfold sets no security options`},
		{"cap_add ALL", `cap_add: [NET_ADMIN, ALL]`, `services.web.cap_add: "ALL": every capability is privileged in all but name`},
		{"cap_add CAP_ALL", `cap_add: [cap_all]`, `services.web.cap_add: "cap_all": every capability`},
		{"bad cap_drop", `cap_drop: [net-raw]`, `services.web.cap_drop: cap_drop "net-raw": want a capability's name`},
		{"relative working_dir", `working_dir: app`, `services.web.working_dir: workdir "app": not absolute`},
		{"bad user", `user: "a b"`, `services.web.user: user "a b": want NAME, UID`},
		{"reserved label", `labels: [io.pinfold.x=1]`, `services.web.labels: label key "io.pinfold.x": the prefix io.pinfold. is pinfold's own`},
		{"bad log driver", `logging: {driver: "-x"}`, `services.web.logging.driver: log_driver "-x"`},
		// Compose fills in $VAR as it does ${VAR}: taken as written, the
		// directory would be the text $DIR.
		{"variable without braces", `working_dir: "$DIR"`, `services.web.working_dir: "$DIR": pinfold does not fill in compose variables ($VAR, ${...})`},
		{"variable in a command", `command: "echo $HOME"`, `services.web.command: "echo $HOME": pinfold does not fill in`},
		{"bad log option", `logging: {driver: local, options: {"a b": 1}}`, `services.web.logging.options: log_opt key "a b"`},
		// Issue 39 item 5: dropped with a note, the container started
		// without its settings or its data.
		{"env_file", `env_file: .env`, `services.web.env_file: ".env": pinfold reads no env files (it has no project directory on the hosts): move the variables under environment:`},
		{"env_file list", `env_file: [a.env, b.env]`, `services.web.env_file: ["a.env","b.env"]: pinfold reads no env files`},
		{"relative bind volume", `volumes: ["./gitea:/data"]`, `services.web.volumes[0]: "./gitea:/data": a host path relative to the compose file: pinfold has no project directory on the hosts`},
		{"parent bind volume", `volumes: [/srv/a:/a, "../x:/x"]`, `services.web.volumes[1]: "../x:/x": a host path relative`},
		{"home bind volume", `volumes: ["~/x:/x"]`, `services.web.volumes[0]: "~/x:/x": a host path relative`},
		// A GPU job run without its GPU: the reservation was dropped
		// without a note.
		{"reserved devices", `deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]}}}`,
			`services.web.deploy.resources.reservations.devices: [{"capabilities":["gpu"],"count":1,"driver":"nvidia"}]: pinfold passes no devices (GPUs or others) into a container`},
		{"reserved generic resources", `deploy: {resources: {reservations: {generic_resources: [{discrete_resource_spec: {kind: gpu, value: 2}}]}}}`,
			`services.web.deploy.resources.reservations.generic_resources: [{"discrete_resource_spec":{"kind":"gpu","value":2}}]: pinfold plans CPUs and memory only`},
		{"relative long bind volume", `volumes: [{type: bind, source: ./pg, target: /pg}]`, `services.web.volumes[0]: {"source":"./pg","target":"/pg","type":"bind"}: a host path relative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := composeWeb(tt.keys)
			want, _, err := Decode([]byte(file))
			if err == nil || !strings.Contains(err.Error(), tt.want) || want != nil {
				t.Errorf("Decode(%q) = %d services, %v; want an error containing %q and no services", file, len(want), err, tt.want)
			}
		})
	}
}

// TestComposeDeployModeAndPlacement: deploy.mode global is strategy each
// with one instance per host; deploy.placement's constraints pinfold's
// language can say become the service's constraint, and its per-node cap
// max_per_host; what cannot be honoured is refused naming its key.
func TestComposeDeployModeAndPlacement(t *testing.T) {
	tests := []struct {
		name, keys string
		count      int
		want       model.Deploy // Scheduling and Rules.Constraint compared
		err        string
	}{
		{name: "replicated", keys: `deploy: {mode: replicated, replicas: 3}`, count: 3},
		{name: "global", keys: `deploy: {mode: global}`, count: 1, want: model.Deploy{Scheduling: model.Scheduling{Strategy: "each"}}},
		{name: "global and x-pinfold-strategy each", keys: `deploy: {mode: global}, x-pinfold-strategy: each`, count: 1, want: model.Deploy{Scheduling: model.Scheduling{Strategy: "each"}}},
		{name: "global with replicas", keys: `deploy: {mode: global, replicas: 2}`,
			err: `services.web.deploy.replicas: 2: deploy.mode global runs one instance per host: compose refuses both keys`},
		{name: "global and another strategy", keys: `deploy: {mode: global}, x-pinfold-strategy: fill`,
			err: `services.web.x-pinfold-strategy: "fill": deploy.mode global is strategy each`},
		{name: "a job", keys: `deploy: {mode: replicated-job}`, err: `services.web.deploy.mode: "replicated-job": want replicated or global`},
		{name: "label constraints", keys: `deploy: {placement: {constraints: ["node.labels.disk == ssd", "node.labels.zone!=b"]}}`, count: 1,
			want: model.Deploy{Rules: model.Rules{Constraint: `disk == "ssd" && zone != "b"`}}},
		{name: "hostname constraint", keys: `deploy: {placement: {constraints: [node.hostname==h2]}}`, count: 1,
			want: model.Deploy{Rules: model.Rules{Constraint: `HostName == "h2"`}}},
		{name: "role constraint", keys: `deploy: {placement: {constraints: [node.role == manager]}}`,
			err: `services.web.deploy.placement.constraints[0]: "node.role == manager": pinfold hosts have no node.role`},
		{name: "constraint without an operator", keys: `deploy: {placement: {constraints: [node.labels.disk]}}`,
			err: `services.web.deploy.placement.constraints[0]: "node.labels.disk": want NAME == VALUE`},
		{name: "constraint with a quote", keys: `deploy: {placement: {constraints: ["node.labels.a == \"x\""]}}`,
			err: `services.web.deploy.placement.constraints[0]: "node.labels.a == \"x\"": a value with a quote`},
		{name: "max_replicas_per_node", keys: `deploy: {replicas: 4, placement: {max_replicas_per_node: 2}}`, count: 4,
			want: model.Deploy{Scheduling: model.Scheduling{MaxPerHost: 2}}},
		{name: "max_replicas_per_node and x-pinfold-max-per-host", keys: `deploy: {placement: {max_replicas_per_node: 2}}, x-pinfold-max-per-host: 3`,
			err: `services.web.deploy.placement.max_replicas_per_node: 2: services.web.x-pinfold-max-per-host says 3`},
		{name: "negative max_replicas_per_node", keys: `deploy: {placement: {max_replicas_per_node: -1}}`,
			err: `services.web.deploy.placement.max_replicas_per_node: -1: want 0 (no cap)`},
		// Issue 39 item 5: scale was ignored with a note (1 instance).
		{name: "scale", keys: `scale: 3`, count: 3},
		{name: "scale 0", keys: `scale: 0`, count: 0},
		{name: "scale and the same replicas", keys: `scale: 3, deploy: {replicas: 3}`, count: 3},
		{name: "scale and other replicas", keys: `scale: 3, deploy: {replicas: 2}`,
			err: `services.web.scale: 3: deploy.replicas says 2: compose refuses two counts, give one of them`},
		{name: "scale and global", keys: `scale: 3, deploy: {mode: global}`,
			err: `services.web.scale: 3: deploy.mode global runs one instance per host`},
		{name: "negative scale", keys: `scale: -1`, err: `services.web.scale: -1: want 0 to`},
		{name: "scale not a number", keys: `scale: many`, err: `services.web.scale: a string where`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := composeWeb(tt.keys)
			want, _, err := Decode([]byte(file))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || want != nil {
					t.Errorf("Decode(%q) = %d services, %v; want an error containing %q and no services", file, len(want), err, tt.err)
				}
				return
			}
			if err != nil || len(want) != 1 {
				t.Fatalf("Decode(%q) = %d services, %v", file, len(want), err)
			}
			got := want[0].Deploy
			if int(got.Count) != tt.count {
				t.Errorf("Decode(%q): count %d, want %d", file, got.Count, tt.count)
			}
			m := got.Model(0)
			if diff := cmp.Diff(tt.want.Scheduling, m.Scheduling); diff != "" {
				t.Errorf("Decode(%q): scheduling (-want +got):\n%s", file, diff)
			}
			if m.Rules.Constraint != tt.want.Rules.Constraint {
				t.Errorf("Decode(%q): constraint %q, want %q", file, m.Rules.Constraint, tt.want.Rules.Constraint)
			}
		})
	}
}

// TestComposeNotesWhatItIgnores: keys pinfold has no form for (ulimits,
// pids_limit: model.Container has neither) are named in the notes, as are
// deploy's, its placement's and healthcheck's; extension keys (x-) are
// not.
func TestComposeNotesWhatItIgnores(t *testing.T) {
	file := "x-defaults: &d {restart: always}\nname: shop\nservices:\n  web: {image: a, mem_limit: 64m, ulimits: {nofile: 1024}, pids_limit: 100, x-team: web,\n" +
		"    healthcheck: {test: [CMD, ok], interval: 5s},\n" +
		"    deploy: {update_config: {parallelism: 1}, placement: {preferences: [{spread: node.labels.zone}]}}}\n"
	_, notes, err := Decode([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"compose: web: no CPU limit: 1 CPU (a memory-first quota)",
		"compose: web: ignored keys: pids_limit, ulimits, deploy.update_config, deploy.placement.preferences, healthcheck.interval"}
	if diff := cmp.Diff(want, notes); diff != "" {
		t.Errorf("Decode(%q): notes (-want +got):\n%s", file, diff)
	}
}

// TestComposeDollarEscape (issue 39 item 5): $$ is compose's escape of a
// dollar sign, and the value holds one $ (PRICE: "$$5" was stored as
// $$5); a key is left as written.
func TestComposeDollarEscape(t *testing.T) {
	tests := []struct{ name, keys, env, command string }{
		{"environment map", `environment: {PRICE: "$$5"}`, "PRICE=$5", ""},
		{"environment list", `environment: ["A=$$$$", "B=x$$y"]`, "A=$$ B=x$y", ""},
		{"command", `command: ["sh", "-c", "echo $$HOME"]`, "", "sh -c echo $HOME"},
		{"a lone dollar", `environment: {A: "5$"}`, "A=5$", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := composeWeb(tt.keys)
			want, _, err := Decode([]byte(file))
			if err != nil || len(want) != 1 {
				t.Fatalf("Decode(%q) = %d services, %v", file, len(want), err)
			}
			if got := strings.Join(want[0].Deploy.Env, " "); got != tt.env {
				t.Errorf("Decode(%q): env %q, want %q", file, got, tt.env)
			}
			if got := strings.Join(want[0].Deploy.Command, " "); got != tt.command {
				t.Errorf("Decode(%q): command %q, want %q", file, got, tt.command)
			}
		})
	}
}

// TestComposeNotesResourceKeys: deploy.resources keys pinfold does not
// map are named in the notes (they were dropped without one):
// limits.pids (as pids_limit: pinfold sets no PID limit),
// reservations.cpus (a hint; pinfold plans the CPU limit), and any
// unknown key; reservations.memory is the soft memory, and empty device
// lists are what pinfold runs: no note.
func TestComposeNotesResourceKeys(t *testing.T) {
	tests := []struct {
		name, keys, ignored string // ignored: "" for no note
		soft                string
	}{
		{"limits.pids", `deploy: {resources: {limits: {pids: 100}}}`, "deploy.resources.limits.pids", ""},
		{"reservations.cpus", `deploy: {resources: {reservations: {cpus: "0.5", memory: 32m}}}`, "deploy.resources.reservations.cpus", "32 MiB"},
		{"an unknown key in limits", `deploy: {resources: {limits: {gpus: 1}}}`, "deploy.resources.limits.gpus", ""},
		{"an unknown key in resources", `deploy: {resources: {claims: [a]}}`, "deploy.resources.claims", ""},
		{"reservations.memory, empty devices", `deploy: {resources: {reservations: {memory: 32m, devices: [], generic_resources: []}}}`, "", "32 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := composeWeb(tt.keys)
			want, notes, err := Decode([]byte(file))
			if err != nil || len(want) != 1 {
				t.Fatalf("Decode(%q) = %d services, %v", file, len(want), err)
			}
			var got string
			for _, n := range notes {
				if k, ok := strings.CutPrefix(n, "compose: web: ignored keys: "); ok {
					got = k
				}
			}
			if got != tt.ignored {
				t.Errorf("Decode(%q): ignored keys %q (notes %q), want %q", file, got, notes, tt.ignored)
			}
			if soft := alloc.FormatBytes(want[0].Deploy.MemorySoftBytes); tt.soft != "" && soft != tt.soft {
				t.Errorf("Decode(%q): memory_soft %s, want %s", file, soft, tt.soft)
			}
		})
	}
}

// TestComposeSizeGivenTwice: cpus, mem_limit or mem_reservation with a
// deploy.resources key of another value for the same limit was taken
// from the deploy key without a word; it is refused naming both keys, as
// compose refuses it. The same value, however written, is taken.
func TestComposeSizeGivenTwice(t *testing.T) {
	tests := []struct {
		name, keys string
		want       string // "": decoded
	}{
		{"cpus", `cpus: 1, deploy: {resources: {limits: {cpus: "2"}}}`,
			`services.web.cpus: "1": deploy.resources.limits.cpus says "2": compose refuses two values of one limit, give one of them`},
		{"mem_limit", `deploy: {resources: {limits: {memory: 128m}}}`,
			`services.web.mem_limit: "64m": deploy.resources.limits.memory says "128m": compose refuses two values`},
		{"mem_reservation", `mem_reservation: 32m, deploy: {resources: {reservations: {memory: 16m}}}`,
			`services.web.mem_reservation: "32m": deploy.resources.reservations.memory says "16m"`},
		{"a bad value under the deploy key", `cpus: 1, deploy: {resources: {limits: {cpus: "x"}}}`,
			`services.web.deploy.resources.limits.cpus: "x" is not a number`},
		{"the same values", `cpus: 1.0, mem_reservation: 32m, deploy: {resources: {limits: {cpus: "1", memory: 64MiB}, reservations: {memory: 32M}}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := composeWeb(tt.keys)
			want, _, err := Decode([]byte(file))
			if tt.want == "" {
				if err != nil || len(want) != 1 {
					t.Errorf("Decode(%q) = %d services, %v; want the service", file, len(want), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || want != nil {
				t.Errorf("Decode(%q) = %d services, %v; want an error containing %q and no services", file, len(want), err, tt.want)
			}
		})
	}
}
