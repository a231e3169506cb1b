package servicesfile

import (
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestSchedulingKeys: every model.Scheduling field is a key of a pinfold
// services file and an x-pinfold- key of a compose file, read into the
// deploy with no code of its own (the json tag), and refused with its
// path when its value is wrong. Guard: the table covers every field.
func TestSchedulingKeys(t *testing.T) {
	keys, _ := schedulingFields()
	if len(keys) < 3 {
		t.Fatalf("scheduling fields %v: the test checks too little", keys)
	}
	covered := map[string]bool{}
	tests := []struct {
		key, file, compose string // the value as YAML in each file kind
		check              func(model.Scheduling) bool
	}{
		{"strategy", "fill", "fill", func(s model.Scheduling) bool { return s.Strategy == "fill" }},
		{"max_per_host", "3", "3", func(s model.Scheduling) bool { return s.MaxPerHost == 3 }},
		{"priority", "batch", "-200", func(s model.Scheduling) bool { return s.Priority == model.PriorityBatch || s.Priority == -200 }},
		{"never_preempted", "true", "true", func(s model.Scheduling) bool { return s.NeverPreempted }},
	}
	for _, tt := range tests {
		covered[tt.key] = true
		t.Run(tt.key, func(t *testing.T) {
			for _, f := range []string{
				"services:\n  web: {image: a, memory: 64MiB, " + tt.key + ": " + tt.file + "}\n",
				"services:\n  web: {image: a, mem_limit: 64m, " + composeKey(tt.key) + ": " + tt.compose + "}\n",
			} {
				want, notes, err := Decode([]byte(f))
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				got := want[0].Deploy.Model(0).Scheduling
				if !tt.check(got) {
					t.Errorf("%s: read %+v", f, got)
				}
				for _, n := range notes {
					if strings.Contains(n, "ignored keys") {
						t.Errorf("%s: %s", f, n)
					}
				}
			}
		})
	}
	for _, k := range keys {
		if !covered[k] {
			t.Errorf("scheduling key %s has no case here", k)
		}
	}
	for _, tt := range []struct{ name, file, want string }{
		{"negative max_per_host", "services:\n  web: {image: a, memory: 64MiB, max_per_host: -1}\n", `services.web.max_per_host: -1: want 0 (no cap) to 2147483647`},
		{"compose negative max", "services:\n  web: {image: a, mem_limit: 64m, x-pinfold-max-per-host: -1}\n", `services.web.x-pinfold-max-per-host: -1: want 0 (no cap) to 2147483647`},
		{"unknown priority", "services:\n  web: {image: a, memory: 64MiB, priority: urgent}\n", `services.web.priority: "urgent": want system, production, batch, best-effort or an integer from -100000 to 100000`},
		{"compose unknown priority", "services:\n  web: {image: a, mem_limit: 64m, x-pinfold-priority: urgent}\n", `services.web.x-pinfold-priority: "urgent": want system, production, batch, best-effort or an integer`},
		{"compose priority past the range", "services:\n  web: {image: a, mem_limit: 64m, x-pinfold-priority: 99999999999}\n", `services.web.x-pinfold-priority: 99999999999: want -100000 to 100000`},
		{"compose bad strategy", "services:\n  web: {image: a, mem_limit: 64m, x-pinfold-strategy: spread}\n", `services.web.x-pinfold-strategy: "spread": want auto`},
		{"priority out of range", "services:\n  web: {image: a, memory: 64MiB, priority: 100001}\n", `services.web.priority: 100001: want -100000 to 100000`},
		{"pinfold's priority key in a compose file", "services:\n  web: {image: a, mem_limit: 64m, priority: system}\n", `services.web: unknown key "mem_limit"`},
		{"max_per_host past int32", "services:\n  web: {image: a, memory: 64MiB, max_per_host: 3000000000}\n", `services.web.max_per_host: 3000000000: want 0 (no cap) to 2147483647`},
		{"priority a fraction", "services:\n  web: {image: a, memory: 64MiB, priority: 1.5}\n", `services.web.priority: 1.5: want system, production, batch, best-effort or an integer`},
		{"max_per_host a word", "services:\n  web: {image: a, memory: 64MiB, max_per_host: many}\n", `services.web.max_per_host: a string where a whole number is wanted`},
		{"unknown x-pinfold key", "services:\n  web: {image: a, mem_limit: 64m, x-pinfold-prio: 1}\n", `services.web: unknown key "x-pinfold-prio" (pinfold's compose keys: x-pinfold-max-per-host, x-pinfold-never-preempted, x-pinfold-priority, x-pinfold-strategy)`},
		{"never_preempted for batch", "services:\n  web: {image: a, memory: 64MiB, priority: batch, never_preempted: true}\n", `services.web.never_preempted: true: only for a priority of production (0) or higher, not batch`},
		{"compose never-preempted for best-effort", "services:\n  web: {image: a, mem_limit: 64m, x-pinfold-priority: best-effort, x-pinfold-never-preempted: true}\n", `services.web.x-pinfold-never-preempted: true: only for a priority of production (0) or higher, not best-effort`},
		{"never_preempted a word", "services:\n  web: {image: a, memory: 64MiB, never_preempted: always}\n", `services.web.never_preempted`},
		{"known keys list it", "services:\n  web: {image: a, memory: 64MiB, prio: 1}\n", `priority`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Decode([]byte(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestSchedulingChanges: the diff names each scheduling field that
// differs between the record and the file, zero values by their names.
func TestSchedulingChanges(t *testing.T) {
	rec := &pinfoldv1.ServiceRecord{Name: "web", Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Strategy: "auto", Count: 1, ShareBase: 100}
	ins := []*pinfoldv1.Instance{{Id: "web-1", Service: "web", Image: "img", MemoryBytes: 1 << 30, CpuQuotaPieces: 100, ShareBase: 100}}
	for _, tt := range []struct {
		name string
		set  func(*pinfoldv1.DeployRequest)
		want string
	}{
		{"same", func(*pinfoldv1.DeployRequest) {}, ""},
		{"strategy", func(d *pinfoldv1.DeployRequest) { d.Strategy = "drained" }, "strategy auto → drained"},
		{"max per host", func(d *pinfoldv1.DeployRequest) { d.MaxPerHost = 2 }, "max_per_host no cap → 2"},
		{"priority", func(d *pinfoldv1.DeployRequest) { d.Priority = int32(model.PriorityBatch) }, "priority production → batch"},
		{"never preempted", func(d *pinfoldv1.DeployRequest) { d.NeverPreempted = true }, "never_preempted false → true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &pinfoldv1.DeployRequest{Service: "web", Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Count: 1}
			tt.set(d)
			_, blocked := diffService(Service{Deploy: d}, rec, ins)
			if got := strings.Join(blocked, "; "); got != tt.want {
				t.Errorf("blocked %q, want %q", got, tt.want)
			}
		})
	}
}
