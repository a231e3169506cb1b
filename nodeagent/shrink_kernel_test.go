//go:build linux && kernel

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/test/testenv"
)

// pageCacheDir is a directory on a file system whose page cache the kernel
// can reclaim (not tmpfs): in the guest the payload share (9p, cache=loose),
// natively the first of /var/tmp and the temporary directory that is not
// tmpfs.
func pageCacheDir(t *testing.T) string {
	t.Helper()
	cands := []string{"/var/tmp", os.TempDir()}
	if os.Getenv("PINFOLD_VM") != "" {
		cands = []string{"/payload"}
	}
	for _, d := range cands {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil && st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC && unix.Access(d, unix.W_OK) == nil {
			return d
		}
	}
	t.Fatalf("kernel tier: no writable directory off tmpfs among %v: page cache there could not be reclaimed", cands)
	return ""
}

func memCurrent(t *testing.T, m *cgroup.Manager, p cgroup.Path) int64 {
	t.Helper()
	s, err := m.Read(p, "memory.current")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}

// startIn starts a helper inside group p.
func startIn(t *testing.T, p cgroup.Path, mode string) *os.Process {
	t.Helper()
	dir, err := os.Open(filepath.Join(cgroup.HostMount, p.String()))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	return testenv.StartHelperWith(t, mode, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}, "GOMAXPROCS=1").Process
}

// TestKernelMemoryShrink: the pressure-guided shrink on the real kernel.
// Page cache (96 MiB written by a process in the group) shrinks to a 32 MiB
// target; memory.max is then set to it and the process runs on. Hot
// anonymous memory (64 MiB allocated, freed and faulted in again, no swap)
// cannot be reclaimed: the container stalls, the shrink gives up, memory.high
// is back to max, memory.max untouched, and the process runs on.
func TestKernelMemoryShrink(t *testing.T) {
	m := kernelManager(t, "shrink")
	if _, err := os.ReadFile("/proc/pressure/memory"); err != nil {
		t.Fatalf("kernel tier: PSI is off (%v): boot with psi=1", err)
	}
	const MiB = 1 << 20
	group := func(name string) cgroup.Path {
		p, _ := m.Parent().Child(name)
		if err := m.Apply(context.Background(), cgroup.Spec{Path: p, MemoryMax: cgroup.Int64(256 * MiB), MemorySwapMax: cgroup.Int64(0)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Remove(context.Background(), p) })
		return p
	}
	waitUse := func(p cgroup.Path, atLeast int64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for memCurrent(t, m, p) < atLeast {
			if time.Now().After(deadline) {
				t.Fatalf("%s: memory.current %d never reached %d", p, memCurrent(t, m, p), atLeast)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	alive := func(proc *os.Process) bool { return proc.Signal(syscall.Signal(0)) == nil }

	t.Run("page cache shrinks to the target", func(t *testing.T) {
		p := group("cache")
		file := filepath.Join(pageCacheDir(t), fmt.Sprintf("pinfold-shrink-%d", os.Getpid()))
		defer os.Remove(file)
		proc := startIn(t, p, "write:96:"+file)
		waitUse(p, 90*MiB)
		before := memCurrent(t, m, p)
		t0 := time.Now()
		if err := ShrinkMemory(context.Background(), m, p, 32*MiB, ShrinkOptions{Deadline: 60 * time.Second}); err != nil {
			t.Fatalf("shrink of page cache in %s from %d MiB to 32 MiB: %v; memory.stat then: %s", fsOf(file), before/MiB, err, memBreakdown(m, p))
		}
		took := time.Since(t0)
		if err := m.Apply(context.Background(), cgroup.Spec{Path: p, MemoryMax: cgroup.Int64(32 * MiB), MemoryHigh: cgroup.Int64(cgroup.Max)}); err != nil {
			t.Fatal(err)
		}
		after := memCurrent(t, m, p)
		if after > 32*MiB || !alive(proc) {
			t.Errorf("after the shrink: memory.current %d MiB (target 32), helper alive %v", after/MiB, alive(proc))
		}
		st, _ := m.Stats(p)
		t.Logf("page cache: memory.current %.1f → %.1f MiB in %s; memory.max 32 MiB set; oom_kill %d", float64(before)/MiB, float64(after)/MiB, took.Round(time.Millisecond), st.MemoryEventsOOMKill)
	})

	t.Run("hot anonymous memory rolls back", func(t *testing.T) {
		p := group("hot")
		proc := startIn(t, p, "churn:64")
		waitUse(p, 60*MiB)
		before := memCurrent(t, m, p)
		t0 := time.Now()
		err := ShrinkMemory(context.Background(), m, p, 16*MiB, ShrinkOptions{Deadline: 20 * time.Second})
		var se *ShrinkError
		if !errors.As(err, &se) {
			t.Fatalf("shrink of hot memory from %d MiB to 16 MiB = %v, want a *ShrinkError", before/MiB, err)
		}
		if !strings.Contains(err.Error(), "memory.pressure") {
			t.Errorf("the shrink gave up for another reason than pressure: %v", err)
		}
		hi, _ := m.Read(p, "memory.high")
		mx, _ := m.Read(p, "memory.max")
		if hi != "max" || mx != strconv.Itoa(256*MiB) || !alive(proc) {
			t.Errorf("after giving up: memory.high %s (want max), memory.max %s (want 256 MiB), helper alive %v", hi, mx, alive(proc))
		}
		t.Logf("hot memory: %.1f MiB in use, gave up after %s: %v", float64(before)/MiB, time.Since(t0).Round(time.Millisecond), err)
	})
}

// memBreakdown is the part of p's memory.stat that says what the memory
// is: anon, file, shmem, dirty and under writeback (MiB).
func memBreakdown(m *cgroup.Manager, p cgroup.Path) string {
	s, err := m.Read(p, "memory.stat")
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "anon", "file", "shmem", "file_dirty", "file_writeback", "active_file", "inactive_file", "unevictable":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			parts = append(parts, fmt.Sprintf("%s %.1f MiB", f[0], float64(n)/(1<<20)))
		}
	}
	return strings.Join(parts, ", ")
}

// fsOf names the file system holding path (its statfs magic number).
func fsOf(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return filepath.Dir(path) + " (" + err.Error() + ")"
	}
	return fmt.Sprintf("%s (file system type %#x)", filepath.Dir(path), st.Type)
}
