//go:build linux && e2e

package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/test/testenv"
)

// portsEntry is an instance's ports as ps -o json shows them.
type portsEntry struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Ports []struct {
		Name      string `json:"name"`
		Host      int    `json:"host_port"`
		Container int    `json:"container_port"`
		Static    bool   `json:"static"`
	} `json:"ports"`
	Generation int64  `json:"generation"`
	Observed   int64  `json:"observed_generation"`
	Container  string `json:"container_id"`
}

func portsOf(t *testing.T, id string) portsEntry {
	t.Helper()
	out, errOut, code := pinfold(t, "", "ps", "-o", "json", "--planner", plannerAddr)
	if code != 0 {
		t.Fatalf("ps: %s", errOut)
	}
	var list []portsEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.ID == id {
			return e
		}
	}
	return portsEntry{}
}

// answers GETs /ok on the guest's published host port.
func answers(port int) (bool, string) {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/ok", port))
	if err != nil {
		return false, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode == 200 && strings.TrimSpace(string(b)) == "ok", r.Status + " " + string(b)
}

// TestE2EPorts: planner + agent + dockerd in the guest. A dynamic port
// reaches the container as PINFOLD_PORT_HTTP, is published on the guest
// (its host port answers from the host side), and a replace gets a new
// dynamic port whose health check on the named port passes. A static
// port is published as asked, and a replace stops the old container
// first and answers on the same port.
func TestE2EPorts(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	image := testenv.Image(t)
	dir := t.TempDir()
	startPlanner(t, dir+"/planner", "warn")
	daemon(t, "agent", "agent", "--planner", plannerAddr, "--host", "vm", "--state-dir", dir+"/agent", "--resync", "1s", "--health-wait", "2s")
	eventually(t, 60*time.Second, "host vm up", func() (bool, string) {
		out, _, _ := pinfold(t, "", "host", "list", "-o", "json", "--planner", plannerAddr)
		return strings.Contains(out, `"state": "up"`) && strings.Contains(out, `"agent": true`), out
	})
	// The guest's dockerd runs without its default bridge (hack/vm/init:
	// --bridge=none --iptables=false): publishing needs a network with
	// addresses, so the test makes a bridge of its own; the engine's
	// userland proxy forwards each published port to the container. Where
	// the guest's kernel has no bridges the instances run on the host
	// network instead: the env still carries the port, nothing is
	// published, and the container answers on the host port itself.
	network, published := "pinfold-ports", true
	if out, err := exec.Command("docker", "network", "create", "--driver", "bridge", network).CombinedOutput(); err != nil {
		t.Logf("no bridge network in the guest (%v: %s): the host network instead", err, strings.TrimSpace(string(out)))
		network, published = "host", false
	} else {
		t.Cleanup(func() { exec.Command("docker", "network", "rm", network).Run() })
	}
	serve := func(port string) []string {
		return []string{"sh", "-c", "echo ok > /tmp/ok; exec httpd -f -p " + port + " -h /tmp"}
	}
	deploy := func(name string, args ...string) string {
		t.Helper()
		base := []string{"deploy", name, "--cpu", "0.2", "--memory", "32MiB", "--image", image, "--network", network, "--planner", plannerAddr}
		if _, errOut, code := pinfold(t, "", append(base, args...)...); code != 0 {
			t.Fatalf("deploy %s: %s", name, errOut)
		}
		return runningInstance(t, name)
	}
	running := func(id string, gen int64) portsEntry {
		t.Helper()
		var e portsEntry
		eventually(t, 90*time.Second, fmt.Sprintf("%s running generation %d", id, gen), func() (bool, string) {
			e = portsOf(t, id)
			return e.State == "running" && e.Observed == gen, fmt.Sprintf("%+v", e)
		})
		return e
	}
	envOf := func(container string) string {
		out, _ := exec.Command("docker", "inspect", "-f", "{{json .Config.Env}} {{json .HostConfig.PortBindings}}", container).Output()
		return strings.TrimSpace(string(out))
	}

	// 1. A dynamic port: the lowest of the range, in the env, published.
	dyn := deploy("dyn", append([]string{"--port", "http", "--health-port", "http", "--health-http", "/ok", "--"}, serve("$PINFOLD_PORT_HTTP")...)...)
	e := running(dyn, 1)
	if len(e.Ports) != 1 || e.Ports[0].Name != "http" || e.Ports[0].Host != 20000 || e.Ports[0].Container != 20000 || e.Ports[0].Static {
		t.Fatalf("ps ports %+v, want http 20000 (dynamic)", e.Ports)
	}
	if got := envOf(e.Container); !strings.Contains(got, `"PINFOLD_PORT_HTTP=20000"`) ||
		published && !strings.Contains(got, `"20000/tcp":[{"HostIp":"","HostPort":"20000"}]`) || !published && !strings.HasSuffix(got, "{}") && !strings.HasSuffix(got, "null") {
		t.Errorf("container env and bindings %s, want PINFOLD_PORT_HTTP=20000 (published on 20000: %t)", got, published)
	}
	eventually(t, 30*time.Second, "the published dynamic port to answer", func() (bool, string) { return answers(20000) })

	// 2. Replace: the new container gets its own dynamic port and passes
	// its HTTP check on the named port before the old one goes.
	if _, errOut, code := pinfold(t, "", append([]string{"replace", dyn, "--image", image, "--planner", plannerAddr, "--"}, serve("$PINFOLD_PORT_HTTP")...)...); code != 0 {
		t.Fatalf("replace dyn (its check on the named port): exit %d, %s", code, errOut)
	}
	e = running(dyn, 2)
	if len(e.Ports) != 1 || e.Ports[0].Host != 20001 {
		t.Errorf("after the replace: ports %+v, want http 20001 (20000 was the old container's)", e.Ports)
	}
	eventually(t, 30*time.Second, "the new dynamic port to answer", func() (bool, string) { return answers(20001) })
	if ok, _ := answers(20000); ok {
		t.Errorf("the old container's port 20000 still answers after the replace")
	}

	// 3. A static port with another container port: published as asked;
	// a replace stops the old container first, then answers on it again.
	web, listen := "web=18090:8080", "8080"
	if !published {
		web, listen = "web=18090", "18090" // under the host network the container listens on the host port
	}
	st := deploy("st", append([]string{"--port", web, "--health-port", "web", "--"}, serve(listen)...)...)
	e = running(st, 1)
	if len(e.Ports) != 1 || e.Ports[0].Host != 18090 || e.Ports[0].Container != map[bool]int{true: 8080, false: 18090}[published] || !e.Ports[0].Static {
		t.Fatalf("ps ports %+v, want %s (static)", e.Ports, web)
	}
	eventually(t, 30*time.Second, "the static port to answer", func() (bool, string) { return answers(18090) })
	if _, errOut, code := pinfold(t, "", append([]string{"replace", st, "--image", image, "--planner", plannerAddr, "--"}, serve(listen)...)...); code != 0 {
		t.Fatalf("replace st (stop-first, TCP check on the named port): exit %d, %s", code, errOut)
	}
	running(st, 2)
	eventually(t, 30*time.Second, "the static port to answer after the replace", func() (bool, string) { return answers(18090) })
	// A second instance asking for 18090 on the one host is refused by the Ports rule.
	_, errOut, code := pinfold(t, "", "deploy", "st2", "--cpu", "0.2", "--memory", "32MiB", "--image", image, "--port", "web=18090", "--planner", plannerAddr, "--", "sleep", "60")
	if code == 0 || !strings.Contains(errOut, "no host has port 18090 free") || !strings.Contains(errOut, "Ports") {
		t.Errorf("a second instance on 18090: exit %d, %s", code, errOut)
	}
	t.Logf("network %s (published %t): dynamic port 20000 answering, replaced onto 20001 with a passing check; static %s replaced stop-first", network, published, web)
}
