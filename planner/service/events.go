package service

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
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
	failed  refusals
	// unchanged samples the successful calls of viewers and agents that
	// changed nothing (a dry-run rebalance, a re-registration): issue 36
	// E1, 12,000 of them pushed every admin event out of retention.
	unchanged refusals
}

func newEvents() *events {
	return &events{ch: make(chan state.Event, eventQueue), keep: DefaultEventsKeep, maxAge: DefaultEventsMaxAge,
		unchanged: refusals{what: "calls that changed nothing"}}
}

// Audit is one API call's event, written in the etcd transaction of the
// first change the call commits (state.Change.PutEvent), so that an
// acknowledged change always has its event (issue 26 N10). A call that
// commits nothing (a refusal, a repeat) is recorded after it returns, in
// the background (Record, RecordFailed).
type Audit struct {
	// Event is the call's event: identity, kind, subject, host, service
	// and request; its ID, time and outcome ("ok") are set when written.
	Event state.Event
	// Request, when set, makes the event's request text, once and only
	// when the event is written (a refusal over its identity's budget
	// never marshals its request).
	Request func() string

	once      sync.Once
	committed atomic.Bool
}

// Full is the call's event with its request text.
func (a *Audit) Full() state.Event {
	a.once.Do(func() {
		if a.Request != nil && a.Event.Request == "" {
			a.Event.Request = a.Request()
		}
	})
	return a.Event
}

// Committed reports whether the call's event was committed with a change.
func (a *Audit) Committed() bool { return a != nil && a.committed.Load() }

type auditKey struct{}

// WithAudit returns ctx carrying a: the service writes a.Event with the
// first change the call commits.
func WithAudit(ctx context.Context, a *Audit) context.Context {
	return context.WithValue(ctx, auditKey{}, a)
}

func auditOf(ctx context.Context) *Audit {
	a, _ := ctx.Value(auditKey{}).(*Audit)
	return a
}

// stamp is ev ready to write: cut to its bounds, its time (now when zero),
// outcome ("ok" when empty) and ID set.
func (s *Service) stamp(ev state.Event) state.Event {
	ev = ev.Clipped()
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.Outcome == "" {
		ev.Outcome = "ok"
	}
	ev.ID = s.st.NewEventID(ev.Time, s.ev.seq.Add(1))
	return ev
}

// audited adds the event of ctx's call to c, unless c writes nothing or
// the call's event was committed already; it returns the audit to mark
// committed once c is (nil: none added).
func (s *Service) audited(ctx context.Context, c *state.Change) *Audit {
	a := auditOf(ctx)
	if a == nil || a.Committed() || c.Len() == 0 {
		return nil
	}
	c.PutEvent(s.stamp(a.Full()))
	return a
}

// commit commits c outside the pipeline (host changes, settings) with the
// event of ctx's call (audited).
func (s *Service) commit(ctx context.Context, c *state.Change) (int64, error) {
	a := s.audited(ctx, c)
	rev, err := s.st.Commit(ctx, c)
	if err == nil && a != nil {
		a.committed.Store(true)
	}
	return rev, err
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
	ev = s.stamp(ev)
	select {
	case s.ev.ch <- ev:
	default:
		if s.ev.dropped.Add(1)%1000 == 1 {
			s.log.Warn("event log queue full: events dropped", "dropped", s.ev.dropped.Load())
		}
	}
}

// EventsDropped is the number of events dropped: with the queue full, or
// not written after eventAttempts writes (writeEvents).
func (s *Service) EventsDropped() int64 { return s.ev.dropped.Load() }

// Retries of the event log's writes: a batch whose write fails (no
// leader in etcd for a moment, a timeout) is written again after 0.2 s,
// 0.4 s, … up to 5 s apart, eventAttempts times in all (about 16 s),
// then dropped and counted (EventsDropped). Meanwhile the writer takes no
// more events: they wait in the queue (eventQueue), and past it are
// dropped and counted too. A failed write lost its batch (the refused
// calls' events of a leader change).
const (
	eventAttempts   = 6
	eventRetryFirst = 200 * time.Millisecond
	eventRetryMax   = 5 * time.Second
)

