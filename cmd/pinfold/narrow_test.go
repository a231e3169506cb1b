package main

import (
	"strings"
	"testing"
)

// TestIntFlagsInRange: every int flag sent to the planner as an int32 is
// range-checked: a value that a conversion would wrap (2^32+2 becomes 2)
// is refused with the flag and the value, exit 2, and nothing changes
// (scale --count 4294967298 added an instance and exited 0, issue 26 N4).
func TestIntFlagsInRange(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	pf.Must("deploy", "web", "--count", "1", "--cpu", "0.5", "--memory", "64MiB", "--image", "i")
	snapshot := func() string {
		return pf.Must("ps", "-o", "json") + pf.Must("host", "show", "h1", "-o", "json") + pf.Must("settings", "-o", "json")
	}
	before := snapshot()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"scale", "web", "--count", "4294967298"}, "--count 4294967298: want 0..50000"},
		{[]string{"scale", "web", "--count", "50001"}, "--count 50001: want 0..50000"},
		{[]string{"scale", "web", "--count", "-1"}, "--count -1: want 0..50000"},
		{[]string{"capacity", "--cpu", "0.5", "--memory", "64MiB", "--max-per-host", "4294967297"}, "--max-per-host 4294967297: want 0..2147483647"},
		{[]string{"host", "set", "h1", "--numa-memory", "4294967296=1GiB"}, `--numa-memory "4294967296=1GiB": want NODE=SIZE with NODE 0..8191`},
		{[]string{"settings", "--priority", "Affinity=4294967297"}, `--priority "Affinity=4294967297"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errOut, code := pf.Run(tc.args...)
			if code != exitBadInput || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d with %q", code, errOut, exitBadInput, tc.want)
			}
			if after := snapshot(); after != before {
				t.Errorf("the refused call changed the cluster")
				before = after
			}
		})
	}
}
