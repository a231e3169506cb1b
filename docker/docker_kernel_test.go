//go:build linux && kernel

package docker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/test/testenv"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// linearWeight and quadraticWeight are runc's two CPUShares → cpu.weight
// conversions (runc < 1.3 and later; research §2.3).
func linearWeight(shares int64) string { return fmt.Sprint(1 + (shares-2)*9999/262142) }

// TestKernelDockerLiveResize: a container started through the adapter on
// Debian's docker.io 20.10 gets the cpuset, weight and memory asked for, and
// a live update changes them without a restart (same ID, same PID).
func TestKernelDockerLiveResize(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	testenv.RequireNUMANodes(t, 2)
	image := testenv.Image(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := docker.Connect(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("engine %s, negotiated API %s, cgroup driver %s", a.ServerVersion(), a.APIVersion(), a.CgroupDriver())
	if !a.SwapLimit() {
		t.Errorf("the engine reports no swap limit support")
	}
	if a.APIVersion() != "1.41" {
		t.Errorf("negotiated API %s with docker.io 20.10, want 1.41", a.APIVersion())
	}
	node0 := cpuset.MustParseCPUs(readFile(t, "/sys/devices/system/node/node0/cpulist"))
	node1 := cpuset.MustParseCPUs(readFile(t, "/sys/devices/system/node/node1/cpulist"))
	res := docker.Resources{CPUs: node1, Mems: cpuset.MustParseMems("1"), CPUShares: 717, MemoryBytes: 64 << 20, MemoryReservation: 32 << 20}
	t0 := time.Now()
	id, err := a.Create(ctx, docker.CreateSpec{Name: "pinfold-kt-web-1", Image: image, Cmd: []string{"sleep", "3600"}, Service: "web", Instance: "web-1", Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Remove(context.Background(), id) })
	if err := a.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	t.Logf("create+start took %s", time.Since(t0).Round(time.Millisecond))
	c, err := a.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Running || c.PID <= 0 {
		t.Fatalf("container not running: %+v", c)
	}
	if got := readFile(t, fmt.Sprintf("/proc/%d/cgroup", c.PID)); got != "0::/"+c.CgroupPath {
		t.Errorf("/proc/%d/cgroup = %q, adapter says %q", c.PID, got, c.CgroupPath)
	}
	cg := "/sys/fs/cgroup/" + c.CgroupPath + "/"
	want := map[string]string{"cpuset.cpus": node1.String(), "cpuset.mems": "1", "memory.max": fmt.Sprint(64 << 20),
		"memory.swap.max": "0", "memory.low": fmt.Sprint(32 << 20), "cpu.max": "max 100000", "cpu.weight": linearWeight(717)}
	for f, v := range want {
		if got := readFile(t, cg+f); got != v {
			t.Errorf("after create %s = %q, want %q", f, got, v)
		}
	}
	// Live update: NUMA node 0, more memory, a CPU quota.
	res = docker.Resources{CPUs: node0, Mems: cpuset.MustParseMems("0"), CPUShares: 1024, CPUQuota: 150000, MemoryBytes: 128 << 20}
	t1 := time.Now()
	after, err := a.Update(ctx, id, res)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("live update took %s", time.Since(t1).Round(time.Millisecond))
	if after.ID != id || after.PID != c.PID || !after.Running {
		t.Errorf("update restarted the container: before %s pid %d, after %s pid %d running %v", id, c.PID, after.ID, after.PID, after.Running)
	}
	want = map[string]string{"cpuset.cpus": node0.String(), "cpuset.mems": "0", "memory.max": fmt.Sprint(128 << 20),
		"memory.swap.max": "0", "cpu.max": "150000 100000", "cpu.weight": linearWeight(1024)}
	for f, v := range want {
		if got := readFile(t, cg+f); got != v {
			t.Errorf("after update %s = %q, want %q", f, got, v)
		}
	}
	// 0.005 CPU (share base 1000): a quota per 1 s period, which the
	// engine accepts and reads back.
	fine := res
	fine.CPUQuota, fine.CPUPeriod = docker.QuotaFor(5, 1000)
	if after, err := a.Update(ctx, id, fine); err != nil {
		t.Errorf("0.005 CPU update: %v", err)
	} else if after.Applied.CPUQuota != 5000 || after.Applied.PeriodUsec() != docker.LongPeriod {
		t.Errorf("0.005 CPU update: engine holds quota %d per %d µs", after.Applied.CPUQuota, after.Applied.PeriodUsec())
	}
	if got := readFile(t, cg+"cpu.max"); got != "5000 1000000" {
		t.Errorf("after the 0.005 CPU update cpu.max = %q, want \"5000 1000000\"", got)
	}
	if _, err := a.Update(ctx, id, res); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cg+"cpu.max"); got != "150000 100000" {
		t.Errorf("back to 1.5 CPUs: cpu.max = %q, want \"150000 100000\"", got)
	}
	status := readFile(t, fmt.Sprintf("/proc/%d/status", c.PID))
	if !strings.Contains(status, "Cpus_allowed_list:\t"+node0.String()) {
		t.Errorf("the container's process did not follow the new cpuset:\n%s", status)
	}

	// Bad input changes nothing.
	if _, err := a.Update(ctx, id, docker.Resources{CPUs: node0, Mems: res.Mems, MemoryBytes: 4 << 20}); err == nil || !strings.Contains(err.Error(), "6 MiB") {
		t.Errorf("4 MiB update = %v, want the 6 MiB minimum", err)
	}
	if got := readFile(t, cg+"memory.max"); got != fmt.Sprint(128<<20) {
		t.Errorf("memory.max after the refused update = %s", got)
	}
	if _, err := a.Update(ctx, "0123456789ab", res); !errors.Is(err, docker.ErrNotFound) {
		t.Errorf("update of a vanished container = %v, want ErrNotFound", err)
	}
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--name", "not-pinfold", image, "sleep", "3600").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	foreign := strings.TrimSpace(string(out))
	defer exec.Command("docker", "rm", "-f", foreign).Run()
	if _, err := a.Update(ctx, foreign, res); !errors.Is(err, docker.ErrNotOwned) {
		t.Errorf("update of a container pinfold does not own = %v, want ErrNotOwned", err)
	}
	if err := a.Remove(ctx, foreign); !errors.Is(err, docker.ErrNotOwned) {
		t.Errorf("remove of a foreign container = %v", err)
	}
	// Exec (health probes) reports the command's exit code.
	for _, tc := range []struct {
		cmd  []string
		want int
	}{{[]string{"true"}, 0}, {[]string{"false"}, 1}, {[]string{"sh", "-c", "exit 3"}, 3}} {
		if code, err := a.Exec(ctx, id, tc.cmd); err != nil || code != tc.want {
			t.Errorf("Exec(%q) = %d, %v; want exit code %d", tc.cmd, code, err, tc.want)
		}
	}
	if _, err := a.Exec(ctx, foreign, []string{"true"}); !errors.Is(err, docker.ErrNotOwned) {
		t.Errorf("exec in a foreign container = %v, want ErrNotOwned", err)
	}
	if c, _ := a.Inspect(ctx, id); c.Health != "" {
		t.Errorf("health of a container whose image declares no HEALTHCHECK = %q, want empty", c.Health)
	}
	list, err := a.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Errorf("List = %d containers, %v; want only pinfold's", len(list), err)
	}
	if err := a.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Inspect(ctx, id); !errors.Is(err, docker.ErrNotFound) {
		t.Errorf("inspect after remove = %v", err)
	}
}
