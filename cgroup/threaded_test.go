package cgroup_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/cgroup/cgrouptest"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// openContainers is the node agent's manager (owning nothing) over a fake
// v2-root tree whose docker/3f2a9c is a container's cgroup, making groups
// with their interface files.
func openContainers(t *testing.T, opts ...cgroup.Option) (*cgroup.Manager, string, *bytes.Buffer) {
	t.Helper()
	dir := cgrouptest.Tree(t, "v2-root")
	var logs bytes.Buffer
	opts = append([]cgroup.Option{cgroup.WithFakeGroups(), cgroup.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}, opts...)
	m, err := cgroup.Open(dir, "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, dir, &logs
}

var (
	container = cgroup.MustParsePath("docker/3f2a9c")
	fragGroup = cgroup.MustParsePath("docker/3f2a9c/pinfold-frag")
)

func fragSpec() cgroup.Spec {
	return cgroup.Spec{Path: fragGroup, CPUs: cgroup.CPUsOf(cpuset.MustParseCPUs("2")), CPUMax: &cgroup.CPUMax{Quota: 70000}}
}

func TestApplyThreaded(t *testing.T) {
	t.Parallel()
	m, dir, logs := openContainers(t)
	if err := m.ApplyThreaded(context.Background(), fragSpec()); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"docker/3f2a9c/pinfold-frag/cgroup.type=threaded",
		"docker/3f2a9c/pinfold-frag/cpu.max=70000 100000",
		"docker/3f2a9c/pinfold-frag/cpuset.cpus=2",
	}, "\n")
	if diff := cmp.Diff(want, cgrouptest.Listing(t, dir, fragGroup.String(), "cgroup.type", "cpu.max", "cpuset.cpus")); diff != "" {
		t.Errorf("child after ApplyThreaded (-want +got):\n%s", diff)
	}
	if got := cgrouptest.Listing(t, dir, container.String(), "cgroup.subtree_control"); !strings.HasPrefix(got, "docker/3f2a9c/cgroup.subtree_control=+cpu +cpuset") {
		t.Errorf("container's subtree_control = %s, want +cpu +cpuset", got)
	}
	if typ, err := m.Type(fragGroup); err != nil || typ != "threaded" {
		t.Errorf("Type(%s) = %q, %v", fragGroup, typ, err)
	}
	// Idempotent: a second call writes nothing.
	before := cgrouptest.Listing(t, dir, container.String())
	logs.Reset()
	if err := m.ApplyThreaded(context.Background(), fragSpec()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, cgrouptest.Listing(t, dir, container.String())); diff != "" || strings.Contains(logs.String(), "threaded group made") || strings.Contains(logs.String(), "cgroup applied") {
		t.Errorf("second ApplyThreaded changed the tree (-before +after):\n%s\nlogs: %s", diff, logs)
	}
}

