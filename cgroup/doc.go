// Package cgroup is pinfold's cgroup v2 writer. It owns one subtree (the
// "parent", e.g. /sys/fs/cgroup/pinfold or pinfold.slice), creates groups
// below it, enables the cpu, cpuset, memory and pids controllers along the
// way, and applies a Spec: cpuset.cpus, cpuset.mems, cpu.weight, cpu.max,
// cpu.max.burst, memory.max, memory.high, memory.low, memory.swap.max and
// memory.oom.group. It also writes the files Docker cannot express on a
// container's own cgroup (which it does not create), and reads back cpu.stat,
// memory.current and memory.events.
//
// Plan, then apply: Plan(Spec) is pure and returns the ordered writes;
// Manager.Apply validates everything first (ranges, CPUs and NUMA nodes the
// host has, the group exists or lies under the owned parent), remembers the
// old values, writes one value per write(2) through an *os.Root (never
// O_CREATE, so a misspelled file is ENOENT on the fake tree too), and on a
// failed write restores what it had written: a failed Apply changes nothing.
//
// github.com/containerd/cgroups/v3 is used where it fits (mode detection,
// statistics, moving processes, deleting groups). Its writer is not used for
// resources because it cannot write "max", drops a quota without a period,
// turns swap -1 into EINVAL and skips unset fields instead of resetting them
// (research: kernel-and-libs.md §1.3).
//
// It imports planner/cpuset, os and golang.org/x/sys/unix; never topology,
// api or docker.
//
// Reference: https://docs.kernel.org/admin-guide/cgroup-v2.html
package cgroup
