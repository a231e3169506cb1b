package planfile

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

// TestRequestScheduling: the plan file's request has model.Scheduling's
// keys (strategy, max_per_host, priority) and they reach the placement
// request; a bad value is refused naming request.KEY.
func TestRequestScheduling(t *testing.T) {
	p := alloc.Params{ShareBase: 100, MaxFragmentCores: 4}
	var r Request
	if err := json.Unmarshal([]byte(`{"service":"web","count":2,"cpu":1,"memory_bytes":67108864,"strategy":"fill","max_per_host":3,"priority":"batch"}`), &r); err != nil {
		t.Fatal(err)
	}
	pr, err := r.build(p)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Strategy != alloc.Fill || pr.MaxPerHost != 3 || pr.Priority != model.PriorityBatch {
		t.Errorf("placement request: strategy %s, max per host %d, priority %s; want fill, 3, batch", pr.Strategy, pr.MaxPerHost, pr.Priority)
	}
	r.MaxPerHost = -1
	if _, err := r.build(p); err == nil || !strings.Contains(err.Error(), "request.max_per_host") {
		t.Errorf("max_per_host -1: %v, want a refusal naming request.max_per_host", err)
	}
	// A priority's name its reader refuses is named under request.
	if _, err := Decode(strings.NewReader(`{"request":{"service":"web","count":1,"cpu":1,"memory_bytes":67108864,"priority":"urgent"}}`)); err == nil ||
		!strings.Contains(err.Error(), `request.priority = "urgent"`) {
		t.Errorf("priority urgent: %v, want a refusal naming request.priority", err)
	}
}
