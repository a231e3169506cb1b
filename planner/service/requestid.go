package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
)

// Idempotent writes. A mutating call may carry a request ID (the CLI makes
// one per invocation). Deploy, Resize, Replace and Remove commit, with
// their change, a record of what they did under that ID, guarded to be its
// first (state.Change.PutRequest). A repeat of the ID, after a lost answer,
// a killed planner or on another planner, finds the record while it plans
// and answers with the first outcome (the instances it made, as they are
// now), changing nothing. Other calls are idempotent by themselves (scale
// to a count, host set, enable, drain) or read only.

// MaxRequestIDLen bounds a request ID.
const MaxRequestIDLen = 64

// ValidateRequestID checks a request ID: 1 to 64 letters, digits, '.',
// '_', ':' or '-'.
func ValidateRequestID(id string) error {
	if id == "" || len(id) > MaxRequestIDLen {
		return errf(Invalid, "request ID = %q: want 1..%d characters", clip(id), MaxRequestIDLen)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == ':' || r == '-') {
			return errf(Invalid, "request ID = %q: character %q; want letters, digits, '.', '_', ':' or '-'", clip(id), r)
		}
	}
	return nil
}

// RequestCall is one call's request ID and, once it ran, whether it was a
// repeat answered from the record.
type RequestCall struct {
	ID       string
	Repeated bool
}

type requestKey struct{}

// WithRequest returns ctx carrying call: the service methods that record
// their outcome (see above) use its ID and set Repeated.
func WithRequest(ctx context.Context, call *RequestCall) context.Context {
	return context.WithValue(ctx, requestKey{}, call)
}

// withoutRequest is ctx carrying no request ID: for a call that makes
// another (scale deploys what is missing) and records nothing of its own.
func withoutRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestKey{}, (*RequestCall)(nil))
}

// RequestFrom is the call ctx carries with a request ID, or nil.
func RequestFrom(ctx context.Context) *RequestCall { return requestOf(ctx) }

func requestOf(ctx context.Context) *RequestCall {
	c, _ := ctx.Value(requestKey{}).(*RequestCall)
	if c == nil || c.ID == "" {
		return nil
	}
	return c
}

// once is one call of method with its request ID (nil call: none).
type once struct {
	s      *Service
	call   *RequestCall
	method string
	digest string // of the request's content
	// replay is the record found while planning: the call is a repeat.
	replay *state.Request
}

// once is a call of method whose request is req (its JSON form is
// digested).
func (s *Service) once(ctx context.Context, method string, req any) *once {
	o := &once{s: s, call: requestOf(ctx), method: method}
	if o.call != nil {
		b, _ := json.Marshal(req) // the service's own request types always marshal
		sum := sha256.Sum256(b)
		o.digest = hex.EncodeToString(sum[:16])
	}
	return o
}

// wrap makes plan idempotent under the call's request ID: a recorded ID is
// answered from its record (replay, an empty change); otherwise plan's
// change, if it writes anything, also records the ID with what record
// fills in.
func (o *once) wrap(plan planFunc, record func(*state.Request)) planFunc {
	if o.call == nil {
		return plan
	}
	id := o.call.ID
	return func(rd reader) (*state.Change, error) {
		o.replay = nil
		if r, ok := rd.Request(id); ok {
			if r.Method != o.method {
				return nil, errf(Invalid, "request ID %q: a %s call used it already; each call needs its own ID", id, r.Method)
			}
			if r.Digest != o.digest {
				return nil, errf(Invalid, "request ID %q: a %s call with other content used it already; each call needs its own ID", id, r.Method)
			}
			if _, done := o.s.st.Request(id); !done {
				return nil, errf(Conflicted, "request ID %q: an earlier call with this ID is committing now; repeat the call to get its outcome", id)
			}
			o.replay = &r
			return new(state.Change), nil
		}
		c, err := plan(rd)
		if err != nil || c == nil || c.Len() == 0 {
			return c, err
		}
		r := state.Request{Method: o.method, Time: time.Now().UTC(), Digest: o.digest}
		record(&r)
		c.PutRequest(id, r)
		return c, nil
	}
}

// repeated reports whether the call was answered from its record, and
// marks the call so.
func (o *once) repeated() bool {
	if o.replay == nil {
		return false
	}
	o.call.Repeated = true
	o.s.log.Info("repeated request answered from its record", "request_id", o.call.ID, "method", o.method)
	return true
}

// instances are the instances ids, as they are now (those since removed
// left out).
func (s *Service) instances(ids []string) []model.Instance {
	out := make([]model.Instance, 0, len(ids))
	for _, id := range ids {
		if v, ok := s.st.Instance(id); ok {
			out = append(out, v.Instance)
		}
	}
	return out
}

func idsOf(ins []model.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}

// pruneRequests forgets request IDs older than state.RequestTTL.
func (s *Service) pruneRequests(ctx context.Context, now time.Time) {
	n, err := s.st.PruneRequests(ctx, now.Add(-state.RequestTTL))
	switch {
	case err != nil:
		s.log.Warn("request records: pruning failed", "err", err)
	case n > 0:
		s.log.Info("request records pruned", "deleted", n, "older_than", state.RequestTTL)
	}
}
