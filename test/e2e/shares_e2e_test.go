//go:build linux && e2e

package e2e_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/test/testenv"
)

func usageUsec(t *testing.T, container string) int64 {
	t.Helper()
	for _, l := range strings.Split(cg(t, container, "cpu.stat"), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no usage_usec for %s", container)
	return 0
}

// TestMeasureFragmentShares: a 1.7 and a 1.3 CPU instance share one fragment
// CPU (70 + 30 pieces) while busy loops saturate every thread. Each
// instance's use of the shared CPU is its total CPU use minus its one whole
// CPU, measured from cpu.stat, under each fragment scheme. The default
// scheme (quota) must come within 0.15 CPU of the plan.
func TestMeasureFragmentShares(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	image := testenv.Image(t)
	dir := t.TempDir()
	daemon(t, "planner", "planner", "--data-dir", dir+"/planner", "--listen", plannerAddr, "--log-level", "warn")
	eventually(t, 60*time.Second, "the planner", func() (bool, string) {
		r, err := http.Get("http://" + plannerAddr + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		r.Body.Close()
		return true, ""
	})
	busy := []string{"sh", "-c", "for i in 1 2 3 4; do (while :; do :; done) & done; wait"}
	results := map[string][2]float64{}
	for _, scheme := range []string{"quota", "weight"} {
		agent := daemon(t, "agent-"+scheme, "agent", "--planner", plannerAddr, "--host", "vm", "--state-dir", dir+"/agent-"+scheme, "--resync", "1s", "--fragment-scheme", scheme)
		eventually(t, 60*time.Second, "host vm up", func() (bool, string) {
			out, _, _ := pinfold(t, "", "host", "list", "-o", "json", "--planner", plannerAddr)
			return strings.Contains(out, `"state": "up"`) && strings.Contains(out, `"agent": true`), out
		})
		for _, svc := range []struct{ name, cpu string }{{"a", "1.7"}, {"b", "1.3"}} {
			if _, errOut, code := pinfold(t, "", append([]string{"deploy", svc.name, "--count", "1", "--cpu", svc.cpu, "--bind", "--memory", "32MiB",
				"--image", image, "--planner", plannerAddr, "--"}, busy...)...); code != 0 {
				t.Fatalf("deploy %s: %s", svc.name, errOut)
			}
		}
		var a, b psEntry
		eventually(t, 120*time.Second, "both running", func() (bool, string) {
			list := ps(t)
			for _, e := range list {
				if e.ID[:1] == "a" {
					a = e
				} else {
					b = e
				}
			}
			return a.State == "running" && b.State == "running", fmt.Sprint(list)
		})
		shared := ""
		for id, p := range a.CPUs {
			if p == 70 && b.CPUs[id] == 30 {
				shared = id
			}
		}
		if shared == "" {
			t.Fatalf("a %v and b %v do not share a fragment CPU", a.CPUs, b.CPUs)
		}
		// The agent applies the scheme; let the loops settle, then measure.
		want := map[string]string{"quota": "170000 100000", "weight": "max 100000"}[scheme]
		eventually(t, 30*time.Second, "the scheme applied", func() (bool, string) {
			return cg(t, a.Container, "cpu.max") == want, cg(t, a.Container, "cpu.max")
		})
		time.Sleep(2 * time.Second)
		ua, ub, t0 := usageUsec(t, a.Container), usageUsec(t, b.Container), time.Now()
		time.Sleep(8 * time.Second)
		wall := float64(time.Since(t0).Microseconds())
		fa := float64(usageUsec(t, a.Container)-ua)/wall - 1 // minus the whole CPU
		fb := float64(usageUsec(t, b.Container)-ub)/wall - 1
		results[scheme] = [2]float64{fa, fb}
		t.Logf("scheme %-6s: shared CPU %s split a(1.7) %.3f / b(1.3) %.3f of a CPU (plan 0.70 / 0.30); cpu.weight a=%s b=%s",
			scheme, shared, fa, fb, cg(t, a.Container, "cpu.weight"), cg(t, b.Container, "cpu.weight"))
		agent.Process.Kill()
		agent.Wait()
		for _, svc := range []string{"a", "b"} {
			pinfold(t, "", "remove", svc, "--planner", plannerAddr)
		}
		// The agent is down: remove the containers by hand for the next round.
		for _, id := range append(dockerPS(t, a.ID), dockerPS(t, b.ID)...) {
			runDocker(t, "rm", "-f", id)
		}
	}
	q := results["quota"]
	if d := q[0] - 0.7; d < -0.15 || d > 0.15 {
		t.Errorf("quota scheme: a got %.3f of the shared CPU, plan 0.70", q[0])
	}
}

func runDocker(t *testing.T, args ...string) {
	t.Helper()
	if out, err := execCommand("docker", args...); err != nil {
		t.Logf("docker %v: %v %s", args, err, out)
	}
}
