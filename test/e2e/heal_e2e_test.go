//go:build linux && e2e

package e2e_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/test/testenv"
)

// TestE2EHeal: two agents share the guest's Docker engine as two hosts,
// e2e-a and e2e-b, each with its own host name, cgroup parent and state
// directory (each touches only the containers labelled with its host).
//
//  1. e2e-a's agent is killed: once its lease expired and the down grace
//     passed, its instances run on e2e-b with the same resources; its old
//     containers ran on meanwhile (at least once), and the agent, back,
//     removes them.
//  2. A replace with the same image and command makes new containers on
//     the same CPUs.
//  3. Draining e2e-b moves every instance to e2e-a, blue-green, and leaves
//     e2e-b disabled.
func TestE2EHeal(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	image := testenv.Image(t)
	dir := t.TempDir()
	pl := []string{"--planner", plannerAddr}
	startPlanner(t, dir+"/planner", "info")
	agentArgs := func(host string) []string {
		return []string{"agent", "--planner", plannerAddr, "--host", host, "--cgroup-parent", "/pinfold-" + host,
			"--state-dir", dir + "/" + host, "--resync", "1s", "--health-wait", "1s", "--heartbeat-ttl", "2s"}
	}
	agentA := daemon(t, "agent-a", agentArgs("e2e-a")...)
	daemon(t, "agent-b", agentArgs("e2e-b")...)
	hostState := func(name string) string {
		out, _, _ := pinfold(t, "", append([]string{"host", "show", name, "-o", "json"}, pl...)...)
		for _, st := range []string{"up", "down", "disabled"} {
			if strings.Contains(out, `"state": "`+st+`"`) {
				return st
			}
		}
		return "?"
	}
	eventually(t, 60*time.Second, "both hosts up", func() (bool, string) {
		a, b := hostState("e2e-a"), hostState("e2e-b")
		return a == "up" && b == "up", a + " " + b
	})
	must := func(args ...string) string {
		t.Helper()
		if i := slices.Index(args, "--"); i >= 0 { // the flags go before the container's command
			args = append(append(slices.Clone(args[:i]), pl...), args[i:]...)
		} else {
			args = append(args, pl...)
		}
		out, errOut, code := pinfold(t, "", args...)
		if code != 0 {
			t.Fatalf("pinfold %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	must("settings", "--down-grace", "5s")
	// Both instances on e2e-a: e2e-b takes nothing while disabled.
	must("host", "disable", "e2e-b")
	must("deploy", "web", "--count", "2", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", image, "--", "sleep", "3600")
	must("host", "enable", "e2e-b")
	running := func(host string, n int) []psEntry {
		var got []psEntry
		eventually(t, 120*time.Second, fmt.Sprintf("%d running instances on %s", n, host), func() (bool, string) {
			got = nil
			list := ps(t)
			for _, e := range list {
				if e.Service == "web" && e.Host == host && e.State == "running" {
					got = append(got, e)
				}
			}
			return len(got) == n && len(list) == n, fmt.Sprint(list) + "\n" + containerStates(t)
		})
		return got
	}
	onA := running("e2e-a", 2)
	for _, e := range onA {
		if got := inspect(t, e.Container, "{{.HostConfig.CgroupParent}} {{index .Config.Labels \"io.pinfold.host\"}}"); got != "/pinfold-e2e-a e2e-a" {
			t.Errorf("%s: cgroup parent and host label %q, want /pinfold-e2e-a e2e-a", e.ID, got)
		}
	}

	// 1. e2e-a's agent dies; its containers run on (nothing stops them).
	agentA.Process.Kill()
	agentA.Wait()
	t0 := time.Now()
	onB := running("e2e-b", 2)
	t.Logf("agent of e2e-a killed: its 2 instances ran on e2e-b %s later (heartbeat TTL 2s, down grace 5s)", time.Since(t0).Round(time.Millisecond))
	for _, e := range onB {
		if e.CPUPlanned != "1" || e.Memory != 64<<20 || !e.Bind || len(e.CPUs) != 1 {
			t.Errorf("healed %+v: want 1 CPU bound, 64 MiB, like the originals", e)
		}
		if got := inspect(t, e.Container, "{{.HostConfig.CpusetCpus}} {{.HostConfig.Memory}} {{.HostConfig.CgroupParent}}"); got != fmt.Sprintf("%s %d /pinfold-e2e-b", cpuList(e.CPUs), 64<<20) {
			t.Errorf("healed %s container: cpuset, memory, parent = %q, want %s %d /pinfold-e2e-b", e.ID, got, cpuList(e.CPUs), 64<<20)
		}
		if slices.ContainsFunc(onA, func(o psEntry) bool { return o.ID == e.ID }) {
			t.Errorf("healed instance %s kept its ID: want a new instance", e.ID)
		}
	}
	stale := hostContainers(t, "e2e-a")
	if len(stale) != 2 {
		t.Errorf("e2e-a's containers while its agent is gone: %v, want the 2 old ones still there (at least once)", stale)
	}
	// The agent returns and removes them before anything else.
	daemon(t, "agent-a2", agentArgs("e2e-a")...)
	t0 = time.Now()
	eventually(t, 60*time.Second, "the returning agent to remove its stale containers", func() (bool, string) {
		left := hostContainers(t, "e2e-a")
		return len(left) == 0, fmt.Sprint(left)
	})
	t.Logf("e2e-a's agent back: its 2 stale containers removed in %s", time.Since(t0).Round(time.Millisecond))

	// 2. Replace with the same image and command: new containers, same CPUs.
	before := map[string]psEntry{}
	for _, e := range running("e2e-b", 2) {
		before[e.ID] = e
	}
	must("replace", "web", "--image", image, "--", "sleep", "3600")
	for _, e := range running("e2e-b", 2) {
		old := before[e.ID]
		if e.Container == old.Container || e.Container == "" {
			t.Errorf("%s after a replace with the same image: container %s, was %s; want a new one", e.ID, short(e.Container), short(old.Container))
		}
		if got := inspect(t, e.Container, "{{.HostConfig.CpusetCpus}}"); got != cpuList(old.CPUs) {
			t.Errorf("%s replaced on CPUs %s, was %s", e.ID, got, cpuList(old.CPUs))
		}
	}

	// 3. Drain e2e-b: everything moves to e2e-a, e2e-b stays disabled.
	t0 = time.Now()
	out, errOut, code := pinfold(t, "", append([]string{"host", "drain", "e2e-b", "--deadline", "2m"}, pl...)...)
	if code != 0 || !strings.Contains(out, "drained: 2 instances moved") || !strings.Contains(errOut, "2 of 2 instances moved") {
		t.Fatalf("host drain e2e-b: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("drain of 2 instances took %s", time.Since(t0).Round(time.Millisecond))
	running("e2e-a", 2)
	if st := hostState("e2e-b"); st != "disabled" {
		t.Errorf("e2e-b after the drain is %s, want disabled", st)
	}
	eventually(t, 60*time.Second, "e2e-b's agent to remove the drained containers", func() (bool, string) {
		left := hostContainers(t, "e2e-b")
		return len(left) == 0, fmt.Sprint(left)
	})
	must("remove", "web")
	eventually(t, 60*time.Second, "web's containers to go", func() (bool, string) {
		left := hostContainers(t, "e2e-a")
		return len(left) == 0, fmt.Sprint(left)
	})
}

func inspect(t *testing.T, container, format string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", format, container).CombinedOutput()
	if err != nil {
		return "<" + strings.TrimSpace(string(out)) + ">"
	}
	return strings.TrimSpace(string(out))
}

// hostContainers lists the containers (running or not) a host's agent made.
func hostContainers(t *testing.T, host string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=io.pinfold.host="+host).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// containerStates is every pinfold container's state and host, for failures.
func containerStates(t *testing.T) string {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=io.pinfold.managed=true").Output()
	var b strings.Builder
	for _, id := range strings.Fields(string(out)) {
		fmt.Fprintf(&b, "%s %s\n", id, inspect(t, id, `{{index .Config.Labels "io.pinfold.host"}} {{.HostConfig.CgroupParent}} {{json .State}}`))
		logs, _ := exec.Command("docker", "logs", "--tail", "5", id).CombinedOutput()
		fmt.Fprintf(&b, "  logs: %q\n", logs)
	}
	return b.String()
}
