package service

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// statusCounting counts the instance status writes that reach the store.
type statusCounting struct {
	Store
	puts atomic.Int64
}

func (c *statusCounting) PutStatus(ctx context.Context, host, id string, st model.Status) error {
	c.puts.Add(1)
	return c.Store.PutStatus(ctx, host, id, st)
}

// etcdFigure is the value of one of the in-process etcd's own metrics
// (etcd registers them with prometheus's default registry).
func etcdFigure(b *testing.B, name string) float64 {
	b.Helper()
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	b.Fatalf("etcd metric %s: not registered", name)
	return 0
}

// etcdWrites is what etcd has done so far: raft entries committed, lease
// grants and renewals, and the store's revision.
type etcdWrites struct{ proposals, grants, renewals, rev float64 }

func readEtcdWrites(b *testing.B, s *Service) etcdWrites {
	b.Helper()
	if err := s.st.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	return etcdWrites{proposals: etcdFigure(b, "etcd_server_proposals_committed_total"), grants: etcdFigure(b, "etcd_debugging_lease_granted_total"),
		renewals: etcdFigure(b, "etcd_debugging_lease_renewed_total"), rev: float64(s.st.Rev())}
}

// BenchmarkHeartbeatWrites measures the etcd writes of a fleet of agents
// in steady state, one iteration per simulated minute of a default
// agent's beats (every 10 s / 3; 18 a minute) on a one-member etcd,
// each beat with an unchanged status report for the host's instance. It
// reports per agent per minute: etcd revisions (live-key puts, status
// puts), raft entries committed (every write, lease grants included; a
// lease keep-alive is none), lease grants and keep-alives. The metrics
// each beat carries: none; the same ones on every beat; the same ones
// every 30 s (the agent's steady state: it resends after metricsEvery);
// new ones on every beat (a host whose load keeps moving).
func BenchmarkHeartbeatWrites(b *testing.B) {
	const agents = 200
	c := statetest.Start(b, 1, func(e *state.EmbedConfig) { e.UnsafeNoFsync = true })
	st := &statusCounting{Store: c.Open(b, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)}
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	s := New(st, nil)
	s.now = func() time.Time { return now }
	for i := range agents {
		host := fmt.Sprintf("h%04d", i)
		if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: host, Topology: topologytest.Laptop().Topology(), Agent: true,
			AgentVersion: "v1", Protocol: model.Protocol, Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
			b.Fatal(err)
		}
		if err := s.Heartbeat(ctx, host, "v1", model.Protocol, 10*time.Second, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	dep, err := s.Deploy(ctx, DeployRequest{Service: "web", Count: agents, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Memory: 64 << 20}}})
	if err != nil {
		b.Fatal(err)
	}
	var ids []string
	for _, in := range dep {
		ids = append(ids, in.ID)
	}
	for _, sc := range []struct {
		name string
		// metrics is what beat r (of 18 a minute) of agent a carries.
		metrics func(r, a int) *state.Metrics
	}{
		{"no metrics", func(int, int) *state.Metrics { return nil }},
		{"same metrics every beat", func(_, a int) *state.Metrics { return &state.Metrics{Load1: float64(a), MemTotal: 8 << 30} }},
		{"same metrics every 30s", func(r, a int) *state.Metrics {
			if r%9 != 0 {
				return nil
			}
			return &state.Metrics{Load1: float64(a), MemTotal: 8 << 30}
		}},
		{"new metrics every beat", func(r, a int) *state.Metrics { return &state.Metrics{Load1: float64(r), MemTotal: 8 << 30} }},
	} {
		b.Run(sc.name, func(b *testing.B) {
			round := 0
			minute := func() {
				for range 18 {
					now = now.Add(beatEvery)
					for a := range agents {
						host := fmt.Sprintf("h%04d", a)
						if err := s.Heartbeat(ctx, host, "v1", model.Protocol, 10*time.Second, sc.metrics(round, a)); err != nil {
							b.Fatal(err)
						}
						in, _ := st.Instance(ids[a])
						if err := s.ReportStatus(ctx, in.Instance.Host, ids[a], model.Status{State: "running", Generation: in.Instance.Generation}); err != nil {
							b.Fatal(err)
						}
					}
					round++
				}
			}
			minute() // the first write of each agent's metrics and status
			w0, s0 := readEtcdWrites(b, s), st.puts.Load()
			b.ResetTimer()
			for range b.N {
				minute()
			}
			b.StopTimer()
			w1, s1 := readEtcdWrites(b, s), st.puts.Load()
			per := float64(agents * b.N)
			status := float64(s1 - s0)
			b.ReportMetric((w1.rev-w0.rev)/per, "revisions/agent/min")
			b.ReportMetric((w1.rev-w0.rev-status)/per, "live-puts/agent/min")
			b.ReportMetric(status/per, "status-puts/agent/min")
			b.ReportMetric((w1.proposals-w0.proposals)/per, "raft-entries/agent/min")
			b.ReportMetric((w1.grants-w0.grants)/per, "lease-grants/agent/min")
			b.ReportMetric((w1.renewals-w0.renewals)/per, "keepalives/agent/min")
		})
	}
}
