package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs url and parses the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: not the Prometheus text format: %v", url, err)
	}
	return fams
}

// value is the sample of family name whose labels include want (nil: none).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestPlannerMetrics: /metrics on the planner's address counts the calls
// by method and outcome, the commits, the hosts and instances by state,
// capacity and leadership.
func TestPlannerMetrics(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	for _, args := range [][]string{
		{"host", "add", "h1", "--topology", "../../numa/testdata/want/laptop-i7-1185g7.json", "--memory-share", "1"},
		{"deploy", "web", "--count", "2", "--cpu", "1.5", "--bind", "--memory", "1GiB", "--image", "busybox"},
	} {
		pf.Must(args...)
	}
	pf.Fails(1, "deploy", "huge", "--cpu", "100", "--bind", "--memory", "1GiB", "--image", "x") // unmet
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(20 * time.Second)
	for {
		fams = scrape(t, "http://"+addr+"/metrics")
		if v, _ := value(fams, "pinfold_planner_leader", nil); v == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   func(float64) bool
		what   string
	}{
		{"pinfold_planner_requests_total", map[string]string{"method": "Deploy", "code": "ok"}, func(v float64) bool { return v == 1 }, "1"},
		{"pinfold_planner_requests_total", map[string]string{"method": "Deploy", "code": "resource_exhausted"}, func(v float64) bool { return v == 1 }, "1"},
		{"pinfold_planner_request_duration_seconds", map[string]string{"method": "RegisterHost"}, func(v float64) bool { return v == 1 }, "1 observation"},
		{"pinfold_planner_commits_total", map[string]string{"outcome": "ok"}, func(v float64) bool { return v >= 2 }, "at least 2"},
		{"pinfold_planner_commit_writes", nil, func(v float64) bool { return v >= 2 }, "at least 2 observations"},
		{"pinfold_planner_hosts", map[string]string{"state": "up"}, func(v float64) bool { return v == 1 }, "1"},
		{"pinfold_planner_instances", map[string]string{"state": "pending"}, func(v float64) bool { return v == 2 }, "2"},
		{"pinfold_planner_cpu_capacity_cpus", nil, func(v float64) bool { return v == 8 }, "8"},
		{"pinfold_planner_cpu_used_cpus", nil, func(v float64) bool { return v == 3 }, "3"},
		{"pinfold_planner_memory_used_bytes", nil, func(v float64) bool { return v == 2<<30 }, "2 GiB"},
		{"pinfold_planner_leader", nil, func(v float64) bool { return v == 1 }, "1"},
		{"go_goroutines", nil, func(v float64) bool { return v > 0 }, "> 0"},
	} {
		v, ok := value(fams, tc.name, tc.labels)
		if !ok || !tc.want(v) {
			t.Errorf("%s%v = %v (present %v), want %s", tc.name, tc.labels, v, ok, tc.what)
		}
	}
	// The event log has the deploy, by "local" (no TLS), and the refused one.
	var evs []eventJSON
	deadline = time.Now().Add(10 * time.Second)
	for {
		out, errOut, code := pf.Run("events", "--service", "web", "-o", "json")
		if code != 0 {
			t.Fatalf("events: %s", errOut)
		}
		_ = json.Unmarshal([]byte(out), &evs)
		if len(evs) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(evs) != 1 || evs[0].Kind != "Deploy" || evs[0].Identity != "local" || evs[0].Outcome != "ok" || !strings.Contains(evs[0].Request, `"count":2`) {
		t.Errorf("events --service web = %+v, want the one deploy by local", evs)
	}
	// The refused deploy's event is written by the same background writer,
	// perhaps later than the deploy's (issue 26 N10): wait for it too.
	var out string
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _, _ = pf.Run("events")
		if strings.Contains(out, "resource_exhausted") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(out, "resource_exhausted") || !strings.Contains(out, "IDENTITY") {
		t.Errorf("events (table) lacks the refused deploy:\n%s", out)
	}
	if out, _, code := pf.Run("events", "-o", "yaml", "--service", "web"); code != 0 || !strings.Contains(out, "identity: local") {
		t.Errorf("events -o yaml: exit %d\n%s", code, out)
	}
}
