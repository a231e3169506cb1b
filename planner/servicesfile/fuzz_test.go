package servicesfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/model"
)

// FuzzServicesFile: Decode never panics on any bytes, and what it
// decodes is decided again the same way: a second Decode of the same bytes
// gives the same services, notes and error, and every service it returns
// passes the shared checks (name, checkWant) again.
func FuzzServicesFile(f *testing.F) {
	for _, name := range []string{"services.yaml", "compose.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	fixtures, err := filepath.Glob(filepath.Join("testdata", "compose", "*.yaml"))
	if err != nil || len(fixtures) == 0 {
		f.Fatalf("testdata/compose: %d fixtures, %v", len(fixtures), err)
	}
	for _, name := range fixtures {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"services:\n  web: {image: a, memory: 64MiB, ports: [http=8080, admin], volumes: [/srv:/srv:ro], restart: always}\n",
		"services:\n  web: {image: a, memory: 64MiB, cpu: 1.5, bind: true, count: 3, health: {http: 80/, timeout: 3s}}\n",
		"services:\n  web: {image: a, environment: [A=1], deploy: {replicas: 2, resources: {limits: {cpus: 0.5, memory: 64M}}}}\n",
		"services:\n  web: {image: a, ports: [\"8080:80\", \"53:53/udp\"], healthcheck: {test: [CMD, true]}, mem_limit: 1g}\n",
		`{"services": {"web": {"image": "a", "memory": 67108864, "command": "sh -c 'echo hi'"}}}`,
		"services:\n  y: {image: a, memory: 64MiB}\n",
		"services: {}\n---\nservices: {}\n",
		"x-d: &d {image: a, memory: 64MiB}\nservices:\n  web: {<<: *d, cpu: 2}\n",
		"services:\n  web: {image: a, mem_limit: 64m, user: \"1:1\", read_only: true, cap_drop: [ALL], labels: [a=b], logging: {driver: local}, deploy: {mode: global, placement: {constraints: [node.labels.a==b]}}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, notes, err := Decode(data)
		again, notes2, err2 := Decode(data)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("Decode twice: errors %v and %v", err, err2)
		}
		if !slices.Equal(notes, notes2) || len(want) != len(again) {
			t.Fatalf("Decode twice: %d services, notes %q; then %d, notes %q", len(want), notes, len(again), notes2)
		}
		if err != nil {
			if want != nil || notes != nil {
				t.Fatalf("Decode = %d services, notes %q with error %v; want none", len(want), notes, err)
			}
			return
		}
		for i, w := range want {
			if !proto.Equal(w.Deploy, again[i].Deploy) || w.Pull != again[i].Pull {
				t.Fatalf("Decode twice: service %d is %v, then %v", i, w.Deploy, again[i].Deploy)
			}
			if err := model.ValidateNewServiceName(w.Deploy.Service); err != nil {
				t.Fatalf("decoded service name %q: %v", w.Deploy.Service, err)
			}
			if err := checkWant(w.Key, w.Deploy, w.Pull); err != nil {
				t.Fatalf("decoded service %q does not check again: %v", w.Deploy.Service, err)
			}
		}
	})
}
