package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestEventsShowTheNewest: `events --limit N` prints the newest N events,
// oldest first, so that a log longer than one read still shows what just
// happened (it printed the oldest N, and the newest were out of reach
// without --follow). Control: with the request's latest flag dropped the
// test gets h0 and h1.
func TestEventsShowTheNewest(t *testing.T) {
	pf := plannerCLI(t)
	var hosts []string
	for i := range 5 {
		h := fmt.Sprintf("h%d", i)
		hosts = append(hosts, h)
		pf.Must("host", "add", h, "--topology", "../../numa/testdata/want/laptop-i7-1185g7.json")
	}
	// The event writer runs in the background: wait for all five.
	for deadline := time.Now().Add(10 * time.Second); len(eventSubjects(t, pf.Must("events", "-o", "json"))) < len(hosts) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if got := eventSubjects(t, pf.Must("events", "-o", "json")); !slices.Equal(got, hosts) {
		t.Fatalf("events = %v, want %v", got, hosts)
	}
	if got := eventSubjects(t, pf.Must("events", "-o", "json", "--limit", "2")); !slices.Equal(got, hosts[3:]) {
		t.Errorf("events --limit 2 = %v, want the newest two, oldest first: %v", got, hosts[3:])
	}
}

// eventSubjects is the subjects of the events in out, events -o json's output.
func eventSubjects(t *testing.T, out string) []string {
	t.Helper()
	var evs []eventJSON
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		t.Fatalf("events -o json: %v\n%s", err, out)
	}
	var subjects []string
	for _, e := range evs {
		subjects = append(subjects, e.Subject)
	}
	return subjects
}
