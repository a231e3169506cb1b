package service

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
)

// TestRebalanceKeepsHostLocalVolumes: an instance with a host-local volume
// (a bind mount or a named volume) is not moved by rebalance, and the
// result says which and why; with MoveLocalVolumes it moves, the move
// saying its data stays behind.
func TestRebalanceKeepsHostLocalVolumes(t *testing.T) {
	f := newHealFixture(t, "a", "b")
	for _, h := range []string{"a", "b"} {
		f.agent(h)
	}
	small := DeployRequest{Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 10, Bind: true, Memory: 64 << 20}}}
	db, cache, web := small, small, small
	db.Service, db.Container = "db", model.Container{Volumes: []string{"/srv/db:/data"}}
	cache.Service, cache.Container = "cache", model.Container{Volumes: []string{"cache:/cache"}}
	web.Service = "web"
	for _, r := range []DeployRequest{db, cache, web} {
		if _, err := f.DeployWithRules(f.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	f.agent("c") // a new, empty host
	res, err := f.Rebalance(f.ctx, RebalanceRequest{Defragment: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Moves) == 0 {
		t.Fatalf("rebalance = %+v, want web's instances moved onto c", res)
	}
	for _, m := range res.Moves {
		if m.Service != "web" {
			t.Errorf("move %+v: only web may move, db and cache have host-local volumes", m)
		}
	}
	if len(res.Kept) != 4 {
		t.Fatalf("kept = %+v, want db's and cache's four instances", res.Kept)
	}
	for _, k := range res.Kept {
		want := map[string]string{"db": "(bind /srv/db)", "cache": "(volume cache)"}[k.Service]
		if k.To != "" || k.Why != k.Instance+" stays on "+k.From+": it has a host-local volume "+want {
			t.Errorf("kept %+v: want no To and why %q", k, k.Instance+" stays on "+k.From+": it has a host-local volume "+want)
		}
	}
	res, err = f.Rebalance(f.ctx, RebalanceRequest{MoveLocalVolumes: true})
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, m := range res.Moves {
		if m.Service == "db" || m.Service == "cache" {
			moved = true
			if !strings.Contains(m.Why, "host-local volume") || !strings.Contains(m.Why, "stays behind") {
				t.Errorf("move %+v: want why to say its volume stays behind", m)
			}
		}
	}
	if !moved || len(res.Kept) != 0 {
		t.Errorf("with MoveLocalVolumes: moves %+v, kept %+v; want db or cache moved and none kept", res.Moves, res.Kept)
	}
}

// TestDrainKeepsHostLocalVolumes: a drain moves the other instances off
// the host but leaves one with a host-local volume, the host's Stuck
// saying which and why; drained again with MoveLocalVolumes, it moves.
func TestDrainKeepsHostLocalVolumes(t *testing.T) {
	hosts := []string{"a", "b"}
	f := newHealFixture(t, hosts...)
	for _, h := range hosts {
		f.agent(h)
	}
	f.deployOn("a", hosts, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	db := f.deployOn("a", hosts, DeployRequest{Service: "db", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Container: model.Container{Volumes: []string{"/srv/db:/data"}}}, Size: model.Size{Pieces: 100, Bind: true, Memory: gib}}})
	if _, err := f.Drain(f.ctx, "a", 0, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	f.tick(f.ctx, tr, time.Now())
	for _, n := range f.on("b") {
		if n.Service != "web" {
			t.Errorf("b runs %+v: only web moves, db has a bind mount", n)
		}
	}
	if len(f.on("b")) != 1 {
		t.Fatalf("on b %+v, want web's replacement", f.on("b"))
	}
	want := "drain: " + db[0].ID + " stays on a: it has a host-local volume (bind /srv/db); drain with --move-local-volumes to move it (its data stays behind)"
	if v, _ := f.Host("a"); v.Host.Stuck != want || !v.Host.Draining {
		t.Errorf("a: draining %v, stuck %q; want draining, stuck %q", v.Host.Draining, v.Host.Stuck, want)
	}
	if _, err := f.DrainHost(f.ctx, DrainRequest{Host: "a", MoveLocalVolumes: true}, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.tick(f.ctx, tr, time.Now().Add(time.Second))
	moved := false
	for _, n := range f.on("b") {
		moved = moved || n.Replaces == db[0].ID
	}
	if !moved {
		t.Errorf("drained with MoveLocalVolumes: on b %+v, want db's replacement", f.on("b"))
	}
}

// TestContainerSpecValidatedAndReplaced: a deploy or replace with a bad
// container setting is refused naming it, and nothing changes; a replace
// with new settings is a spec change (a new spec generation) and keeps
// them when it gives none.
func TestContainerSpecValidatedAndReplaced(t *testing.T) {
	f := newHealFixture(t, "a")
	rev := f.st.Rev()
	_, err := f.DeployWithRules(f.ctx, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Container: model.Container{Volumes: []string{"x:y"}}}, Size: model.Size{Pieces: 10, Bind: true, Memory: 64 << 20}}})
	if CodeOf(err) != Invalid || !strings.Contains(err.Error(), `volume "x:y": container path "y" is not absolute`) || f.st.Rev() != rev {
		t.Fatalf("deploy with volume x:y = %v (store changed: %v), want Invalid naming it and nothing changed", err, f.st.Rev() != rev)
	}
	if _, err := f.DeployWithRules(f.ctx, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Container: model.Container{Restart: "always"}}, Size: model.Size{Pieces: 10, Bind: true, Memory: 64 << 20}}}); err != nil {
		t.Fatal(err)
	}
	rev = f.st.Rev()
	_, err = f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:2", Container: &model.Container{CapAdd: []string{"net_admin"}}})
	if CodeOf(err) != Invalid || !strings.Contains(err.Error(), `cap_add "net_admin"`) || f.st.Rev() != rev {
		t.Fatalf("replace with cap_add net_admin = %v, want Invalid naming it and nothing changed", err)
	}
	out, err := f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:2", Container: &model.Container{Volumes: []string{"data:/data"}, ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if in := out[0]; in.SpecGeneration != in.Generation || in.Restart != "" || !in.ReadOnly || len(in.Volumes) != 1 {
		t.Errorf("replaced: %+v, want a new spec generation and the new settings as a whole", in)
	}
	out, err = f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:3"})
	if err != nil {
		t.Fatal(err)
	}
	if in := out[0]; !in.ReadOnly || len(in.Volumes) != 1 {
		t.Errorf("replaced without settings: %+v, want the settings kept", in)
	}
	if d, _ := f.st.Service("web"); !d.Value.ReadOnly || len(d.Value.Volumes) != 1 {
		t.Errorf("service document %+v: want the replaced settings (a scale-up copies them)", d.Value)
	}
}

