package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
)

// Heartbeat keeps host's live key on a lease of ttl; a host whose agent
// stops calling is marked down when the lease expires. It also records the
// agent's version and protocol (an incompatible protocol keeps the host out
// of planning) and, when m is not nil, the host's metrics: unchanged ones
// write nothing, changed ones at most once per MetricsWriteEvery.
func (s *Service) Heartbeat(ctx context.Context, host, version string, protocol int, ttl time.Duration, m *state.Metrics) error {
	if err := ValidateAgentVersion(version); err != nil {
		return err
	}
	v, ok := s.st.Host(host)
	if !ok {
		return errf(NotFound, "host %q is not registered", clip(host))
	}
	if ttl < time.Second || ttl > 10*time.Minute {
		return errf(Invalid, "heartbeat ttl = %s: want 1s..10m", ttl)
	}
	// At once: a host becoming agent-managed, or its agent leaving the
	// planner's protocol (it must get no new work); every other change at
	// most once per AgentRecordEvery.
	now := !v.Host.Agent || v.Host.Protocol == model.Protocol && protocol != model.Protocol
	if now {
		s.versions.stamp(host, s.clock())
	}
	if now || (v.Host.AgentVersion != version || v.Host.Protocol != protocol) && s.versions.take(host, s.clock(), AgentRecordEvery) {
		h := v.Host
		h.Agent, h.AgentVersion, h.Protocol = true, version, protocol
		var c state.Change
		c.GuardHost(host, v.HostRev)
		c.PutHost(h)
		if _, err := s.st.Commit(ctx, &c); err != nil && !errors.Is(err, state.ErrConflict) {
			return err
		}
		if protocol != model.Protocol {
			s.log.Warn("agent speaks another protocol: no new work for its host", "host", host, "protocol", protocol, "want", model.Protocol)
		}
	}
	if m != nil {
		m.AgentVersion = version
	}
	var live []byte
	if w := s.live.next(host, s.clock(), v.Live, v.Metrics, m); w != nil {
		live, _ = json.Marshal(w)
	}
	return s.st.Heartbeat(ctx, host, live, ttl)
}

// AgentRecordEvery is how often at most a heartbeat rewrites its host's
// record for a new agent version or protocol. The record holds the
// topology (1.1 MB for 8,192 CPUs): an agent that changed its version on
// every heartbeat rewrote it each time, took the planner from 212 MB to
// 5.4 GB and made admin deploys to the host fail on conflicts (issue 36
// A1). A change sooner waits for a later heartbeat; the live record
// (the heartbeat's metrics) carries the version within MetricsWriteEvery.
const AgentRecordEvery = time.Minute

// hostTimes is, per host, when it last did something bounded in rate: a
// table of at most maxHostTimes hosts (entries older than the bound are
// dropped when it fills; past that, every host waits).
// StatusBytesPerSecond and StatusBytesBurst bound the instance status
// one host's agent writes to the store: a token bucket of bytes (a
// status is a few hundred bytes; a host's hundred instances all
// changing at once report well under the burst).
const (
	StatusBytesPerSecond = 64 << 10
	StatusBytesBurst     = 1 << 20
)

// hostBuckets is a token bucket of bytes per host, at most maxHostTimes
// hosts (a full table refuses a new host until one has refilled).
type hostBuckets struct {
	mu sync.Mutex
	b  map[string]*byteBucket
}

type byteBucket struct {
	tokens float64
	at     time.Time
}

