package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDeployContainerSettings: deploy's container flags travel to the
// planner and back in ps (-o json and the VOLUMES column); a bad value is
// bad input (exit 2) naming the flag's value, and nothing is placed;
// replace with a container flag changes that one and keeps the others; rebalance says
// why an instance with a volume stays.
func TestDeployContainerSettings(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--volume", "x:y"}, `volume "x:y": container path "y" is not absolute`},
		{[]string{"--volume", "data/sub:/d"}, `bind source "data/sub" is not absolute`},
		{[]string{"--restart", "sometimes"}, `restart "sometimes"`},
		{[]string{"--label", "novalue"}, `--label "novalue": want KEY=VALUE`},
		{[]string{"--workdir", "app"}, `workdir "app": not absolute`},
		{[]string{"--cap-add", "net_admin"}, `cap_add "net_admin"`},
		{[]string{"--log-opt", "=x"}, `--log-opt "=x": want KEY=VALUE`},
	} {
		args := append([]string{"deploy", "db", "--count", "1", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "i"}, tc.args...)
		_, errOut, code := pf.Run(args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("pinfold %v: exit %d, %q; want exit 2 naming %q", tc.args, code, errOut, tc.want)
		}
	}
	if out := pf.Must("ps", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("after refused deploys ps = %s, want nothing placed", out)
	}
	pf.Must("deploy", "db", "--count", "1", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "i",
		"--volume", "/srv/db:/data", "--volume", "conf:/etc/conf:ro", "--restart", "on-failure:3", "--label", "team=data",
		"--user", "999:999", "--workdir", "/data", "--read-only", "--cap-add", "NET_ADMIN", "--cap-drop", "ALL",
		"--log-driver", "json-file", "--log-opt", "max-size=10m")
	var ps []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ps); err != nil || len(ps) != 1 {
		t.Fatalf("ps -o json: %v, %d instances", err, len(ps))
	}
	got := ps[0]
	if strings.Join(got.Volumes, " ") != "/srv/db:/data conf:/etc/conf:ro" || got.Restart != "on-failure:3" || got.Labels["team"] != "data" ||
		got.User != "999:999" || got.Workdir != "/data" || !got.ReadOnly || strings.Join(got.CapAdd, ",") != "NET_ADMIN" ||
		strings.Join(got.CapDrop, ",") != "ALL" || got.LogDriver != "json-file" || got.LogOpts["max-size"] != "10m" {
		t.Errorf("ps -o json = %+v, want every container setting", got)
	}
	if out := pf.Must("ps"); !strings.Contains(out, "VOLUMES") || !strings.Contains(out, "/srv/db:/data conf:/etc/conf:ro") {
		t.Errorf("ps:\n%s\nwant a VOLUMES column with both volumes", out)
	}
	if out := pf.Must("rebalance"); !strings.Contains(out, "kept: "+got.ID+" stays on h1: it has a host-local volume (bind /srv/db)") {
		t.Errorf("rebalance:\n%s\nwant db kept, saying why", out)
	}
	pf.Must("replace", "db", "--image", "i:2", "--wait", "0", "--restart", "always")
	ps = nil // a fresh decode: omitted fields must read as unset
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ps); err != nil || len(ps) != 1 {
		t.Fatalf("ps -o json: %v", err)
	}
	if got := ps[0]; got.Restart != "always" || len(got.Volumes) != 2 || !got.ReadOnly || got.Image != "i:2" || got.User != "999:999" {
		t.Errorf("after replace --restart always: %+v, want restart always and the other settings kept", got)
	}
}

