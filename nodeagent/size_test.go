package nodeagent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

func TestSizeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		al   model.Allocation
		base int
		want Size
	}{
		{"whole and a fragment", model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 2: 70}, Memory: 1 << 30}, 100,
			Size{CPUs: 1.7, WholeCPUs: 1, Fragment: 0.7, CPUsCeil: 2, Cpuset: "0,2", MemoryBytes: 1 << 30}},
		{"whole only", model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{4: 100, 5: 100}}, 100,
			Size{CPUs: 2, WholeCPUs: 2, CPUsCeil: 2, Cpuset: "4-5"}},
		{"fine pieces", model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{3: 5}}, 1000,
			Size{CPUs: 0.005, Fragment: 0.005, CPUsCeil: 1, Cpuset: "3"}},
		{"memory-first", model.Allocation{CPUQuota: 250, Memory: 64 << 20}, 100,
			Size{CPUs: 2.5, WholeCPUs: 2, Fragment: 0.5, CPUsCeil: 3, MemoryBytes: 64 << 20}},
		{"no CPU", model.Allocation{CPUQuota: 0}, 100, Size{CPUsCeil: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := model.Instance{ID: "web-1", Service: "web", Generation: 3, Allocation: tc.al}
			tc.want.Instance, tc.want.Service, tc.want.Generation = "web-1", "web", 3
			if got := SizeOf(in, tc.base); got != tc.want {
				t.Errorf("SizeOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestShrinksAndNotice(t *testing.T) {
	size := func(cpus map[cpuset.CPUID]int, mem int64) Size {
		return SizeOf(model.Instance{ID: "web-1", Allocation: model.Allocation{Bind: true, CPUs: cpus, Memory: mem}}, 100)
	}
	was := size(map[cpuset.CPUID]int{0: 100, 2: 70}, 1<<30)
	for _, tc := range []struct {
		name string
		next Size
		want bool
	}{
		{"CPU lowered", size(map[cpuset.CPUID]int{0: 100, 2: 20}, 1<<30), true},
		{"memory lowered", size(map[cpuset.CPUID]int{0: 100, 2: 70}, 1<<29), true},
		{"CPU lowered, memory raised", size(map[cpuset.CPUID]int{0: 100}, 2<<30), true},
		{"grown", size(map[cpuset.CPUID]int{0: 100, 1: 100}, 2<<30), false},
		{"moved to other CPUs", size(map[cpuset.CPUID]int{4: 100, 6: 70}, 1<<30), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Shrinks(was, tc.next); got != tc.want {
				t.Fatalf("Shrinks = %v, want %v", got, tc.want)
			}
			n := Notice(was, tc.next)
			if n.CPUs != was.CPUs || n.Next == nil || *n.Next != tc.next {
				t.Errorf("Notice = %+v (next %+v): want the size before, the new one in next", n, n.Next)
			}
		})
	}
}

func TestSizeEnvAndJSON(t *testing.T) {
	s := SizeOf(model.Instance{ID: "a", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 2: 70}, Memory: 256 << 20}}, 100)
	want := []string{"PINFOLD_CPUS=1.7", "PINFOLD_CPUS_CEIL=2", "PINFOLD_MEMORY_BYTES=268435456", "PINFOLD_RESOURCES=/run/pinfold/resources.json"}
	if got := s.Env(); !slices.Equal(got, want) {
		t.Errorf("Env = %q, want %q", got, want)
	}
	var back Size
	if err := json.Unmarshal(s.JSON(), &back); err != nil || back != s {
		t.Errorf("JSON round trip = %+v, %v; want %+v", back, err, s)
	}
	if strings.Contains(string(s.JSON()), "next") {
		t.Errorf("JSON without a notice names next: %s", s.JSON())
	}
}

func TestSizeDirName(t *testing.T) {
	for _, id := range []string{"web-1a2b3c4d5e", "db_1", "a.b"} {
		if err := sizeDirName(id); err != nil {
			t.Errorf("sizeDirName(%q) = %v, want ok", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "../etc", "a/b", ".hidden", "a b", strings.Repeat("x", 201), "é"} {
		err := sizeDirName(id)
		if err == nil {
			t.Errorf("sizeDirName(%q) = nil, want an error", id)
			continue
		}
		if !strings.Contains(err.Error(), "instance ID") {
			t.Errorf("sizeDirName(%q) = %v: want the field named", id, err)
		}
	}
}

// newSizedAgent is newTestAgent with a resources directory and notice.
func newSizedAgent(t *testing.T, notice time.Duration) (*Agent, *fakeEngine, string) {
	t.Helper()
	dir := t.TempDir()
	eng, cg, pl := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}, &fakePlanner{}
	a := New(Config{Host: "h", HealthWait: 50 * time.Millisecond, HealthTimeout: 600 * time.Millisecond, ResourcesDir: dir, ShrinkNotice: notice},
		pl, eng, cg, topologytest.Laptop().Topology(), nil)
	return a, eng, dir
}

func readSize(t *testing.T, dir, id string) Size {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, id, SizeFile))
	if err != nil {
		t.Fatal(err)
	}
	var s Size
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return s
}

