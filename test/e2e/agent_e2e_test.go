//go:build linux && e2e

package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
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

// TestE2EAgent: planner + agent + dockerd in the guest. Deploy, resize
// (grow, shrink, unbind) in place, drift repair, blue-green replace (healthy
// and unhealthy), and an agent killed mid-replace that converges on restart.
func TestE2EAgent(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	testenv.RequireNUMANodes(t, 2)
	image := testenv.Image(t)
	dir := t.TempDir()
	planner := startPlanner(t, dir+"/planner", "warn")
	agentArgs := []string{"agent", "--planner", plannerAddr, "--host", "vm", "--state-dir", dir + "/agent", "--resync", "1s", "--health-wait", "2s", "--shrink-deadline", "8s", "--shrink-notice", "2s"}
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
			"cpu.max": "130000 100000", "cpu.weight": "30", "memory.swap.max": "0", // the default (capped) fragment scheme: the container's
			// own files, a plain domain with no children (what runc, docker top and the workload expect)
			"cgroup.type": "domain", "cgroup.subtree_control": ""}
		for f, v := range want {
			if got := cg(t, e.Container, f); got != v {
				t.Errorf("%s %s = %q, want %q", e.ID, f, got, v)
			}
		}
		if ap := e.Applied; ap == nil || ap.CPUs != cpus || ap.Mems != fmt.Sprint(e.NUMANode) || ap.MemoryBytes != 128<<20 || ap.CPUQuota != 130000 || ap.CPUWeight != 30 {
			t.Errorf("%s: applied as reported by the agent = %+v", e.ID, e.Applied)
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
	// What the workload is told: the size file mounted read-only at
	// /run/pinfold, and the variables it was created with.
	if s := sizeSeen(t, b.Container); s.CPUs != 1.3 || s.CPUsCeil != 2 || s.WholeCPUs != 1 || s.Fragment != 0.3 || s.MemoryBytes != 128<<20 {
		t.Errorf("%s: /run/pinfold/resources.json = %+v, want 1.3 CPUs (1 whole + 0.3), ceil 2, 128 MiB", b.ID, s)
	}
	if out, err := exec.Command("docker", "exec", b.Container, "sh", "-c", "echo $PINFOLD_CPUS $PINFOLD_CPUS_CEIL $PINFOLD_MEMORY_BYTES; touch /run/pinfold/x").CombinedOutput(); !strings.HasPrefix(string(out), fmt.Sprintf("1.3 2 %d\n", 128<<20)) || err == nil {
		t.Errorf("%s: the environment and a write to /run/pinfold: %q (%v); want 1.3 2 %d and the write refused", b.ID, out, err, 128<<20)
	}

	// 2. Resize in place: +0.7 CPU +64 MiB, then -0.5, then unbind.
	var latencies []time.Duration
	resize := func(target string, args []string, file, want string) psEntry {
		t.Helper()
		t0 := time.Now()
		if _, errOut, code := pinfold(t, "", append(append([]string{"resize", target}, args...), "--wait", "0", "--planner", plannerAddr)...); code != 0 {
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
	if s := sizeSeen(t, a.Container); s.CPUs != 2 || s.WholeCPUs != 2 || s.MemoryBytes != 192<<20 || s.Generation < 2 {
		t.Errorf("after +0.7: /run/pinfold/resources.json = %+v, want 2 whole CPUs, 192 MiB (rewritten live)", s)
	}
	// A shrink is announced (--shrink-notice 2s): the agent's file for a
	// names the next size before the cgroup files change.
	noticed := make(chan string, 1)
	go func() {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			b, _ := os.ReadFile("/run/pinfold/instances/" + a.ID + "/resources.json")
			if strings.Contains(string(b), `"next"`) {
				noticed <- string(b)
				return
			}
		}
		noticed <- ""
	}()
	e = resize(a.ID, []string{"--cpu", "-0.5"}, "cpu.weight", "50")
	if n := <-noticed; !strings.Contains(n, `"cpus": 1.5`) {
		t.Errorf("the shrink to 1.5 CPUs was not announced in the size file first: %q", n)
	}
	if s := sizeSeen(t, a.Container); s.CPUs != 1.5 || s.Next != nil {
		t.Errorf("after -0.5: /run/pinfold/resources.json = %+v, want 1.5 CPUs and no notice left", s)
	}
	if cg(t, a.Container, "cpuset.cpus") != cpuList(e.CPUs) {
		t.Errorf("after -0.5 cpuset %q, want %s", cg(t, a.Container, "cpuset.cpus"), cpuList(e.CPUs))
	}
	e = resize(a.ID, []string{"--no-bind"}, "cpuset.mems", "0-1")
	if e.Bind || e.CPUQuota != "1.5" || cg(t, a.Container, "cpu.max") != "150000 100000" {
		t.Errorf("after unbinding: %+v, cpu.max %q", e, cg(t, a.Container, "cpu.max"))
	}
	// More samples of the apply latency: memory up and down by 16 MiB.
	for i := 0; i < 20; i++ {
		sign, mem := "+", 208<<20
		if i%2 == 1 {
			sign, mem = "-", 192<<20
		}
		t0 := time.Now()
		if _, errOut, code := pinfold(t, "", "resize", a.ID, "--memory", sign+"16MiB", "--wait", "0", "--planner", plannerAddr); code != 0 {
			t.Fatalf("resize %s16MiB: %s", sign, errOut)
		}
		eventually(t, 60*time.Second, fmt.Sprintf("memory.max = %d", mem), func() (bool, string) {
			got := cg(t, a.Container, "memory.max")
			return got == fmt.Sprint(mem), got
		})
		latencies = append(latencies, time.Since(t0))
	}
	slices.Sort(latencies)
	p99 := latencies[min(len(latencies)-1, len(latencies)*99/100)]
	t.Logf("apply latency (planner committed, CLI returned → cgroup file changed), %d samples: min %s, median %s, p90 %s, p99 %s, max %s",
		len(latencies), latencies[0].Round(time.Millisecond), latencies[len(latencies)/2].Round(time.Millisecond),
		latencies[len(latencies)*9/10].Round(time.Millisecond), p99.Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
	// Without --wait 0 the CLI returns only once the host applied it.
	if _, errOut, code := pinfold(t, "", "resize", a.ID, "--memory", "+8MiB", "--planner", plannerAddr); code != 0 {
		t.Fatalf("resize --memory +8MiB (waiting): %s", errOut)
	}
	if got := cg(t, a.Container, "memory.max"); got != fmt.Sprint(200<<20) {
		t.Errorf("memory.max right after a waiting resize returned = %s, want %d", got, 200<<20)
	}

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
	// Drift written straight into the cgroup files, behind Docker's back
	// (its stored config still matches the plan): reverted too.
	cgDir := "/sys/fs/cgroup/docker/" + b.Container + "/"
	for file, v := range map[string]string{"cpuset.cpus": other, "memory.max": fmt.Sprint(256 << 20), "cpu.max": "20000 100000"} {
		want := cg(t, b.Container, file)
		if err := os.WriteFile(cgDir+file, []byte(v), 0o644); err != nil {
			t.Fatalf("write %s%s = %s: %v", cgDir, file, v, err)
		}
		if got := cg(t, b.Container, file); got == want {
			t.Fatalf("writing %s = %s did not change it (%s)", file, v, got)
		}
		t0 := time.Now()
		eventually(t, 30*time.Second, file+" written by hand to be reverted", func() (bool, string) {
			got := cg(t, b.Container, file)
			return got == want, got
		})
		t.Logf("%s written by hand (%s) reverted to %s in %s", file, v, want, time.Since(t0).Round(time.Millisecond))
	}

	// 4. Replace, unhealthy: the new container exits, the old one resumes.
	if _, errOut, code := pinfold(t, "", "replace", b.ID, "--image", image, "--wait", "0", "--planner", plannerAddr, "--", "false"); code != 0 {
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
	if _, errOut, code := pinfold(t, "", "replace", c.ID, "--image", image, "--wait", "0", "--planner", plannerAddr, "--", "sleep", "7200"); code != 0 {
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
	if _, errOut, code := pinfold(t, "", "replace", c.ID, "--image", image, "--wait", "0", "--planner", plannerAddr, "--", "sleep", "7300"); code != 0 {
		t.Fatalf("replace: %s", errOut)
	}
	eventually(t, 60*time.Second, "the replacement to start", func() (bool, string) {
		ids := dockerPS(t, c.ID)
		return len(ids) == 2, fmt.Sprint(ids)
	})
	agent.Process.Kill()
	agent.Wait()
	agent = daemon(t, "agent2", agentArgs...)
	eventually(t, 90*time.Second, "convergence after the restart", func() (bool, string) {
		ids := dockerPS(t, c.ID)
		if len(ids) != 1 {
			return false, fmt.Sprint(ids)
		}
		out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}} {{json .Config.Cmd}}", ids[0]).Output()
		return strings.TrimSpace(string(out)) == `true ["sleep","7300"]`, string(out)
	})

	testMemoryGuardsAndRollback(t, image)
	testHealthChecks(t, image)
	testNetworkProbes(t, image)
	// The agent reports the host's load and memory (gopsutil).
	out, _, _ := pinfold(t, "", "host", "show", "vm", "-o", "json", "--planner", plannerAddr)
	var h struct {
		Metrics *struct {
			Load1    float64 `json:"load1"`
			MemTotal uint64  `json:"mem_total_bytes"`
			MemAvail uint64  `json:"mem_available_bytes"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil || h.Metrics == nil || h.Metrics.MemTotal == 0 || h.Metrics.MemAvail > h.Metrics.MemTotal {
		t.Errorf("host show: metrics = %+v (%v)\n%s", h.Metrics, err, tail(out, 20))
	} else {
		t.Logf("host metrics from the agent: load1 %.2f, memory %d of %d bytes available", h.Metrics.Load1, h.Metrics.MemAvail, h.Metrics.MemTotal)
	}
	// The agent holds its agent link (heartbeats and desired state on one
	// connection), not the calls it falls back to with an older planner.
	eventually(t, 30*time.Second, "the agent's link open", func() (bool, string) {
		r, err := http.Get("http://" + plannerAddr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, `pinfold_planner_streams_open{kind="link"} `); ok {
				return v != "0", line
			}
		}
		return false, "no pinfold_planner_streams_open{kind=\"link\"} in /metrics"
	})
	testCPUGot(t, image)
	testPoolAndCheckpoint(t, image, planner, agent, agentArgs)
}

// testCPUGot: a busy bound instance of 1 CPU reports cpu_planned 1 and a
// cpu_got, measured by its host from cpu.stat, of at most the plan + 0.05
// (its cpuset holds one CPU) and well above 0.
func testCPUGot(t *testing.T, image string) {
	// The memory-first instances (hc, and web's first one since its
	// --no-bind resize, a 1.5 CPU quota) keep the guest's free CPUs as
	// their shared pool, which a bound deploy may not take: make room.
	for _, svc := range []string{"hc", "web"} {
		if _, errOut, code := pinfold(t, "", "remove", svc, "--planner", plannerAddr); code != 0 {
			t.Fatalf("remove %s: %s", svc, errOut)
		}
	}
	if _, errOut, code := pinfold(t, "", "deploy", "busy", "--count", "1", "--cpu", "1", "--bind", "--memory", "32MiB",
		"--image", image, "--planner", plannerAddr, "--", "sh", "-c", "while :; do :; done"); code != 0 {
		t.Fatalf("deploy busy: %s", errOut)
	}
	var e psEntry
	eventually(t, 60*time.Second, "busy to report the CPU it gets", func() (bool, string) {
		for _, x := range ps(t) {
			if x.Service == "busy" {
				e = x
			}
		}
		got, err := e.CPUGot.Float64()
		return e.State == "running" && err == nil && got >= 0.5, fmt.Sprintf("%+v", e)
	})
	got, _ := e.CPUGot.Float64()
	if e.CPUPlanned != "1" || got > 1.05 {
		t.Errorf("busy: cpu_planned %q, cpu_got %q; want 1 planned and at most 1.05 got", e.CPUPlanned, e.CPUGot)
	}
	t.Logf("busy loop bound to 1 CPU: cpu_planned %s, cpu_got %s (cpu.stat over the agent's last window)", e.CPUPlanned, e.CPUGot)
	// cpu.weight written by hand (behind Docker's back) is reverted too:
	// busy holds whole CPUs only, so no share loop moves its weight.
	want := cg(t, e.Container, "cpu.weight")
	if err := os.WriteFile("/sys/fs/cgroup/docker/"+e.Container+"/cpu.weight", []byte("5"), 0o644); err != nil {
		t.Fatalf("write cpu.weight: %v", err)
	}
	if got := cg(t, e.Container, "cpu.weight"); got != "5" {
		t.Fatalf("writing cpu.weight = 5 did not change it (%s)", got)
	}
	t0 := time.Now()
	eventually(t, 30*time.Second, "cpu.weight written by hand to be reverted", func() (bool, string) {
		got := cg(t, e.Container, "cpu.weight")
		return got == want, got
	})
	t.Logf("cpu.weight written by hand (5) reverted to %s in %s", want, time.Since(t0).Round(time.Millisecond))
}

// testPoolAndCheckpoint: a memory-first instance runs on the host's CPUs in
// capacity only (a CPU taken out of it is left alone); then, with the
// planner stopped, a restarted agent enforces its checkpointed desired
// state: a hand-made docker update onto that CPU is reverted.
func testPoolAndCheckpoint(t *testing.T, image string, planner, agent *exec.Cmd, agentArgs []string) {
	services := map[string]bool{}
	for _, e := range ps(t) {
		services[e.Service] = true
	}
	for svc := range services {
		if _, errOut, code := pinfold(t, "", "remove", svc, "--planner", plannerAddr); code != 0 {
			t.Fatalf("remove %s: %s", svc, errOut)
		}
	}
	b, _ := os.ReadFile("/sys/devices/system/cpu/online")
	online := cpuset.MustParseCPUs(strings.TrimSpace(string(b)))
	ids := online.Slice()
	out := ids[len(ids)-1]
	if _, errOut, code := pinfold(t, "", "host", "set", "vm", "--remove-cpus", fmt.Sprint(out), "--planner", plannerAddr); code != 0 {
		t.Fatalf("host set --remove-cpus %d: %s", out, errOut)
	}
	if _, errOut, code := pinfold(t, "", "deploy", "mf", "--count", "1", "--cpu", "0.5", "--memory", "32MiB",
		"--image", image, "--planner", plannerAddr, "--", "sleep", "3600"); code != 0 {
		t.Fatalf("deploy memory-first: %s", errOut)
	}
	want := online.Difference(cpuset.Of(out)).String()
	var mf psEntry
	eventually(t, 60*time.Second, "the memory-first instance to run on "+want, func() (bool, string) {
		for _, e := range ps(t) {
			if e.Service == "mf" && e.State == "running" {
				mf = e
				got := cg(t, e.Container, "cpuset.cpus")
				return got == want, got
			}
		}
		return false, "not running"
	})
	planner.Process.Kill()
	planner.Wait()
	agent.Process.Kill()
	agent.Wait()
	if o, err := exec.Command("docker", "update", "--cpuset-cpus", fmt.Sprint(out), mf.Container).CombinedOutput(); err != nil {
		t.Fatalf("docker update: %v %s", err, o)
	}
	daemon(t, "agent3", agentArgs...)
	t0 := time.Now()
	eventually(t, 60*time.Second, "the drift reverted from the checkpoint, planner down", func() (bool, string) {
		got := cg(t, mf.Container, "cpuset.cpus")
		return got == want, got
	})
	t.Logf("planner stopped, agent restarted: docker update --cpuset-cpus %d reverted to %s from the checkpoint in %s", out, want, time.Since(t0).Round(time.Millisecond))
}

// testMemoryGuardsAndRollback: shrinking memory below memory.current that
// cannot be reclaimed (tmpfs) is given up by the agent's pressure-guided
// shrink at its deadline and rolled back, the container untouched, and the
// CLI says why; a resize below Docker's 6 MiB minimum is refused up front.
func testMemoryGuardsAndRollback(t *testing.T, image string) {
	if _, errOut, code := pinfold(t, "", "deploy", "mem", "--count", "1", "--cpu", "0.5", "--memory", "128MiB", "--image", image,
		"--planner", plannerAddr, "--", "sh", "-c", "head -c 41943040 /dev/zero > /dev/shm/fill; sleep 3600"); code != 0 {
		t.Fatalf("deploy mem: %s", errOut)
	}
	var m psEntry
	// 40 MiB written to shm; the agent's figure may lag real use by up to
	// 1 MiB (nodeagent.memoryMoved), so wait for 39 MiB.
	eventually(t, 120*time.Second, "mem to run and report ≥ 39 MiB in use", func() (bool, string) {
		for _, e := range ps(t) {
			if e.ID != "" && strings.HasPrefix(e.ID, "mem-") {
				m = e
			}
		}
		return m.State == "running" && m.MemoryCurrent >= 39<<20, fmt.Sprintf("%+v", m)
	})
	t.Logf("mem-instance memory.current reported: %d bytes", m.MemoryCurrent)
	// Below use: planned, then the agent steps memory.high down; tmpfs pages
	// cannot be reclaimed without swap, so the shrink gives up at the
	// agent's deadline, memory.high is restored and the planner rolls back.
	_, errOut, code := pinfold(t, "", "resize", m.ID, "--memory", "-100MiB", "--planner", plannerAddr)
	if code != 1 || !strings.Contains(errOut, "rolled back") || !strings.Contains(errOut, "memory shrink to 28.0 MiB stopped") {
		t.Errorf("shrink to 28 MiB with 39 MiB or more of tmpfs in use: exit %d, %q; want exit 1, rolled back with the shrink's reason", code, errOut)
	}
	if got := cg(t, m.Container, "memory.max"); got != fmt.Sprint(128<<20) {
		t.Errorf("memory.max after a refused shrink = %s", got)
	}
	if got := cg(t, m.Container, "memory.high"); got != "max" {
		t.Errorf("memory.high after a refused shrink = %s, want max (restored)", got)
	}
	if ids := dockerPS(t, m.ID); len(ids) != 1 || ids[0] != m.Container {
		t.Errorf("after the refused shrink %s runs %v, want its container %s (not OOM-killed)", m.ID, ids, short(m.Container))
	}
	m.Generation += 2
	// Below Docker's 6 MiB minimum: the planner refuses it up front.
	_, errOut, code = pinfold(t, "", "resize", m.ID, "--memory", "-124MiB", "--planner", plannerAddr)
	if code != 2 || !strings.Contains(errOut, "6 MiB") {
		t.Errorf("resize to 4 MiB: exit %d, %q; want exit 2 naming Docker's 6 MiB minimum", code, errOut)
	}
	e := byID(ps(t), m.ID)
	if e.Memory != 128<<20 || e.Generation != m.Generation || !strings.Contains(e.RolledBack, "memory shrink") {
		t.Errorf("after the refusals: %+v, want 128 MiB at generation %d, the shrink's rollback recorded", e, m.Generation)
	}
	if got := cg(t, m.Container, "memory.max"); got != fmt.Sprint(128<<20) {
		t.Errorf("memory.max after the refusals = %s", got)
	}
	if _, errOut, code := pinfold(t, "", "remove", "mem", "--planner", plannerAddr); code != 0 {
		t.Errorf("remove mem: %s", errOut)
	}
}

// testHealthChecks: a rolling replace of a service with an exec probe that
// passes, one that fails (rolled back, exit 1), and an image whose own
// HEALTHCHECK decides.
func testHealthChecks(t *testing.T, image string) {
	before := map[string]string{}
	for _, e := range ps(t) {
		if strings.HasPrefix(e.ID, "web-") {
			before[e.ID] = e.Container
		}
	}
	// Failing probe: the first batch rolls back, nothing else is touched.
	_, errOut, code := pinfold(t, "", "replace", "web", "--image", image, "--batch", "1", "--health-cmd", "test -f /nonexistent",
		"--health-timeout", "3s", "--planner", plannerAddr, "--", "sleep", "3601")
	if code != 1 || !strings.Contains(errOut, "rolled back") || !strings.Contains(errOut, "batch 1/1") {
		t.Errorf("replace with a failing probe: exit %d, %q; want exit 1, rolled back", code, errOut)
	}
	for id, c := range before {
		if ids := dockerPS(t, id); len(ids) != 1 || ids[0] != c {
			t.Errorf("%s after the failed replace runs %v, want its old container %s", id, ids, short(c))
		}
	}
	// Passing probe: every instance swapped, progress shown.
	t0 := time.Now()
	_, errOut, code = pinfold(t, "", "replace", "web", "--image", image, "--batch", "1", "--health-cmd", "test -d /proc/1",
		"--planner", plannerAddr, "--", "sleep", "3602")
	if code != 0 || !strings.Contains(errOut, "batch 1/1 done") {
		t.Errorf("replace with a passing probe: exit %d, %q", code, errOut)
	}
	t.Logf("rolling replace of %d instances with an exec probe took %s", len(before), time.Since(t0).Round(time.Millisecond))
	for id, c := range before {
		if ids := dockerPS(t, id); len(ids) != 1 || ids[0] == c {
			t.Errorf("%s after the healthy replace runs %v (old %s)", id, ids, short(c))
		}
	}
	// The image's own HEALTHCHECK: built here from the test image.
	build := exec.Command("docker", "build", "-q", "-t", "pinfold/hc:test", "-")
	build.Stdin = strings.NewReader("FROM " + image + "\nHEALTHCHECK --interval=2s --timeout=20s --retries=2 CMD test -f /healthy\n")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v %s", err, out)
	}
	// A fresh service (no probe of its own), replaced with that image.
	if _, errOut, code := pinfold(t, "", "deploy", "hc", "--count", "1", "--cpu", "0.2", "--memory", "32MiB", "--image", image,
		"--planner", plannerAddr, "--", "sleep", "3600"); code != 0 {
		t.Fatalf("deploy hc: %s", errOut)
	}
	one := runningInstance(t, "hc")
	_, errOut, code = pinfold(t, "", "replace", one, "--image", "pinfold/hc:test", "--planner", plannerAddr, "--", "sleep", "3603")
	if code != 1 || !strings.Contains(errOut, "HEALTHCHECK reports unhealthy") {
		t.Errorf("replace with an image that turns unhealthy: exit %d, %q", code, errOut)
	}
	_, errOut, code = pinfold(t, "", "replace", one, "--image", "pinfold/hc:test", "--planner", plannerAddr, "--", "sh", "-c", "echo ok > /healthy; sleep 3604")
	if code != 0 {
		t.Errorf("replace with an image that turns healthy: exit %d, %q", code, errOut)
	}
	ids := dockerPS(t, one)
	if len(ids) != 1 {
		t.Fatalf("%s runs %v", one, ids)
	}
	if out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Health.Status}}", ids[0]).Output(); strings.TrimSpace(string(out)) != "healthy" {
		t.Errorf("the HEALTHCHECK replacement is %q, want healthy", out)
	}
}

// testNetworkProbes: on the host network (--network host) the agent's TCP
// and HTTP probes reach the new container at 127.0.0.1. Each replacement
// listens on a port of its own: the paused old container keeps its ports.
func testNetworkProbes(t *testing.T, image string) {
	if _, errOut, code := pinfold(t, "", "deploy", "net", "--count", "1", "--cpu", "0.2", "--memory", "32MiB", "--image", image,
		"--network", "host", "--planner", plannerAddr, "--", "sleep", "3600"); code != 0 {
		t.Fatalf("deploy net: %s", errOut)
	}
	one := runningInstance(t, "net")
	serve := func(port int) []string {
		return []string{"sh", "-c", fmt.Sprintf("echo ok > /tmp/ok; exec httpd -f -p %d -h /tmp", port)}
	}
	replace := func(probe []string, cmd []string) (string, int) {
		args := append([]string{"replace", one, "--image", image, "--planner", plannerAddr}, probe...)
		_, errOut, code := pinfold(t, "", append(append(args, "--"), cmd...)...)
		return errOut, code
	}
	running := func() string {
		ids := dockerPS(t, one)
		if len(ids) != 1 {
			t.Fatalf("%s runs %v, want one container", one, ids)
		}
		out, _ := exec.Command("docker", "inspect", "-f", "{{.HostConfig.NetworkMode}} {{json .Config.Cmd}}", ids[0]).Output()
		return strings.TrimSpace(string(out))
	}
	if errOut, code := replace([]string{"--health-http", "18081/ok"}, serve(18081)); code != 0 {
		t.Errorf("replace with a passing HTTP probe: exit %d, %q", code, errOut)
	}
	if got := running(); !strings.HasPrefix(got, "host ") || !strings.Contains(got, "18081") {
		t.Errorf("after the HTTP-probed replace: %s, want the host network and the httpd on 18081", got)
	}
	errOut, code := replace([]string{"--health-http", "18082/missing", "--health-timeout", "6s"}, serve(18082))
	if code != 1 || !strings.Contains(errOut, "rolled back") || !strings.Contains(errOut, "404") {
		t.Errorf("replace with an HTTP probe answered 404: exit %d, %q; want exit 1, rolled back, naming the 404", code, errOut)
	}
	errOut, code = replace([]string{"--health-tcp", "18083", "--health-timeout", "6s"}, []string{"sleep", "3601"})
	if code != 1 || !strings.Contains(errOut, "rolled back") || !strings.Contains(errOut, "tcp 18083") {
		t.Errorf("replace with nothing on the probed TCP port: exit %d, %q; want exit 1, rolled back", code, errOut)
	}
	if got := running(); !strings.Contains(got, "18081") {
		t.Errorf("after two failed replaces: %s, want the httpd on 18081 to run on", got)
	}
	if errOut, code := replace([]string{"--health-tcp", "18084"}, serve(18084)); code != 0 {
		t.Errorf("replace with a passing TCP probe: exit %d, %q", code, errOut)
	}
	if got := running(); !strings.Contains(got, "18084") {
		t.Errorf("after the TCP-probed replace: %s, want the httpd on 18084", got)
	} else {
		t.Logf("host network: HTTP probe passed, a 404 and a closed TCP port rolled back, TCP probe passed")
	}
	if _, errOut, code := pinfold(t, "", "remove", "net", "--planner", plannerAddr); code != 0 {
		t.Errorf("remove net: %s", errOut)
	}
}
