package servicesfile

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestOrderDeploysAfterRuleTargets: a new service is deployed after the
// new services its hard affinity or anti-affinity names, so the rule sees
// them (a trial found cache, anti-affine to web, deployed first by name and
// web then placed beside it).
func TestOrderDeploysAfterRuleTargets(t *testing.T) {
	dep := func(name string, aff, anti []string) Step {
		return Step{Service: name, Action: "deploy", Deploy: &pinfoldv1.DeployRequest{Service: name, AffinityHard: aff, AntiAffinityHard: anti}}
	}
	got := orderDeploys([]Step{dep("aa", nil, []string{"zz"}), dep("bb", []string{"yy"}, nil), dep("cc", nil, nil), dep("yy", nil, nil), dep("zz", nil, nil)})
	var names []string
	for _, s := range got {
		names = append(names, s.Service)
	}
	if want := "zz aa yy bb cc"; strings.Join(names, " ") != want {
		t.Errorf("deploy order %v, want %s", names, want)
	}
}

// TestDiffCountsWhatTheScaleDownLeaves: a resize after the scale down of
// the same diff counts the instances of another size that stay, not all
// of them: 3 of another size scaled to 2 is 2 resized (diff said 3).
func TestDiffCountsWhatTheScaleDownLeaves(t *testing.T) {
	rec := &pinfoldv1.ServiceRecord{Name: "u", Image: "img", Cpu: "2", MemoryBytes: 2 << 30, Strategy: "auto", Count: 3, ShareBase: 100}
	in := func(id string, pieces int32) *pinfoldv1.Instance {
		return &pinfoldv1.Instance{Id: id, Service: "u", Image: "img", MemoryBytes: 2 << 30, CpuQuotaPieces: pieces, ShareBase: 100}
	}
	tests := []struct {
		name   string
		count  int32
		ins    []*pinfoldv1.Instance
		detail string
	}{
		{"all of another size, 3 to 2", 2, []*pinfoldv1.Instance{in("u-1", 100), in("u-2", 100), in("u-3", 100)},
			"2 instances of another size to 2 (memory-first), 2 GiB: u-1 (1 (memory-first), 2 GiB), u-2 (1 (memory-first), 2 GiB), u-3 (1 (memory-first), 2 GiB) (the scale down leaves 2 of these 3)"},
		{"two of another size, 3 to 2", 2, []*pinfoldv1.Instance{in("u-1", 100), in("u-2", 200), in("u-3", 100)},
			"1 to 2 instances of another size to 2 (memory-first), 2 GiB: u-1 (1 (memory-first), 2 GiB), u-3 (1 (memory-first), 2 GiB) (the scale down picks which of these 2 stay)"},
		{"no scale down", 3, []*pinfoldv1.Instance{in("u-1", 100), in("u-2", 200), in("u-3", 200)},
			"1 instance of another size to 2 (memory-first), 2 GiB: u-1 (1 (memory-first), 2 GiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := Service{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img", Cpu: "2", MemoryBytes: 2 << 30, Count: tt.count}}
			steps, blocked := diffService(w, rec, tt.ins)
			var resize *Step
			for i := range steps {
				if steps[i].Action == "resize" {
					resize = &steps[i]
				}
			}
			if len(blocked) > 0 || resize == nil || resize.Detail != tt.detail {
				t.Errorf("diffService(count %d) = %+v, blocked %q; want a resize: %s", tt.count, steps, blocked, tt.detail)
			}
		})
	}
}

