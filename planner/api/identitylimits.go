package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinfold/pinfold/planner/state"
)

// Per-identity bounds: no one certificate can hold all of the planner's
// connections or calls (issue 26 item 3). They bound the callers with a
// verified client certificate, each by its identity ("viewer:bob", or
// "carol (no role)"). Callers without one (no TLS, on loopback or with
// --insecure; TLS with --tls-no-client-auth) share the identity "local"
// and may do everything anyway: they are not bounded per identity (the
// simulation's 10,000 agents and the benchmarks' 32 clients are such
// callers), only by the connection timeouts (conns.go).
const (
	// DefaultConnsPerIdentity bounds the connections one identity holds
	// open: the CLI holds one per command, an agent one or two, a
	// browser's web view up to six.
	DefaultConnsPerIdentity = 64
	// DefaultRatePerIdentity and DefaultBurstPerIdentity are the token
	// bucket of each identity's calls (every request: API calls, the web
	// view's pages and streams, /metrics): a burst of 2,000 calls, then
	// 200 a second (the whole planner serves about 2,500 deploys a
	// second, docs/BENCHMARKS.md; an agent calls a few times a minute).
	DefaultRatePerIdentity  = 200
	DefaultBurstPerIdentity = 2000
	// MaxTrackedIdentities bounds the rate table: past it, identities
	// not in it share one bucket, (other), until idle entries (a full
	// bucket is the same as none) are swept out, every minute or, while
	// the table is full, every second.
	MaxTrackedIdentities = 65536
)

// Limits bound what one identity may hold and call (0: the default;
// negative: no bound).
type Limits struct {
	ConnsPerIdentity int     // connections open at once
	RatePerIdentity  float64 // calls a second, sustained
	BurstPerIdentity int     // calls at once, over the rate
	// BodyBytesPerIdentity and BodyBytesInFlight bound the request body
	// bytes held by one identity's calls in flight and by all calls
	// (MaxBodyBytesPerIdentity, MaxBodyBytesInFlight; never less than
	// one request's bound, --max-request-bytes).
	BodyBytesPerIdentity, BodyBytesInFlight int64
}

// orDefaults is l with 0 as the default and no bound as 0.
func (l Limits) orDefaults() Limits {
	if l.ConnsPerIdentity == 0 {
		l.ConnsPerIdentity = DefaultConnsPerIdentity
	}
	if l.RatePerIdentity == 0 {
		l.RatePerIdentity = DefaultRatePerIdentity
	}
	if l.BurstPerIdentity == 0 {
		l.BurstPerIdentity = DefaultBurstPerIdentity
	}
	if l.BodyBytesPerIdentity == 0 {
		l.BodyBytesPerIdentity = MaxBodyBytesPerIdentity
	}
	if l.BodyBytesInFlight == 0 {
		l.BodyBytesInFlight = MaxBodyBytesInFlight
	}
	l.BodyBytesPerIdentity = max(l.BodyBytesPerIdentity, 0)
	l.BodyBytesInFlight = max(l.BodyBytesInFlight, 0)
	l.ConnsPerIdentity = max(l.ConnsPerIdentity, 0)
	l.RatePerIdentity = max(l.RatePerIdentity, 0)
	l.BurstPerIdentity = max(l.BurstPerIdentity, 0)
	return l
}

// identityLimits are a Handler's per-identity bounds and their refusals.
type identityLimits struct {
	lim   Limits
	conns *streamLimits // nil: no bound
	// extra: connections admitted at their handshake past conns' bound,
	// as many again, so that their first request is answered why
	// (AdmitHandshake); past both, the handshake fails.
	extra *streamLimits
	rate  *rateLimits // nil: no bound
	// heavy counts each identity's fleet-wide calls in flight
	// (heavyMethods), at most MaxHeavyPerIdentity.
	heavy *streamLimits
	// bodies holds the request body bytes of the calls in flight (nil:
	// no bound), a compressed body's decompressed bytes too; messageMax
	// is what one may decompress to (--max-request-bytes; 0: no bound).
	bodies     *bodyBudget
	messageMax int64

	mu      sync.Mutex
	limited map[limitedKey]int64 // bounded: 4 limits × 5 roles × the methods
}

// limitedKey labels a refusal: the limit, the caller's role ("none" for
// a certificate with no valid role) and the method (an API method, "ui",
// "metrics" or "(other)").
type limitedKey struct{ limit, role, method string }

