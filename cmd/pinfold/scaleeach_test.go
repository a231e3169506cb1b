package main

import (
	"encoding/json"
	"maps"
	"testing"
)

// TestScaleOfEachCountsPerHost is issue 38 item 6's repro: a service
// deployed with --strategy each --count 1 on three hosts has three
// instances, and scale --count 2 removed one of them (the count was a
// total). It now counts per host, as the deploy's did: --count 2 gives
// each host two, --count 1 brings each back to one, --count 0 removes
// all and keeps the record.
func TestScaleOfEachCountsPerHost(t *testing.T) {
	pf := plannerCLI(t)
	for _, h := range []string{"a", "b", "c"} {
		pf.Must("host", "add", h, "--topology", laptopTopology)
	}
	pf.Must("deploy", "ag", "--strategy", "each", "--count", "1", "--cpu", "0.1", "--memory", "16MiB", "--image", "agent:1")
	perHost := func() map[string]int {
		var ins []instanceJSON
		if err := json.Unmarshal([]byte(pf.Must("ps", "--service", "ag", "-o", "json")), &ins); err != nil {
			t.Fatalf("ps -o json: %v", err)
		}
		n := map[string]int{}
		for _, in := range ins {
			n[in.Host]++
		}
		return n
	}
	for _, tt := range []struct {
		count, total int
		per          map[string]int
	}{
		{2, 6, map[string]int{"a": 2, "b": 2, "c": 2}},
		{1, 3, map[string]int{"a": 1, "b": 1, "c": 1}},
		{1, 3, map[string]int{"a": 1, "b": 1, "c": 1}},
		{0, 0, map[string]int{}},
		{1, 3, map[string]int{"a": 1, "b": 1, "c": 1}},
	} {
		var got struct {
			Count int `json:"count"`
		}
		out := pf.Must("scale", "ag", "--count", itoa(tt.count), "-o", "json")
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Count != tt.total {
			t.Errorf("scale ag --count %d -o json: %s (%v), want count %d in all", tt.count, out, err, tt.total)
		}
		if per := perHost(); !maps.Equal(per, tt.per) {
			t.Errorf("after scale ag --count %d: per host %v, want %v", tt.count, per, tt.per)
		}
	}
}
