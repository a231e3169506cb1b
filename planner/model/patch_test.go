package model_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/model"
)

func ptr[T any](v T) *T { return &v }

// baseSpec is a Spec with every setting set (none its zero), valid.
func baseSpec() model.Spec {
	return model.Spec{Image: "img:1", Command: []string{"run"}, Env: []string{"A=1"}, Network: "bridge",
		Health: &model.HealthCheck{HTTP: "80/h"}, Ports: []model.Port{{Name: "http", Container: 80}}, Pull: model.PullAlways,
		Container: model.Container{Volumes: []string{"/srv/data:/data", "cache:/cache:ro"}, Restart: "unless-stopped",
			Labels: map[string]string{"team": "a", "tier": "web"}, User: "app", Workdir: "/app", ReadOnly: true,
			CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}, LogDriver: "local", LogOpts: map[string]string{"max-size": "10m"}}}
}

// leaves are the settings of v (a Spec) by path, the embedded Container's
// fields as Container.Name: what a field-by-field comparison compares.
func leaves(v reflect.Value, prefix string, out map[string]reflect.Value) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			leaves(v.Field(i), f.Name+".", out)
			continue
		}
		out[prefix+f.Name] = v.Field(i)
	}
}

// specSettings is how many settings a Spec holds: a new one fails
// TestPatchedChangesOnlyWhatItNames until the table says how a replace
// treats it.
const specSettings = 7 + 10