// TestDiffResizesInstancesOfAnotherSize: a service whose instances do not
// all have the file's size (an instance resized on its own, or the service
// deployed again at another size) is not "same" as the file: diff sends one
// resize of the service to the file's size (to_cpu, to_memory_bytes), which
// moves each instance by its own delta, naming the record's size it read.
// An instance already at the file's size is not first brought to the
// record's: it was shrunk and grown again (two resizes per apply, and a
// memory shrink that could be refused).
func TestDiffResizesInstancesOfAnotherSize(t *testing.T) {
	rec := &pinfoldv1.ServiceRecord{Name: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Strategy: "auto", Count: 2, ShareBase: 100}
	want := Service{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img2", Cpu: "2", MemoryBytes: 2 << 30, Count: 2}}
	bigger := Service{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img2", Cpu: "3", MemoryBytes: 4 << 30, Count: 2}}
	same := &pinfoldv1.Instance{Id: "u-1", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}
	no := false
	to := func(cpu string, mem int64) *pinfoldv1.ResizeRequest {
		return &pinfoldv1.ResizeRequest{Target: "u", ToCpu: cpu, ToMemoryBytes: mem, Bind: &no, ExpectCpu: "2", ExpectMemoryBytes: 2 << 30}
	}
	tests := []struct {
		name   string
		want   Service
		other  *pinfoldv1.Instance
		resize *pinfoldv1.ResizeRequest // nil: no step
		detail string
	}{
		{"all of the record's size", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 200, ShareBase: 100}, nil, ""},
		{"bound, 1 CPU, 1 GiB", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, Bind: true, Cpus: map[int32]int32{9: 100}, ShareBase: 100},
			to("2", 2<<30), "1 instance of another size to 2 (memory-first), 2 GiB: u-2 (1 (bound), 1 GiB)"},
		{"less memory", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 1 << 30, CpuQuotaPieces: 200, ShareBase: 100},
			to("2", 2<<30), "1 instance of another size to 2 (memory-first), 2 GiB: u-2 (2 (memory-first), 1 GiB)"},
		{"a larger quota", want, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 2 << 30, CpuQuotaPieces: 250, ShareBase: 100},
			to("2", 2<<30), "1 instance of another size to 2 (memory-first), 2 GiB: u-2 (2.5 (memory-first), 2 GiB)"},
		{"one already at the file's size", bigger, &pinfoldv1.Instance{Id: "u-2", Service: "u", Image: "img2", MemoryBytes: 4 << 30, CpuQuotaPieces: 300, ShareBase: 100},
			to("3", 4<<30), "cpu 2 → 3 (+1), memory 2 GiB → 4 GiB; 1 instance of another size to 3 (memory-first), 4 GiB: u-1 (2 (memory-first), 2 GiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, blocked := diffService(tt.want, rec, []*pinfoldv1.Instance{same, tt.other})
			if len(blocked) > 0 {
				t.Fatalf("blocked %q, want none", blocked)
			}
			if tt.resize == nil {
				if len(steps) != 0 {
					t.Errorf("steps %+v, want none", steps)
				}
				return
			}
			if len(steps) != 1 || steps[0].Action != "resize" || steps[0].Detail != tt.detail {
				t.Fatalf("steps %+v, want one resize: %s", steps, tt.detail)
			}
			got, w := steps[0].Resize, tt.resize
			if got.Target != w.Target || got.CpuDelta != "" || got.MemoryDeltaBytes != 0 || got.ToCpu != w.ToCpu || got.ToMemoryBytes != w.ToMemoryBytes ||
				got.Bind == nil || *got.Bind != *w.Bind || got.ExpectCpu != w.ExpectCpu || got.ExpectMemoryBytes != w.ExpectMemoryBytes {
				t.Errorf("resize %+v, want %+v", got, w)
			}
		})
	}
}

