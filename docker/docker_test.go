package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/system"
	mobyclient "github.com/moby/moby/client"

	"github.com/pinfold/pinfold/planner/cpuset"
)

func TestResourcesFor(t *testing.T) {
	t.Parallel()
	r := Resources{CPUs: cpuset.MustParseCPUs("2-3"), Mems: cpuset.MustParseMems("1"), CPUShares: 717, MemoryBytes: 128 << 20, MemoryReservation: 64 << 20}
	want := container.Resources{CpusetCpus: "2-3", CpusetMems: "1", CPUShares: 717, CPUPeriod: 100000, CPUQuota: -1,
		Memory: 128 << 20, MemorySwap: 128 << 20, MemoryReservation: 64 << 20}
	if diff := cmp.Diff(want, resourcesFor(r)); diff != "" {
		t.Errorf("resourcesFor (-want +got):\n%s", diff)
	}
	r.CPUQuota, r.CPUShares = 170000, 0
	got := resourcesFor(r)
	if got.CPUQuota != 170000 || got.CPUShares != 1024 || got.NanoCPUs != 0 {
		t.Errorf("quota/shares: %+v", got)
	}
	r.CPUQuota, r.CPUPeriod = 5000, LongPeriod // 0.005 CPU
	if got := resourcesFor(r); got.CPUQuota != 5000 || got.CPUPeriod != LongPeriod {
		t.Errorf("0.005 CPU: quota %d period %d, want 5000 per %d", got.CPUQuota, got.CPUPeriod, LongPeriod)
	}
	for _, tt := range []struct {
		pieces, sb    int
		quota, period int64
	}{{5, 1000, 5000, LongPeriod}, {1, 1000, 1000, LongPeriod}, {10, 1000, 1000, 0}, {1005, 1000, 100500, 0}, {170, 100, 170000, 0}, {0, 100, 0, 0}, {10, 10000, 1000, LongPeriod}} {
		if q, p := QuotaFor(tt.pieces, tt.sb); q != tt.quota || p != tt.period {
			t.Errorf("QuotaFor(%d, %d) = %d, %d; want %d, %d", tt.pieces, tt.sb, q, p, tt.quota, tt.period)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Resources{CPUs: cpuset.MustParseCPUs("0"), Mems: cpuset.MustParseMems("0"), MemoryBytes: MinMemory}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		change func(*Resources)
		want   string
	}{
		{func(r *Resources) { r.MemoryBytes = 4 << 20 }, "memory = 4194304: Docker's minimum memory limit is 6 MiB"},
		{func(r *Resources) { r.CPUs = cpuset.CPUs{} }, "cpus"},
		{func(r *Resources) { r.Mems = cpuset.Mems{} }, "mems"},
		{func(r *Resources) { r.CPUShares = 1 }, "cpu_shares = 1"},
		{func(r *Resources) { r.CPUQuota = 500 }, "cpu_quota = 500"},
		{func(r *Resources) { r.CPUQuota, r.CPUPeriod = 500, LongPeriod }, "cpu_quota = 500: want at least 1000 µs per 1000000"},
		{func(r *Resources) { r.CPUQuota, r.CPUPeriod = 5000, 2*LongPeriod }, "cpu_period = 2000000"},
		{func(r *Resources) { r.MemoryReservation = 1 << 20 }, "memory_reservation"},
		{func(r *Resources) { r.MemoryReservation = 1 << 30 }, "above the memory limit"},
	}
	for _, tt := range tests {
		r := ok
		tt.change(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want %q", r, err, tt.want)
		}
	}
}

func TestCgroupPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ driver, parent, want string }{
		{"cgroupfs", "", "docker/abc"},
		{"cgroupfs", "/pinfold", "pinfold/abc"},
		{"systemd", "", "system.slice/docker-abc.scope"},
		{"systemd", "pinfold.slice", "pinfold.slice/docker-abc.scope"},
	} {
		if got, err := CgroupPath(tt.driver, tt.parent, "abc"); err != nil || got != tt.want {
			t.Errorf("CgroupPath(%q, %q) = %q, %v; want %q", tt.driver, tt.parent, got, err, tt.want)
		}
	}
	if _, err := CgroupPath("none", "", "abc"); err == nil {
		t.Errorf("unknown driver accepted")
	}
}

// fakeEngine is an in-memory engine for the calls the adapter makes.
type fakeEngine struct {
	containers map[string]*container.InspectResponse
	updates    []container.Resources
	next       int
	execs      map[string][]string
	pulls      []string
}

