package service

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pinfold/pinfold/planner/state"
)

// failingEvents is a store whose first fails writes of events fail, as
// etcd's do with no leader.
type failingEvents struct {
	Store
	fails  atomic.Int64
	writes atomic.Int64
}

func (f *failingEvents) PutEvents(ctx context.Context, evs []state.Event) error {
	f.writes.Add(1)
	if f.fails.Add(-1) >= 0 {
		return errors.New("etcdserver: no leader")
	}
	return f.Store.PutEvents(ctx, evs)
}

// TestRefusedEventSurvivesFailedWrites: a refused call's event whose
// first writes fail (a leader change) is written once the store answers
// again, not dropped; a store that never answers has the batch dropped
// after eventAttempts writes, and with the queue full meanwhile new events
// are dropped, all counted (EventsDropped). Control: with one attempt (no
// retry) the event is lost.
func TestRefusedEventSurvivesFailedWrites(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fails   int64
		written bool
	}{
		{"written after 3 failed writes", 3, true},
		{"dropped after every write failed", 1 << 20, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &failingEvents{Store: memStore(t, state.Config{ShareBase: 100})}
				st.fails.Store(tt.fails)
				s := New(st, nil)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); s.RunEvents(ctx) }()
				s.RecordFailed(state.Event{Identity: "viewer:v", Kind: "Deploy", Outcome: "permission_denied: no"}, nil, "Deploy", false)
				synctest.Wait() // the first write failed; the writer waits to retry
				// Meanwhile the queue fills; past it events are dropped.
				for range eventQueue + 10 {
					s.Record(state.Event{Identity: "viewer:v", Kind: "Deploy"})
				}
				if got := s.EventsDropped(); got != 10 {
					t.Errorf("events dropped with the queue full = %d, want 10", got)
				}
				// The backoff's fake time passes: 0.2+0.4+0.8+1.6+3.2 s
				// between the 6 attempts.
				time.Sleep(2 * eventRetryMax * eventAttempts)
				synctest.Wait()
				if want := min(tt.fails+1, eventAttempts); st.writes.Load() < want {
					t.Errorf("%d writes, want at least %d", st.writes.Load(), want)
				}
				cancel()
				<-done
				evs, err := st.Store.Events(context.Background(), "", 2*eventQueue, 2*eventQueue, func(ev state.Event) bool { return strings.HasPrefix(ev.Outcome, "permission_denied") })
				if err != nil {
					t.Fatal(err)
				}
				if tt.written != (len(evs) == 1) {
					t.Errorf("refused call's events written = %.300v after %d writes (%d failed), want written %v", evs, st.writes.Load(), tt.fails, tt.written)
				}
				if !tt.written && s.EventsDropped() < 10+1 {
					t.Errorf("events dropped = %d, want the queue's 10 and the failed batch", s.EventsDropped())
				}
			})
		})
	}
}
