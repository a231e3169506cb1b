//go:build linux && kernel

package cgroup_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// TestKernelThreaded: on a real kernel, a group holding a running
// process (a container's cgroup) gets a threaded child capped at 0.3 CPU:
// the group becomes "domain threaded", cpu and cpuset are enabled in its
// subtree_control with the process in it, a busy thread moved into the
// child runs at its cap while the process's other thread runs on, the
// child cannot be removed while it holds the thread, and can once the
// thread is moved back.
func TestKernelThreaded(t *testing.T) {
	m := kernelManager(t)
	ctx := context.Background()
	p := cgroup.MustParsePath(m.Parent().String() + "/c")
	if err := m.Apply(ctx, cgroup.Spec{Path: p, CPUWeight: 100}); err != nil {
		t.Fatal(err)
	}
	cmd := helper(t, m, p, "spin:2") // GOMAXPROCS from the environment: at least 2 threads spin
	child := cgroup.MustParsePath(p.String() + "/pinfold-frag")
	cpus := m.HostCPUs().Slice()
	one := cpuset.CPUs(cpuset.Of(cpus[len(cpus)-1]))
	s := cgroup.Spec{Path: child, CPUs: &one, CPUMax: &cgroup.CPUMax{Quota: 30000}}
	if err := m.ApplyThreaded(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.RemoveThreaded(ctx, child) })
	if typ, err := m.Type(p); err != nil || typ != "domain threaded" {
		t.Errorf("container group's cgroup.type = %q, %v, want \"domain threaded\"", typ, err)
	}
	if typ, err := m.Type(child); err != nil || typ != "threaded" {
		t.Errorf("child's cgroup.type = %q, %v, want threaded", typ, err)
	}
	if err := m.ApplyThreaded(ctx, s); err != nil {
		t.Errorf("second ApplyThreaded = %v", err)
	}
	// Move one busy thread: the first thread in state R other than the main one.
	time.Sleep(300 * time.Millisecond)
	tids, err := m.Threads(p)
	if err != nil || len(tids) < 2 {
		t.Fatalf("Threads(%s) = %v, %v", p, tids, err)
	}
	busy := 0
	for _, tid := range tids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tid))
		if tid != cmd.Process.Pid && len(b) > 0 && containsState(string(b), "R") {
			busy = tid
			break
		}
	}
	if busy == 0 {
		t.Fatalf("no busy thread among %v", tids)
	}
	if err := m.MoveThread(child, busy); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Threads(child); err != nil || len(got) != 1 || got[0] != busy {
		t.Fatalf("Threads(%s) = %v, %v, want [%d]", child, got, err, busy)
	}
	before, err := m.Stats(child)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(3 * time.Second)
	after, _ := m.Stats(child)
	share := float64(after.CPUUsageUsec-before.CPUUsageUsec) / float64(time.Since(start).Microseconds())
	t.Logf("thread %d in the threaded child capped at 0.3 CPU on CPU %s: %.3f CPU", busy, one, share)
	if share < 0.2 || share > 0.33 {
		t.Errorf("the threaded child's thread ran at %.3f CPU, want about its 0.3 cap", share)
	}
	if err := m.RemoveThreaded(ctx, child); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("RemoveThreaded with a thread in it = %v, want EBUSY", err)
	}
	if err := m.MoveThread(p, busy); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveThreaded(ctx, child); err != nil {
		t.Fatal(err)
	}
	if m.Exists(child) {
		t.Errorf("%s still exists", child)
	}
	if err := m.MoveThread(p, 0x7ffffff0); err == nil {
		t.Errorf("MoveThread of a thread that does not exist succeeded")
	} else {
		t.Logf("MoveThread of a missing thread: %v", err)
	}
}

// containsState reports whether /proc/<tid>/stat text has state st.
func containsState(stat, st string) bool {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return len(stat) > i+2 && stat[i+2:i+3] == st
		}
	}
	return false
}