// fakePull is a pull that finished: with err when the registry refused.
type fakePull struct {
	io.ReadCloser
	err error
}

func (p fakePull) JSONMessages(context.Context) iter.Seq2[jsonstream.Message, error] {
	return func(func(jsonstream.Message, error) bool) {}
}
func (p fakePull) Wait(context.Context) error { return p.err }

// ImagePull records the reference; "unreachable/…" fails as a registry
// that cannot be reached would, at Wait.
func (f *fakeEngine) ImagePull(_ context.Context, ref string, _ mobyclient.ImagePullOptions) (mobyclient.ImagePullResponse, error) {
	f.pulls = append(f.pulls, ref)
	var err error
	if strings.HasPrefix(ref, "unreachable/") {
		err = errors.New("dial tcp: lookup unreachable: no such host")
	}
	return fakePull{ReadCloser: io.NopCloser(strings.NewReader("")), err: err}, nil
}

var _ engineAPI = (*fakeEngine)(nil)
var _ engineAPI = (*mobyclient.Client)(nil)

func newFake() *fakeEngine { return &fakeEngine{containers: map[string]*container.InspectResponse{}} }

func (f *fakeEngine) Ping(context.Context, mobyclient.PingOptions) (mobyclient.PingResult, error) {
	return mobyclient.PingResult{APIVersion: "1.41"}, nil
}
func (f *fakeEngine) ClientVersion() string { return "1.41" }
func (f *fakeEngine) Info(context.Context, mobyclient.InfoOptions) (mobyclient.SystemInfoResult, error) {
	return mobyclient.SystemInfoResult{Info: system.Info{CgroupDriver: "cgroupfs", CgroupVersion: "2", ServerVersion: "20.10.24"}}, nil
}
func (f *fakeEngine) ContainerCreate(_ context.Context, o mobyclient.ContainerCreateOptions) (mobyclient.ContainerCreateResult, error) {
	f.next++
	id := fmt.Sprintf("%064d", f.next)
	hc := *o.HostConfig
	f.containers[id] = &container.InspectResponse{ID: id, Name: "/" + o.Name, Config: o.Config, HostConfig: &hc,
		State: &container.State{Status: "created"}}
	return mobyclient.ContainerCreateResult{ID: id}, nil
}
func (f *fakeEngine) get(id string) (*container.InspectResponse, error) {
	c, ok := f.containers[id]
	if !ok {
		return nil, errdefs.ErrNotFound.WithMessage("No such container: " + id)
	}
	return c, nil
}
func (f *fakeEngine) ContainerStart(_ context.Context, id string, _ mobyclient.ContainerStartOptions) (mobyclient.ContainerStartResult, error) {
	c, err := f.get(id)
	if err == nil {
		c.State = &container.State{Status: "running", Running: true, Pid: 4242}
	}
	return mobyclient.ContainerStartResult{}, err
}
func (f *fakeEngine) ContainerInspect(_ context.Context, id string, _ mobyclient.ContainerInspectOptions) (mobyclient.ContainerInspectResult, error) {
	c, err := f.get(id)
	if err != nil {
		return mobyclient.ContainerInspectResult{}, err
	}
	return mobyclient.ContainerInspectResult{Container: *c}, nil
}
func (f *fakeEngine) ContainerList(context.Context, mobyclient.ContainerListOptions) (mobyclient.ContainerListResult, error) {
	var out mobyclient.ContainerListResult
	for id, c := range f.containers {
		if c.Config.Labels[LabelManaged] == "true" {
			out.Items = append(out.Items, container.Summary{ID: id})
		}
	}
	return out, nil
}
func (f *fakeEngine) ContainerUpdate(_ context.Context, id string, o mobyclient.ContainerUpdateOptions) (mobyclient.ContainerUpdateResult, error) {
	c, err := f.get(id)
	if err != nil {
		return mobyclient.ContainerUpdateResult{}, err
	}
	f.updates = append(f.updates, *o.Resources)
	c.HostConfig.Resources = *o.Resources
	return mobyclient.ContainerUpdateResult{}, nil
}
func (f *fakeEngine) ContainerPause(_ context.Context, id string, _ mobyclient.ContainerPauseOptions) (mobyclient.ContainerPauseResult, error) {
	_, err := f.get(id)
	return mobyclient.ContainerPauseResult{}, err
}
func (f *fakeEngine) ContainerUnpause(_ context.Context, id string, _ mobyclient.ContainerUnpauseOptions) (mobyclient.ContainerUnpauseResult, error) {
	_, err := f.get(id)
	return mobyclient.ContainerUnpauseResult{}, err
}
func (f *fakeEngine) ContainerStop(_ context.Context, id string, _ mobyclient.ContainerStopOptions) (mobyclient.ContainerStopResult, error) {
	_, err := f.get(id)
	return mobyclient.ContainerStopResult{}, err
}
func (f *fakeEngine) ContainerRemove(_ context.Context, id string, _ mobyclient.ContainerRemoveOptions) (mobyclient.ContainerRemoveResult, error) {
	if _, err := f.get(id); err != nil {
		return mobyclient.ContainerRemoveResult{}, err
	}
	delete(f.containers, id)
	return mobyclient.ContainerRemoveResult{}, nil
}

