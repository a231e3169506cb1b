package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPortsCLI: --port places static and dynamic host ports, ps shows
// them (a PORTS column, and ports in -o json), a third instance asking
// for a static port two hosts hold is refused naming the Ports rule, and
// bad ports are bad input naming the flag and value, with nothing changed.
func TestPortsCLI(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	pf.Must("host", "add", "h2", "--topology", laptopTopology)
	pf.Must("deploy", "web", "--count", "2", "--cpu", "0.5", "--memory", "64MiB", "--image", "i", "--port", "http=8080:80", "--port", "admin")
	var ins []instanceJSON
	if err := json.Unmarshal([]byte(pf.Must("ps", "-o", "json")), &ins); err != nil || len(ins) != 2 {
		t.Fatalf("ps -o json: %v, %d instances", err, len(ins))
	}
	for _, in := range ins {
		want := []portJSON{{Name: "http", Host: 8080, Container: 80, Static: true}, {Name: "admin", Host: 20000, Container: 20000}}
		if len(in.Ports) != 2 || in.Ports[0] != want[0] || in.Ports[1] != want[1] {
			t.Errorf("instance %s on %s: ports %+v, want %+v", in.ID, in.Host, in.Ports, want)
		}
	}
	if ps := pf.Must("ps"); !strings.Contains(ps, "PORTS") || !strings.Contains(ps, "http=8080:80 admin=20000") {
		t.Errorf("ps lacks the ports:\n%s", ps)
	}
	before := pf.Must("ps", "-o", "json")
	_, errOut, code := pf.Run("deploy", "api", "--cpu", "0.5", "--memory", "64MiB", "--image", "i", "--port", "web=8080")
	if code == 0 || !strings.Contains(errOut, "no host has port 8080 free") || !strings.Contains(errOut, "Ports                2 eliminated: h1 h2") {
		t.Errorf("a third instance on 8080: exit %d, stderr:\n%s", code, errOut)
	}
	for _, tc := range []struct{ args, want string }{
		{"http=70000", `--port "http=70000": port 70000 is outside 1-65535`},
		{"http=80x", `--port "http=80x": host port "80x" is not a number`},
		{"HTTP", `--port "HTTP": name "HTTP": want [a-z][a-z0-9_-]*`},
	} {
		_, errOut, code := pf.Run("deploy", "bad", "--cpu", "0.5", "--memory", "64MiB", "--image", "i", "--port", tc.args)
		if code != exitBadInput || !strings.Contains(errOut, tc.want) {
			t.Errorf("--port %s: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, exitBadInput, tc.want)
		}
	}
	_, errOut, code = pf.Run("deploy", "bad", "--cpu", "0.5", "--memory", "64MiB", "--image", "i", "--port", "a", "--port", "a=81")
	if code != exitBadInput || !strings.Contains(errOut, `name "a" is given twice`) {
		t.Errorf("a port name twice: exit %d, stderr %q", code, errOut)
	}
	if after := pf.Must("ps", "-o", "json"); after != before {
		t.Errorf("refused deploys changed the instances")
	}
}