// TestCompare: a service the planner runs and the file has not is
// removed with prune and left alone without, one not deployed is a
// deploy (or nothing at count 0), and one as the file wants it is the
// same.
func TestCompare(t *testing.T) {
	svc := func(name string, count int32) Service {
		return Service{Deploy: &pinfoldv1.DeployRequest{Service: name, Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Count: count}}
	}
	rec := &pinfoldv1.ServiceRecord{Name: "web", Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Strategy: "auto", Count: 1, ShareBase: 100}
	ins := []*pinfoldv1.Instance{
		{Id: "web-1", Service: "web", Image: "img", MemoryBytes: 1 << 30, CpuQuotaPieces: 100, ShareBase: 100},
		{Id: "old-1", Service: "old", Image: "img", MemoryBytes: 1 << 30, CpuQuotaPieces: 100, ShareBase: 100},
	}
	records := map[string]*pinfoldv1.ServiceRecord{"web": rec}
	tests := []struct {
		name             string
		prune            Prune
		steps, unchanged string
		leftAlone, notes string
		why              string // LeftAloneWhy["old"]
	}{
		{"left alone", Prune{}, "deploy new", "web idle", "old", "idle: count 0 and not deployed: nothing to do", "deployed by hand: --prune leaves it"},
		// Issue 39 item 4: without --prune, what --prune would do.
		{"the project's own, no prune", Prune{Project: "shop", Sources: map[string]string{"old": "shop"}}, "deploy new", "web idle", "old",
			"idle: count 0 and not deployed: nothing to do", "of project shop: --prune removes it"},
		{"another project's, no prune", Prune{Project: "shop", Sources: map[string]string{"old": "shop2"}}, "deploy new", "web idle", "old",
			"idle: count 0 and not deployed: nothing to do", "of project shop2, not shop: --prune leaves it"},
		{"pruned: the project's own", Prune{On: true, Project: "shop", Sources: map[string]string{"old": "shop"}}, "remove old, deploy new", "web idle", "",
			"idle: count 0 and not deployed: nothing to do", ""},
		// Issue 38 item 3: --prune removed every service not in the
		// file, another project's and those deployed by hand too.
		{"another project's is left", Prune{On: true, Project: "shop", Sources: map[string]string{"old": "shop2"}}, "deploy new", "web idle", "old",
			"old: of project shop2, not shop: --prune leaves it; idle: count 0 and not deployed: nothing to do", "of project shop2, not shop: --prune leaves it"},
		{"one deployed by hand is left", Prune{On: true, Project: "shop"}, "deploy new", "web idle", "old",
			"old: deployed by hand, not by project shop: --prune leaves it; idle: count 0 and not deployed: nothing to do", "deployed by hand: --prune leaves it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compare([]Service{svc("web", 1), svc("new", 2), svc("idle", 0)}, records, ins, tt.prune)
			var steps []string
			for _, s := range d.Steps {
				steps = append(steps, s.Action+" "+s.Service)
			}
			if got := strings.Join(steps, ", "); got != tt.steps {
				t.Errorf("steps %q, want %q", got, tt.steps)
			}
			if got := strings.Join(d.Unchanged, " "); got != tt.unchanged {
				t.Errorf("unchanged %q, want %q", got, tt.unchanged)
			}
			if got := strings.Join(d.LeftAlone, " "); got != tt.leftAlone {
				t.Errorf("left alone %q, want %q", got, tt.leftAlone)
			}
			if got := strings.Join(d.Notes, "; "); got != tt.notes {
				t.Errorf("notes %q, want %q", got, tt.notes)
			}
			if got := d.LeftAloneWhy["old"]; got != tt.why {
				t.Errorf("left alone why of old %q, want %q", got, tt.why)
			}
		})
	}
}

// TestDiffShowsContainerSettingsOneByOne: a file's change of container
// settings is a replace with the file's settings as a whole, and diff
// says setting by setting what changes (it said "container settings
// changed (A → B)" with both sets whole).
func TestDiffShowsContainerSettingsOneByOne(t *testing.T) {
	rec := &pinfoldv1.ServiceRecord{Name: "u", Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Strategy: "auto", Count: 1, ShareBase: 100,
		Container: &pinfoldv1.ContainerSpec{Volumes: []string{"/srv/www:/www"}, Restart: "unless-stopped"}}
	in := &pinfoldv1.Instance{Id: "u-1", Service: "u", Image: "img", MemoryBytes: 1 << 30, CpuQuotaPieces: 100, ShareBase: 100, Container: rec.Container}
	for _, tt := range []struct {
		name   string
		ctr    *pinfoldv1.ContainerSpec
		detail string // "": no step
	}{
		{"the same", &pinfoldv1.ContainerSpec{Volumes: []string{"/srv/www:/www"}, Restart: "unless-stopped"}, ""},
		{"restart changed", &pinfoldv1.ContainerSpec{Volumes: []string{"/srv/www:/www"}, Restart: "always"}, "restart unless-stopped → always"},
		{"the volume left out", &pinfoldv1.ContainerSpec{Restart: "unless-stopped", User: "app"}, "volumes /srv/www:/www removed, user (the image's) → app"},
		{"none in the file", nil, "volumes /srv/www:/www removed, restart unless-stopped → no"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := Service{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Count: 1, Container: tt.ctr}}
			steps, blocked := diffService(want, rec, []*pinfoldv1.Instance{in})
			if len(blocked) > 0 {
				t.Fatalf("blocked %q, want none", blocked)
			}
			if tt.detail == "" {
				if len(steps) != 0 {
					t.Errorf("steps %+v, want none", steps)
				}
				return
			}
			if len(steps) != 1 || steps[0].Action != "replace" || steps[0].Detail != tt.detail || steps[0].Replace.Container == nil {
				t.Fatalf("steps %+v, want one replace with the settings as a whole: %s", steps, tt.detail)
			}
		})
	}
}

