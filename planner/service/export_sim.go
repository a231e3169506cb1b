package service

import (
	"context"
	"time"
)

// Ticker runs the leader's healing passes (dead hosts' instances placed
// again, moves settled, drains carried on: heal.go) from the caller's
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
