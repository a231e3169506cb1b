package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// HelperMain turns the test binary into a helper process when
// PINFOLD_HELPER is set, and never returns then: "spin" burns a CPU,
// "alloc:N" touches N MiB, prints "allocated N" and sleeps. Call it first
// in TestMain; without PINFOLD_HELPER it returns at once.
func HelperMain() {
	switch h := os.Getenv("PINFOLD_HELPER"); {
	case h == "spin":
		for x := 0; ; x++ {
			_ = x
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