// TestSizeFileFollowsResizes: the container is created with the size's
// environment and its directory mounted read-only at /run/pinfold; the
// file holds the size, and a live resize rewrites it (the container is
// not replaced). Control: without ResourcesDir, no mount, no variable.
func TestSizeFileFollowsResizes(t *testing.T) {
	a, eng, dir := newSizedAgent(t, 0)
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	spec := eng.specs["c1"]
	if !slices.Contains(spec.Binds, filepath.Join(dir, "db-1")+":/run/pinfold:ro") || !slices.Contains(spec.Env, "PINFOLD_CPUS=1") {
		t.Fatalf("create spec binds %q env %q: want the size directory mounted read-only and PINFOLD_CPUS=1", spec.Binds, spec.Env)
	}
	if s := readSize(t, dir, "db-1"); s.CPUs != 1 || s.MemoryBytes != 128<<20 || s.Generation != 1 {
		t.Fatalf("resources.json after create = %+v", s)
	}
	grown := memInst(2, 256<<20)
	grown.CPUs = map[cpuset.CPUID]int{0: 100, 1: 50}
	a.SetDesired([]model.Instance{grown})
	settle(t, a)
	if s := readSize(t, dir, "db-1"); s.CPUs != 1.5 || s.CPUsCeil != 2 || s.MemoryBytes != 256<<20 || s.Generation != 2 || s.Cpuset != "0-1" {
		t.Errorf("resources.json after a live resize = %+v, want 1.5 CPUs on 0-1, 256 MiB, generation 2", s)
	}
	if eng.creates != 1 {
		t.Errorf("%d creates: a resize must not replace the container", eng.creates)
	}
	a.SetDesired(nil)
	settle(t, a)
	if _, err := os.Stat(filepath.Join(dir, "db-1")); !os.IsNotExist(err) {
		t.Errorf("the directory of a removed instance: %v, want it gone", err)
	}

	for _, v := range []string{"state:/run/pinfold/", "/srv/x:/run//pinfold/.", "state:/run/pinfold/x:ro"} {
		t.Run("the service mounts "+v, func(t *testing.T) {
			a, eng, _ := newSizedAgent(t, 0)
			in := memInst(1, 128<<20)
			in.Volumes = []string{v}
			a.SetDesired([]model.Instance{in})
			settle(t, a)
			if spec := eng.specs["c1"]; !slices.Equal(spec.Binds, in.Volumes) {
				t.Errorf("binds %q: want the service's own volume alone (Docker refuses two mounts on one target, and one inside the read-only size mount)", spec.Binds)
			}
		})
	}
	t.Run("the service mounts /run", func(t *testing.T) {
		a, eng, dir := newSizedAgent(t, 0)
		in := memInst(1, 128<<20)
		in.Volumes = []string{"state:/run"}
		a.SetDesired([]model.Instance{in})
		settle(t, a)
		if spec := eng.specs["c1"]; !slices.Contains(spec.Binds, filepath.Join(dir, "db-1")+":/run/pinfold:ro") {
			t.Errorf("binds %q: want the size mount too (Docker mounts /run first)", spec.Binds)
		}
	})
	t.Run("control: off", func(t *testing.T) {
		a, eng, _, _ := newTestAgent(t)
		a.SetDesired([]model.Instance{memInst(1, 128<<20)})
		settle(t, a)
		spec := eng.specs["c1"]
		if len(spec.Binds) != 0 || slices.ContainsFunc(spec.Env, func(e string) bool { return strings.HasPrefix(e, "PINFOLD_CPUS") }) {
			t.Errorf("without ResourcesDir: binds %q env %q", spec.Binds, spec.Env)
		}
	})
}

