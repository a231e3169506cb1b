package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// composeHardened is a compose file with a hardened service (user,
// read_only, cap_drop from an x- anchor, merged) and a global one.
const composeHardened = `x-hardened: &hardened
  user: "999:999"
  read_only: true
  cap_drop: [ALL]
services:
  api:
    <<: *hardened
    image: busybox:1.36
    cap_add: [NET_BIND_SERVICE]
    working_dir: /srv
    labels: {com.example.team: api}
    ulimits: {nofile: 1024}
    deploy: {resources: {limits: {cpus: "0.5", memory: 64M}}}
  agent:
    image: busybox:1.36
    deploy:
      mode: global
      resources: {limits: {cpus: "0.5", memory: 64M}}
`

// TestApplyComposeHardenedAndGlobal (issue 38 item 4): a compose file's
// user, read_only and capabilities reach the container spec (ps -o json),
// deploy.mode global places one instance per host, and the keys pinfold
// ignores are in -o json's notes of diff and apply (they were on stderr
// only, with "notes": []). A key pinfold cannot honour (privileged) is
// exit 2 naming it, and nothing changes.
func TestApplyComposeHardenedAndGlobal(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", "../../numa/testdata/want/laptop-i7-1185g7.json")
	pf.Must("host", "add", "h2", "--topology", "../../numa/testdata/want/dual-xeon-gold-6230.json")
	dir := t.TempDir()
	file := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(file, []byte(composeHardened), 0o644); err != nil {
		t.Fatal(err)
	}
	const ignored = "compose: api: ignored keys: ulimits"
	var doc struct {
		Notes []string `json:"notes"`
	}
	for _, cmd := range []string{"diff", "apply"} {
		out, _, code := pf.Run(cmd, "-f", file, "-o", "json")
		if want := map[string]int{"diff": exitUnmet, "apply": 0}[cmd]; code != want {
			t.Fatalf("%s -o json: exit %d, want %d: %s", cmd, code, want, out)
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || !slices.Contains(doc.Notes, ignored) {
			t.Errorf("%s -o json: notes %q (%v), want %q among them", cmd, doc.Notes, err, ignored)
		}
	}
	if _, errOut, _ := pf.Run("diff", "-f", file); !strings.Contains(errOut, "note: "+ignored) {
		t.Errorf("diff: stderr %q, want the note %q", errOut, ignored)
	}
	var ps []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ps); err != nil {
		t.Fatal(err)
	}
	var agentHosts []string
	for _, in := range ps {
		switch in.Service {
		case "api":
			if in.User != "999:999" || !in.ReadOnly || !slices.Equal(in.CapDrop, []string{"ALL"}) || !slices.Equal(in.CapAdd, []string{"NET_BIND_SERVICE"}) ||
				in.Workdir != "/srv" || in.Labels["com.example.team"] != "api" {
				t.Errorf("api instance %+v: want user 999:999, read_only, cap_drop ALL, cap_add NET_BIND_SERVICE, workdir /srv, label com.example.team=api", in.Container)
			}
		case "agent":
			agentHosts = append(agentHosts, in.Host)
		}
	}
	if slices.Sort(agentHosts); !slices.Equal(agentHosts, []string{"h1", "h2"}) {
		t.Errorf("agent (deploy.mode global) on hosts %q, want one on each of h1 and h2", agentHosts)
	}
	if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Errorf("diff after apply:\n%s\nwant no changes", out)
	}
	bad := filepath.Join(dir, "privileged.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(composeHardened, "    working_dir: /srv\n", "    working_dir: /srv\n    privileged: true\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if errOut := pf.Fails(exitBadInput, "apply", "-f", bad); !strings.Contains(errOut, "services.api.privileged: true: pinfold does not run privileged containers") {
		t.Errorf("apply of a privileged service: %q, want the refusal naming services.api.privileged", errOut)
	}
	if out := pf.Must("diff", "-f", file); !strings.Contains(out, "no changes") {
		t.Errorf("diff after the refused apply:\n%s\nwant no changes", out)
	}
}

// TestApplyComposeResourceKeys: deploy.resources keys pinfold cannot
// honour were dropped without a note. A reserved device (a GPU) is
// refused naming its key path, exit 2 and nothing deployed; limits.pids
// and reservations.cpus are in -o json's notes.
// Control: without composeRefuseResources the GPU file is applied (exit
// 0); without the deploy.resources walk of composeIgnored the notes lack
// the keys.
func TestApplyComposeResourceKeys(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", "../../numa/testdata/want/laptop-i7-1185g7.json")
	dir := t.TempDir()
	gpu := writeFile(t, dir, "gpu/compose.yaml", "services:\n  w:\n    image: busybox:1\n    deploy:\n      resources:\n        limits: {memory: 64M}\n"+
		"        reservations: {devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]}\n")
	for _, cmd := range []string{"diff", "apply"} {
		if errOut := pf.Fails(exitBadInput, cmd, "-f", gpu); !strings.Contains(errOut, "services.w.deploy.resources.reservations.devices: ") || !strings.Contains(errOut, "pinfold passes no devices") {
			t.Errorf("%s of a service reserving a GPU: %q, want the refusal naming services.w.deploy.resources.reservations.devices", cmd, errOut)
		}
	}
	if got := psImages(t, pf); len(got) != 0 {
		t.Errorf("after the refused apply: images %v, want none", got)
	}
	hints := writeFile(t, dir, "hints/compose.yaml", "services:\n  w:\n    image: busybox:1\n    deploy:\n      resources:\n        limits: {memory: 64M, pids: 100}\n"+
		"        reservations: {cpus: '0.5', memory: 32M}\n")
	const ignored = "compose: w: ignored keys: deploy.resources.limits.pids, deploy.resources.reservations.cpus"
	out, _, code := pf.Run("apply", "-f", hints, "-o", "json")
	var doc struct {
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || !slices.Contains(doc.Notes, ignored) {
		t.Errorf("apply -o json: exit %d, notes %q (%v), want exit 0 and %q among them", code, doc.Notes, err, ignored)
	}
}
