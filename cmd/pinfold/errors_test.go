package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestErrorsAsTyped: refusals show sizes in binary units (never a raw
// "1073741824 bytes"), name a CPU amount as it was typed (--cpu 0.0001,
// not "0"), and input the command line can check is refused before any
// progress line, with nothing changed.
func TestErrorsAsTyped(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	pf.Must("deploy", "web", "--count", "1", "--cpu", "1", "--bind", "--memory", "1GiB", "--image", "i")
	before := pf.Must("ps", "-o", "json")
	rawBytes := regexp.MustCompile(`\d{4,} bytes|= \d{7,}\b`)
	for _, tc := range []struct {
		args  []string
		code  int
		want  []string
		local bool // refused by the command line itself: no progress line
	}{
		{[]string{"deploy", "bad", "--cpu", "1e9", "--bind", "--memory", "1GiB", "--image", "i"}, exitBadInput, []string{`--cpu "1e9": want a number of CPUs from 0 to 1000000`}, true},
		{[]string{"deploy", "bad", "--cpu", "0", "--bind", "--memory", "1GiB", "--image", "i"}, exitBadInput, []string{`--cpu "0": a CPU-bound instance (--bind) needs more than 0 CPUs`}, true},
		{[]string{"deploy", "bad", "--cpu", "1", "--memory", "1MiB", "--image", "i"}, exitBadInput, []string{`--memory "1MiB": want at least 6 MiB`}, true},
		{[]string{"deploy", "bad", "--cpu", "1", "--memory", "1GiB", "--memory-soft", "2GiB", "--image", "i"}, exitBadInput, []string{`--memory-soft 2 GiB: want at most --memory (1 GiB)`}, true},
		{[]string{"deploy", "tiny", "--cpu", "0.0001", "--bind", "--memory", "1GiB", "--image", "i"}, exitBadInput, []string{`cpu = "0.0001": less than one piece of a CPU`, "(1 piece = 0.01 CPU"}, false},
		{[]string{"deploy", "bad", "--cpu", "1_0", "--memory", "1GiB", "--image", "i"}, exitBadInput, []string{`--cpu "1_0": want a number of CPUs such as 1.7`}, true},
		{[]string{"resize", "web", "--cpu", "+0x1p-1", "--wait", "0"}, exitBadInput, []string{`--cpu "+0x1p-1": want a signed number of CPUs`}, true},
		{[]string{"deploy", "odd", "--cpu", "0.505", "--memory", "1GiB", "--image", "i"}, exitBadInput, []string{`cpu = "0.505": not a whole number of pieces of a CPU`, "the nearest amounts are 0.5 and 0.51"}, false},
		{[]string{"capacity", "--cpu", "0.0001", "--bind", "--memory", "1GiB"}, exitBadInput, []string{`cpu = "0.0001": less than one piece of a CPU`}, false},
		{[]string{"resize", "web", "--memory", "+100GiB", "--wait", "0"}, 1, []string{"to 1 CPUs (bound) and 101 GiB does not fit"}, false},
		{[]string{"resize", "web", "--memory", "-1GiB", "--wait", "0"}, exitBadInput, []string{"= -1 GiB: the instance has 1 GiB"}, false},
		{[]string{"host", "set", "h1", "--memory", "512MiB"}, 1, []string{"memory 512 MiB is below the 1 GiB in use"}, false},
		{[]string{"host", "set", "h1"}, exitBadInput, []string{"host set h1: nothing to change: give at least one of --add-cpus, --remove-cpus, --memory"}, true},
		{[]string{"host", "set", "h1", "--fault-domain", ""}, 0, nil, false}, // clearing is a change
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errOut, code := pf.Run(tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d: %s", code, tc.code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
			if m := rawBytes.FindString(errOut); m != "" {
				t.Errorf("stderr %q shows a raw size %q", errOut, m)
			}
			if strings.Contains(errOut, `cpu = "0"`) || strings.Contains(errOut, "e+09") {
				t.Errorf("stderr %q names the amount as parsed, not as typed", errOut)
			}
			if tc.local && strings.Contains(errOut, "placing") {
				t.Errorf("stderr %q: a progress line before the refusal", errOut)
			}
		})
	}
	if after := pf.Must("ps", "-o", "json"); after != before {
		t.Errorf("refused commands changed the instances:\n%s\nwas\n%s", after, before)
	}
}
