package main

import (
	"slices"
	"testing"
)

// TestV1Bound: the controllers a cgroup v1 hierarchy holds are found in
// /proc/self/mounts (the hybrid layout), none on a unified host.
func TestV1Bound(t *testing.T) {
	hybrid := `sysfs /sys sysfs rw,nosuid 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
`
	unified := "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n"
	want := []string{"cpu at /sys/fs/cgroup/cpu,cpuacct", "cpuset at /sys/fs/cgroup/cpuset", "memory at /sys/fs/cgroup/memory"}
	if got := v1Bound(hybrid, "/sys/fs/cgroup/unified", []string{"cpu", "cpuset", "memory", "pids"}); !slices.Equal(got, want) {
		t.Errorf("hybrid: %q, want %q", got, want)
	}
	if got := v1Bound(unified, "/sys/fs/cgroup", []string{"cpu", "cpuset", "memory", "pids"}); len(got) != 0 {
		t.Errorf("unified: %q, want none", got)
	}
	// A root that is no cgroup2 mount (a test's directory): not the hybrid case.
	if got := v1Bound(hybrid, "/tmp/x", []string{"cpu"}); len(got) != 0 {
		t.Errorf("a directory that is no mount: %q, want none", got)
	}
}