// writeEvents writes batch, each attempt within commitTimeout of write's
// context, retrying as the constants above say until stop ends. It
// reports false when stop ended before the batch was written or given up
// (the caller keeps it); a batch given up is dropped and counted.
func (s *Service) writeEvents(stop, write context.Context, batch []state.Event) bool {
	wait := eventRetryFirst
	for attempt := 1; ; attempt++ {
		wctx, cancel := context.WithTimeout(write, commitTimeout)
		var err error
		if perr := s.safely("event writer", func() { hit("events"); err = s.st.PutEvents(wctx, batch) }); perr != nil {
			err = perr
		}
		cancel()
		if err == nil {
			return true
		}
		if attempt == eventAttempts {
			n := s.ev.dropped.Add(int64(len(batch)))
			s.log.Warn("event log: events not written, dropped", "events", len(batch), "attempts", attempt, "dropped", n, "err", err)
			return true
		}
		s.log.Warn("event log: events not written, retrying", "events", len(batch), "attempt", attempt, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop.Done():
			t.Stop()
			return false
		}
		wait = min(2*wait, eventRetryMax)
	}
}

// RunEvents writes queued events until ctx ends, then writes what is
// queued (for up to 2 s) and returns. A failed write is retried
// (writeEvents); what is still unwritten when it returns is dropped and
// counted.
func (s *Service) RunEvents(ctx context.Context) {
	var batch []state.Event
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			// The summaries of the refused calls suppressed in a minute
			// that has ended.
			for _, ev := range append(s.ev.failed.flush(now, false), s.ev.unchanged.flush(now, false)...) {
				s.Record(ev)
			}
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
			// Not ctx: a batch taken from the queue as ctx ends is
			// written, not lost to a cancelled write; its retries end
			// with ctx, and the batch is written below.
			if s.writeEvents(ctx, context.WithoutCancel(ctx), batch) {
				batch = batch[:0]
			}
		case <-ctx.Done():
			for _, ev := range append(s.ev.failed.flush(time.Now(), true), s.ev.unchanged.flush(time.Now(), true)...) {
				s.Record(ev)
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			for {
				select {
				case ev := <-s.ev.ch:
					batch = append(batch, ev)
					if len(batch) < state.MaxEventsPerCommit {
						continue
					}
				default:
				}
				if len(batch) > 0 && !s.writeEvents(fctx, fctx, batch) {
					n := s.ev.dropped.Add(int64(len(batch) + len(s.ev.ch)))
					s.log.Warn("event log: events not written at shutdown, dropped", "events", len(batch)+len(s.ev.ch), "dropped", n)
					return
				}
				batch = batch[:0]
				if len(s.ev.ch) == 0 {
					return
				}
			}
		}
	}
}

// EventQuery selects events to list: those of Service and Host ("": any),
// up to Limit (0 or past MaxEventsListed: MaxEventsListed) of them, after
// the event with ID After, or, with Latest, the newest ones.
type EventQuery struct {
	Service, Host, After string
	Limit                int
	Latest               bool
}

// Events lists the events q selects, oldest first.
func (s *Service) Events(ctx context.Context, q EventQuery) ([]state.Event, error) {
	if q.Latest && q.After != "" {
		return nil, &Error{Code: Invalid, Message: fmt.Sprintf("latest with after = %q: want one of them", q.After)}
	}
	if q.Limit <= 0 || q.Limit > MaxEventsListed {
		q.Limit = MaxEventsListed
	}
	if q.Latest {
		return s.st.LatestEvents(ctx, q.Limit, 20*MaxEventsListed, state.EventMatches(q.Service, q.Host))
	}
	return s.st.Events(ctx, q.After, q.Limit, 20*MaxEventsListed, state.EventMatches(q.Service, q.Host))
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

// Refused calls: a call that ends in an error and commits nothing is
// counted per identity and method, and its event sampled: at most
// RefusedEventsPerMinute per identity in a minute are written, the rest
// counted and summarized in one "Suppressed" event when the minute ends,
// so that no caller can push others' events out of the log nor grow it
// (1,000 refused viewer calls once left 2 of 12 admin calls with an
// event, issue 26 N1).
const (
	// RefusedEventsPerMinute bounds the refused calls of one identity
	// written to the event log in a minute.
	RefusedEventsPerMinute = 10
	// maxRefusalSeries bounds the (identity, method) pairs counted: past
	// it, new pairs are counted under the identity "(other)".
	maxRefusalSeries = 1000
	// maxSampledIdentities bounds the identities sampled in one minute:
	// past it, new identities share one budget under "(other)".
	maxSampledIdentities = 1000
)

// refusals counts refused calls and samples their events.
type refusals struct {
	what   string // the calls, in the summary ("": refused calls)
	mu     sync.Mutex
	minute time.Time                 // the sampling window's start
	window map[string]*refusedMinute // identity → its calls this minute
	total  map[RefusalKey]int64      // every refused call, by identity and method
	supp   int64                     // events suppressed, all time
}

type refusedMinute struct{ written, suppressed int }

// RefusalKey is one series of refused calls.
type RefusalKey struct{ Identity, Method string }

// take counts a refused call of method by identity at now and reports
// whether its event is written, with the summaries of a minute that ended.
func (r *refusals) take(identity, method string, now time.Time, sample bool) (bool, []state.Event) {
	identity = strings.ToValidUTF8(identity, "?") // a metric's label
	method = strings.ToValidUTF8(method, "?")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == nil {
		r.total = map[RefusalKey]int64{}
	}
	k := RefusalKey{identity, method}
	if _, ok := r.total[k]; !ok && len(r.total) >= maxRefusalSeries {
		k.Identity = "(other)"
	}
	r.total[k]++
	out := r.roll(now, false)
	if !sample {
		return true, out
	}
	if r.window == nil {
		r.window = map[string]*refusedMinute{}
	}
	m := r.window[identity]
	if m == nil {
		if len(r.window) >= maxSampledIdentities {
			identity = "(other)"
			m = r.window[identity]
		}
		if m == nil {
			m = &refusedMinute{}
			r.window[identity] = m
		}
	}
	if m.written < RefusedEventsPerMinute {
		m.written++
		return true, out
	}
	m.suppressed++
	r.supp++
	return false, out
}

// flush is the summaries of the minute that ended by now (all: also the
// current one's, at shutdown).
func (r *refusals) flush(now time.Time, all bool) []state.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.roll(now, all)
}

