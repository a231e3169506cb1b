package servicesfile

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// serviceLine is what a compose service became, in one line: count,
// strategy, cpu, memory, soft memory, command, health, ports and the
// container's settings that are set.
func serviceLine(w Service) string {
	d := w.Deploy
	m := d.Model(0)
	parts := []string{fmt.Sprintf("%s: count %d cpu %s memory %d", d.Service, d.Count, d.Cpu, d.MemoryBytes)}
	add := func(name string, v any, set bool) {
		if set {
			parts = append(parts, fmt.Sprintf("%s %v", name, v))
		}
	}
	add("strategy", m.Strategy, m.Strategy != "")
	add("soft", d.MemorySoftBytes, d.MemorySoftBytes != 0)
	add("image", d.Image, true)
	add("command", strings.Join(d.Command, " "), len(d.Command) > 0)
	add("env", strings.Join(d.Env, " "), len(d.Env) > 0)
	if h := m.Health; h != nil {
		add("health", strings.Join(h.Exec, " "), true)
	}
	add("ports", portsLine(d.Ports), len(d.Ports) > 0)
	c := m.Container
	add("volumes", strings.Join(c.Volumes, " "), len(c.Volumes) > 0)
	add("restart", c.Restart, c.Restart != "")
	add("user", c.User, c.User != "")
	add("read_only", c.ReadOnly, c.ReadOnly)
	add("cap_add", c.CapAdd, len(c.CapAdd) > 0)
	add("cap_drop", c.CapDrop, len(c.CapDrop) > 0)
	return strings.Join(parts, ", ")
}

