package service

import (
	"context"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestDesiredSetBounded: a deploy that would make a host's desired set
// larger than its agent reads is refused, naming the host and the sizes,
// and changes nothing (issue 36 A2: 1,200 instances of 60 KiB of
// environment each made a 73.8 MB set the agent refused for ever).
// Control: the same instances up to the bound are placed. The bound is
// lowered to 200 KiB for the test (maxDesiredBytes).
func TestDesiredSetBounded(t *testing.T) {
	old := maxDesiredBytes
	maxDesiredBytes = 200 << 10
	t.Cleanup(func() { maxDesiredBytes = old })
	st := memStore(t, state.Config{ShareBase: 100, MaxFragmentCores: -1})
	s := New(st, nil)
	ctx := context.Background()
	if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: "h1", Topology: topologytest.BenchHost().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	env := []string{"BLOB=" + strings.Repeat("x", 30<<10)}
	deploy := func(name string, n int) error {
		_, err := s.Deploy(ctx, DeployRequest{Service: name, Spec: model.Spec{Image: "i", Env: env}, Count: n, Pieces: 1, Memory: 16 << 20})
		return err
	}
	if err := deploy("a", 5); err != nil { // about 150 KiB
		t.Fatalf("control: 5 instances of 30 KiB: %v", err)
	}
	v, _ := st.Host("h1")
	if v.DesiredBytes < 150<<10 || v.DesiredBytes > 160<<10 {
		t.Errorf("h1's desired set after 5 instances of 30 KiB = %d bytes, want about 150 KiB", v.DesiredBytes)
	}
	err := deploy("b", 3)
	if CodeOf(err) != Exhausted || !strings.Contains(err.Error(), "host h1: its desired set would be") || !strings.Contains(err.Error(), "over the 200 KiB its agent reads") {
		t.Fatalf("3 more = %v, want resource_exhausted naming the host and the sizes", err)
	}
	if n := len(st.Instances("h1")); n != 5 {
		t.Errorf("%d instances on h1 after the refusal, want the 5 before", n)
	}
	if _, err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if v, _ := st.Host("h1"); v.DesiredBytes != 0 {
		t.Errorf("h1's desired set after removing every instance = %d bytes, want 0", v.DesiredBytes)
	}
	if err := deploy("b", 3); err != nil {
		t.Errorf("3 instances after the removal: %v", err)
	}
}