// take reports whether host may write n bytes now, and if so takes them.
func (t *hostBuckets) take(host string, now time.Time, n float64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.b == nil {
		t.b = map[string]*byteBucket{}
	}
	b, ok := t.b[host]
	if !ok {
		if len(t.b) >= maxHostTimes {
			for h, o := range t.b {
				if o.tokens+now.Sub(o.at).Seconds()*StatusBytesPerSecond >= StatusBytesBurst {
					delete(t.b, h)
				}
			}
			if len(t.b) >= maxHostTimes {
				return false
			}
		}
		b = &byteBucket{tokens: StatusBytesBurst, at: now}
		t.b[host] = b
	}
	if d := now.Sub(b.at).Seconds(); d > 0 {
		b.tokens = min(StatusBytesBurst, b.tokens+d*StatusBytesPerSecond)
	}
	b.at = now
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

type hostTimes struct {
	mu sync.Mutex
	at map[string]time.Time
	// swept is when a full table was last swept for entries to drop: it
	// is swept again only once every has passed (before then none can
	// have aged out), so a full table costs a new host O(1), not a scan.
	swept time.Time
}

const maxHostTimes = 1 << 16

// stamp records now as host's last time.
func (t *hostTimes) stamp(host string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	if _, ok := t.at[host]; ok || len(t.at) < maxHostTimes {
		t.at[host] = now
	}
}

// take reports whether host may act now (its last time is every or more
// ago, or it has none), and if so records now.
func (t *hostTimes) take(host string, now time.Time, every time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	if last, ok := t.at[host]; ok && now.Sub(last) < every && now.Sub(last) >= 0 {
		return false
	}
	if _, ok := t.at[host]; !ok && len(t.at) >= maxHostTimes {
		if d := now.Sub(t.swept); d < every && d >= 0 {
			return false
		}
		t.swept = now
		for h, last := range t.at {
			if now.Sub(last) >= every {
				delete(t.at, h)
			}
		}
		if len(t.at) >= maxHostTimes {
			return false
		}
	}
	t.at[host] = now
	return true
}

// ReportStatus records what an agent observed for one of its instances; a
// report that the host refused the instance's resize rolls the resize back.
func (s *Service) ReportStatus(ctx context.Context, host, id string, st model.Status) error {
	if err := validateStatus(st); err != nil {
		return err
	}
	if _, ok := s.st.Host(host); !ok {
		return errf(NotFound, "host %q is not registered", host)
	}
	v, ok := s.st.Instance(id)
	if !ok || v.Instance.Host != host {
		return errf(NotFound, "instance %q is not on host %s", id, host)
	}
	// A report that changes nothing writes nothing, and a host's reports
	// write at most StatusBytesPerSecond after a burst of
	// StatusBytesBurst (attack review: an agent repeating an 8 KiB report
	// 195 times a second grew etcd's db by 2.2 MB/s, for ever).
	if v.Status == nil || !reflect.DeepEqual(*v.Status, st) {
		b, _ := json.Marshal(st)
		if !s.statusBytes.take(host, s.clock(), float64(len(b))) {
			return errf(Exhausted, "host %s reported more than %d bytes of instance status a second (after a burst of %d): an agent reports a status when it changes; slow down",
				clip(host), StatusBytesPerSecond, StatusBytesBurst)
		}
		if err := s.st.PutStatus(ctx, host, id, st); err != nil {
			return err
		}
	}
	if in := v.Instance; st.Refused != 0 && st.Refused == in.Generation {
		// Sampled per agent as refused calls are: an agent repeating its
		// report wrote one event a call (issue 36).
		s.RecordFailed(state.Event{Identity: host, Kind: "Refused", Subject: id, Host: host, Service: in.Service,
			Outcome: fmt.Sprintf("generation %d refused: %s", st.Refused, st.Error)}, nil, "Refused", true)
	}
	if in := v.Instance; st.Refused != 0 && st.Refused == in.Generation && in.Previous != nil && in.Previous.Generation == in.Generation {
		return s.rollBack(ctx, id, st.Error)
	}
	return nil
}

// rollBack undoes a resize its host refused: the instance gets its previous
// allocation back (if that still fits; a deploy may have taken what the
// resize released), under a new generation, and records why.
func (s *Service) rollBack(ctx context.Context, id, why string) error {
	var logged func()
	err := s.pipe.do(ctx, func(rd reader) (*state.Change, error) {
		logged = nil
		c := new(state.Change)
		v, ok := rd.Instance(id)
		if !ok || v.Instance.Previous == nil {
			return c, nil
		}
		h, ok := rd.Host(v.Instance.Host)
		if !ok {
			return c, nil
		}
		next, a, err := rolledBack(s.params, h, v.Instance, why)
		c.GuardInstance(next.Host, id, v.Rev)
		c.PutInstance(next)
		if err != nil {
			// Keep the refused allocation; the host keeps reporting why.
			logged = func() {
				s.log.Warn("resize refused by host, and the previous allocation no longer fits", "instance", id, "host", next.Host, "refusal", why, "err", err)
			}
		} else {
			c.GuardAlloc(next.Host, h.AllocRev)
			c.PutAlloc(next.Host, a)
			logged = func() {
				s.log.Warn("resize refused by host", "instance", id, "host", next.Host, "refusal", why, "rolled_back", next.RolledBack)
			}
		}
		return c, nil
	})
	if err == nil && logged != nil {
		logged()
	}
	return err
}

// rolledBack is in with its previous allocation back, under a new
// generation, and the host's usage after the swap. When the previous
// allocation no longer fits (its CPUs' pieces or memory were taken, a
// whole-cores instance holds its CPUs, or the shared pool left would not
// hold the largest memory-first quota: alloc.Readmit), it is in as it is
// (no usage change) with the reason recorded, and the error says what does
// not fit.
func rolledBack(params alloc.Params, h state.HostView, in model.Instance, why string) (model.Instance, state.Alloc, error) {
	p := in.Previous
	a := h.Alloc.Clone()
	a.Add(in, -1)
	next := in
	next.Allocation = p.Allocation
	next.Previous = nil
	next.Generation++
	err := a.Fits(h.Host, next)
	if err == nil {
		err = alloc.Readmit(params, state.AllocHost(h.Host, a), next.Allocation)
	}
	if err != nil {
		next = in
		next.Previous = nil
		next.RolledBack = fmt.Sprintf("resize to generation %d refused by host %s (%s); the previous allocation no longer fits (%v)", in.Generation, in.Host, why, err)
		return next, state.Alloc{}, err
	}
	a.Add(next, +1)
	next.RolledBack = fmt.Sprintf("resize to generation %d refused by host %s: %s; rolled back to the previous allocation", in.Generation, in.Host, why)
	return next, a, nil
}
