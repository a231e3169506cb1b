package cgroup_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/cgroup/cgrouptest"
	"github.com/pinfold/pinfold/planner/cpuset"
)

func TestParsePath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string
	}{
		{in: ""},
		{in: "pinfold"},
		{in: "pinfold.slice/pinfold-web_1.scope"},
		{in: "docker/3f2a9cbeef"},
		{in: "system.slice/docker-3f2a.scope"},
		{in: "../etc", wantErr: `segment ".." is not allowed`},
		{in: "a/../b", wantErr: `segment ".."`},
		{in: "/abs", wantErr: "empty segment"},
		{in: "a//b", wantErr: "empty segment"},
		{in: "a/", wantErr: "empty segment"},
		{in: "a/./b", wantErr: `segment "."`},
		{in: "a b", wantErr: "letters, digits"},
		{in: "cgroup.procs", wantErr: "interface file"},
		{in: "x/memory.max", wantErr: "interface file"},
		{in: strings.Repeat("a", 256), wantErr: "longer than 255"},
		{in: strings.Repeat("a/", 40) + "a", wantErr: "more than 32 segments"},
	}
	for _, tt := range tests {
		p, err := cgroup.ParsePath(tt.in)
		if tt.wantErr == "" {
			if err != nil || p.String() != tt.in {
				t.Errorf("ParsePath(%q) = %q, %v", tt.in, p, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParsePath(%q) error = %v, want %q", tt.in, err, tt.wantErr)
		}
	}
	if _, err := cgroup.MustParsePath("pinfold").Child("../x"); err == nil {
		t.Errorf("Child(\"../x\") accepted")
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	full := cgroup.Spec{
		Path:           cgroup.MustParsePath("pinfold/web-1"),
		CPUs:           cgroup.CPUsOf(cpuset.MustParseCPUs("2-3")),
		Mems:           cgroup.MemsOf(cpuset.MustParseMems("1")),
		CPUWeight:      70,
		CPUMax:         &cgroup.CPUMax{Quota: 170000},
		CPUMaxBurst:    cgroup.Uint64(10000),
		MemoryMax:      cgroup.Int64(256 << 20),
		MemoryHigh:     cgroup.Int64(200 << 20),
		MemoryLow:      cgroup.Int64(0),
		MemorySwapMax:  cgroup.Int64(cgroup.Max),
		MemoryOOMGroup: cgroup.Bool(true),
	}
	got, err := cgroup.Plan(full)
	if err != nil {
		t.Fatal(err)
	}
	want := []cgroup.Write{
		{"cpuset.mems", "1"}, {"cpuset.cpus", "2-3"}, {"cpu.weight", "70"},
		{"cpu.max", "170000 100000"}, {"cpu.max.burst", "10000"},
		{"memory.swap.max", "max"}, {"memory.low", "0"}, {"memory.high", "209715200"}, {"memory.max", "268435456"},
		{"memory.oom.group", "1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Plan (-want +got):\n%s", diff)
	}
	if w, _ := cgroup.Plan(cgroup.Spec{CPUMax: &cgroup.CPUMax{Quota: cgroup.Max, Period: 50000}}); len(w) != 1 || w[0].Value != "max 50000" {
		t.Errorf("unlimited quota = %v", w)
	}
	if w, _ := cgroup.Plan(cgroup.Spec{CPUs: cgroup.CPUsOf(cpuset.CPUs{})}); len(w) != 1 || w[0] != (cgroup.Write{"cpuset.cpus", ""}) {
		t.Errorf("empty cpuset (inherit) = %v", w)
	}
	bad := []struct {
		s    cgroup.Spec
		want string
	}{
		{cgroup.Spec{CPUWeight: 10001}, `cpu.weight = "10001": want 1..10000`},
		{cgroup.Spec{CPUMax: &cgroup.CPUMax{Quota: 500}}, "quota must be at least 1000"},
		{cgroup.Spec{CPUMax: &cgroup.CPUMax{Quota: 5000, Period: 500}}, "period must be 1000..1000000"},
		{cgroup.Spec{CPUMax: &cgroup.CPUMax{Quota: 5000}, CPUMaxBurst: cgroup.Uint64(6000)}, "burst must not exceed the quota 5000"},
		{cgroup.Spec{MemoryMax: cgroup.Int64(-5)}, `memory.max = "-5"`},
	}
	for _, b := range bad {
		if _, err := cgroup.Plan(b.s); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Plan(%+v) error = %v, want %q", b.s, err, b.want)
		}
	}
}

func open(t *testing.T, scenario string) (*cgroup.Manager, string, *bytes.Buffer) {
	t.Helper()
	dir := cgrouptest.Tree(t, scenario)
	var logs bytes.Buffer
	m, err := cgroup.Open(dir, "pinfold", cgroup.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, dir, &logs
}

func TestOpen(t *testing.T) {
	t.Parallel()
	_, dir, _ := open(t, "v2-root")
	for _, g := range []string{".", "pinfold"} {
		b, _ := os.ReadFile(filepath.Join(dir, g, "cgroup.subtree_control"))
		if string(b) != "+cpu +cpuset +memory +pids" {
			t.Errorf("%s/cgroup.subtree_control = %q", g, b)
		}
	}
	_, err := cgroup.Open(cgrouptest.Tree(t, "v2-no-cpuset-controller"), "pinfold")
	if err == nil || !strings.Contains(err.Error(), `controller "cpuset" is not available`) {
		t.Errorf("Open without cpuset = %v", err)
	}
	if _, err := cgroup.Open(t.TempDir(), "pinfold"); err == nil {
		t.Errorf("Open of an empty directory succeeded")
	}
	if _, err := cgroup.Open(dir, "../escape"); err == nil {
		t.Errorf("Open with parent ../escape succeeded")
	}
}

// TestOpenOwningNothing: with parent "" (the node agent's case) the
// manager creates no group and writes no subtree_control; it writes groups
// that exist and refuses to create or remove any.
func TestOpenOwningNothing(t *testing.T) {
	t.Parallel()
	dir := cgrouptest.Tree(t, "v2-root")
	before, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	m, err := cgroup.Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if after, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); string(after) != string(before) {
		t.Errorf("root cgroup.subtree_control changed: %q → %q", before, after)
	}
	container := cgroup.MustParsePath("docker/3f2a9c")
	if err := m.Apply(context.Background(), cgroup.Spec{Path: container, CPUWeight: 50}); err != nil {
		t.Errorf("Apply to a container's group = %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "docker/3f2a9c/cpu.weight")); strings.TrimSpace(string(b)) != "50" {
		t.Errorf("docker/3f2a9c/cpu.weight = %q, want 50", b)
	}
	missing := cgroup.MustParsePath("system.slice/docker-gone.scope")
	if err := m.Apply(context.Background(), cgroup.Spec{Path: missing, CPUWeight: 50}); !errors.Is(err, cgroup.ErrNoGroup) {
		t.Errorf("Apply to a missing group = %v, want ErrNoGroup", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "system.slice")); !os.IsNotExist(err) {
		t.Errorf("Apply created %s: %v", missing, err)
	}
	if err := m.Remove(context.Background(), missing); err == nil || !strings.Contains(err.Error(), "no subtree") {
		t.Errorf("Remove with no owned subtree = %v", err)
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	m, dir, logs := open(t, "v2-root")
	s := cgroup.Spec{
		Path:       cgroup.MustParsePath("pinfold/web-1"),
		CPUs:       cgroup.CPUsOf(cpuset.MustParseCPUs("2-3")),
		Mems:       cgroup.MemsOf(cpuset.MustParseMems("1")),
		CPUWeight:  70,
		CPUMax:     &cgroup.CPUMax{Quota: 170000},
		MemoryMax:  cgroup.Int64(256 << 20),
		MemoryHigh: cgroup.Int64(200 << 20),
	}
	if err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"pinfold/web-1/cpu.max=170000 100000", "pinfold/web-1/cpu.weight=70",
		"pinfold/web-1/cpuset.cpus=2-3", "pinfold/web-1/cpuset.mems=1",
		"pinfold/web-1/memory.high=209715200", "pinfold/web-1/memory.max=268435456",
	}, "\n")
	if diff := cmp.Diff(want, cgrouptest.Listing(t, dir, "pinfold/web-1", "cpu.max", "cpu.weight", "cpuset.cpus", "cpuset.mems", "memory.max", "memory.high")); diff != "" {
		t.Errorf("tree after Apply (-want +got):\n%s", diff)
	}
	// Idempotent: a second Apply writes nothing.
	logs.Reset()
	if err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "cgroup applied") {
		t.Errorf("second Apply wrote files: %s", logs)
	}
	// A container's cgroup (not pinfold's) is written but never created.
	c := cgroup.Spec{Path: cgroup.MustParsePath("docker/3f2a9c"), CPUWeight: 70, MemoryHigh: cgroup.Int64(64 << 20)}
	if err := m.Apply(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if got := cgrouptest.Listing(t, dir, "docker/3f2a9c", "cpu.weight", "memory.high"); got != "docker/3f2a9c/cpu.weight=70\ndocker/3f2a9c/memory.high=67108864" {
		t.Errorf("container cgroup = %s", got)
	}
}

// TestApplyBadInputChangesNothing: unknown groups, CPUs the host lacks and
// kernel refusals leave the tree exactly as it was.
func TestApplyBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    cgroup.Spec
		breakFS func(dir string)
		wantErr string
	}{
		{"unknown container group", cgroup.Spec{Path: cgroup.MustParsePath("docker/nosuch"), CPUWeight: 5}, nil, "docker/nosuch: no such cgroup"},
		{"cpus outside host", cgroup.Spec{Path: cgroup.MustParsePath("pinfold/web-1"), CPUWeight: 5, CPUs: cgroup.CPUsOf(cpuset.MustParseCPUs("2-5"))}, nil, "CPUs 4-5 are not on this host (it has 0-3)"},
		{"mems outside host", cgroup.Spec{Path: cgroup.MustParsePath("pinfold/web-1"), Mems: cgroup.MemsOf(cpuset.MustParseMems("2"))}, nil, "NUMA nodes 2 are not on this host"},
		{"bad weight", cgroup.Spec{Path: cgroup.MustParsePath("pinfold/web-1"), CPUWeight: 20000}, nil, "want 1..10000"},
		{"root", cgroup.Spec{CPUWeight: 5}, nil, "root cgroup"},
		{"kernel refuses memory.max: rolled back", cgroup.Spec{Path: cgroup.MustParsePath("pinfold/web-1"), CPUWeight: 5, CPUs: cgroup.CPUsOf(cpuset.MustParseCPUs("1")), MemoryMax: cgroup.Int64(1 << 30)},
			func(string) {}, "write pinfold/web-1/memory.max = \"1073741824\": device or resource busy (earlier writes were rolled back)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, dir, _ := open(t, "v2-root")
			if tt.breakFS != nil {
				tt.breakFS(dir)
				m = reopen(t, dir)
			}
			before := cgrouptest.Listing(t, dir, "")
			err := m.Apply(context.Background(), tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Apply error = %v, want %q", err, tt.wantErr)
			}
			if diff := cmp.Diff(before, cgrouptest.Listing(t, dir, "")); diff != "" {
				t.Errorf("Apply changed the tree (-before +after):\n%s", diff)
			}
		})
	}
	m, dir, _ := open(t, "v2-root")
	err := m.Apply(context.Background(), cgroup.Spec{Path: cgroup.MustParsePath("docker/nosuch"), CPUWeight: 5})
	if !errors.Is(err, cgroup.ErrNoGroup) {
		t.Errorf("unknown group error = %v, want ErrNoGroup", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "docker/nosuch")); err == nil {
		t.Errorf("Apply created a group outside the owned subtree")
	}
}

