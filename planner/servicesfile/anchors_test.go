package servicesfile

import (
	"slices"
	"strings"
	"testing"
)

// TestExtensionsAndAnchors: both file kinds take top-level x- keys (read
// by neither: they hold YAML anchors) and anchors, aliases and merge keys,
// a key of the service overriding the merged one; a key given twice in
// one map is still refused.
func TestExtensionsAndAnchors(t *testing.T) {
	tests := []struct {
		name, file string
		memory     []int64 // per service, by name
		cpu        []string
		notes      int // how many notes
		err        string
	}{
		{name: "services file", file: "x-defaults: &d {image: a, memory: 64MiB, cpu: 1}\n" +
			"services:\n  api: *d\n  web:\n    <<: *d\n    memory: 128MiB\n",
			memory: []int64{64 << 20, 128 << 20}, cpu: []string{"1", "1"}},
		{name: "compose file", file: "x-limits: &lim {resources: {limits: {cpus: \"0.5\", memory: 64M}}}\nx-svc: &svc {image: a, deploy: *lim}\n" +
			"services:\n  api: *svc\n  web:\n    <<: *svc\n    mem_limit: 1g\n    deploy: {replicas: 2}\n",
			memory: []int64{64 << 20, 1 << 30}, cpu: []string{"0.5", "1"}, notes: 1},
		{name: "services file other top-level key", file: "defaults: {}\nservices: {web: {image: a, memory: 64MiB}}\n",
			err: `unknown top-level key "defaults"`},
		{name: "key twice beside a merge", file: "x-d: &d {image: a}\nservices:\n  web:\n    <<: *d\n    memory: 64MiB\n    memory: 128MiB\n",
			err: `line 6: key "memory" already set in map (services.web)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, notes, err := Decode([]byte(tt.file))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || want != nil {
					t.Errorf("Decode(%q) = %d services, %v; want an error containing %q", tt.file, len(want), err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%q): %v", tt.file, err)
			}
			var mem []int64
			var cpu []string
			for _, w := range want {
				mem, cpu = append(mem, w.Deploy.MemoryBytes), append(cpu, w.Deploy.Cpu)
			}
			if !slices.Equal(mem, tt.memory) || !slices.Equal(cpu, tt.cpu) {
				t.Errorf("Decode(%q): memory %v, cpu %v; want %v, %v", tt.file, mem, cpu, tt.memory, tt.cpu)
			}
			if len(notes) != tt.notes {
				t.Errorf("Decode(%q): notes %q, want %d (no x- key named)", tt.file, notes, tt.notes)
			}
		})
	}
}
