package service

import (
	"sync"
	"time"

	"github.com/pinfold/pinfold/planner/state"
)

// MetricsWriteEvery is how often at most a heartbeat rewrites its host's
// live key for changed metrics (or a new agent version in them). A
// heartbeat that carries the metrics the key holds writes nothing: its
// lease keep-alive is no raft write (etcd's lessor renews in memory on
// the leader). A change sooner is held, the newest wins, and written by
// the host's first heartbeat once MetricsWriteEvery has passed, with or
// without metrics: it reaches the store within MetricsWriteEvery plus one
// heartbeat interval. A host not live, or live without metrics, is
// written at once (its key is put anyway, with its new lease).
// docs/OPERATIONS.md ("etcd writes per agent") states the bound.
const MetricsWriteEvery = 30 * time.Second

// liveWrites is, per host, when its live key was last written for a
// change of metrics, and the newest change held since (MetricsWriteEvery).
// Both tables hold at most maxHostTimes hosts: a full table drops what
// has waited its interval, and past that holds no more changes (their
// agents resend metrics at least every 30 s).
type liveWrites struct {
	mu      sync.Mutex
	at      hostTimes
	pending map[string]state.Metrics
	swept   time.Time // when a full pending table was last swept (hostTimes.swept)
}

// next is the metrics a heartbeat of host writes to its live key, nil for
// none (the key keeps its value). held is what the key holds (nil: none,
// or no metrics), live whether it exists, m what the heartbeat carries
// (nil: none).
func (w *liveWrites) next(host string, now time.Time, live bool, held, m *state.Metrics) *state.Metrics {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m == nil {
		p, ok := w.pending[host]
		if !ok {
			return nil
		}
		m = &p
	}
	switch {
	case live && held != nil && *held == *m:
		delete(w.pending, host)
		return nil
	case !live || held == nil:
		w.at.stamp(host, now)
	case !w.at.take(host, now, MetricsWriteEvery):
		w.holdLocked(host, now, *m)
		return nil
	}
	delete(w.pending, host)
	return m
}

// holdLocked keeps m as host's newest unwritten change, if the table has
// room (after dropping the changes whose interval has passed: their host
// stopped beating, or writes them on its next beat anyway; a full table
// is swept at most once per interval).
func (w *liveWrites) holdLocked(host string, now time.Time, m state.Metrics) {
	if w.pending == nil {
		w.pending = map[string]state.Metrics{}
	}
	if _, ok := w.pending[host]; !ok && len(w.pending) >= maxHostTimes {
		if d := now.Sub(w.swept); d < MetricsWriteEvery && d >= 0 {
			return
		}
		w.swept = now
		w.at.mu.Lock()
		for h := range w.pending {
			if last, ok := w.at.at[h]; !ok || now.Sub(last) >= MetricsWriteEvery {
				delete(w.pending, h)
			}
		}
		w.at.mu.Unlock()
		if len(w.pending) >= maxHostTimes {
			return
		}
	}
	w.pending[host] = m
}
