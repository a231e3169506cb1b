//go:build linux && e2e

package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/test/testenv"
)

// TestE2EDockerShares: two containers bound to 1.7 and 1.3 CPUs share
// their fragment CPU (NUMA node 1's CPUs are taken out of capacity, so both
// pack into node 0's three) under the agent's default scheme, with 2 and 8
// busy processes each, and the 1.7 one busy beside an idle 1.3 one; the
// CPU each gets, from its cgroup's cpu.stat over a fixed window after a
// fixed settle (never "the first good window"), is at most 5 % over its
// plan and at least the guest's lower bound under it (e2eSharesLow: set
// from the spread of 10 guest runs, docs/AGENT.md; natively the matrix's
// 5 %, with its rows under it named there). The control runs the agent
// with --fragment-scheme weight (no cpu.max): the busy container beside an
// idle one must then take more than its plan: only the caps hold it.
//
// PINFOLD_E2E_SHARES_RUNS=10 repeats the default's rounds (the spread).
func TestE2EDockerShares(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	testenv.RequireNUMANodes(t, 2)
	image := testenv.Image(t)
	runs := 1
	if v := os.Getenv("PINFOLD_E2E_SHARES_RUNS"); v != "" {
		var err error
		if runs, err = strconv.Atoi(v); err != nil || runs < 1 || runs > 50 {
			t.Fatalf("PINFOLD_E2E_SHARES_RUNS = %q: want 1..50", v)
		}
	}
	for _, tc := range []struct {
		name    string
		args    []string
		rounds  []sharesRound
		control bool
	}{
		{"default", nil, []sharesRound{{2, 2}, {8, 8}, {4, 0}}, false},
		{"control-weight", []string{"--fragment-scheme", "weight"}, []sharesRound{{4, 0}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			startOnNode0(t, tc.args)
			n := 1
			if !tc.control {
				n = runs
			}
			var problems []string
			for i := range n {
				for _, r := range tc.rounds {
					problems = append(problems, dockerSharesRound(t, image, r, i)...)
				}
			}
			switch {
			case !tc.control && len(problems) > 0:
				t.Errorf("docker shares: %s", strings.Join(problems, "; "))
			case tc.control && !strings.Contains(strings.Join(problems, "; "), "sa got"):
				t.Errorf("control (weight, no caps): sa stayed within its plan beside an idle neighbour: the test cannot see the caps (%q)", problems)
			case tc.control:
				t.Logf("control (weight, no caps) failed as it must: %s", strings.Join(problems, "; "))
			}
		})
	}
}

// sharesRound is one measurement: busy processes in sa (1.7) and sb (1.3);
// 0 is an idle container.
type sharesRound struct{ a, b int }

// e2eSharesLow is how far under min(plan, demand) an instance may fall in
// the TCG guest, by busy processes per container. 10 runs under the default
// on the quiet 2-core machine (2026-11-28, docs/AGENT.md): 2 processes sa
// −3.2 to −10.8 %, sb −4.6 to −19.4 %; 8 processes sa −1.6 to −11.5 %,
// sb −1.8 to −13.0 %. The guest's vCPUs lose time to their host, so it
// cannot hold a share to 5 %; the native matrix does. Over the plan the
// guest reads up to 7.6 % (its vCPUs' clocks drift: sweepOver in the
// kernel tier), so the upper bound is 10 %: what the control, 2 CPUs
// beside an idle neighbour (+18 %), must break.
var e2eSharesLow = map[int]float64{2: 0.25, 4: 0.20, 8: 0.25}

const e2eSharesHigh = 0.10

func dockerSharesRound(t *testing.T, image string, r sharesRound, run int) []string {
	usage := func(container string) time.Duration { return cpuUsage(t, container) }
	plan := map[string]float64{"sa": 1.7, "sb": 1.3}
	procs := map[string]int{"sa": r.a, "sb": r.b}
	for _, svc := range []string{"sa", "sb"} {
		cmd := []string{"sleep", "3600"}
		if procs[svc] > 0 {
			cmd = []string{"sh", "-c", fmt.Sprintf("for i in $(seq %d); do (while :; do :; done) & done; wait", procs[svc])}
		}
		defer pinfold(t, "", "remove", svc, "--planner", plannerAddr)
		if _, errOut, code := pinfold(t, "", append([]string{"deploy", svc, "--count", "1", "--cpu", fmt.Sprint(plan[svc]), "--bind", "--memory", "32MiB",
			"--image", image, "--planner", plannerAddr, "--"}, cmd...)...); code != 0 {
			t.Fatalf("deploy %s: %s", svc, errOut)
		}
	}
	got, shared := runningPair(t, plan)
	sa, sb := got["sa"], got["sb"]
	time.Sleep(5 * time.Second) // settle: the share loop's windows are 1 s
	b0 := map[string]time.Duration{"sa": usage(sa.Container), "sb": usage(sb.Container)}
	t0 := time.Now()
	time.Sleep(10 * time.Second)
	wall := time.Since(t0)
	var missed, line []string
	for _, svc := range []string{"sa", "sb"} {
		cpu := float64(usage(got[svc].Container)-b0[svc]) / float64(wall)
		want := min(plan[svc], float64(procs[svc]))
		d := 0.0
		if want > 0 {
			d = (cpu - want) / want
		}
		line = append(line, fmt.Sprintf("%s %.3f (plan %.1f, %d busy, %+.1f %%)", svc, cpu, plan[svc], procs[svc], 100*d))
		if low := e2eSharesLow[procs[svc]]; procs[svc] > 0 && d < -low {
			missed = append(missed, fmt.Sprintf("%s got %.3f, under %.3f (-%.0f %%)", svc, cpu, (1-low)*want, 100*low))
		}
		if cpu > (1+e2eSharesHigh)*plan[svc] {
			missed = append(missed, fmt.Sprintf("%s got %.3f, over %.3f (+%.0f %%)", svc, cpu, (1+e2eSharesHigh)*plan[svc], 100*e2eSharesHigh))
		}
	}
	t.Logf("run %d: docker shares, %d / %d busy processes, fragment CPU %s shared: %s (5 s settle, %s window)", run+1, r.a, r.b, shared,
		strings.Join(line, ", "), wall.Round(time.Millisecond))
	return missed
}
