package model_test

import (
	"encoding/json"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

func TestPieces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a    model.Allocation
		want int
	}{
		{"bound 1.7", model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 2: 70}}, 170},
		{"memory-first 1.5", model.Allocation{CPUQuota: 150}, 150},
		{"memory-first ignores CPUs", model.Allocation{CPUQuota: 50, CPUs: map[cpuset.CPUID]int{1: 100}}, 50},
		{"bound, fine pieces", model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 1000, 1: 995}}, 1995},
	} {
		if got := tc.a.Pieces(); got != tc.want {
			t.Errorf("%s: Pieces() = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestInstanceDocument: an instance's JSON is flat (the etcd document and
// the checkpoint read it so), and reads back equal.
func TestInstanceDocument(t *testing.T) {
	t.Parallel()
	in := model.Instance{ID: "web-1", Service: "web", Host: "h1", Generation: 3,
		Spec: model.Spec{Image: "img", Health: &model.HealthCheck{TCP: 80},
			Container: model.Container{Volumes: []string{"/srv:/srv"}, Restart: "always", Labels: map[string]string{"a": "b"}}},
		Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{4: 100}, NUMANode: 1, Memory: 1 << 30},
		Previous:   &model.Previous{Generation: 3, Allocation: model.Allocation{CPUQuota: 50, NUMANode: -1, Memory: 1 << 29}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]any
	if err := json.Unmarshal(b, &flat); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"image", "bind", "cpus", "numa_node", "memory_bytes", "generation", "health", "previous", "volumes", "restart", "labels"} {
		if _, ok := flat[k]; !ok {
			t.Errorf("document %s lacks %q at the top level", b, k)
		}
	}
	var back model.Instance
	if err := json.Unmarshal(b, &back); err != nil || back.Previous == nil || back.Previous.CPUQuota != 50 || back.CPUs[4] != 100 || back.Health.TCP != 80 ||
		len(back.Volumes) != 1 || back.Restart != "always" || back.Labels["a"] != "b" {
		t.Errorf("read back %+v (%v) from %s", back, err, b)
	}
}
