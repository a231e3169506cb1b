package service

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// rebalanceFleet is issue 36's R1 fleet: 4 services × 5,000 + 777
// instances (20,777; memory-first, 0.01 CPU and 16 MiB each; or counts
// per service) deployed on two 128-CPU hosts, then two empty hosts
// registered, so that a rebalance has moves to find.
func rebalanceFleet(tb testing.TB, counts ...int) *Service {
	tb.Helper()
	c := statetest.Start(tb, 1)
	st := c.Open(tb, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	s := New(st, nil)
	ctx := context.Background()
	register := func(name string) {
		if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: name, Topology: topologytest.BenchHost().Topology(),
			Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
			tb.Fatal(err)
		}
	}
	register("h0")
	register("h1")
	if len(counts) == 0 {
		counts = []int{5000, 5000, 5000, 5000, 777}
	}
	total := 0
	for i, n := range counts {
		total += n
		if _, err := s.Deploy(ctx, DeployRequest{Service: fmt.Sprintf("s%d", i), Count: n, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 1, Memory: 16 << 20}}}); err != nil {
			tb.Fatal(err)
		}
	}
	register("h2")
	register("h3")
	if n := len(st.Instances("")); n != total {
		tb.Fatalf("%d instances, want %d", n, total)
	}
	return s
}

// BenchmarkRebalanceDryRun is a viewer's dry-run rebalance over
// rebalanceFleet (issue 36 R1: 197.6 s of a planner core at 12481af).
func BenchmarkRebalanceDryRun(b *testing.B) {
	s := rebalanceFleet(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		out, err := s.Rebalance(ctx, RebalanceRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Moves) == 0 {
			b.Fatal("no moves proposed: the fleet is not imbalanced")
		}
	}
}

// TestRebalanceStopsWhenTheCallerLeaves: a dry run whose context is done
// plans nothing more and returns the context's error (issue 36 R1: a
// client that left kept a planner core busy). Control: the same call
// with a live context proposes moves.
func TestRebalanceStopsWhenTheCallerLeaves(t *testing.T) {
	s := rebalanceFleet(t, 300, 200)
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		want error
	}{
		{"control: the caller stays", context.Background, nil},
		{"the caller left", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, defrag := range []bool{false, true} {
				out, err := s.Rebalance(tc.ctx(), RebalanceRequest{Defragment: defrag})
				switch {
				case tc.want == nil && (err != nil || len(out.Moves) == 0):
					t.Errorf("defragment %v: %d moves, %v: want moves", defrag, len(out.Moves), err)
				case tc.want != nil && (!errors.Is(err, tc.want) || len(out.Moves) != 0):
					t.Errorf("defragment %v: %d moves, %v: want none and %v", defrag, len(out.Moves), err, tc.want)
				}
			}
		})
	}
}

// BenchmarkViewerReadsFleet: the other fleet-wide calls a viewer may
// make, over rebalanceFleet (issue 36 item 1: each at most O(n log n)).
func BenchmarkViewerReadsFleet(b *testing.B) {
	s := rebalanceFleet(b)
	now := time.Now()
	b.Run("Health", func(b *testing.B) {
		for range b.N {
			s.Health(now)
		}
	})
	b.Run("ExportPlan", func(b *testing.B) {
		for range b.N {
			if err := s.ExportPlan(func([]byte) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Capacity", func(b *testing.B) {
		for range b.N {
			if _, err := s.Capacity(DeployRequest{Service: "s0", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 1, Memory: 16 << 20}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
