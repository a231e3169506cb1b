//go:build linux && e2e

package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/test/testenv"
)

const plannerAddr = "127.0.0.1:7878"

type psEntry struct {
	ID         string         `json:"id"`
	Host       string         `json:"host"`
	CPUs       map[string]int `json:"cpus"`
	CPUQuota   string         `json:"cpu_quota"`
	NUMANode   int            `json:"numa_node"`
	Memory     int64          `json:"memory_bytes"`
	State      string         `json:"state"`
	Generation int64          `json:"generation"`
	Container  string         `json:"container_id"`
	PID        int            `json:"pid"`
	Bind       bool           `json:"bind"`
}

// daemon starts a pinfold subcommand in the background, killed at cleanup.
func daemon(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Getenv("PINFOLD_BIN"), args...)
	logf, _ := os.Create(fmt.Sprintf("%s/%s.log", t.TempDir(), name))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", name, tail(string(b), 40))
		}
	})
	return cmd
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last: %s)", d, what, last)
}

func ps(t *testing.T) []psEntry {
	t.Helper()
	out, errOut, code := pinfold(t, "", "ps", "-o", "json", "--planner", plannerAddr)
	if code != 0 {
		t.Fatalf("ps: %s", errOut)
	}
	var list []psEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	return list
}

func cg(t *testing.T, container, file string) string {
	t.Helper()
	b, err := os.ReadFile("/sys/fs/cgroup/docker/" + container + "/" + file)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return strings.TrimSpace(string(b))
}

func cpuList(m map[string]int) string {
	var ids []cpuset.CPUID
	for k := range m {
		var id int
		fmt.Sscan(k, &id)
		ids = append(ids, cpuset.CPUID(id))
	}
	return cpuset.Of(ids...).String()
}

func byID(list []psEntry, id string) psEntry {
	for _, e := range list {
		if e.ID == id {
			return e
		}
	}
	return psEntry{}
}