// newIdentityLimits bounds l; a body budget is at least request, one
// request's bound.
func newIdentityLimits(l Limits, request int64, now func() time.Time) *identityLimits {
	l = l.orDefaults()
	if l.BodyBytesPerIdentity > 0 || l.BodyBytesInFlight > 0 {
		per, all := l.BodyBytesPerIdentity, l.BodyBytesInFlight
		if per > 0 {
			per = max(per, request)
		}
		if all > 0 {
			all = max(all, request)
		}
		l.BodyBytesPerIdentity, l.BodyBytesInFlight = per, all
	}
	il := &identityLimits{lim: l, limited: map[limitedKey]int64{}, heavy: newStreamLimits(MaxHeavyPerIdentity)}
	if l.ConnsPerIdentity > 0 {
		il.conns = newStreamLimits(l.ConnsPerIdentity)
		il.extra = newStreamLimits(l.ConnsPerIdentity)
	}
	if l.BodyBytesPerIdentity > 0 || l.BodyBytesInFlight > 0 {
		il.bodies = newBodyBudget(l.BodyBytesPerIdentity, l.BodyBytesInFlight)
	}
	if l.RatePerIdentity > 0 && l.BurstPerIdentity > 0 {
		il.rate = &rateLimits{rate: l.RatePerIdentity, burst: float64(l.BurstPerIdentity), max: MaxTrackedIdentities,
			buckets: map[string]*bucket{}, now: now}
	}
	return il
}

func (l *identityLimits) count(k limitedKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limited[k]++
}

// overflowIdentity is the bucket the identities past MaxTrackedIdentities
// share.
const overflowIdentity = "(other)"

// rateLimits is a token bucket per identity, in a bounded table.
type rateLimits struct {
	mu          sync.Mutex
	rate, burst float64
	max         int
	buckets     map[string]*bucket
	swept       time.Time
	now         func() time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

// allow takes one call's token from key's bucket, and reports false when
// there is none.
func (l *rateLimits) allow(key string) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if since := now.Sub(l.swept); since >= time.Minute || len(l.buckets) >= l.max && since >= time.Second {
		l.sweep(now)
	}
	b, ok := l.buckets[key]
	if !ok && len(l.buckets) >= l.max {
		b, ok = l.buckets[overflowIdentity]
		key = overflowIdentity
	}
	if !ok {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweep drops the buckets that are full again: the same as none.
func (l *rateLimits) sweep(now time.Time) {
	l.swept = now
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// entries is the number of identities in the table.
func (l *rateLimits) entries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// limitedIdentity is the caller's identity when it is bounded: a
// verified client certificate's (with its role, "none" when it has no
// valid one).
func limitedIdentity(ctx context.Context) (key, role string, ok bool) {
	who, _ := ctx.Value(identityKey{}).(identified)
	switch {
	case !who.tls:
		return "", "", false
	case who.err == nil && who.id.Name != "" || who.cn != "":
		key, role = limitKey(who.id, who.err, who.cn)
		return key, role, true
	}
	return "", "", false
}

// methodLabel is the method a request's path calls, for the metrics: an
// API method, "ui", "metrics" or "(other)" (a bounded set).
func methodLabel(path string) string {
	if m, ok := strings.CutPrefix(path, procedurePrefix); ok {
		if _, known := methodAccess[m]; known {
			return m
		}
	}
	switch {
	case strings.HasPrefix(path, "/ui/"):
		return "ui"
	case path == "/metrics":
		return "metrics"
	}
	return "(other)"
}

// MaxHeavyPerIdentity bounds the calls one identity may have in flight
// among heavyMethods: those whose work grows with the whole fleet (a
// rebalance plan, capacity on every host, the plan's export, the health
// checks, the audit's reads), so that no caller spends more than that many
// planner cores on them however many connections it opens (issue 36 R1).
const MaxHeavyPerIdentity = 2

// heavyMethods are the fleet-wide methods MaxHeavyPerIdentity bounds.
var heavyMethods = map[string]bool{"Rebalance": true, "Capacity": true, "ExportPlan": true, "Health": true, "ListEvents": true}

// heavyList names heavyMethods in the refusal.
const heavyList = "Rebalance, Capacity, ExportPlan, Health, ListEvents"

// limitIdentities refuses, before its body is read, a request whose
// verified identity holds its bound of connections already (on a new
// connection, which is closed after the answer), has called faster
// than its rate, or holds its bound of request body bytes (budgetBody;
// every caller is held to the overall one): resource_exhausted naming the identity, the bound and
// its flag, in the call's protocol (an API call, counted and recorded as
// precheck's refusals are; its event always sampled) or 429 (the web
// view, /metrics).
func limitIdentities(next http.Handler, l *identityLimits, rec unreadRecorder) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, role, ok := limitedIdentity(r.Context())
		if !ok {
			// Not bounded per identity: only the overall body budget.
			l.budgetBody(next, w, r, "", "local", rec)
			return
		}
		var msg, limit string
		if s, _ := r.Context().Value(connSlotKey{}).(*connSlot); s != nil && l.conns != nil && !s.claim(key, l.conns) {
			limit = "connections"
			msg = fmt.Sprintf("identity %s has %d connections open already: at most %d per identity (--identity-max-conns); close one first",
				key, l.lim.ConnsPerIdentity, l.lim.ConnsPerIdentity)
			closeAfter(w, r)
		} else if l.rate != nil && !l.rate.allow(key) {
			limit = "rate"
			msg = fmt.Sprintf("identity %s called more than %g times a second: at most %g a second per identity after a burst of %d (--identity-rate, --identity-burst); slow down",
				key, l.lim.RatePerIdentity, l.lim.RatePerIdentity, l.lim.BurstPerIdentity)
		} else if method := methodLabel(r.URL.Path); heavyMethods[method] && !l.heavy.take(key) {
			limit = "heavy"
			msg = fmt.Sprintf("identity %s has %d fleet-wide calls (%s) running already: at most %d at once per identity (MaxHeavyPerIdentity); wait for one to finish",
				key, MaxHeavyPerIdentity, heavyList, MaxHeavyPerIdentity)
		} else {
			if heavyMethods[method] {
				defer l.heavy.release(key)
			}
			l.budgetBody(next, w, r, key, role, rec)
			return
		}
		method := methodLabel(r.URL.Path)
		l.count(limitedKey{limit: limit, role: role, method: method})
		err := connect.NewError(connect.CodeResourceExhausted, errors.New(msg))
		switch {
		case strings.HasPrefix(r.URL.Path, procedurePrefix) && method != "(other)":
			rec.limited(r.Context(), r.URL.Path, time.Now(), err)
			_ = errs.Write(w, r, err) // a write error is the client's gone: nothing to answer
		case errs.IsSupported(r):
			_ = errs.Write(w, r, err)
		default:
			http.Error(w, "pinfold: resource_exhausted: "+msg, http.StatusTooManyRequests)
		}
	})
}

