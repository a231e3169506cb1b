package service

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
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
		_, err := s.Deploy(ctx, DeployRequest{Service: name, Count: n, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Env: env}, Size: model.Size{Pieces: 1, Memory: 16 << 20}}})
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

// TestDesiredSetBoundedInPlace: a replace or a resize, which rewrite
// instances on their hosts, is refused as a deploy is when it would grow a
// host's desired set past what its agent reads, naming the host and the
// sizes, and changes nothing (issue 36 A2: the bound held for deploys
// only; a replace with a 45 KiB command per instance took the same host
// past it). Controls: the same replace with a smaller command, and the
// same resize with room for it, succeed.
func TestDesiredSetBoundedInPlace(t *testing.T) {
	old := maxDesiredBytes
	t.Cleanup(func() { maxDesiredBytes = old })
	maxDesiredBytes = 200 << 10
	st := memStore(t, state.Config{ShareBase: 100, MaxFragmentCores: -1})
	s := New(st, nil)
	ctx := context.Background()
	if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: "h1", Topology: topologytest.BenchHost().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	env := []string{"BLOB=" + strings.Repeat("x", 30<<10)}
	ins, err := s.Deploy(ctx, DeployRequest{Service: "a", Count: 5, Deploy: model.Deploy{Spec: model.Spec{Image: "i", Env: env}, Size: model.Size{Pieces: 10, Memory: 16 << 20}}}) // about 150 KiB
	if err != nil {
		t.Fatal(err)
	}
	generations := func() []int64 {
		var out []int64
		for _, v := range st.Instances("h1") {
			out = append(out, v.Instance.Generation)
		}
		return out
	}
	before := generations()
	tests := []struct {
		name  string
		bound int64 // 0: 200 KiB
		call  func() error
		want  string // "": succeeds
	}{
		{"replace past the bound", 0, func() error {
			_, err := s.Replace(ctx, ReplaceRequest{Target: "a", Image: "i2", Command: []string{strings.Repeat("c", 15<<10)}, Pull: model.PullMissing})
			return err
		}, "with the replace of a,"},
		{"resize past the bound", -1, func() error {
			_, err := s.Resize(ctx, ResizeRequest{Target: ins[0].ID, CPUDelta: 10})
			return err
		}, "with the resize of " + ins[0].ID + ","},
		{"control: replace under the bound", 0, func() error {
			_, err := s.Replace(ctx, ReplaceRequest{Target: "a", Image: "i2", Command: []string{strings.Repeat("c", 5<<10)}, Pull: model.PullMissing})
			return err
		}, ""},
		{"control: resize under the bound", 0, func() error {
			_, err := s.Resize(ctx, ResizeRequest{Target: ins[0].ID, CPUDelta: 10})
			return err
		}, ""},
	}
	for _, tt := range tests { // in order, not parallel: the controls change the store
		t.Run(tt.name, func(t *testing.T) {
			v, _ := st.Host("h1")
			maxDesiredBytes = 200 << 10
			if tt.bound < 0 {
				maxDesiredBytes = v.DesiredBytes + 8 // the set as it is: any growth is past it
			}
			err := tt.call()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("= %v, want success (desired set %d bytes, bound %d)", err, v.DesiredBytes, maxDesiredBytes)
				}
				return
			}
			if CodeOf(err) != Exhausted || !strings.Contains(err.Error(), "host h1: its desired set would be") ||
				!strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "over the "+alloc.FormatBytes(maxDesiredBytes)+" its agent reads") {
				t.Fatalf("= %v, want resource_exhausted with %q naming the bound", err, tt.want)
			}
			if got := generations(); !slices.Equal(got, before) {
				t.Errorf("generations after the refusal = %v, want %v (nothing changed)", got, before)
			}
			t.Log(err)
		})
	}
}
