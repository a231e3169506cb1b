package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/test/workload"
)

// HelperMain turns the test binary into a helper process when
// PINFOLD_HELPER is set, and never returns then: "spin" burns a CPU,
// "spin:N" burns N CPUs (N busy OS threads; start it with GOMAXPROCS=N),
// "write:N:PATH" writes N MiB of page cache to PATH and sleeps, "churn:N"
// allocates N MiB, returns it to the system and again, for ever (hot
// anonymous memory),
// "alloc:N" touches N MiB, prints "allocated N" and sleeps, "load:SPEC"
// runs a workload of the matrix (package workload; what it sees goes to
// the file PINFOLD_REPORT names), "burn:MS" uses MS ms of CPU and exits
// (a forks workload's process), "probe" sleeps 1.5 s (time for the agent
// to place it) and prints what a process started in the instance sees
// (as `docker exec` would start it). Call it first
// in TestMain; without PINFOLD_HELPER it returns at once.
func HelperMain() {
	h := os.Getenv("PINFOLD_HELPER")
	if h != "" && !slices.Contains(os.Args[1:], "-test.run=^$") {
		// Helpers are started with -test.run=^$ (StartHelper, the matrix,
		// the e2e containers); a PINFOLD_HELPER left in a shell's
		// environment must not turn a test run into a helper that exits 0.
		fmt.Fprintf(os.Stderr, "testenv: PINFOLD_HELPER=%q ignored: this is a test run, not a helper (helpers run with -test.run=^$)\n", h)
		return
	}
	switch {
	case h == "spin":
		spin()
	case strings.HasPrefix(h, "spin:"):
		var n int
		fmt.Sscanf(h, "spin:%d", &n)
		for range n - 1 {
			go spin()
		}
		spin()
	case strings.HasPrefix(h, "load:"):
		l, err := workload.Parse(strings.TrimPrefix(h, "load:"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
		workload.Run(l, os.Getenv("PINFOLD_REPORT"), os.Args[0], "PINFOLD_HELPER")
	case strings.HasPrefix(h, "burn:"):
		var ms int
		fmt.Sscanf(h, "burn:%d", &ms)
		workload.Burn(ms)
		os.Exit(0)
	case h == "probe":
		time.Sleep(1500 * time.Millisecond)
		fmt.Printf("gomaxprocs=%d aff=%d\n", runtime.GOMAXPROCS(0), workload.Affinity(0))
		os.Exit(0)
	case strings.HasPrefix(h, "write:"):
		writeFile(strings.TrimPrefix(h, "write:"))
	case strings.HasPrefix(h, "churn:"):
		var mib int
		fmt.Sscanf(h, "churn:%d", &mib)
		fmt.Println("churning", mib)
		for {
			b := make([]byte, mib<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			runtime.KeepAlive(b)
			debug.FreeOSMemory() // the pages go back and are faulted in again: charged anew
		}
	case strings.HasPrefix(h, "alloc:"):
		var mib int
		fmt.Sscanf(h, "alloc:%d", &mib)
		buf := make([][]byte, 0, mib)
		for range mib {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			buf = append(buf, b)
		}
		fmt.Println("allocated", len(buf))
		time.Sleep(time.Hour)
		os.Exit(0)
	}
}

// writeFile handles "write:MIB:PATH": it writes MIB MiB to PATH (page
// cache charged to the helper's cgroup), syncs it so the pages are clean
// and reclaimable, prints "written", and sleeps.
func writeFile(arg string) {
	var mib int
	n, _ := fmt.Sscanf(arg, "%d:", &mib)
	_, path, ok := strings.Cut(arg, ":")
	if n != 1 || !ok {
		fmt.Fprintln(os.Stderr, "helper: want write:MIB:PATH, got", arg)
		os.Exit(2)
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for range mib {
		if _, err := f.Write(buf); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
	}
	if err := f.Sync(); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	fmt.Println("written", mib)
	time.Sleep(time.Hour)
	os.Exit(0)
}

// spin burns the CPU of one OS thread for ever.
func spin() {
	runtime.LockOSThread()
	for x := 0; ; x++ {
		_ = x
	}
}

// StartHelperWith starts a helper as StartHelper does, with attr (for
// example CgroupFD, to start it inside a cgroup) and extra environment.
func StartHelperWith(t testing.TB, mode string, attr *syscall.SysProcAttr, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "PINFOLD_HELPER="+mode), env...)
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper %s: %v", mode, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// StartHelper starts this test binary as a helper process in mode (see
// HelperMain); it is killed at cleanup.
func StartHelper(t testing.TB, mode string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PINFOLD_HELPER="+mode)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}
