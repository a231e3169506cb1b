package service

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pinfold/pinfold/planner/state"
)

// Event retention defaults: the leader keeps the newest DefaultEventsKeep
// events and none older than DefaultEventsMaxAge.
const (
	DefaultEventsKeep   = 10000
	DefaultEventsMaxAge = 7 * 24 * time.Hour
	// eventQueue bounds the events waiting to be written: past it an event
	// is dropped and counted, never held in memory without bound.
	eventQueue = 4096
)

// events writes the event log in the background, in batches, so that a
// request never waits for its event's fsync.
type events struct {
	ch      chan state.Event
	seq     atomic.Int64
	dropped atomic.Int64
	keep    int
	maxAge  time.Duration
}

func newEvents() *events {
	return &events{ch: make(chan state.Event, eventQueue), keep: DefaultEventsKeep, maxAge: DefaultEventsMaxAge}
}

// SetEventRetention sets how many events the leader keeps and for how long
// (0: the defaults).
func (s *Service) SetEventRetention(keep int, maxAge time.Duration) {
	if keep > 0 {
		s.ev.keep = keep
	}
	if maxAge > 0 {
		s.ev.maxAge = maxAge
	}
}

// Record queues ev for the event log, with its ID and time set (now when
// zero) and every field cut to its bound (state.Event.Clipped), so that
// neither the queue nor etcd holds more of a caller's text than that. It
// never blocks: with the queue full the event is dropped and counted
// (EventsDropped).
func (s *Service) Record(ev state.Event) {
	ev = ev.Clipped()
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.Outcome == "" {
		ev.Outcome = "ok"
	}
	ev.ID = s.st.NewEventID(ev.Time, s.ev.seq.Add(1))
	select {
	case s.ev.ch <- ev:
	default:
		if s.ev.dropped.Add(1)%1000 == 1 {
			s.log.Warn("event log queue full: events dropped", "dropped", s.ev.dropped.Load())
		}
	}
}

// EventsDropped is the number of events dropped with the queue full.
func (s *Service) EventsDropped() int64 { return s.ev.dropped.Load() }

// RunEvents writes queued events until ctx ends, then writes what is
// queued (for up to 2 s) and returns.
func (s *Service) RunEvents(ctx context.Context) {
	var batch []state.Event
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		var err error
		if perr := s.safely("event writer", func() { hit("events"); err = s.st.PutEvents(ctx, batch) }); perr != nil {
			err = perr
		}
		if err != nil {
			s.log.Warn("event log: events not written", "events", len(batch), "err", err)
		}
		batch = batch[:0]
	}
	for {
		select {
		case ev := <-s.ev.ch:
			batch = append(batch, ev)
			for len(batch) < state.MaxEventsPerCommit {
				select {
				case ev := <-s.ev.ch:
					batch = append(batch, ev)
					continue
				default:
				}
				break
			}
			flush(ctx)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			for {
				select {
				case ev := <-s.ev.ch:
					batch = append(batch, ev)
					if len(batch) == state.MaxEventsPerCommit {
						flush(fctx)
					}
				default:
					flush(fctx)
					return
				}
			}
		}
	}
}

// Events lists up to limit events after the one with ID after, oldest
// first, of service and host ("": any).
func (s *Service) Events(ctx context.Context, service, host, after string, limit int) ([]state.Event, error) {
	if limit <= 0 || limit > MaxEventsListed {
		limit = MaxEventsListed
	}
	return s.st.Events(ctx, after, limit, 20*MaxEventsListed, state.EventMatches(service, host))
}

// MaxEventsListed bounds one listing of the event log.
const MaxEventsListed = 1000

// pruneEvents applies the retention (the leader, with the audit).
func (s *Service) pruneEvents(ctx context.Context, now time.Time) {
	n, err := s.st.PruneEvents(ctx, s.ev.keep, now.Add(-s.ev.maxAge))
	switch {
	case err != nil:
		s.log.Warn("event log: pruning failed", "err", err)
	case n > 0:
		s.log.Info("event log pruned", "deleted", n, "keep", s.ev.keep, "max_age", s.ev.maxAge)
	}
}
