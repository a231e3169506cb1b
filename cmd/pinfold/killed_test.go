package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run pinfold itself in a child process (so that it
// can be killed with SIGKILL): with PINFOLD_TEST_MAIN set to a JSON list
// of arguments, the test binary is pinfold with those arguments.
func TestMain(m *testing.M) {
	if a := os.Getenv("PINFOLD_TEST_MAIN"); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			fmt.Fprintln(os.Stderr, "PINFOLD_TEST_MAIN:", err)
			os.Exit(2)
		}
		os.Exit(run(args, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// plannerProcess is `pinfold planner` in a child process over dir.
type plannerProcess struct {
	t    *testing.T
	dir  string
	addr string
	etcd [2]string
	cmd  *exec.Cmd
}

func newPlannerProcess(t *testing.T) *plannerProcess {
	p := &plannerProcess{t: t, dir: t.TempDir(), addr: freeAddr(t), etcd: [2]string{"https://" + freeAddr(t), "https://" + freeAddr(t)}}
	t.Cleanup(func() {
		if p.cmd != nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// start starts the planner and waits until it answers.
func (p *plannerProcess) start() {
	p.t.Helper()
	args, _ := json.Marshal([]string{"planner", "--data-dir", p.dir, "--listen", p.addr, "--etcd-listen-client", p.etcd[0],
		"--etcd-listen-peer", p.etcd[1], "--log-level", "error"})
	exe, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(exe)
	p.cmd.Env = append(os.Environ(), "PINFOLD_TEST_MAIN="+string(args))
	log, err := os.Create(filepath.Join(p.dir, "planner.log"))
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if r, err := http.Get("http://" + p.addr + "/healthz"); err == nil {
			r.Body.Close()
			return
		}
	}
	b, _ := os.ReadFile(filepath.Join(p.dir, "planner.log"))
	p.t.Fatalf("the planner did not answer within 30 s:\n%s", b)
}

// kill kills the planner with SIGKILL.
func (p *plannerProcess) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	_ = p.cmd.Wait()
	p.cmd = nil
}

// TestKilledDuringLargeDeploy: the planner is killed with SIGKILL while a
// 5,000-instance deploy is in flight and started again; the CLI sends the
// deploy again with its request ID (by itself while the planner comes
// back, or when the user repeats it with --request-id): exactly 5,000
// instances, whether the first attempt committed or not. Before request
// IDs, a deploy committed just before the kill exited 3 ("nothing is
// changed"), and its retry made 10,000.
func TestKilledDuringLargeDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a planner process")
	}
	p := newPlannerProcess(t)
	p.start()
	pf := newCLI(t, p.addr)
	topo := topologyFile(t, "dual-xeon-gold-6230")
	for i := range 14 { // 1,120 CPUs: room for 22,400 instances of 0.05 CPU, 20,000 needed
		pf.Must("host", "add", fmt.Sprintf("h%02d", i), "--topology", topo)
	}
	// A 5,000-instance deploy takes about 0.25 s here: the kill falls
	// before, during or after its commit, in turn.
	for round, at := range []time.Duration{30 * time.Millisecond, 90 * time.Millisecond, 150 * time.Millisecond, 220 * time.Millisecond} {
		svc, id := fmt.Sprintf("big%d", round), fmt.Sprintf("kill-test-%d", round)
		deploy := []string{"deploy", svc, "--count", "5000", "--cpu", "0.05", "--bind", "--memory", "16MiB", "--image", "busybox",
			"--request-id", id, "-o", "json"}
		type result struct {
			errOut string
			code   int
		}
		done := make(chan result, 1)
		go func() {
			_, errOut, code := pf.Run(deploy...)
			done <- result{errOut, code}
		}()
		time.Sleep(at)
		p.kill()
		p.start()
		r := <-done
		t.Logf("killed %s after the deploy started: exit %d %s", at, r.code, strings.TrimSpace(r.errOut))
		if r.code == exitUnknown {
			if !strings.Contains(r.errOut, "--request-id "+id) {
				t.Errorf("an unknown outcome does not say how to repeat the deploy: %s", r.errOut)
			}
			_, errOut, code := pf.Run(deploy...) // the user repeats it
			r = result{errOut, code}
		}
		if r.code != 0 {
			t.Fatalf("the deploy, sent again with its request ID: exit %d: %s", r.code, r.errOut)
		}
		// Repeated once more by hand: nothing changes.
		if _, errOut, code := pf.Run(deploy...); code != 0 {
			t.Fatalf("a third send of the request: exit %d: %s", code, errOut)
		} else if !strings.Contains(errOut, "was made before: this is its first outcome, and nothing changed now") {
			t.Errorf("a third send of the request says nothing of being a repeat: %q", errOut)
		}
		psOut, errOut, code := pf.Run("ps", "--service", svc, "-o", "json")
		if code != 0 {
			t.Fatal(errOut)
		}
		var ins []json.RawMessage
		if err := json.Unmarshal([]byte(psOut), &ins); err != nil {
			t.Fatal(err)
		}
		if len(ins) != 5000 {
			t.Fatalf("killed %s in: %d instances of %s, want exactly 5000", at, len(ins), svc)
		}
	}
}
