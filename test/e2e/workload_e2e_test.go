//go:build linux && e2e

package e2e_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/test/testenv"
	"github.com/pinfold/pinfold/test/workload"
)

func TestMain(m *testing.M) {
	testenv.HelperMain() // the workloads run this binary inside containers
	os.Exit(m.Run())
}

// TestE2EWorkloadSees: the programs users deploy, in Docker containers
// bound to 1.7 and 1.3 CPUs that share one CPU, under the agent's default
// fragment scheme: a Go program with default GOMAXPROCS (the matrix's
// "go 4") sees GOMAXPROCS >= 2 and gets its plan, a Go program started
// with `docker exec` sees GOMAXPROCS >= 2 and an affinity (what nproc
// reads; the test image has no nproc) of >= 2 CPUs, `docker top` lists the container,
// and bursty request-like threads get >= 95 % of min(plan, demand) where
// the native matrix shows the kernel can give it. The control runs the same
// with --fragment-scheme split: it must fail what the workload sees.
func TestE2EWorkloadSees(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	testenv.RequireNUMANodes(t, 2)
	for _, tc := range []struct {
		name    string
		args    []string
		control bool
	}{
		{name: "default"},
		{name: "control-split", args: []string{"--fragment-scheme", "split"}, control: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := workloadSees(t, tc.args)
			switch {
			case !tc.control && len(problems) > 0:
				t.Errorf("the default scheme: %s", strings.Join(problems, "; "))
			case tc.control && len(problems) == 0:
				t.Errorf("control (split): every check passed: the checks cannot see what they are for")
			case tc.control:
				t.Logf("control (split) failed as it must: %s", strings.Join(problems, "; "))
			}
		})
	}
}

// e2eShareBound is the guest's bound under min(plan, demand), as
// e2eSharesLow's (the TCG guest loses part of a busy vCPU to its host);
// over the plan e2eSharesHigh.
const e2eShareBound = 0.25

// workloadSees runs the loads under an agent started with args and returns
// what broke the promise.
func workloadSees(t *testing.T, agentArgs []string) []string {
	image := testenv.Image(t)
	dir := startOnNode0(t, agentArgs)
	// The load is this static test binary, mounted into busybox
	// containers with a folder for its reports.
	w := filepath.Join(dir, "w")
	os.MkdirAll(w, 0o777)
	copyFile(t, os.Args[0], filepath.Join(w, "load"))
	var problems []string
	for _, c := range []workload.Case{
		{Name: "go 4", A: workload.Load{Kind: workload.Go, N: 4}, B: workload.Load{Kind: workload.Go, N: 4}},
		{Name: "bursty 4x5/20", A: workload.Load{Kind: workload.Bursty, N: 4, On: 5, Off: 20}, B: workload.Load{Kind: workload.Bursty, N: 4, On: 5, Off: 20}},
	} {
		problems = append(problems, runCase(t, image, w, c)...)
	}
	return problems
}