// roll ends the sampling window when now is in a later minute (or all),
// returning one Suppressed event per identity that had calls suppressed,
// sorted by identity.
func (r *refusals) roll(now time.Time, all bool) []state.Event {
	minute := now.UTC().Truncate(time.Minute)
	if !all && minute.Equal(r.minute) {
		return nil
	}
	var out []state.Event
	ids := make([]string, 0, len(r.window))
	for id, m := range r.window {
		if m.suppressed > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		o := fmt.Sprintf("%d more refused calls suppressed in the minute from %s (the first %d were recorded; all are counted in pinfold_planner_refused_calls_total)",
			r.window[id].suppressed, r.minute.Format("15:04:05Z"), RefusedEventsPerMinute)
		if r.what != "" {
			o = fmt.Sprintf("%d more %s suppressed in the minute from %s (the first %d were recorded)",
				r.window[id].suppressed, r.what, r.minute.Format("15:04:05Z"), RefusedEventsPerMinute)
		}
		out = append(out, state.Event{Identity: id, Kind: "Suppressed", Subject: id, Outcome: o})
	}
	r.minute, r.window = minute, nil
	return out
}

// RecordFailed records the event of a call to method that ended in an
// error and committed nothing; request (nil: none) makes its request text
// when it is written. With sample, it is counted and written only within
// its identity's budget (RefusedEventsPerMinute); without (an admin's
// call, or no TLS), it is counted and always written.
func (s *Service) RecordFailed(ev state.Event, request func() string, method string, sample bool) {
	ev = ev.Clipped()
	write, summaries := s.ev.failed.take(ev.Identity, state.Event{Kind: method}.Clipped().Kind, time.Now(), sample)
	for _, sum := range summaries {
		s.Record(sum)
	}
	if !write {
		return
	}
	if request != nil {
		ev.Request = request()
	}
	s.Record(ev)
}

// RecordUnchanged records the event of a call to method that succeeded
// and committed nothing: with sample (a viewer's or agent's) at most
// RefusedEventsPerMinute per identity in a minute are written, the rest
// summarized in one Suppressed event, as refusals are, so that no reader
// can push others' events out of the log (issue 36 E1).
func (s *Service) RecordUnchanged(ev state.Event, method string, sample bool) {
	ev = ev.Clipped()
	write, summaries := s.ev.unchanged.take(ev.Identity, state.Event{Kind: method}.Clipped().Kind, time.Now(), sample)
	for _, sum := range summaries {
		s.Record(sum)
	}
	if write {
		s.Record(ev)
	}
}

// RefusedCalls are the refused calls counted so far, by identity and
// method, and the events suppressed.
func (s *Service) RefusedCalls() (map[RefusalKey]int64, int64) {
	r := &s.ev.failed
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[RefusalKey]int64, len(r.total))
	for k, v := range r.total {
		out[k] = v
	}
	return out, r.supp
}

// EnvName is an environment entry's name ("SECRET=hunter2" → "SECRET"):
// values are never written to the event log, echoed in an error nor shown
// to viewers (issue 26 N7).
func EnvName(entry string) string {
	name, _, _ := strings.Cut(entry, "=")
	return name
}