// TestDiffSeesAnInstancesOwnContainerSettings: an instance whose
// container settings were replaced on its own (replace u-2 --cap-add
// SYS_ADMIN --volume /:/host) differs from the file even though the
// record does not: diff said "same" and apply never repaired it. Now it
// is a replace with the file's settings as a whole, naming the instance
// and what changes; a value the planner hides from a viewer (log option,
// secret label) is no difference.
func TestDiffSeesAnInstancesOwnContainerSettings(t *testing.T) {
	file := &pinfoldv1.ContainerSpec{Restart: "always", LogOpts: map[string]string{"splunk-token": "s3cret"}}
	rec := &pinfoldv1.ServiceRecord{Name: "u", Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Strategy: "auto", Count: 2, ShareBase: 100, Container: file}
	in := func(id, image string, c *pinfoldv1.ContainerSpec) *pinfoldv1.Instance {
		return &pinfoldv1.Instance{Id: id, Service: "u", Image: image, MemoryBytes: 1 << 30, CpuQuotaPieces: 100, ShareBase: 100, Container: c}
	}
	drifted := &pinfoldv1.ContainerSpec{Restart: "always", LogOpts: file.LogOpts, CapAdd: []string{"SYS_ADMIN"}, Volumes: []string{"/:/host"}}
	hidden := &pinfoldv1.ContainerSpec{Restart: "always", LogOpts: map[string]string{"splunk-token": ""}} // as a viewer sees it
	for _, tt := range []struct {
		name   string
		ins    []*pinfoldv1.Instance
		detail string // "": no step
	}{
		{"as the file", []*pinfoldv1.Instance{in("u-1", "img", file), in("u-2", "img", file)}, ""},
		{"a value hidden from a viewer", []*pinfoldv1.Instance{in("u-1", "img", hidden), in("u-2", "img", hidden)}, ""},
		{"one with its own cap_add and volume", []*pinfoldv1.Instance{in("u-1", "img", file), in("u-2", "img", drifted)},
			"instance u-2: volumes /:/host removed, cap_add SYS_ADMIN removed (its own settings differ from the file)"},
		{"one with none", []*pinfoldv1.Instance{in("u-1", "img", nil), in("u-2", "img", file)},
			"instance u-1: restart no → always, log_opts splunk-token=\"s3cret\" added (its own settings differ from the file)"},
		{"five with their own", []*pinfoldv1.Instance{in("u-1", "img", nil), in("u-2", "img", nil), in("u-3", "img", nil), in("u-4", "img", nil), in("u-5", "img", nil)},
			"instance u-1: restart no → always, log_opts splunk-token=\"s3cret\" added (its own settings differ from the file), " +
				"instance u-2: restart no → always, log_opts splunk-token=\"s3cret\" added (its own settings differ from the file), " +
				"instance u-3: restart no → always, log_opts splunk-token=\"s3cret\" added (its own settings differ from the file), and 2 more instances with settings of their own"},
		{"another image too", []*pinfoldv1.Instance{in("u-1", "img", file), in("u-2", "img0", drifted)},
			"instance u-2 runs img0, instance u-2: volumes /:/host removed, cap_add SYS_ADMIN removed (its own settings differ from the file)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := Service{Deploy: &pinfoldv1.DeployRequest{Service: "u", Image: "img", Cpu: "1", MemoryBytes: 1 << 30, Count: 2, Container: file}}
			steps, blocked := diffService(want, rec, tt.ins)
			if len(blocked) > 0 {
				t.Fatalf("blocked %q, want none", blocked)
			}
			if tt.detail == "" {
				if len(steps) != 0 {
					t.Errorf("steps %+v, want none", steps)
				}
				return
			}
			if len(steps) != 1 || steps[0].Action != "replace" || steps[0].Detail != tt.detail || !proto.Equal(steps[0].Replace.Container, file) {
				t.Fatalf("steps %+v, want one replace with the file's settings as a whole: %s", steps, tt.detail)
			}
		})
	}
}