// TestApplyThreadedBadInputChangesNothing: bad specs are refused before any
// write, and a refused write removes the child it made.
func TestApplyThreadedBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	refuseMax := cgroup.WithFaultInjection(func(file, _ string) error {
		if strings.HasSuffix(file, "/cpu.max") {
			return syscall.EINVAL
		}
		return nil
	})
	tests := []struct {
		name    string
		spec    cgroup.Spec
		opts    []cgroup.Option
		wantErr string
	}{
		{"memory in a threaded group", cgroup.Spec{Path: fragGroup, MemoryMax: cgroup.Int64(1 << 30)}, nil, "memory is a domain controller"},
		{"parent is the root", cgroup.Spec{Path: cgroup.MustParsePath("pinfold-frag"), CPUWeight: 5}, nil, "needs a parent group below the root"},
		{"parent missing", cgroup.Spec{Path: cgroup.MustParsePath("docker/gone/pinfold-frag"), CPUWeight: 5}, nil, "parent docker/gone: no such cgroup"},
		{"cpus outside host", cgroup.Spec{Path: fragGroup, CPUs: cgroup.CPUsOf(cpuset.MustParseCPUs("7"))}, nil, "CPUs 7 are not on this host"},
		{"bad quota", cgroup.Spec{Path: fragGroup, CPUMax: &cgroup.CPUMax{Quota: 10}}, nil, "quota must be at least 1000"},
		{"kernel refuses cpu.max", fragSpec(), []cgroup.Option{refuseMax}, `write docker/3f2a9c/pinfold-frag/cpu.max = "70000 100000": invalid argument`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, dir, _ := openContainers(t, tt.opts...)
			before := cgrouptest.Listing(t, dir, "docker")
			err := m.ApplyThreaded(context.Background(), tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ApplyThreaded(%+v) = %v, want %q", tt.spec, err, tt.wantErr)
			}
			if _, err := os.Stat(filepath.Join(dir, fragGroup.String())); !os.IsNotExist(err) {
				t.Errorf("the child is left behind: %v", err)
			}
			after := cgrouptest.Listing(t, dir, "docker")
			// A fake tree holds the last write: the controllers enabled,
			// then disabled again.
			after = strings.ReplaceAll(after, "docker/3f2a9c/cgroup.subtree_control=-cpu -cpuset", "docker/3f2a9c/cgroup.subtree_control=")
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("tree changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestMoveThreadAndThreads(t *testing.T) {
	t.Parallel()
	m, dir, _ := openContainers(t)
	if err := m.ApplyThreaded(context.Background(), fragSpec()); err != nil {
		t.Fatal(err)
	}
	if err := m.MoveThread(fragGroup, 4242); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Threads(fragGroup); err != nil || !cmp.Equal(got, []int{4242}) {
		t.Errorf("Threads(%s) = %v, %v, want [4242]", fragGroup, got, err)
	}
	if err := m.MoveThread(fragGroup, 0); err == nil || !strings.Contains(err.Error(), `pinfold-frag/cgroup.threads = "0": not a thread id`) {
		t.Errorf("MoveThread(0) = %v", err)
	}
	if err := m.MoveThread(cgroup.MustParsePath("docker/gone"), 7); err == nil || !strings.Contains(err.Error(), `docker/gone/cgroup.threads = "7"`) {
		t.Errorf("MoveThread into a missing group = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, fragGroup.String(), "cgroup.threads"), []byte("12\nx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Threads(fragGroup); err == nil || !strings.Contains(err.Error(), `"x" is not a thread id`) {
		t.Errorf("Threads of a garbled file = %v", err)
	}
}

func TestRemoveThreaded(t *testing.T) {
	t.Parallel()
	m, dir, _ := openContainers(t)
	ctx := context.Background()
	if err := m.ApplyThreaded(ctx, fragSpec()); err != nil {
		t.Fatal(err)
	}
	if err := m.MoveThread(fragGroup, 99); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveThreaded(ctx, fragGroup); !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "threads [99] still in it") {
		t.Errorf("RemoveThreaded with a thread in it = %v, want EBUSY naming 99", err)
	}
	if err := m.RemoveThreaded(ctx, container); err == nil || !strings.Contains(err.Error(), `is "domain", not threaded`) {
		t.Errorf("RemoveThreaded of the container's own cgroup = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, fragGroup.String(), "cgroup.threads"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveThreaded(ctx, fragGroup); err != nil {
		t.Fatal(err)
	}
	if m.Exists(fragGroup) {
		t.Errorf("%s still exists", fragGroup)
	}
	// Its last child gone, the container's cgroup turns the threaded
	// controllers off again (else it stays a thread root).
	if b, _ := os.ReadFile(filepath.Join(dir, container.String(), "cgroup.subtree_control")); strings.Contains(string(b), "+cpu") || !strings.Contains(string(b), "-cpu -cpuset") {
		t.Errorf("the container's cgroup.subtree_control after its last threaded child went = %q, want -cpu -cpuset written", b)
	}
	if err := m.RemoveThreaded(ctx, fragGroup); err != nil {
		t.Errorf("RemoveThreaded of a missing group = %v, want nil", err)
	}
}

func TestPathDir(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", "a": "", "a/b": "a", "docker/3f2a9c/pinfold-frag": "docker/3f2a9c"} {
		if got := cgroup.MustParsePath(in).Dir().String(); got != want {
			t.Errorf("Path(%q).Dir() = %q, want %q", in, got, want)
		}
	}
}
