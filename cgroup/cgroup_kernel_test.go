//go:build linux && kernel

package cgroup_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/test/testenv"
)

func TestMain(m *testing.M) {
	testenv.HelperMain()
	os.Exit(m.Run())
}

// kernelManager opens the real cgroup2 mount owning a unique subtree, removed at cleanup.
func kernelManager(t *testing.T) *cgroup.Manager {
	t.Helper()
	testenv.RequireKernel(t)
	name := fmt.Sprintf("pinfold-test-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), os.Getpid())
	m, err := cgroup.OpenHost(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove("/sys/fs/cgroup/" + name)
		m.Close()
	})
	return m
}

// helper starts the test binary as a helper process inside group p; at
// cleanup it is killed, then p removed.
func helper(t *testing.T, m *cgroup.Manager, p cgroup.Path, mode string) *exec.Cmd {
	t.Helper()
	t.Cleanup(func() { _ = m.Remove(context.Background(), p) })
	cmd := testenv.StartHelper(t, mode)
	if err := m.AddProc(p, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func nodeCPUs(t *testing.T, node int) cpuset.CPUs {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/node/node%d/cpulist", node))
	if err != nil {
		t.Fatal(err)
	}
	return cpuset.MustParseCPUs(string(b))
}

func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// TestKernelCpusetPinsToNUMANode: a process in a group whose cpuset.cpus is
// NUMA node 1's CPUs and cpuset.mems node 1 may run only there.
func TestKernelCpusetPinsToNUMANode(t *testing.T) {
	m := kernelManager(t)
	testenv.RequireNUMANodes(t, 2)
	node1 := nodeCPUs(t, 1)
	p, _ := m.Parent().Child("pinned")
	if err := m.Apply(context.Background(), cgroup.Spec{Path: p, CPUs: cgroup.CPUsOf(node1), Mems: cgroup.MemsOf(cpuset.MustParseMems("1"))}); err != nil {
		t.Fatal(err)
	}
	cmd := helper(t, m, p, "spin")
	if got := statusField(t, cmd.Process.Pid, "Cpus_allowed_list"); got != node1.String() {
		t.Errorf("Cpus_allowed_list = %q, want NUMA node 1's %q", got, node1)
	}
	if got := statusField(t, cmd.Process.Pid, "Mems_allowed_list"); got != "1" {
		t.Errorf("Mems_allowed_list = %q, want 1", got)
	}
	if got, _ := m.Read(p, "cpuset.cpus.effective"); got != node1.String() {
		t.Errorf("cpuset.cpus.effective = %q", got)
	}
	// Live change: move it to NUMA node 0; the running process follows.
	node0 := nodeCPUs(t, 0)
	if err := m.Apply(context.Background(), cgroup.Spec{Path: p, CPUs: cgroup.CPUsOf(node0), Mems: cgroup.MemsOf(cpuset.MustParseMems("0"))}); err != nil {
		t.Fatal(err)
	}
	if got := statusField(t, cmd.Process.Pid, "Cpus_allowed_list"); got != node0.String() {
		t.Errorf("after the live change Cpus_allowed_list = %q, want %q", got, node0)
	}
}

// TestKernelCPUMaxHoldsBusyLoop: cpu.max "50000 100000" holds a busy loop
// near half a CPU, measured from cpu.stat, and the group is throttled.
func TestKernelCPUMaxHoldsBusyLoop(t *testing.T) {
	m := kernelManager(t)
	p, _ := m.Parent().Child("half")
	one := cpuset.Of[cpuset.CPUID](m.HostCPUs().Slice()[0])
	if err := m.Apply(context.Background(), cgroup.Spec{Path: p, CPUs: &one, CPUMax: &cgroup.CPUMax{Quota: 50000, Period: 100000}}); err != nil {
		t.Fatal(err)
	}
	helper(t, m, p, "spin")
	time.Sleep(500 * time.Millisecond) // let the helper reach its loop
	before, err := m.Stats(p)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(4 * time.Second)
	after, _ := m.Stats(p)
	wall := time.Since(t0)
	share := float64(after.CPUUsageUsec-before.CPUUsageUsec) / float64(wall.Microseconds())
	t.Logf("cpu.max 50000/100000: busy loop used %.3f CPU over %s (throttled %d of %d periods)",
		share, wall.Round(time.Millisecond), after.CPUThrottled-before.CPUThrottled, after.CPUPeriods-before.CPUPeriods)
	if after.CPUThrottled <= before.CPUThrottled {
		t.Errorf("group was never throttled")
	}
	// A wide band: the guest runs under emulation on a busy 2-core host.
	if share < 0.35 || share > 0.6 {
		t.Errorf("busy loop used %.3f CPU under a 0.5 CPU quota", share)
	}
}

// TestKernelMemoryMaxKillsOverAllocator: memory.max 32 MiB (no swap) kills a
// process touching 96 MiB, and memory.events counts the OOM kill.
func TestKernelMemoryMaxKillsOverAllocator(t *testing.T) {
	m := kernelManager(t)
	p, _ := m.Parent().Child("small")
	if err := m.Apply(context.Background(), cgroup.Spec{Path: p, MemoryMax: cgroup.Int64(32 << 20), MemorySwapMax: cgroup.Int64(0)}); err != nil {
		t.Fatal(err)
	}
	cmd := helper(t, m, p, "alloc:96")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("over-allocator ended with %v, want SIGKILL", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("over-allocator still alive after 60 s under memory.max 32 MiB")
	}
	st, err := m.Stats(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.MemoryEventsOOMKill < 1 || st.MemoryEventsMax < 1 {
		t.Errorf("memory.events: max %d, oom_kill %d; want both >= 1", st.MemoryEventsMax, st.MemoryEventsOOMKill)
	}
	t.Logf("memory.events after the kill: max %d oom %d oom_kill %d", st.MemoryEventsMax, st.MemoryEventsOOM, st.MemoryEventsOOMKill)
}

// TestKernelRefusedWriteRollsBack: the kernel refuses an absurd
// cpu.max.burst; the cpu.weight written before it is restored.
func TestKernelRefusedWriteRollsBack(t *testing.T) {
	m := kernelManager(t)
	p, _ := m.Parent().Child("refused")
	if err := m.Apply(context.Background(), cgroup.Spec{Path: p, CPUWeight: 100}); err != nil {
		t.Fatal(err)
	}
	err := m.Apply(context.Background(), cgroup.Spec{Path: p, CPUWeight: 42, CPUMaxBurst: cgroup.Uint64(1 << 62)})
	var ae *cgroup.ApplyError
	if !errors.As(err, &ae) || ae.File != "cpu.max.burst" {
		t.Fatalf("Apply with burst 2^62 = %v, want the kernel to refuse cpu.max.burst", err)
	}
	if w, _ := m.Read(p, "cpu.weight"); w != "100" {
		t.Errorf("cpu.weight after the refused Apply = %q, want the old 100", w)
	}
	t.Logf("kernel refusal: %v", err)
}

// TestKernelReadBackAndWriteOrder: the kernel stores memory limits in whole
// pages and cpusets in its own list form, and Apply reads each back as
// holding what it wrote; lowering memory (high before max, as Plan orders
// it) ends with both as asked.
func TestKernelReadBackAndWriteOrder(t *testing.T) {
	m := kernelManager(t)
	p, _ := m.Parent().Child("readback")
	cpus := m.HostCPUs()
	odd := int64(256<<20 + 100) // not a whole number of pages
	s := cgroup.Spec{Path: p, CPUs: cgroup.CPUsOf(cpus), Mems: cgroup.MemsOf(m.HostMems()), MemoryHigh: cgroup.Int64(odd), MemoryMax: cgroup.Int64(odd)}
	if err := m.Apply(context.Background(), s); err != nil {
		t.Fatalf("Apply of a memory limit the kernel rounds to pages = %v", err)
	}
	page := int64(os.Getpagesize())
	if got, _ := m.Read(p, "memory.max"); got != fmt.Sprint(odd-odd%page) {
		t.Errorf("memory.max = %s, want %d rounded down to pages", got, odd)
	}
	if got, _ := m.Read(p, "cpuset.cpus"); !cpuset.MustParseCPUs(got).Equal(cpus) {
		t.Errorf("cpuset.cpus = %q, want %s", got, cpus)
	}
	// Lower both: high first, so the hard limit never undercuts it.
	s.MemoryHigh, s.MemoryMax = cgroup.Int64(64<<20), cgroup.Int64(96<<20)
	if err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	hi, _ := m.Read(p, "memory.high")
	mx, _ := m.Read(p, "memory.max")
	if hi != fmt.Sprint(64<<20) || mx != fmt.Sprint(96<<20) {
		t.Errorf("after lowering: memory.high %s, memory.max %s", hi, mx)
	}
	t.Logf("read back: memory.max %d stored as %d; cpuset.cpus %s", odd, odd-odd%page, cpus)
}

// TestKernelWritesBlock: the manager writes interface files in blocking
// mode. Go opens cgroup files O_NONBLOCK (they can be polled), and newer
// kernels skip the reclaim of a memory.high or memory.max write on such a
// file; the control shows Go still does so, so that the manager's clearing
// of the flag is what this test sees.
func TestKernelWritesBlock(t *testing.T) {
	m := kernelManager(t)
	p, _ := m.Parent().Child("block")
	if err := m.Apply(context.Background(), cgroup.Spec{Path: p, MemoryMax: cgroup.Int64(64 << 20)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Remove(context.Background(), p) })
	flags := func(f *os.File) int {
		t.Helper()
		rc, err := f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var fl int
		var ferr error
		if err := rc.Control(func(fd uintptr) { fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
			t.Fatalf("F_GETFL: %v %v", err, ferr)
		}
		return fl
	}
	for _, file := range []string{"memory.high", "memory.max"} {
		plain, err := os.OpenFile("/sys/fs/cgroup/"+p.String()+"/"+file, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		control := flags(plain)&unix.O_NONBLOCK != 0
		plain.Close()
		f, err := m.OpenWrite(p, file)
		if err != nil {
			t.Fatal(err)
		}
		got := flags(f)&unix.O_NONBLOCK != 0
		f.Close()
		if !control {
			t.Errorf("control: os.OpenFile(%s) is not O_NONBLOCK: Go no longer polls cgroup files, and this test no longer shows the manager's fix", file)
		}
		if got {
			t.Errorf("the manager's %s write is O_NONBLOCK: the kernel would skip its reclaim", file)
		}
		t.Logf("%s: os.OpenFile O_NONBLOCK %v; the manager's O_NONBLOCK %v", file, control, got)
	}
}