func dockerPS(t *testing.T, instance string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label=io.pinfold.instance="+instance).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// TestE2EAgent: planner + agent + dockerd in the guest. Deploy, resize
// (grow, shrink, unbind) in place, drift repair, blue-green replace (healthy
// and unhealthy), and an agent killed mid-replace that converges on restart.
func TestE2EAgent(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	testenv.RequireNUMANodes(t, 2)
	image := testenv.Image(t)
	dir := t.TempDir()
	daemon(t, "planner", "planner", "--data-dir", dir+"/planner", "--listen", plannerAddr, "--log-level", "warn")
	eventually(t, 60*time.Second, "the planner", func() (bool, string) {
		r, err := http.Get("http://" + plannerAddr + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		r.Body.Close()
		return r.StatusCode == 200, r.Status
	})
	agentArgs := []string{"agent", "--planner", plannerAddr, "--host", "vm", "--state-dir", dir + "/agent", "--resync", "1s", "--health-wait", "2s"}
	agent := daemon(t, "agent", agentArgs...)
	eventually(t, 60*time.Second, "host vm up", func() (bool, string) {
		out, _, _ := pinfold(t, "", "host", "list", "-o", "json", "--planner", plannerAddr)
		return strings.Contains(out, `"state": "up"`) && strings.Contains(out, `"agent": true`), out
	})
	node := map[int]cpuset.CPUs{}
	for i := 0; i < 2; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/sys/devices/system/node/node%d/cpulist", i))
		node[i] = cpuset.MustParseCPUs(string(b))
	}

	// 1. Deploy 3 × (1.3 CPU bound, 128 MiB): NUMA-local, files match.
	if _, errOut, code := pinfold(t, "", "deploy", "web", "--count", "3", "--cpu", "1.3", "--bind", "--memory", "128MiB",
		"--image", image, "--planner", plannerAddr, "--", "sleep", "3600"); code != 0 {
		t.Fatalf("deploy: %s", errOut)
	}
	eventually(t, 120*time.Second, "3 running instances", func() (bool, string) {
		list := ps(t)
		n := 0
		for _, e := range list {
			if e.State == "running" && e.Generation == 1 {
				n++
			}
		}
		return n == 3, fmt.Sprint(list)
	})
	list := ps(t)
	for _, e := range list {
		cpus := cpuList(e.CPUs)
		if e.NUMANode < 0 || !cpuset.MustParseCPUs(cpus).IsSubsetOf(node[e.NUMANode]) {
			t.Errorf("%s on CPUs %s, NUMA node %d: not NUMA-local", e.ID, cpus, e.NUMANode)
		}
		want := map[string]string{"cpuset.cpus": cpus, "cpuset.mems": fmt.Sprint(e.NUMANode), "memory.max": fmt.Sprint(128 << 20),
			"cpu.max": "130000 100000", "cpu.weight": "30", "memory.swap.max": "0"} // the default (capped) fragment scheme
		for f, v := range want {
			if got := cg(t, e.Container, f); got != v {
				t.Errorf("%s %s = %q, want %q", e.ID, f, got, v)
			}
		}
	}
	// a is the instance alone on NUMA node 1 (only it can grow to 2 whole
	// CPUs); b and c share NUMA node 0's fragment CPU.
	sort.Slice(list, func(i, j int) bool {
		return list[i].NUMANode > list[j].NUMANode || list[i].NUMANode == list[j].NUMANode && list[i].ID < list[j].ID
	})
	a, b, c := list[0], list[1], list[2]
	if a.NUMANode != 1 || b.NUMANode != 0 || c.NUMANode != 0 {
		t.Fatalf("placement: %+v", list)
	}

	// 2. Resize in place: +0.7 CPU +64 MiB, then -0.5, then unbind.
	var latencies []time.Duration
	resize := func(target string, args []string, file, want string) psEntry {
		t.Helper()
		t0 := time.Now()
		if _, errOut, code := pinfold(t, "", append(append([]string{"resize", target}, args...), "--planner", plannerAddr)...); code != 0 {
			t.Fatalf("resize %v: %s", args, errOut)
		}
		eventually(t, 60*time.Second, fmt.Sprintf("%s %s = %s", target, file, want), func() (bool, string) {
			got := cg(t, a.Container, file)
			return got == want, got
		})
		latencies = append(latencies, time.Since(t0))
		var e psEntry
		eventually(t, 30*time.Second, "the status to catch up", func() (bool, string) {
			e = byID(ps(t), target)
			return e.Generation > 1 && e.State == "running", fmt.Sprint(e)
		})
		if e.Container != a.Container || e.PID != a.PID {
			t.Errorf("resize %v restarted %s: container %s pid %d, was %s pid %d", args, target, e.Container, e.PID, a.Container, a.PID)
		}
		return e
	}
	e := resize(a.ID, []string{"--cpu", "+0.7", "--memory", "+64MiB"}, "memory.max", fmt.Sprint(192<<20))
	if got := cg(t, a.Container, "cpu.max"); got != "max 100000" || cg(t, a.Container, "cpuset.cpus") != cpuList(e.CPUs) {
		t.Errorf("after +0.7 (2.0 CPUs, no fragment) cpu.max = %q, cpuset %q (want %s)", got, cg(t, a.Container, "cpuset.cpus"), cpuList(e.CPUs))
	}
	e = resize(a.ID, []string{"--cpu", "-0.5"}, "cpu.weight", "50")
	if cg(t, a.Container, "cpuset.cpus") != cpuList(e.CPUs) {
		t.Errorf("after -0.5 cpuset %q, want %s", cg(t, a.Container, "cpuset.cpus"), cpuList(e.CPUs))
	}
	e = resize(a.ID, []string{"--no-bind"}, "cpuset.mems", "0-1")
	if e.Bind || e.CPUQuota != "1.5" || cg(t, a.Container, "cpu.max") != "150000 100000" {
		t.Errorf("after unbinding: %+v, cpu.max %q", e, cg(t, a.Container, "cpu.max"))
	}
	slices.Sort(latencies)
	t.Logf("apply latency (CLI resize returned → cgroup file changed), %d samples: min %s, median %s, max %s",
		len(latencies), latencies[0].Round(time.Millisecond), latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))

	// 3. Drift: a hand-made docker update is reverted.
	wantCPUs := cg(t, b.Container, "cpuset.cpus")
	other := node[1-b.NUMANode].String()
	if out, err := exec.Command("docker", "update", "--cpuset-cpus", other, b.Container).CombinedOutput(); err != nil {
		t.Fatalf("docker update: %v %s", err, out)
	}
	t0 := time.Now()
	eventually(t, 30*time.Second, "the drift to be reverted", func() (bool, string) {
		got := cg(t, b.Container, "cpuset.cpus")
		return got == wantCPUs, got
	})
	t.Logf("manual docker update --cpuset-cpus %s reverted to %s in %s", other, wantCPUs, time.Since(t0).Round(time.Millisecond))

	// 4. Replace, unhealthy: the new container exits, the old one resumes.
	if _, errOut, code := pinfold(t, "", "replace", b.ID, "--image", image, "--planner", plannerAddr, "--", "false"); code != 0 {
		t.Fatalf("replace: %s", errOut)
	}
	eventually(t, 60*time.Second, "the failed replace to roll back", func() (bool, string) {
		out, _, _ := pinfold(t, "", "ps", "-o", "json", "--planner", plannerAddr)
		ids := dockerPS(t, b.ID)
		return len(ids) == 1 && ids[0] == b.Container && strings.Contains(out, "rolled back"), fmt.Sprint(ids)
	})
	if st, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}} {{.State.Paused}}", b.Container).Output(); strings.TrimSpace(string(st)) != "true false" {
		t.Errorf("old container after the rollback: %s", st)
	}
	// 5. Replace, healthy, on the same CPUs.
	cCPUs := cg(t, c.Container, "cpuset.cpus")
	if _, errOut, code := pinfold(t, "", "replace", c.ID, "--image", image, "--planner", plannerAddr, "--", "sleep", "7200"); code != 0 {
		t.Fatalf("replace: %s", errOut)
	}
	var newC string
	eventually(t, 60*time.Second, "the healthy replace", func() (bool, string) {
		ids := dockerPS(t, c.ID)
		if len(ids) == 1 && ids[0] != c.Container {
			newC = ids[0]
			return true, ""
		}
		return false, fmt.Sprint(ids)
	})
	if got := cg(t, newC, "cpuset.cpus"); got != cCPUs {
		t.Errorf("replacement on CPUs %s, the old one had %s", got, cCPUs)
	}
	// 6. Kill the agent mid-replace, restart it: it converges.
	if _, errOut, code := pinfold(t, "", "replace", c.ID, "--image", image, "--planner", plannerAddr, "--", "sleep", "7300"); code != 0 {
		t.Fatalf("replace: %s", errOut)
	}
	eventually(t, 60*time.Second, "the replacement to start", func() (bool, string) {
		ids := dockerPS(t, c.ID)
		return len(ids) == 2, fmt.Sprint(ids)
	})
	agent.Process.Kill()
	agent.Wait()
	daemon(t, "agent2", agentArgs...)
	eventually(t, 90*time.Second, "convergence after the restart", func() (bool, string) {
		ids := dockerPS(t, c.ID)
		if len(ids) != 1 {
			return false, fmt.Sprint(ids)
		}
		out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}} {{json .Config.Cmd}}", ids[0]).Output()
		return strings.TrimSpace(string(out)) == `true ["sleep","7300"]`, string(out)
	})
}