// reopen opens dir with a fault injector that refuses every memory.max write (EBUSY).
func reopen(t *testing.T, dir string) *cgroup.Manager {
	m, err := cgroup.Open(dir, "pinfold", cgroup.WithFaultInjection(func(file, _ string) error {
		if strings.HasSuffix(file, "/memory.max") {
			return syscall.EBUSY
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestStats(t *testing.T) {
	t.Parallel()
	m, _, _ := open(t, "v2-root")
	got, err := m.Stats(cgroup.MustParsePath("docker/3f2a9c"))
	if err != nil {
		t.Fatal(err)
	}
	want := cgroup.Stats{CPUUsageUsec: 2500000, CPUThrottledUsec: 300000, CPUPeriods: 40, CPUThrottled: 12, MemoryCurrent: 8 << 20,
		MemoryEventsHigh: 3, MemoryEventsMax: 2, MemoryEventsOOM: 1, MemoryEventsOOMKill: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	if _, err := m.Stats(cgroup.MustParsePath("docker/nosuch")); !errors.Is(err, cgroup.ErrNoGroup) {
		t.Errorf("Stats of a missing group = %v", err)
	}
	if v, err := m.Read(cgroup.MustParsePath("docker/3f2a9c"), "cpu.weight"); err != nil || v != "39" {
		t.Errorf("Read cpu.weight = %q, %v", v, err)
	}
	if _, err := m.Read(cgroup.MustParsePath("docker"), "../../etc/passwd"); err == nil {
		t.Errorf("Read with a path in the file name succeeded")
	}
}

// TestApplyReadBack: every write is read back. A kernel that stores memory
// limits in whole pages and cpusets in its own list form is fine; one that
// holds another value than written is a refusal, and what Apply wrote
// before is restored.
func TestApplyReadBack(t *testing.T) {
	t.Parallel()
	page := int64(os.Getpagesize())
	for _, tc := range []struct {
		name   string
		stored func(file, value string) string
		err    bool
	}{
		{"as written", nil, false},
		{"pages and list forms", func(file, value string) string {
			switch {
			case strings.HasSuffix(file, "memory.max"):
				n, _ := strconv.ParseInt(value, 10, 64)
				return strconv.FormatInt(n-n%page, 10)
			case strings.HasSuffix(file, "cpuset.cpus"):
				return "2,3"
			}
			return value
		}, false},
		{"weight clamped", func(file, value string) string {
			if strings.HasSuffix(file, "cpu.weight") {
				return "100"
			}
			return value
		}, true},
		{"memory.max not the value", func(file, value string) string {
			if strings.HasSuffix(file, "memory.max") {
				return "max"
			}
			return value
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := cgrouptest.Tree(t, "v2-root")
			m, err := cgroup.Open(dir, "pinfold", cgroup.WithStoredValue(tc.stored))
			if tc.stored == nil {
				m, err = cgroup.Open(dir, "pinfold")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			p := cgroup.MustParsePath("pinfold/web-1")
			before := cgrouptest.Listing(t, dir, "pinfold/web-1", "cpu.weight", "cpuset.cpus", "memory.max")
			err = m.Apply(context.Background(), cgroup.Spec{Path: p, CPUs: cgroup.CPUsOf(cpuset.MustParseCPUs("2-3")),
				CPUWeight: 70, MemoryMax: cgroup.Int64(256<<20 + 100)})
			if !tc.err {
				if err != nil {
					t.Fatalf("Apply = %v", err)
				}
				return
			}
			var ae *cgroup.ApplyError
			if !errors.As(err, &ae) || !errors.Is(err, cgroup.ErrReadBack) {
				t.Fatalf("Apply = %v, want an *ApplyError wrapping ErrReadBack", err)
			}
			if after := cgrouptest.Listing(t, dir, "pinfold/web-1", "cpu.weight", "cpuset.cpus", "memory.max"); after != before {
				t.Errorf("a refused Apply left changes:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}
