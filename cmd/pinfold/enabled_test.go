package main

import "testing"

// TestEnabledLine: host enable says when it ended a drain (it used to say
// only "host h1 is up"), and when the host still takes no work and why
// ("host h1 is maintenance" before, then "it is maintenance", with no word
// of how a maintenance ends).
func TestEnabledLine(t *testing.T) {
	for _, tc := range []struct {
		enable, endedDrain bool
		state, want        string
	}{
		{true, false, "up", "host h1 is up"},
		{true, true, "up", "host h1 is up; its drain ended (instances already moved stay where they are)"},
		{true, false, "maintenance", "host h1 is enabled, but it is in maintenance: it takes no new work until that ends ('pinfold host maintenance h1 --off' ends it now)"},
		{true, true, "down", "host h1 is enabled and its drain ended, but it is down: it takes no new work until its agent reports again"},
		{true, false, "protocol", "host h1 is enabled, but its agent speaks another protocol than the planner (state protocol): it takes no new work until they match"},
		{false, false, "disabled", "host h1 is disabled: no new work is placed on it; its instances keep running"},
	} {
		if got := enabledLine("h1", tc.enable, tc.endedDrain, tc.state); got != tc.want {
			t.Errorf("enabledLine(h1, %t, %t, %s) = %q, want %q", tc.enable, tc.endedDrain, tc.state, got, tc.want)
		}
	}
}

// TestCPUsOf: a CPU count as typed keeps its noun's number ("1 CPUs
// bound" in apply's and deploy's lines before).
func TestCPUsOf(t *testing.T) {
	for in, want := range map[string]string{"1": "1 CPU", "1.5": "1.5 CPUs", "0": "0 CPUs", "2": "2 CPUs", "0.5": "0.5 CPUs"} {
		if got := cpusOf(in); got != want {
			t.Errorf("cpusOf(%q) = %q, want %q", in, got, want)
		}
	}
}
