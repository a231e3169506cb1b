package service

import (
	"context"
	"fmt"
	"time"
)

// Ticker runs the leader's healing passes (dead hosts' instances placed
// again, moves settled, drains carried on: tick.go) from the caller's
// clock instead of RunBackground's tickers, keeping what the leader
// remembers between passes (when it first saw each host down, the backoff
// of aborted moves). It is the seam of the control plane's simulation
// (planner/sim), whose clock is simulated; a planner serving hosts runs
// RunBackground instead.
type Ticker struct {
	s *Service
	t *tracker
}

// NewTicker is a Ticker over s with a fresh memory, as a newly elected
// leader has.
func (s *Service) NewTicker() *Ticker { return &Ticker{s: s, t: newTracker()} }

// Tick is one healing pass at now.
func (k *Ticker) Tick(ctx context.Context, now time.Time) { k.s.tick(ctx, k.t, now) }

// About says what the leader remembers of host's heal: when it first saw
// the host down, and the failures and backoff of its heal step. The
// simulation prints it with a heal that did not come.
func (k *Ticker) About(host string) string {
	subject := "heal/" + host
	since, ok := k.t.downSince[host]
	seen := "never seen down"
	if ok {
		seen = "seen down since " + since.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s; heal failures in a row %d, retry at %s, last logged %q", seen, k.t.failures[subject], k.t.retryAt[subject].Format(time.RFC3339Nano), k.t.logged[subject])
}

// DownSince is when the leader first saw host down, if it sees it down.
func (k *Ticker) DownSince(host string) (time.Time, bool) {
	t, ok := k.t.downSince[host]
	return t, ok
}