// TestPatchedChangesOnlyWhatItNames checks every setting of a Spec, found
// by reflection: a patch naming nothing keeps it, and a patch naming one
// setting changes that one and no other.
func TestPatchedChangesOnlyWhatItNames(t *testing.T) {
	t.Parallel()
	base := baseSpec()
	keep := model.SpecPatch{Pull: base.Pull} // pull is every replace's own
	named := map[string]*model.SpecPatch{    // nil: a deploy's setting, no patch names it
		"Image":               {Image: "img:2", Pull: base.Pull},
		"Command":             {Command: []string{"other"}, Pull: base.Pull},
		"Env":                 nil,
		"Network":             nil,
		"Health":              {Health: &model.HealthCheck{TCP: 81}, Pull: base.Pull},
		"Ports":               nil,
		"Pull":                {Pull: model.PullMissing},
		"Container.Volumes":   {Pull: base.Pull, Edit: model.ContainerEdit{VolumesRm: []string{"/cache"}}},
		"Container.Restart":   {Pull: base.Pull, Edit: model.ContainerEdit{Restart: ptr("always")}},
		"Container.Labels":    {Pull: base.Pull, Edit: model.ContainerEdit{Labels: map[string]string{"team": "b"}}},
		"Container.User":      {Pull: base.Pull, Edit: model.ContainerEdit{User: ptr("")}},
		"Container.Workdir":   {Pull: base.Pull, Edit: model.ContainerEdit{Workdir: ptr("/w")}},
		"Container.ReadOnly":  {Pull: base.Pull, Edit: model.ContainerEdit{ReadOnly: ptr(false)}},
		"Container.CapAdd":    {Pull: base.Pull, Edit: model.ContainerEdit{CapAdd: []string{"SYS_TIME"}}},
		"Container.CapDrop":   {Pull: base.Pull, Edit: model.ContainerEdit{CapDropRm: []string{"ALL"}}},
		"Container.LogDriver": {Pull: base.Pull, Edit: model.ContainerEdit{LogDriver: ptr("json-file")}},
		"Container.LogOpts":   {Pull: base.Pull, Edit: model.ContainerEdit{LogOptsRm: []string{"max-size"}}},
	}
	before := map[string]reflect.Value{}
	leaves(reflect.ValueOf(base), "", before)
	if len(before) != specSettings || len(named) != specSettings {
		t.Fatalf("Spec has %d settings, the table %d, the guard %d: say how a replace treats the new one", len(before), len(named), specSettings)
	}
	for _, field := range slices.Sorted(func(yield func(string) bool) {
		for k := range before {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(field, func(t *testing.T) {
			if before[field].IsZero() {
				t.Fatalf("baseSpec leaves %s at its zero: the test cannot see it lost", field)
			}
			p, ok := named[field]
			if !ok {
				t.Fatalf("%s: no entry in the table: say how a replace treats it", field)
			}
			after := map[string]reflect.Value{}
			leaves(reflect.ValueOf(base.Patched(keep)), "", after)
			if !reflect.DeepEqual(before[field].Interface(), after[field].Interface()) {
				t.Errorf("a patch naming nothing changed %s: %v → %v", field, before[field], after[field])
			}
			if p == nil {
				return // the other patches leave it (checked in their runs)
			}
			got := base.Patched(*p)
			after = map[string]reflect.Value{}
			leaves(reflect.ValueOf(got), "", after)
			for other, v := range before {
				same := reflect.DeepEqual(v.Interface(), after[other].Interface())
				switch {
				case other == field && same:
					t.Errorf("the patch naming %s left it %v", field, v)
				case other != field && !same:
					t.Errorf("the patch naming %s changed %s too: %v → %v", field, other, v, after[other])
				}
			}
		})
	}
	if diff := cmp.Diff(baseSpec(), base); diff != "" {
		t.Errorf("Patched wrote into the spec it was given (-before +after):\n%s", diff)
	}
}

func TestEdited(t *testing.T) {
	t.Parallel()
	base := baseSpec().Container
	for _, tc := range []struct {
		name string
		edit model.ContainerEdit
		want func(c *model.Container)
	}{
		{"nothing", model.ContainerEdit{}, func(*model.Container) {}},
		{"a volume at a new path is added", model.ContainerEdit{Volumes: []string{"logs:/logs"}},
			func(c *model.Container) { c.Volumes = []string{"/srv/data:/data", "cache:/cache:ro", "logs:/logs"} }},
		{"a volume at a mounted path replaces that one in place", model.ContainerEdit{Volumes: []string{"/srv/new:/data:ro"}},
			func(c *model.Container) { c.Volumes = []string{"/srv/new:/data:ro", "cache:/cache:ro"} }},
		{"volume removed by container path", model.ContainerEdit{VolumesRm: []string{"/data"}},
			func(c *model.Container) { c.Volumes = []string{"cache:/cache:ro"} }},
		{"volume removed by the whole volume", model.ContainerEdit{VolumesRm: []string{"cache:/cache"}},
			func(c *model.Container) { c.Volumes = []string{"/srv/data:/data"} }},
		{"every volume removed", model.ContainerEdit{VolumesRm: []string{"/data", "/cache"}},
			func(c *model.Container) { c.Volumes = nil }},
		{"removal before addition", model.ContainerEdit{VolumesRm: []string{"/data"}, Volumes: []string{"v:/data"}},
			func(c *model.Container) { c.Volumes = []string{"cache:/cache:ro", "v:/data"} }},
		{"removing what is not there changes nothing", model.ContainerEdit{VolumesRm: []string{"/nope"}, LabelsRm: []string{"nope"},
			CapAddRm: []string{"SYS_TIME"}, LogOptsRm: []string{"nope"}}, func(*model.Container) {}},
		{"restart no", model.ContainerEdit{Restart: ptr("no")}, func(c *model.Container) { c.Restart = "no" }},
		{"label set and removed", model.ContainerEdit{Labels: map[string]string{"owner": "x"}, LabelsRm: []string{"tier"}},
			func(c *model.Container) { c.Labels = map[string]string{"team": "a", "owner": "x"} }},
		{"every label removed", model.ContainerEdit{LabelsRm: []string{"tier", "team"}}, func(c *model.Container) { c.Labels = nil }},
		{"user and workdir back to the image's", model.ContainerEdit{User: ptr(""), Workdir: ptr("")},
			func(c *model.Container) { c.User, c.Workdir = "", "" }},
		{"read-only off", model.ContainerEdit{ReadOnly: ptr(false)}, func(c *model.Container) { c.ReadOnly = false }},
		{"a capability held is not added twice, CAP_ or not", model.ContainerEdit{CapAdd: []string{"CAP_NET_ADMIN", "SYS_TIME"}},
			func(c *model.Container) { c.CapAdd = []string{"NET_ADMIN", "SYS_TIME"} }},
		{"capability removed by its CAP_ name", model.ContainerEdit{CapAddRm: []string{"CAP_NET_ADMIN"}, CapDrop: []string{"CHOWN"}},
			func(c *model.Container) { c.CapAdd, c.CapDrop = nil, []string{"ALL", "CHOWN"} }},
		{"log driver and options", model.ContainerEdit{LogDriver: ptr(""), LogOpts: map[string]string{"max-file": "3"}, LogOptsRm: []string{"max-size"}},
			func(c *model.Container) { c.LogDriver, c.LogOpts = "", map[string]string{"max-file": "3"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := baseSpec().Container
			tc.want(&want)
			if diff := cmp.Diff(want, base.Edited(tc.edit)); diff != "" {
				t.Errorf("Edited (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(baseSpec().Container, base); diff != "" {
				t.Errorf("Edited wrote into the container it was given (-before +after):\n%s", diff)
			}
		})
	}
}

func TestSpecPatchValidate(t *testing.T) {
	t.Parallel()
	many := make([]string, model.MaxVolumes+1)
	for i := range many {
		many[i] = "/v" + strings.Repeat("x", i)
	}
	for _, tc := range []struct {
		name  string
		patch model.SpecPatch
		err   string // a part of the error; "" for none
	}{
		{"an edit", model.SpecPatch{Edit: model.ContainerEdit{Volumes: []string{"/a:/a"}, VolumesRm: []string{"/b", "c:/c"}, Restart: ptr("always")}}, ""},
		{"a whole container", model.SpecPatch{Container: &model.Container{Restart: "no"}}, ""},
		{"both", model.SpecPatch{Container: &model.Container{}, Edit: model.ContainerEdit{Restart: ptr("no")}}, "set as a whole and edited in one replace"},
		{"a relative removal", model.SpecPatch{Edit: model.ContainerEdit{VolumesRm: []string{"data"}}}, `volumes_rm: "data": want a container path (/data) or a volume`},
		{"a bad volume", model.SpecPatch{Edit: model.ContainerEdit{Volumes: []string{"x:y"}}}, `volume "x:y": container path "y" is not absolute`},
		{"a bad restart", model.SpecPatch{Edit: model.ContainerEdit{Restart: ptr("sometimes")}}, `restart "sometimes"`},
		{"an empty label key removed", model.SpecPatch{Edit: model.ContainerEdit{LabelsRm: []string{""}}}, `labels_rm entry ""`},
		{"a bad capability removed", model.SpecPatch{Edit: model.ContainerEdit{CapDropRm: []string{"net-admin"}}}, `cap_add_rm or cap_drop_rm "net-admin"`},
		{"too many removals", model.SpecPatch{Edit: model.ContainerEdit{VolumesRm: many}}, "volumes_rm: 65 entries: want at most 64"},
		{"a reserved label", model.SpecPatch{Edit: model.ContainerEdit{Labels: map[string]string{"io.pinfold.x": "1"}}}, "pinfold's own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.patch.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Validate: %v, want an error holding %q", err, tc.err)
			}
		})
	}
}

func TestSpecChanges(t *testing.T) {
	t.Parallel()
	base := baseSpec()
	for _, tc := range []struct {
		name  string
		patch model.SpecPatch
		want  []string
	}{
		{"nothing", model.SpecPatch{Pull: base.Pull}, nil},
		{"image and restart", model.SpecPatch{Image: "img:2", Pull: base.Pull, Edit: model.ContainerEdit{Restart: ptr("always")}},
			[]string{"image img:1 → img:2", "restart unless-stopped → always"}},
		{"a volume removed, one replaced, one added", model.SpecPatch{Pull: base.Pull,
			Edit: model.ContainerEdit{VolumesRm: []string{"/cache"}, Volumes: []string{"/srv/b:/data", "l:/logs"}}},
			[]string{"volumes cache:/cache:ro removed", "volumes /srv/data:/data → /srv/b:/data", "volumes l:/logs added"}},
		{"labels, caps, log options", model.SpecPatch{Pull: model.PullMissing, Edit: model.ContainerEdit{Labels: map[string]string{"team": "b", "new": "1"},
			LabelsRm: []string{"tier"}, CapAdd: []string{"SYS_TIME"}, LogOptsRm: []string{"max-size"}, User: ptr("")}},
			[]string{"pull always → missing", `labels team: "a" → "b"`, "labels tier removed", `labels new="1" added`,
				"user app → (the image's)", "cap_add SYS_TIME added", "log_opts max-size removed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, model.SpecChanges(base, base.Patched(tc.patch))); diff != "" {
				t.Errorf("SpecChanges (-want +got):\n%s", diff)
			}
		})
	}
}