// TestShrinkNotice: a shrink is announced in the file (size now, next) and
// applied only after the notice; a grow is applied at once. Control: with
// no notice the shrink lands in the first pass.
func TestShrinkNotice(t *testing.T) {
	for _, tc := range []struct {
		name    string
		notice  time.Duration
		restart bool // the shrink reaches a new agent on the same directory
	}{{"notice", 300 * time.Millisecond, false}, {"notice after a restart", 300 * time.Millisecond, true}, {"control: no notice", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, eng, dir := newSizedAgent(t, tc.notice)
				ctx := context.Background()
				in := memInst(1, 256<<20)
				a.SetDesired([]model.Instance{in})
				settle(t, a)
				if tc.restart {
					a = New(Config{Host: "h", HealthWait: 50 * time.Millisecond, ResourcesDir: dir, ShrinkNotice: tc.notice},
						&fakePlanner{}, eng, &fakeCgroup{mem: map[string]int64{}}, topologytest.Laptop().Topology(), nil)
				}
				shrunk := memInst(2, 128<<20)
				a.SetDesired([]model.Instance{shrunk})
				a.Reconcile(ctx)
				eng.mu.Lock()
				applied := eng.cs["c1"].Applied.MemoryBytes
				eng.mu.Unlock()
				s := readSize(t, dir, "db-1")
				if tc.notice == 0 {
					if applied != 128<<20 || s.MemoryBytes != 128<<20 || s.Next != nil {
						t.Fatalf("no notice: memory %d, file %+v: want the shrink applied and written at once", applied, s)
					}
					return
				}
				if applied != 256<<20 {
					t.Fatalf("memory %d in the notice's first pass: want 256 MiB kept", applied)
				}
				if s.MemoryBytes != 256<<20 || s.Next == nil || s.Next.MemoryBytes != 128<<20 || s.NextAt == "" {
					t.Fatalf("file during the notice = %+v (next %+v): want 256 MiB now, 128 MiB next", s, s.Next)
				}
				time.Sleep(tc.notice + 50*time.Millisecond)
				settle(t, a)
				eng.mu.Lock()
				applied = eng.cs["c1"].Applied.MemoryBytes
				eng.mu.Unlock()
				if s := readSize(t, dir, "db-1"); applied != 128<<20 || s.MemoryBytes != 128<<20 || s.Next != nil {
					t.Errorf("after the notice: memory %d, file %+v: want the shrink applied and the file at 128 MiB", applied, s)
				}
			})
		})
	}
}

// TestSizeFilesHostile: what a hostile local user (or a container that
// remounted its size directory) can plant in --resources-dir is never
// followed, never blocks the agent, and a directory of other data is
// never deleted (issue 36 attack review). Each case fails without its
// guard: a link followed overwrites the victim, a FIFO read blocks the
// pass, RemoveAll deletes the data.
func TestSizeFilesHostile(t *testing.T) {
	t.Run("a link as the temporary file", func(t *testing.T) {
		dir := t.TempDir()
		victim := filepath.Join(t.TempDir(), "victim")
		os.WriteFile(victim, []byte("keep"), 0o600)
		os.MkdirAll(filepath.Join(dir, "db-1"), 0o755)
		os.Symlink(victim, filepath.Join(dir, "db-1", "."+SizeFile+".tmp"))
		s := newSizeFiles(dir)
		if err := s.write("db-1", []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "keep" {
			t.Errorf("the victim behind the link now holds %q", b)
		}
		if fi, _ := os.Lstat(victim); fi.Mode().Perm() != 0o600 {
			t.Errorf("the victim's mode is now %v", fi.Mode().Perm())
		}
	})
	t.Run("a link as the instance's directory", func(t *testing.T) {
		dir, elsewhere := t.TempDir(), t.TempDir()
		os.Symlink(elsewhere, filepath.Join(dir, "db-1"))
		if err := newSizeFiles(dir).write("db-1", []byte("{}\n")); err == nil {
			t.Error("written through a linked directory")
		}
		if es, _ := os.ReadDir(elsewhere); len(es) != 0 {
			t.Errorf("the link's target got %d entries", len(es))
		}
	})
	t.Run("a FIFO as resources.json", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "db-1"), 0o755)
		if err := syscall.Mkfifo(filepath.Join(dir, "db-1", SizeFile), 0o644); err != nil {
			t.Skip(err)
		}
		done := make(chan struct{})
		go func() { newSizeFiles(dir).load(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("loading the size files blocked on a FIFO")
		}
	})
	t.Run("a directory of other data", func(t *testing.T) {
		dir := t.TempDir()
		data := filepath.Join(dir, "postgres-data", "PG_VERSION")
		os.MkdirAll(filepath.Dir(data), 0o755)
		os.WriteFile(data, []byte("16"), 0o644)
		s := newSizeFiles(dir)
		if err := s.prune(map[string]bool{}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(data); err != nil {
			t.Errorf("pruning removed another directory's data: %v", err)
		}
		// Control: an instance's own directory goes.
		s.write("db-1", []byte("{}\n"))
		s.prune(map[string]bool{})
		if _, err := os.Stat(filepath.Join(dir, "db-1")); !os.IsNotExist(err) {
			t.Errorf("the agent's own directory of a gone instance: %v, want removed", err)
		}
	})
}
