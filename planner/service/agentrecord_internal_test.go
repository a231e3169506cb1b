package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestHeartbeatVersionChurn: an agent whose version changes on every
// heartbeat rewrites its host's record at most once per
// AgentRecordEvery (issue 36 A1: 3,000 such heartbeats took the planner
// to 5.4 GB), except for its agent leaving the planner's protocol, which
// is written at once (its host must get no new work). Control: with the
// clock a minute on between heartbeats, every change is written.
func TestHeartbeatVersionChurn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		step  time.Duration // the clock between two heartbeats
		wants func(n int) int
	}{
		// The first new version, then the protocol leaving (at once); the
		// way back to it waits as every other change (the host gets no new
		// work meanwhile: the safe side).
		{"churn", time.Millisecond, func(int) int { return 2 }},
		{"control: a minute apart", AgentRecordEvery, func(n int) int { return n }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st, now := clockedService(t)
			ctx := context.Background()
			if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(), Agent: true,
				AgentVersion: "v0", Protocol: model.Protocol, Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
				t.Fatal(err)
			}
			v0, _ := st.Host("h1")
			const n = 50
			rewrites, last := 0, v0.HostRev
			for i := range n {
				*now = now.Add(tc.step)
				// A new version each time, and every tenth another
				// protocol back and forth.
				proto := model.Protocol
				if i%20 == 10 {
					proto++
				}
				if err := s.Heartbeat(ctx, "h1", fmt.Sprintf("v%d", i+1), proto, 10*time.Second, &state.Metrics{}); err != nil {
					t.Fatal(err)
				}
				if v, _ := st.Host("h1"); v.HostRev != last {
					rewrites, last = rewrites+1, v.HostRev
				}
			}
			if want := tc.wants(n); rewrites != want {
				t.Errorf("%d heartbeats with a new version each rewrote the host record %d times, want %d", n, rewrites, want)
			}
		})
	}
}

// TestAgentReRegisterChurn: an agent re-registering its host with the
// same topology rewrites the record only when something changed, and a
// new version at most once per AgentRecordEvery (issue 36: 50 such calls
// rewrote it 50 times, each with an unsampled event). Control: a minute
// apart, every new version is written.
func TestAgentReRegisterChurn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		step    time.Duration
		version func(i int) string
		want    int
	}{
		{"same version", time.Millisecond, func(int) string { return "v0" }, 0},
		{"new version each time", time.Millisecond, func(i int) string { return fmt.Sprintf("v%d", i+1) }, 1},
		{"control: a minute apart", AgentRecordEvery, func(i int) string { return fmt.Sprintf("v%d", i+1) }, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st, now := clockedService(t)
			ctx := context.Background()
			reg := func(v string) {
				if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(), Agent: true,
					AgentVersion: v, Protocol: model.Protocol}); err != nil {
					t.Fatal(err)
				}
			}
			reg("v0")
			v0, _ := st.Host("h1")
			rewrites, last := 0, v0.HostRev
			for i := range 20 {
				*now = now.Add(tc.step)
				reg(tc.version(i))
				if v, _ := st.Host("h1"); v.HostRev != last {
					rewrites, last = rewrites+1, v.HostRev
				}
			}
			if rewrites != tc.want {
				t.Errorf("20 re-registrations rewrote the host record %d times, want %d", rewrites, tc.want)
			}
		})
	}
}

// TestRefusedReportsSampled: an agent repeating a report that its host
// refused an instance's generation writes at most RefusedEventsPerMinute
// Refused events a minute (issue 36: one a call, unsampled). Control: the
// first report is written.
func TestRefusedReportsSampled(t *testing.T) {
	st := memStore(t, state.Config{ShareBase: 100, MaxFragmentCores: -1})
	s := New(st, nil)
	ctx := context.Background()
	if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(),
		Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	dep, err := s.Deploy(ctx, DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 50, Bind: true, Memory: 64 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	for len(s.ev.ch) > 0 {
		<-s.ev.ch
	}
	in := dep[0]
	for range 30 {
		if err := s.ReportStatus(ctx, "h1", in.ID, model.Status{State: "running", Generation: in.Generation, Refused: in.Generation, Error: "no"}); err != nil {
			t.Fatal(err)
		}
	}
	refused := 0
	for len(s.ev.ch) > 0 {
		if ev := <-s.ev.ch; ev.Kind == "Refused" {
			refused++
		}
	}
	if refused < 1 || refused > RefusedEventsPerMinute {
		t.Errorf("30 refused reports wrote %d Refused events, want 1..%d", refused, RefusedEventsPerMinute)
	}
}

// clockedService is a service over an in-memory store whose clock is
// *now (2026-11-28 00:00 UTC until the test moves it).
func clockedService(t *testing.T) (*Service, *state.Memory, *time.Time) {
	t.Helper()
	st := memStore(t, state.Config{ShareBase: 100, MaxFragmentCores: -1})
	s := New(st, nil)
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	return s, st, &now
}