// ExecCreate records the command; ExecInspect exits 0 for "true", else 1.
func (f *fakeEngine) ExecCreate(_ context.Context, id string, o mobyclient.ExecCreateOptions) (mobyclient.ExecCreateResult, error) {
	if _, err := f.get(id); err != nil {
		return mobyclient.ExecCreateResult{}, err
	}
	if f.execs == nil {
		f.execs = map[string][]string{}
	}
	eid := fmt.Sprintf("exec%d", len(f.execs))
	f.execs[eid] = o.Cmd
	return mobyclient.ExecCreateResult{ID: eid}, nil
}
func (f *fakeEngine) ExecStart(context.Context, string, mobyclient.ExecStartOptions) (mobyclient.ExecStartResult, error) {
	return mobyclient.ExecStartResult{}, nil
}
func (f *fakeEngine) ExecInspect(_ context.Context, eid string, _ mobyclient.ExecInspectOptions) (mobyclient.ExecInspectResult, error) {
	code := 1
	if f.execs[eid][0] == "true" {
		code = 0
	}
	return mobyclient.ExecInspectResult{ID: eid, ExitCode: code}, nil
}

func TestAdapterWithFake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake()
	a, err := newAdapter(ctx, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := Resources{CPUs: cpuset.MustParseCPUs("2-3"), Mems: cpuset.MustParseMems("1"), MemoryBytes: 128 << 20}
	id, err := a.Create(ctx, CreateSpec{Name: "web-1", Image: "img", Service: "web", Instance: "web-1", Resources: res, Network: "host", Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	c, err := a.Inspect(ctx, id)
	if err != nil || c.CgroupPath != "docker/"+id || c.Service != "web" || c.PID != 4242 || !c.Applied.CPUs.Equal(res.CPUs) || c.Network != "host" || c.Host != "h1" {
		t.Fatalf("Inspect = %+v, %v", c, err)
	}
	if err := a.Pull(ctx, "img:1"); err != nil || f.pulls[len(f.pulls)-1] != "img:1" {
		t.Errorf("Pull(img:1) = %v, pulls %v", err, f.pulls)
	}
	if err := a.Pull(ctx, "unreachable/img:1"); err == nil || !strings.Contains(err.Error(), "pull unreachable/img:1") {
		t.Errorf("Pull from an unreachable registry = %v, want an error naming the image", err)
	}
	if err := a.Pull(ctx, ""); err == nil || len(f.pulls) != 2 {
		t.Errorf("Pull(\"\") = %v (pulls %v), want refused before the engine", err, f.pulls)
	}
	res.MemoryBytes = 256 << 20
	if _, err := a.Update(ctx, id, res); err != nil {
		t.Fatal(err)
	}
	if u := f.updates[len(f.updates)-1]; u.Memory != 256<<20 || u.MemorySwap != 256<<20 || u.CpusetCpus != "2-3" {
		t.Errorf("update sent %+v; want Memory and MemorySwap together and the full cpuset", u)
	}
	for cmd, want := range map[string]int{"true": 0, "false": 1} {
		if code, err := a.Exec(ctx, id, []string{cmd}); err != nil || code != want {
			t.Errorf("Exec(%s) = %d, %v; want %d", cmd, code, err, want)
		}
	}
	if _, err := a.Exec(ctx, id, nil); err == nil || !strings.Contains(err.Error(), "exec") {
		t.Errorf("Exec without a command = %v", err)
	}
	f.containers[id].State.Health = &container.Health{Status: container.Unhealthy}
	if c, _ := a.Inspect(ctx, id); c.Health != "unhealthy" {
		t.Errorf("health = %q, want unhealthy", c.Health)
	}
	// Bad input changes nothing: no update call reaches the engine.
	n := len(f.updates)
	if _, err := a.Update(ctx, id, Resources{CPUs: res.CPUs, Mems: res.Mems, MemoryBytes: 4 << 20}); err == nil || !strings.Contains(err.Error(), "6 MiB") {
		t.Errorf("4 MiB update = %v", err)
	}
	if _, err := a.Update(ctx, "vanished", res); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of a vanished container = %v, want ErrNotFound", err)
	}
	foreign, _ := f.ContainerCreate(ctx, mobyclient.ContainerCreateOptions{Name: "theirs", Config: &container.Config{Image: "x"}, HostConfig: &container.HostConfig{}})
	for name, op := range map[string]func() error{
		"update": func() error { _, err := a.Update(ctx, foreign.ID, res); return err },
		"stop":   func() error { return a.Stop(ctx, foreign.ID, 0) },
		"remove": func() error { return a.Remove(ctx, foreign.ID) },
		"pause":  func() error { return a.Pause(ctx, foreign.ID) },
	} {
		if err := op(); !errors.Is(err, ErrNotOwned) {
			t.Errorf("%s of a foreign container = %v, want ErrNotOwned", name, err)
		}
	}
	if len(f.updates) != n {
		t.Errorf("refused updates reached the engine")
	}
	list, err := a.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Errorf("List = %+v, %v; want only pinfold's container", list, err)
	}
	if err := a.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, id); err != nil {
		t.Errorf("second Remove = %v, want nil (already gone)", err)
	}
}