func runCase(t *testing.T, image, w string, c workload.Case) []string {
	plan := map[string]float64{"wa": 1.7, "wb": 1.3}
	load := map[string]workload.Load{"wa": c.A, "wb": c.B}
	// Each case's own report files: a container of the last case may
	// still be writing its own while the agent removes it.
	report := map[string]string{}
	for _, svc := range []string{"wa", "wb"} {
		report[svc] = fmt.Sprintf("%s-%s.seen", svc, strings.NewReplacer(" ", "", "/", "-").Replace(c.Name))
		os.Remove(filepath.Join(w, report[svc]))
	}
	for _, svc := range []string{"wa", "wb"} {
		env := []string{"--env", "PINFOLD_HELPER=load:" + load[svc].String(), "--env", "PINFOLD_REPORT=/w/" + report[svc]}
		if l := load[svc]; !l.GoRuntime() {
			env = append(env, "--env", "GOMAXPROCS="+strconv.Itoa(l.N+1), "--env", "GODEBUG=asyncpreemptoff=1")
		}
		args := append([]string{"deploy", svc, "--count", "1", "--cpu", fmt.Sprint(plan[svc]), "--bind", "--memory", "64MiB",
			"--image", image, "--volume", w + ":/w", "--planner", plannerAddr}, env...)
		defer pinfold(t, "", "remove", svc, "--planner", plannerAddr) // also when the next deploy fails
		if _, errOut, code := pinfold(t, "", append(args, "--", "/w/load", "-test.run=^$")...); code != 0 {
			t.Fatalf("deploy %s (%s): %s", svc, c.Name, errOut)
		}
	}
	got, shared := runningPair(t, plan)
	usage := func(container string) time.Duration { return cpuUsage(t, container) }
	time.Sleep(5 * time.Second) // settle
	for _, e := range ps(t) {   // the containers as they run now
		if plan[e.Service] > 0 && e.State == "running" {
			got[e.Service] = e
		}
	}
	b0 := map[string]time.Duration{"wa": usage(got["wa"].Container), "wb": usage(got["wb"].Container)}
	t0 := time.Now()
	time.Sleep(10 * time.Second)
	// Both read at the window's end, before the probes: a docker exec
	// takes seconds in the TCG guest.
	b1 := map[string]time.Duration{"wa": usage(got["wa"].Container), "wb": usage(got["wb"].Container)}
	wall := time.Since(t0)
	var problems, line []string
	for _, svc := range []string{"wa", "wb"} {
		ctr := got[svc].Container
		cpu := float64(b1[svc]-b0[svc]) / float64(wall)
		want := min(plan[svc], load[svc].Demand())
		seen, err := os.ReadFile(filepath.Join(w, report[svc]))
		s, perr := workload.ParseSeen(string(seen))
		probe, perr2 := exec.Command("docker", "exec", "-e", "PINFOLD_HELPER=probe", ctr, "/w/load", "-test.run=^$").CombinedOutput()
		top, terr := exec.Command("docker", "top", ctr).CombinedOutput()
		line = append(line, fmt.Sprintf("%s got %.3f (plan %.1f, demand %.1f) seen[%s] docker exec'd Go program saw %q, docker top ok %v",
			svc, cpu, plan[svc], load[svc].Demand(), strings.TrimSpace(string(seen)), strings.TrimSpace(string(probe)), terr == nil))
		ceil := int(plan[svc] + 0.999)
		switch {
		case err != nil || perr != nil:
			problems = append(problems, fmt.Sprintf("%s %s: no report of what it saw (%v %v)", c.Name, svc, err, perr))
		case load[svc].GoRuntime() && s.MinGOMAXPROCS < ceil:
			problems = append(problems, fmt.Sprintf("%s %s: GOMAXPROCS fell to %d, want >= %d", c.Name, svc, s.MinGOMAXPROCS, ceil))
		}
		var pg, pa int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(probe)), "gomaxprocs=%d aff=%d", &pg, &pa); perr2 != nil || err != nil || pa < ceil {
			problems = append(problems, fmt.Sprintf("%s %s: a Go program started by docker exec saw %q (%v), want affinity (what nproc reads) >= %d", c.Name, svc, strings.TrimSpace(string(probe)), perr2, ceil))
		}
		if terr != nil {
			problems = append(problems, fmt.Sprintf("%s %s: docker top: %v: %s", c.Name, svc, terr, strings.TrimSpace(string(top))))
		}
		if cpu < (1-e2eShareBound)*want || cpu > (1+e2eSharesHigh)*plan[svc] {
			problems = append(problems, fmt.Sprintf("%s %s: got %.3f CPUs, want %.3f..%.3f (min(plan, demand) %.2f)", c.Name, svc, cpu,
				(1-e2eShareBound)*want, (1+e2eSharesHigh)*plan[svc], want))
		}
	}
	t.Logf("%s, fragment CPU %s shared: %s", c.Name, shared, strings.Join(line, "; "))
	return problems
}

// startOnNode0 starts a planner and an agent (with agentArgs) for the
// guest as host vm, waits until the host is up, and takes NUMA node 1's
// CPUs out of capacity: a 1.7 and a 1.3 instance then pack into node 0's
// three CPUs and share one. It returns the test's folder.
func startOnNode0(t *testing.T, agentArgs []string) string {
	t.Helper()
	dir := t.TempDir()
	startPlanner(t, dir+"/planner", "warn")
	daemon(t, "agent", append([]string{"agent", "--planner", plannerAddr, "--host", "vm", "--state-dir", dir + "/agent", "--resync", "1s"}, agentArgs...)...)
	eventually(t, 60*time.Second, "host vm up", func() (bool, string) {
		out, _, _ := pinfold(t, "", "host", "list", "-o", "json", "--planner", plannerAddr)
		return strings.Contains(out, `"state": "up"`) && strings.Contains(out, `"agent": true`), out
	})
	b, _ := os.ReadFile("/sys/devices/system/node/node1/cpulist")
	if _, errOut, code := pinfold(t, "", "host", "set", "vm", "--remove-cpus", strings.TrimSpace(string(b)), "--planner", plannerAddr); code != 0 {
		t.Fatalf("host set --remove-cpus: %s", errOut)
	}
	return dir
}

// runningPair waits until both services of plan (1.7 and 1.3 bound) run,
// and checks that they share one fragment CPU; it returns their entries
// and that CPU.
func runningPair(t *testing.T, plan map[string]float64) (map[string]psEntry, cpuset.CPUs) {
	t.Helper()
	got := map[string]psEntry{}
	eventually(t, 120*time.Second, "both services running", func() (bool, string) {
		for _, e := range ps(t) {
			if plan[e.Service] > 0 && e.State == "running" {
				got[e.Service] = e
			}
		}
		return len(got) == len(plan), fmt.Sprint(got)
	})
	var sets []cpuset.CPUs
	for _, e := range got {
		sets = append(sets, cpuset.MustParseCPUs(cpuList(e.CPUs)))
	}
	shared := sets[0].Intersect(sets[1])
	if shared.Len() != 1 {
		t.Fatalf("%v share %s, want their one fragment CPU", got, shared)
	}
	return got, shared
}

// cpuUsage is a container's cpu.stat usage_usec.
func cpuUsage(t *testing.T, container string) time.Duration {
	t.Helper()
	st := cg(t, container, "cpu.stat")
	for _, l := range strings.Split(st, "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * time.Microsecond
		}
	}
	t.Fatalf("no usage_usec in %s's cpu.stat (%s)", container, st)
	return 0
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