// closeAfter has the server close r's connection once it answered r. On
// HTTP/1.1 with a body still coming, as the server does for a large body
// a handler left unread: a half-close, then a wait for the client to read
// the answer (a bare "Connection: close" drops the connection at once, and
// a client still sending its body gets a reset instead of the answer).
// The body's first byte is read to tell the server so (at most that one).
// On HTTP/2 "Connection: close" is a GOAWAY: the connection's other
// streams end, no new one starts.
func closeAfter(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		var one [1]byte
		_, _ = http.MaxBytesReader(w, r.Body, 0).Read(one[:]) // past 0 bytes: the server's half-close
	}
	w.Header().Set("Connection", "close")
}

// limited counts and records an API call refused by a per-identity bound,
// as refused does, except that its event is always sampled (an admin's
// flood is not written whole: that would be the flood the bound stops).
func (u unreadRecorder) limited(ctx context.Context, procedure string, start time.Time, err error) {
	method := procedure[strings.LastIndexByte(procedure, '/')+1:]
	if u.metrics != nil {
		u.metrics.observe(procedure, start, err)
	}
	if recorded(method) {
		ev := state.Event{Identity: identityOf(ctx), Kind: method}.Clipped()
		ev.Outcome = connect.CodeOf(err).String() + ": " + errorMessage(err)
		u.events.svc.RecordFailed(ev, nil, method, true)
	}
}

var (
	descLimited    = prometheus.NewDesc("pinfold_planner_identity_limited_total", "Requests refused over a per-identity bound: limit connections (--identity-max-conns), rate (--identity-rate, --identity-burst), heavy (MaxHeavyPerIdentity fleet-wide calls in flight) or body (request body bytes in flight: MaxBodyBytesPerIdentity, or MaxBodyBytesInFlight in all, role local for callers without a certificate), by the caller's role and the method.", []string{"limit", "role", "method"}, nil)
	descConnsOpen  = prometheus.NewDesc("pinfold_planner_identity_connections_open", "Connections held by callers with a client certificate (each counted in its identity's bound).", nil, nil)
	descRateTables = prometheus.NewDesc("pinfold_planner_identity_rate_entries", "Identities in the rate table (at most MaxTrackedIdentities, 65,536; idle ones swept out).", nil, nil)
)

// limitCollector reads the per-identity bounds' counts at each scrape.
type limitCollector struct{ m *Metrics }

func (limitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLimited
	ch <- descConnsOpen
	ch <- descRateTables
}

func (c limitCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.m.limits.Load()
	if l == nil {
		return
	}
	l.mu.Lock()
	for k, n := range l.limited {
		ch <- prometheus.MustNewConstMetric(descLimited, prometheus.CounterValue, float64(n), k.limit, k.role, k.method)
	}
	l.mu.Unlock()
	if l.conns != nil {
		ch <- prometheus.MustNewConstMetric(descConnsOpen, prometheus.GaugeValue, float64(l.conns.openStreams()))
	}
	if l.rate != nil {
		ch <- prometheus.MustNewConstMetric(descRateTables, prometheus.GaugeValue, float64(l.rate.entries()))
	}
}