// TestComposeFixtures reads compose files written after popular
// projects' own (testdata/compose: each names its source and what was
// added for pinfold) and checks what each service becomes, the notes on
// what is ignored, or the error that refuses the file, and why.
func TestComposeFixtures(t *testing.T) {
	tests := []struct {
		file     string
		services []string // serviceLine of each, by name
		notes    []string
		err      string
		// edits are old, new pairs replaced in the file before it is
		// read: what a user writes to make a refused file pinfold's.
		edits []string
	}{
		// Issue 39 item 5: relative bind mounts are refused (the data
		// would silently be missing); with absolute paths the file is read.
		{file: "prometheus-grafana.yaml", err: `services.grafana.volumes[0]: "./grafana:/etc/grafana/provisioning/datasources": a host path relative to the compose file`},
		{file: "prometheus-grafana.yaml", edits: []string{"./grafana:", "/srv/grafana:", "./prometheus:", "/srv/prometheus:"}, services: []string{
			"grafana: count 1 cpu 1 memory 268435456, image grafana/grafana, env GF_SECURITY_ADMIN_USER=admin GF_SECURITY_ADMIN_PASSWORD=grafana, ports p3000=3000:3000, volumes /srv/grafana:/etc/grafana/provisioning/datasources, restart unless-stopped",
			"prometheus: count 1 cpu 1 memory 536870912, image prom/prometheus, command --config.file=/etc/prometheus/prometheus.yml, ports p9090=9090:9090, volumes /srv/prometheus:/etc/prometheus prom_data:/prometheus, restart unless-stopped",
		}, notes: []string{
			"compose: ignored top-level keys: volumes",
			"compose: grafana: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: grafana: ignored keys: container_name",
			"compose: prometheus: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: prometheus: ignored keys: container_name",
		}},
		{file: "gitea-postgres.yaml", services: []string{
			"db: count 1 cpu 1 memory 536870912, image postgres:alpine, env POSTGRES_USER=gitea POSTGRES_PASSWORD=gitea POSTGRES_DB=gitea, volumes db_data:/var/lib/postgresql/data, restart always",
			"gitea: count 1 cpu 1 memory 1073741824, image gitea/gitea:latest, env DB_TYPE=postgres DB_HOST=db:5432 DB_NAME=gitea DB_USER=gitea DB_PASSWD=gitea, ports p3000=3000:3000, volumes git_data:/data, restart always",
		}, notes: []string{
			"compose: ignored top-level keys: volumes",
			"compose: db: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: db: ignored keys: expose",
			"compose: gitea: no CPU limit: 1 CPU (a memory-first quota)",
		}},
		// Refused as a whole: netdata's AppArmor confinement lifted
		// (security_opt) cannot be run as written, and nothing of the file
		// is applied.
		{file: "netdata.yaml", err: `services.netdata.security_opt: ["apparmor:unconfined"]: pinfold sets no security options`},
		// Health checks (CMD and CMD-SHELL), string commands split as a
		// shell would, ports on 127.0.0.1 named as ignored; env_file and
		// relative bind mounts refused (issue 39 item 5), and read once
		// written out.
		{file: "mastodon.yaml", err: `services.sidekiq.env_file: ".env.production": pinfold reads no env files`},
		{file: "mastodon.yaml", edits: []string{"env_file: .env.production", "", "./postgres14:", "/srv/postgres14:", "./redis:", "/srv/redis:", "./public/", "/srv/public/"}, services: []string{
			"db: count 1 cpu 1 memory 1073741824, image postgres:14-alpine, env POSTGRES_HOST_AUTH_METHOD=trust, health pg_isready -U postgres, volumes /srv/postgres14:/var/lib/postgresql/data, restart always",
			"redis: count 1 cpu 1 memory 268435456, image redis:7-alpine, health redis-cli ping, volumes /srv/redis:/data, restart always",
			"sidekiq: count 1 cpu 1.5 memory 1073741824, image ghcr.io/mastodon/mastodon:v4.3.17, command bundle exec sidekiq, health sh -c ps aux | grep '[s]idekiq 6' || false, volumes /srv/public/system:/mastodon/public/system, restart always",
			"streaming: count 1 cpu 1 memory 536870912, image ghcr.io/mastodon/mastodon-streaming:v4.3.17, command node ./streaming/index.js, health sh -c curl -s --noproxy localhost localhost:4000/api/v1/streaming/health | grep -q 'OK' || exit 1, restart always",
			"web: count 1 cpu 2 memory 2147483648, image ghcr.io/mastodon/mastodon:v4.3.17, command bundle exec puma -C config/puma.rb, health sh -c curl -s --noproxy localhost localhost:3000/health | grep -q 'OK' || exit 1, volumes /srv/public/system:/mastodon/public/system, restart always",
		}, notes: []string{
			"compose: ignored top-level keys: networks",
			"compose: db: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: db: ignored keys: networks, shm_size",
			"compose: redis: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: redis: ignored keys: networks",
			"compose: sidekiq: ignored keys: depends_on, networks",
			"compose: streaming: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: streaming: ignored keys: depends_on, networks, ports: 127.0.0.1:4000:4000 (pinfold publishes TCP ports: HOST:CONTAINER or CONTAINER, no host address or range)",
			"compose: web: ignored keys: depends_on, networks, ports: 127.0.0.1:3000:3000 (pinfold publishes TCP ports: HOST:CONTAINER or CONTAINER, no host address or range)",
		}},
		// x- extension fields holding anchors, merged into each service
		// (<<: *restart_policy) and into health checks; the x- keys are
		// not named as ignored.
		{file: "sentry-self-hosted.yaml", err: `services.postgres.volumes[1]: {"read_only":true,"source":"./postgres/","target":"/opt/sentry/","type":"bind"}: a host path relative`},
		{file: "sentry-self-hosted.yaml", edits: []string{"source: ./postgres/", "source: /srv/sentry/postgres/"}, services: []string{
			"memcached: count 1 cpu 1 memory 268435456, image memcached:1.6.26-alpine, command -I 1M, health sh -c echo stats | nc 127.0.0.1 11211, restart unless-stopped",
			"postgres: count 1 cpu 2 memory 1073741824, soft 536870912, image postgres:14.11, command /opt/sentry/postgres-entrypoint.sh postgres -c wal_level=logical -c max_replication_slots=1 -c max_wal_senders=1 -c max_connections=100, env POSTGRES_HOST_AUTH_METHOD=trust, health sh -c pg_isready -U postgres, volumes sentry-postgres:/var/lib/postgresql/data /srv/sentry/postgres/:/opt/sentry/:ro, restart unless-stopped",
			"redis: count 1 cpu 1 memory 268435456, image redis:6.2.14-alpine, health sh -c redis-cli ping, volumes sentry-redis:/data, restart unless-stopped",
			"smtp: count 1 cpu 1 memory 268435456, image tianon/exim4, volumes sentry-smtp:/var/spool/exim4 sentry-smtp-log:/var/log/exim4, restart unless-stopped",
		}, notes: []string{
			"compose: ignored top-level keys: volumes",
			"compose: memcached: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: memcached: ignored keys: healthcheck.interval, healthcheck.retries, healthcheck.start_period",
			"compose: postgres: entrypoint runs as the start of the command (an image's own ENTRYPOINT still comes first)",
			"compose: postgres: ignored keys: healthcheck.interval, healthcheck.retries, healthcheck.start_period",
			"compose: redis: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: redis: ignored keys: ulimits, healthcheck.interval, healthcheck.retries, healthcheck.start_period",
			"compose: smtp: no CPU limit: 1 CPU (a memory-first quota)",
			"compose: smtp: ignored keys: platform",
		}},
	}
	// Every fixture has a row: one added without is no fixture.
	files, err := filepath.Glob(filepath.Join("testdata", "compose", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, tt := range tests {
		rows = append(rows, filepath.Join("testdata", "compose", tt.file))
	}
	if diff := cmp.Diff(files, slices.Compact(slices.Sorted(slices.Values(rows)))); diff != "" {
		t.Errorf("testdata/compose files (-on disk +rows):\n%s", diff)
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "compose", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(tt.edits); i += 2 {
				data = []byte(strings.ReplaceAll(string(data), tt.edits[i], tt.edits[i+1]))
			}
			want, notes, err := Decode(data)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || want != nil {
					t.Errorf("Decode(%s) = %d services, %v; want an error containing %q and no services", tt.file, len(want), err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.file, err)
			}
			var got []string
			for _, w := range want {
				got = append(got, serviceLine(w))
			}
			if diff := cmp.Diff(tt.services, got); diff != "" {
				t.Errorf("Decode(%s): services (-want +got):\n%s", tt.file, diff)
			}
			if diff := cmp.Diff(tt.notes, notes); diff != "" {
				t.Errorf("Decode(%s): notes (-want +got):\n%s", tt.file, diff)
			}
		})
	}
}
