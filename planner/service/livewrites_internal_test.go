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

// beatEvery is a default agent's heartbeat interval (its 10 s TTL / 3).
const beatEvery = 10 * time.Second / 3

// beatingService is a service over backend ("memory" or "etcd") with a
// clock the test moves, and host h1 registered and agent-managed.
func beatingService(t *testing.T, backend string) (*Service, *time.Time) {
	t.Helper()
	cfg := state.Config{ShareBase: 100, MaxFragmentCores: -1}
	var st Store
	switch backend {
	case "memory":
		st = memStore(t, cfg)
	case "etcd":
		st = statetest.Start(t, 1).Open(t, cfg, model.Protocol)
	default:
		t.Fatalf("backend %q: want memory or etcd", backend)
	}
	s := New(st, nil)
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	if _, err := s.RegisterHost(context.Background(), RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(), Agent: true,
		AgentVersion: "v1", Protocol: model.Protocol, Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	return s, &now
}

// beat sends one heartbeat of h1 (10 s TTL) and waits until the cache
// holds what it wrote.
func beat(t *testing.T, s *Service, m *state.Metrics) {
	t.Helper()
	ctx := context.Background()
	if err := s.Heartbeat(ctx, "h1", "v1", model.Protocol, 10*time.Second, m); err != nil {
		t.Fatal(err)
	}
	if err := s.st.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// revs is the store's revision, once its cache holds every write so far.
func revs(t *testing.T, s *Service) int64 {
	t.Helper()
	if err := s.st.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s.st.Rev()
}

// TestSteadyHeartbeatsWriteNothing: once a host is live with its metrics,
// heartbeats that carry the same metrics (or none) write no revision, on
// etcd (the lease keep-alive is no write) and in memory, for ten minutes
// of a default agent's beats. Control: the put of the live key on every
// heartbeat with metrics (before issue 39) wrote 180 revisions here.
func TestSteadyHeartbeatsWriteNothing(t *testing.T) {
	for _, backend := range []string{"memory", "etcd"} {
		for _, carry := range []string{"same metrics", "no metrics"} {
			t.Run(backend+"/"+carry, func(t *testing.T) {
				s, now := beatingService(t, backend)
				met := state.Metrics{Load1: 1.5, MemTotal: 8 << 30, MemAvailable: 6 << 30}
				m := met
				beat(t, s, &m)
				r0 := revs(t, s)
				const beats = 180 // ten minutes
				for range beats {
					*now = now.Add(beatEvery)
					var m *state.Metrics
					if carry == "same metrics" {
						c := met
						m = &c
					}
					beat(t, s, m)
				}
				if d := revs(t, s) - r0; d != 0 {
					t.Errorf("%d steady heartbeats with %s wrote %d revisions, want 0", beats, carry, d)
				}
				v, _ := s.st.Host("h1")
				if !v.Live || v.Metrics == nil || v.Metrics.Load1 != 1.5 {
					t.Errorf("after steady heartbeats h1 live %v metrics %+v, want live with load1 1.5", v.Live, v.Metrics)
				}
			})
		}
	}
}

// TestSteadyHostStillGoesDown: a host whose steady heartbeats wrote
// nothing still goes down when they stop, within its TTL (its lease
// expires), and comes back up with its next heartbeat.
func TestSteadyHostStillGoesDown(t *testing.T) {
	s, now := beatingService(t, "etcd")
	ctx := context.Background()
	const ttl = 2 * time.Second
	met := state.Metrics{Load1: 0.5}
	for range 5 {
		*now = now.Add(beatEvery)
		m := met
		if err := s.Heartbeat(ctx, "h1", "v1", model.Protocol, ttl, &m); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 4)
	}
	if v, _ := s.st.Host("h1"); !v.Live {
		t.Fatalf("h1 not live while beating")
	}
	stopped := time.Now()
	for v, _ := s.st.Host("h1"); v.Live; v, _ = s.st.Host("h1") {
		// etcd expires leases on its lessor's tick (500 ms) after the TTL.
		if time.Since(stopped) > 3*ttl {
			t.Fatalf("h1 still live %s after its last heartbeat (TTL %s)", time.Since(stopped), ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := met
	beat(t, s, &m)
	if v, _ := s.st.Host("h1"); !v.Live || v.Metrics == nil || v.Metrics.Load1 != 0.5 {
		t.Errorf("h1 after a new heartbeat: live %v metrics %+v, want live with load1 0.5", v.Live, v.Metrics)
	}
}

// TestChangedMetricsCoalesced: metrics that change on every heartbeat
// rewrite the live key at most once per MetricsWriteEvery, and the newest
// reaches the cache within MetricsWriteEvery plus one heartbeat interval,
// also when the heartbeats after it carry no metrics. Control: heartbeats
// MetricsWriteEvery apart write every change.
func TestChangedMetricsCoalesced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      time.Duration
		beats     int
		maxWrites int
	}{
		// Over ten minutes of beats: at most one write per 30 s. The last
		// change comes five beats after a write: it is held.
		{"every beat", beatEvery, 185, int(185 * beatEvery / MetricsWriteEvery)},
		{"control: MetricsWriteEvery apart", MetricsWriteEvery, 20, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, now := beatingService(t, "memory")
			beat(t, s, &state.Metrics{Load1: 1})
			r0 := revs(t, s)
			for i := range tc.beats {
				*now = now.Add(tc.step)
				beat(t, s, &state.Metrics{Load1: float64(i + 2)})
			}
			if d := int(revs(t, s) - r0); d > tc.maxWrites || tc.step >= MetricsWriteEvery && d != tc.maxWrites {
				t.Errorf("%d heartbeats %s apart, each with new metrics, wrote %d revisions, want at most %d (all when apart by the bound)", tc.beats, tc.step, d, tc.maxWrites)
			}
			// The last change, then heartbeats without metrics: it is in
			// the cache within MetricsWriteEvery plus one beat.
			last := float64(tc.beats + 1)
			if v, _ := s.st.Host("h1"); tc.step < MetricsWriteEvery && v.Metrics != nil && v.Metrics.Load1 == last {
				t.Fatalf("the last change was written at once; the test must hold it")
			}
			for waited := time.Duration(0); ; waited += beatEvery {
				if v, _ := s.st.Host("h1"); v.Metrics != nil && v.Metrics.Load1 == last {
					break
				}
				if waited > MetricsWriteEvery+beatEvery {
					v, _ := s.st.Host("h1")
					t.Fatalf("the last metrics (load1 %v) not in the cache %s after they were sent: it holds %+v", last, waited, v.Metrics)
				}
				*now = now.Add(beatEvery)
				beat(t, s, nil)
			}
		})
	}
}

// TestHeldMetricsBounded: the changes held for later writes are at most
// maxHostTimes hosts, however many hosts send them (each host's newest
// one only); a host past the bound is written on a later heartbeat (its
// agent resends its metrics at least every 30 s). Control: without the
// bound, 70,000 hosts held 70,000 changes.
func TestHeldMetricsBounded(t *testing.T) {
	var w liveWrites
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	held := &state.Metrics{Load1: 1}
	const hosts = maxHostTimes + 4464
	for i := range hosts {
		h := fmt.Sprintf("h%06d", i)
		for j := range 3 {
			w.next(h, now, true, held, &state.Metrics{Load1: float64(j + 2)})
		}
	}
	if n := len(w.pending); n > maxHostTimes {
		t.Errorf("%d hosts sending changes at one instant: %d held, want at most %d", hosts, n, maxHostTimes)
	}
	// Once the interval has passed, a held change is written (and no
	// longer held).
	if got := w.next("h000000", now.Add(MetricsWriteEvery), true, held, nil); got == nil || got.Load1 != 4 {
		t.Errorf("h000000's heartbeat %s later wrote %+v, want its newest change (load1 4)", MetricsWriteEvery, got)
	}
	if _, ok := w.pending["h000000"]; ok {
		t.Errorf("h000000's change still held after it was written")
	}
}
