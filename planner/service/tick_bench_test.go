package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// BenchmarkLeaderTickIdle is one pass of the leader's healing over a
// cluster with nothing to do: 2,000 hosts (8 CPUs each) and 8,000
// instances, none down, draining or moving. It is what the leader pays
// every second (HealEvery).
func BenchmarkLeaderTickIdle(b *testing.B) {
	c := statetest.Start(b, 1)
	st := c.Open(b, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	s := New(st, nil)
	ctx := context.Background()
	const hosts = 2000
	for i := range hosts {
		if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: fmt.Sprintf("h%04d", i), Topology: topologytest.Laptop().Topology(),
			Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 4 {
		if _, err := s.Deploy(ctx, DeployRequest{Service: fmt.Sprintf("s%d", i), Count: hosts, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 150, Bind: true, Memory: 256 << 20}}}); err != nil {
			b.Fatal(err)
		}
	}
	if n := len(st.Instances("")); n != 4*hosts {
		b.Fatalf("%d instances, want %d", n, 4*hosts)
	}
	tr := newTracker()
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.tick(ctx, tr, now)
	}
}
