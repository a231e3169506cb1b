package main

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestResizeReplaceAtCountZeroSay: resize and replace of a service scaled
// to 0 say what its record now holds and print no progress for hosts
// they do not wait for (they said "resized 0 instances in the plan;
// waiting for their hosts…", "applied on 0/0 instances" and "the new
// size" without the size). A refused resize or replace changes nothing.
func TestResizeReplaceAtCountZeroSay(t *testing.T) {
	pf := newCLI(t, startPlanner(t))
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	pf.Must("deploy", "web", "--count", "1", "--cpu", "0.5", "--bind", "--memory", "64MiB", "--image", "busybox:1")
	pf.Must("scale", "web", "--count", "0")
	tests := []struct {
		args      []string
		wantOut   string // on stdout
		notStderr string // not on stderr
	}{
		{[]string{"resize", "web", "--cpu", "+1", "--memory", "+256MiB"},
			"service web has no instances: its record is now 1.5 CPUs (bound) and 320 MiB, which the instances a scale adds get", "waiting for their hosts"},
		{[]string{"replace", "web", "--image", "busybox:2"},
			"service web has no instances: its record has image busybox:2, which the instances a scale adds get", "applied on 0/0"},
	}
	for _, tt := range tests {
		t.Run(tt.args[0], func(t *testing.T) {
			out, errOut, code := pf.Run(tt.args...)
			if code != 0 {
				t.Fatalf("pinfold %v: exit %d: %s%s", tt.args, code, out, errOut)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("stdout:\n%s\nwant %q", out, tt.wantOut)
			}
			if strings.Contains(errOut, tt.notStderr) {
				t.Errorf("stderr:\n%s\nwant no %q", errOut, tt.notStderr)
			}
		})
	}
	// Refusals: exit 2, the field and value named, the record unchanged.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"resize", "web", "--cpu", "-1.5"}, "cpu of service web: 1.5 -1.5 = 0"},
		{[]string{"resize", "web", "--memory", "-319MiB"}, "memory of service web: 320 MiB -319 MiB = 1 MiB"},
		{[]string{"replace", "web", "--image", " "}, `image = " "`},
		{[]string{"resize", "nosuch", "--cpu", "+1"}, `"nosuch"`},
		{[]string{"replace", "nosuch", "--image", "x"}, `"nosuch"`},
	} {
		t.Run(strings.Join(bad.args, " "), func(t *testing.T) {
			out, errOut, code := pf.Run(bad.args...)
			if code != exitBadInput || !strings.Contains(errOut, bad.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q (stdout %q)", code, errOut, bad.want, out)
			}
		})
	}
	pf.Must("scale", "web", "--count", "1")
	ps := pf.Must("ps", "--service", "web", "-o", "json")
	var ins []struct {
		Image       string      `json:"image"`
		CPUPlanned  json.Number `json:"cpu_planned"`
		MemoryBytes int64       `json:"memory_bytes"`
	}
	if err := json.Unmarshal([]byte(ps), &ins); err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].Image != "busybox:2" || ins[0].CPUPlanned != "1.5" || ins[0].MemoryBytes != 320<<20 {
		t.Errorf("web after scale 0 → 1: %+v, want busybox:2, 1.5 CPUs, 320 MiB", ins)
	}
}

// TestDrainCancelSays: host drain --cancel says whether it ended a drain
// and the host's state: on a host with no drain it said "drain cancelled;
// stays disabled" of a host that was up and stayed up.
func TestDrainCancelSays(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	pf.Must("deploy", "web", "--count", "1", "--cpu", "0.5", "--bind", "--memory", "64MiB", "--image", "busybox:1")
	tests := []struct {
		name  string
		setup []string // run first, if any
		want  string
	}{
		{"no drain", nil, "host a: no drain in progress; state up"},
		{"a drain", []string{"host", "drain", "a", "--no-wait"},
			"host a: drain cancelled; stays disabled ('pinfold host enable a' lets it take work again)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				pf.Must(tt.setup...)
			}
			if out := pf.Must("host", "drain", "a", "--cancel"); strings.TrimSpace(out) != tt.want {
				t.Errorf("host drain a --cancel: %q, want %q", out, tt.want)
			}
		})
	}
}

// TestMaintenanceOffSays: host maintenance --off says whether it ended a
// maintenance (of a host in none it said "maintenance ended"), and
// --grace 0s is refused naming the value (it said "give --grace DURATION
// (e.g. 10m) or --off" of a --grace that was given).
func TestMaintenanceOffSays(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topologyFile(t, "dual-xeon-gold-6230"))
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"host", "maintenance", "a", "--off"}, 0, "host a: not in maintenance; state up", ""},
		{[]string{"host", "maintenance", "a", "--grace", "10m"}, 0, "host a: in maintenance until", ""},
		{[]string{"host", "maintenance", "a", "--off"}, 0, "host a: maintenance ended, state up", ""},
		{[]string{"host", "maintenance", "a", "--grace", "0s"}, exitBadInput, "", "--grace 0s: want at least 1s"},
		{[]string{"host", "maintenance", "a"}, exitBadInput, "", "give --grace DURATION (e.g. 10m) or --off"},
	}
	for _, tt := range tests {
		out, errOut, code := pf.Run(tt.args...)
		if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.err) {
			t.Errorf("pinfold %v: exit %d, stdout %q, stderr %q; want exit %d, %q on stdout, %q on stderr",
				tt.args, code, out, errOut, tt.code, tt.out, tt.err)
		}
	}
}

// TestJSONAtCountZeroDescribesTheRecord: resize -o json and replace -o
// json of a service scaled to 0 print an object naming the record's
// change (they printed [], as if nothing had changed).
func TestJSONAtCountZeroDescribesTheRecord(t *testing.T) {
	pf := newCLI(t, startPlanner(t))
	pf.Must("host", "add", "a", "--topology", laptopTopology)
	pf.Must("deploy", "web", "--count", "1", "--cpu", "0.5", "--memory", "64MiB", "--image", "busybox:1", "--restart", "always")
	pf.Must("scale", "web", "--count", "0")
	type record struct {
		Service   string            `json:"service"`
		Count     *int              `json:"count"`
		Instances []json.RawMessage `json:"instances"`
		Changes   []string          `json:"changes"`
		Record    map[string]any    `json:"record"`
	}
	for _, tt := range []struct {
		args    []string
		changes []string
		record  map[string]any
	}{
		{[]string{"resize", "web", "--memory", "+64MiB"}, nil, map[string]any{"cpu": 0.5, "bind": false, "memory_bytes": float64(128 << 20)}},
		{[]string{"replace", "web", "--image", "busybox:2", "--user", "app"}, []string{"image busybox:1 → busybox:2", "user (the image's) → app"},
			map[string]any{"image": "busybox:2", "command": []any{}, "pull": "missing", "container": map[string]any{"restart": "always", "user": "app"}}},
	} {
		t.Run(tt.args[0], func(t *testing.T) {
			out := pf.Must(append(tt.args, "-o", "json")...)
			var got record
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v -o json: %v:\n%s\nwant an object", tt.args, err, out)
			}
			if got.Service != "web" || got.Count == nil || *got.Count != 0 || got.Instances == nil || len(got.Instances) != 0 ||
				!slices.Equal(got.Changes, tt.changes) || !reflect.DeepEqual(got.Record, tt.record) {
				t.Errorf("%v -o json:\n%s\nwant service web, count 0, no instances, changes %q, record %v", tt.args, out, tt.changes, tt.record)
			}
		})
	}
}