// TestCreateOptions: a container's volumes, restart policy, labels, user,
// workdir, read-only root, capabilities and logging reach the engine's
// create request where Docker 20.10 (API 1.41) reads them, and pinfold's
// own labels win over a user's.
func TestCreateOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake()
	a, err := newAdapter(ctx, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := Resources{CPUs: cpuset.MustParseCPUs("0"), Mems: cpuset.MustParseMems("0"), MemoryBytes: 64 << 20}
	id, err := a.Create(ctx, CreateSpec{Name: "db-1", Image: "img", Service: "db", Instance: "db-1", Resources: res, Host: "h1",
		Labels: map[string]string{"team": "data", LabelService: "forged"},
		Binds:  []string{"/srv/db:/data", "conf:/etc/conf:ro"}, Restart: "on-failure", RestartRetries: 3, User: "999:999", Workdir: "/data",
		ReadOnly: true, CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}, LogDriver: "json-file", LogOpts: map[string]string{"max-size": "10m"}})
	if err != nil {
		t.Fatal(err)
	}
	got := f.containers[id]
	wantCfg := map[string]any{"labels": map[string]string{"team": "data", LabelService: "db", LabelInstance: "db-1", LabelManaged: "true", LabelHost: "h1"},
		"user": "999:999", "workdir": "/data"}
	gotCfg := map[string]any{"labels": got.Config.Labels, "user": got.Config.User, "workdir": got.Config.WorkingDir}
	if diff := cmp.Diff(wantCfg, gotCfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	hc := got.HostConfig
	wantHC := map[string]any{"binds": []string{"/srv/db:/data", "conf:/etc/conf:ro"}, "restart": container.RestartPolicy{Name: "on-failure", MaximumRetryCount: 3},
		"read_only": true, "cap_add": []string{"NET_ADMIN"}, "cap_drop": []string{"ALL"},
		"log": container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m"}}}
	gotHC := map[string]any{"binds": hc.Binds, "restart": hc.RestartPolicy, "read_only": hc.ReadonlyRootfs,
		"cap_add": []string(hc.CapAdd), "cap_drop": []string(hc.CapDrop), "log": hc.LogConfig}
	if diff := cmp.Diff(wantHC, gotHC); diff != "" {
		t.Errorf("host config (-want +got):\n%s", diff)
	}
	// None of it given: the engine's defaults (no restart policy, no log
	// config, nothing mounted).
	id, err = a.Create(ctx, CreateSpec{Name: "web-1", Image: "img", Service: "web", Instance: "web-1", Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	if hc := f.containers[id].HostConfig; hc.Binds != nil || hc.RestartPolicy != (container.RestartPolicy{}) || hc.LogConfig.Type != "" || hc.LogConfig.Config != nil || hc.ReadonlyRootfs {
		t.Errorf("host config without settings = %+v, want the engine's defaults", hc)
	}
}
