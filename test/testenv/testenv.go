// Package testenv holds the gates of pinfold's kernel and e2e test tiers.
// A gate that finds its prerequisite missing FAILS the test: a tier that
// was asked for never skips silently. Only *_test.go files import it.
package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireKernel fails t unless it runs as root on a cgroup v2 mount at
// /sys/fs/cgroup whose root offers the cpu, cpuset, memory and pids
// controllers.
func RequireKernel(t testing.TB) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatalf("kernel tier: must run as root (uid %d); run it through hack/vm/run", os.Getuid())
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Fatalf("kernel tier: /sys/fs/cgroup is not a cgroup2 mount (statfs type %#x, err %v)", st.Type, err)
	}
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		t.Fatalf("kernel tier: %v", err)
	}
	for _, c := range []string{"cpu", "cpuset", "memory", "pids"} {
		if !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+c+" ") {
			t.Fatalf("kernel tier: controller %s missing from cgroup.controllers %q", c, b)
		}
	}
}

// RequireNUMANodes fails t unless the host has at least n NUMA nodes.
func RequireNUMANodes(t testing.TB, n int) {
	t.Helper()
	b, err := os.ReadFile("/sys/devices/system/node/online")
	if err != nil {
		t.Fatalf("kernel tier: need %d NUMA nodes: %v", n, err)
	}
	s := strings.TrimSpace(string(b))
	last := s[strings.LastIndexAny(s, ",-")+1:]
	if k, err := strconv.Atoi(last); err != nil || k+1 < n {
		t.Fatalf("kernel tier: need %d NUMA nodes, node/online is %q", n, s)
	}
}

// RequireDocker fails t unless a Docker engine answers on its socket.
func RequireDocker(t testing.TB) {
	t.Helper()
	sock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		sock = strings.TrimPrefix(h, "unix://")
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("docker tier: no Docker engine socket at %s (run with hack/vm/run --docker): %v", sock, err)
	}
}

// Image is the image the guest imports for tests.
func Image(t testing.TB) string {
	t.Helper()
	img := os.Getenv("PINFOLD_TEST_IMAGE")
	if img == "" {
		t.Fatalf("docker tier: PINFOLD_TEST_IMAGE is not set (hack/vm/run sets it)")
	}
	return img
}