// TestReplaceChangesOnlyWhatItNames is issue 38's repro: a service with a
// bind mount and restart unless-stopped, replaced with --restart always,
// keeps its volume (it had none after, exit 0, no warning); a setting
// goes only by its -rm flag; --dry-run lists each change (old → new) and
// changes nothing.
func TestReplaceChangesOnlyWhatItNames(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	pf.Must("deploy", "front", "--count", "2", "--cpu", "0.5", "--memory", "64MiB", "--image", "nginx:1.26",
		"--volume", "/srv/www:/usr/share/nginx/html:ro", "--restart", "unless-stopped", "--label", "team=web", "--log-opt", "max-size=10m")
	ps := func() []instanceJSON {
		var got []instanceJSON
		if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &got); err != nil || len(got) != 2 {
			t.Fatalf("ps -o json: %v, %d instances", err, len(got))
		}
		return got
	}
	pf.Must("replace", "front", "--image", "nginx:1.27", "--restart", "always", "--wait", "0")
	for _, in := range ps() {
		if in.Image != "nginx:1.27" || in.Restart != "always" || strings.Join(in.Volumes, " ") != "/srv/www:/usr/share/nginx/html:ro" ||
			in.Labels["team"] != "web" || in.LogOpts["max-size"] != "10m" {
			t.Errorf("after replace --restart always: %+v, want the new image and restart, and the volume, label and log option kept", in)
		}
	}
	before := pf.Must("ps", "-o", "json")
	dry := pf.Must("replace", "front", "--image", "nginx:1.27", "--volume-rm", "/usr/share/nginx/html", "--label", "team=edge", "--dry-run")
	for _, want := range []string{"service front record: volumes /srv/www:/usr/share/nginx/html:ro removed, labels team: \"web\" → \"edge\"",
		"2 instances as the record", "dry run: nothing changed"} {
		if !strings.Contains(dry, want) {
			t.Errorf("replace --dry-run:\n%s\nwant %q", dry, want)
		}
	}
	if after := pf.Must("ps", "-o", "json"); after != before {
		t.Errorf("replace --dry-run changed the instances:\n%s\nwas\n%s", after, before)
	}
	out := pf.MustCombined("replace", "front", "--image", "nginx:1.27", "--volume-rm", "/usr/share/nginx/html", "--log-opt-rm", "max-size", "--wait", "0")
	if !strings.Contains(out, "volumes /srv/www:/usr/share/nginx/html:ro removed, log_opts max-size removed") {
		t.Errorf("replace --volume-rm:\n%s\nwant it to say the volume and log option go", out)
	}
	for _, in := range ps() {
		if len(in.Volumes) != 0 || len(in.LogOpts) != 0 || in.Restart != "always" || in.Labels["team"] != "web" {
			t.Errorf("after replace --volume-rm --log-opt-rm: %+v, want no volume and no log option, restart and label kept", in)
		}
	}
	// A new user's trial: a removal that matches nothing was "no setting
	// changes", exit 0 (a typo); a settings-only change needed --image.
	for _, args := range [][]string{{"--volume-rm", "/nope", "--dry-run"}, {"--label-rm", "nokey", "--wait", "0"}} {
		if errOut := pf.Fails(2, append([]string{"replace", "front"}, args...)...); !strings.Contains(errOut, "front has no such setting to remove (nothing was changed)") {
			t.Errorf("replace front %v: %s, want it refused naming the removal", args, errOut)
		}
	}
	pf.Must("replace", "front", "--restart", "no", "--wait", "0")
	for _, in := range ps() {
		if in.Image != "nginx:1.27" || in.Restart != "no" || in.Labels["team"] != "web" {
			t.Errorf("after replace --restart no without --image: %+v, want the image and label kept, no restart policy", in)
		}
	}
	help := pf.Must("replace", "--help")
	for _, want := range []string{"Only what a flag names changes", "--volume-rm PATH", "--label-rm KEY", "--restart no",
		"unless-stopped (not given: kept)", "(repeatable; the others are kept)"} {
		if !strings.Contains(help, want) {
			t.Errorf("replace --help: want %q (the merge, the -rm flags, no deploy defaults)", want)
		}
	}
	if out, code := pf.Combined("replace", "ghost", "--image", "x", "--dry-run"); code == 0 || !strings.Contains(out, `no instance or service named "ghost"`) {
		t.Errorf("replace ghost --dry-run: exit %d, %s; want it refused naming ghost", code, out)
	}
	if errOut := pf.Fails(2, "replace", "front", "--image", "x", "--volume-rm", "data"); !strings.Contains(errOut, `volumes_rm: "data": want a container path`) {
		t.Errorf("replace --volume-rm data: %s, want it refused naming the value", errOut)
	}
}

// TestDrainKeepsVolumes: a drain moves the instances without volumes, then
// exits 1 naming the ones with a host-local volume that stay; drained again
// with --move-local-volumes it moves them and ends.
func TestDrainKeepsVolumes(t *testing.T) {
	addr := startPlanner(t)
	topo := topologyFile(t, "dual-xeon-gold-6230")
	pf := newCLI(t, addr)
	pf.Must("host", "add", "a", "--topology", topo)
	pf.Must("deploy", "web", "--count", "1", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "busybox")
	pf.Must("deploy", "db", "--count", "1", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "busybox", "--volume", "/srv/db:/data")
	pf.Must("host", "add", "b", "--topology", topo)
	var ps []instanceJSON
	if err := json.Unmarshal([]byte(pf.MustCombined("ps", "--service", "db", "-o", "json")), &ps); err != nil || len(ps) != 1 {
		t.Fatalf("ps db: %v", err)
	}
	db := ps[0].ID
	out, code := pf.Combined("host", "drain", "a")
	if code != exitUnmet || !strings.Contains(out, "1 instances stay, each with a host-local volume ("+db+": bind /srv/db)") || !strings.Contains(out, "--move-local-volumes") {
		t.Errorf("host drain a: exit %d:\n%s\nwant exit 1 naming %s and --move-local-volumes", code, out, db)
	}
	if show := pf.MustCombined("host", "show", "a"); !strings.Contains(show, "Stuck: drain: "+db+" stays on a: it has a host-local volume (bind /srv/db)") {
		t.Errorf("host show a does not say why db stays:\n%s", show)
	}
	if out := pf.MustCombined("host", "drain", "a", "--move-local-volumes"); !strings.Contains(out, "host a drained") {
		t.Errorf("host drain a --move-local-volumes: %s", out)
	}
	ps = nil
	if err := json.Unmarshal([]byte(pf.MustCombined("ps", "-o", "json")), &ps); err != nil || len(ps) != 2 || ps[0].Host != "b" || ps[1].Host != "b" {
		t.Errorf("after the drain: %+v (%v), want both on b", ps, err)
	}
}