// TestReplaceEditKeepsWhatItDoesNotName: a replace's edit changes the
// settings it names in each instance and in the record, and keeps the
// others, each instance its own; a merge past a limit is refused naming
// the instance and nothing changes.
func TestReplaceEditKeepsWhatItDoesNotName(t *testing.T) {
	f := newHealFixture(t, "a")
	ctr := model.Container{Volumes: []string{"/srv/data:/data"}, Restart: "unless-stopped", Labels: map[string]string{"team": "a"}}
	if _, err := f.DeployWithRules(f.ctx, DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Container: ctr}, Size: model.Size{Pieces: 10, Bind: true, Memory: 64 << 20}}}); err != nil {
		t.Fatal(err)
	}
	ins := f.on("a")
	one, err := f.Replace(f.ctx, ReplaceRequest{Target: ins[0].ID, Image: "i", Edit: model.ContainerEdit{Volumes: []string{"logs:/logs"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := one[0].Volumes; len(got) != 2 {
		t.Fatalf("instance %s after adding a volume: volumes %q, want /data and /logs", one[0].ID, got)
	}
	restart := "always"
	out, err := f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:2", Edit: model.ContainerEdit{Restart: &restart}})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range out {
		want := 1
		if in.ID == one[0].ID {
			want = 2 // its own volume stays too
		}
		if in.Restart != "always" || len(in.Volumes) != want || in.Labels["team"] != "a" {
			t.Errorf("instance %s after replace --restart always: restart %q volumes %q labels %v, want always, its %d volume(s) and team=a", in.ID, in.Restart, in.Volumes, in.Labels, want)
		}
	}
	d, _ := f.st.Service("web")
	if d.Value.Restart != "always" || len(d.Value.Volumes) != 1 || d.Value.Labels["team"] != "a" {
		t.Errorf("record after replace --restart always: %+v, want restart always and the rest kept", d.Value.Container)
	}
	many := make([]string, model.MaxVolumes)
	for i := range many {
		many[i] = fmt.Sprintf("v%d:/v%d", i, i)
	}
	rev := f.st.Rev()
	_, err = f.Replace(f.ctx, ReplaceRequest{Target: "web", Image: "i:3", Edit: model.ContainerEdit{Volumes: many}})
	if CodeOf(err) != Invalid || !strings.Contains(err.Error(), "its container settings after this replace: volumes: 6") && strings.Contains(err.Error(), "want at most 64") || f.st.Rev() != rev {
		t.Errorf("replace adding %d volumes to 1 = %v (store changed: %v), want Invalid naming the merged count and nothing changed", len(many), err, f.st.Rev() != rev)
	}
}
