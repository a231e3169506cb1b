//go:build linux && e2e

package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/nodeagent"
	"github.com/pinfold/pinfold/planner/cpuset"
)

const plannerAddr = "127.0.0.1:7878"

type psEntry struct {
	ID         string         `json:"id"`
	Service    string         `json:"service"`
	Host       string         `json:"host"`
	CPUs       map[string]int `json:"cpus"`
	CPUQuota   json.Number    `json:"cpu_quota"`
	CPUPlanned json.Number    `json:"cpu_planned"`
	CPUGot     json.Number    `json:"cpu_got"`
	NUMANode   int            `json:"numa_node"`
	Memory     int64          `json:"memory_bytes"`
	State      string         `json:"state"`
	Generation int64          `json:"generation"`
	Container  string         `json:"container_id"`
	PID        int            `json:"pid"`
	Bind       bool           `json:"bind"`
	RolledBack string         `json:"rolled_back"`
	// MemoryCurrent is memory.current as the agent last reported it.
	MemoryCurrent int64 `json:"memory_current_bytes"`
	Applied       *struct {
		CPUs        string `json:"cpus"`
		Mems        string `json:"mems"`
		CPUQuota    int64  `json:"cpu_quota_us"`
		CPUWeight   uint64 `json:"cpu_weight"`
		MemoryBytes int64  `json:"memory_bytes"`
	} `json:"applied"`
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
		if t.Failed() || os.Getenv("PINFOLD_E2E_LOGS") != "" { // PINFOLD_E2E_LOGS=1: always, longer
			n := 40
			if os.Getenv("PINFOLD_E2E_LOGS") != "" {
				n = 400
			}
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", name, tail(string(b), n))
		}
	})
	return cmd
}

// startPlanner runs a planner on plannerAddr over dataDir and waits until
// it serves.
func startPlanner(t *testing.T, dataDir, logLevel string) *exec.Cmd {
	t.Helper()
	p := daemon(t, "planner", "planner", "--data-dir", dataDir, "--listen", plannerAddr, "--log-level", logLevel)
	eventually(t, 60*time.Second, "the planner", func() (bool, string) {
		r, err := http.Get("http://" + plannerAddr + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		r.Body.Close()
		return r.StatusCode == 200, r.Status
	})
	return p
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

// sizeSeen is the size file as the container reads it.
func sizeSeen(t *testing.T, container string) nodeagent.Size {
	t.Helper()
	out, err := exec.Command("docker", "exec", container, "cat", "/run/pinfold/resources.json").CombinedOutput()
	var s nodeagent.Size
	if err == nil {
		err = json.Unmarshal(out, &s)
	}
	if err != nil {
		t.Errorf("%s: cat /run/pinfold/resources.json: %v: %s", container, err, out)
	}
	return s
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

// runningInstance waits for an instance of service to run and returns its ID.
func runningInstance(t *testing.T, service string) string {
	t.Helper()
	var id string
	eventually(t, 120*time.Second, service+" to run", func() (bool, string) {
		for _, e := range ps(t) {
			if strings.HasPrefix(e.ID, service+"-") && e.State == "running" {
				id = e.ID
			}
		}
		return id != "", ""
	})
	return id
}

func short(id string) string { return id[:min(12, len(id))] }
