package api

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/state"
)

// Connection bounds: a client that stalls holds a connection and its
// buffers only this long (a body stalled after its headers and an idle
// keep-alive connection were held forever, issue 26 N3).
const (
	// DefaultHeaderTimeout bounds reading a request's headers.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds reading a request's body, from its
	// headers to its end; a stream's response is not bounded (an agent's
	// watch lasts as long as the agent).
	DefaultBodyTimeout = 15 * time.Second
	// DefaultIdleTimeout bounds how long a keep-alive connection with no
	// request in flight stays open.
	DefaultIdleTimeout = 60 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
)

// Timeouts are an API server's connection bounds (0: the default).
type Timeouts struct {
	Header, Body, Idle time.Duration
}

func (t Timeouts) orDefaults() Timeouts {
	if t.Header <= 0 {
		t.Header = DefaultHeaderTimeout
	}
	if t.Body <= 0 {
		t.Body = DefaultBodyTimeout
	}
	if t.Idle <= 0 {
		t.Idle = DefaultIdleTimeout
	}
	return t
}

// NewHTTPServer is the http.Server for the API's handler h (Handler, built
// with the same t as Options.Timeouts): HTTP/1.1, HTTP/2 and h2c, headers
// read within t.Header, idle connections closed after t.Idle (the body's
// bound is Handler's: a per-request read deadline). Each connection has
// its place in Handler's per-identity bound of connections, released when
// it closes.
func NewHTTPServer(h http.Handler, t Timeouts) *http.Server {
	t = t.orDefaults()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: t.Header, IdleTimeout: t.Idle, MaxHeaderBytes: MaxHeaderBytes, HTTP2: agentHTTP2()}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // gRPC over h2c on loopback
	var lim *identityLimits
	if lh, ok := h.(limitedHandler); ok {
		lim = lh.lim
	}
	trackConns(srv, lim)
	if lh, ok := h.(limitedHandler); ok && lh.links != nil {
		srv.RegisterOnShutdown(lh.links.closeAll)
	}
	return srv
}

// bodyDeadline gives every request with a body until d to send all of
// it: a read past that fails and, on HTTP/1.1, the connection is closed
// after the answer (HTTP/2: the stream ends). The deadline is lifted once
// the body ends, so that a stream's response (a watch) runs as long as it
// lasts. (http.Server's ReadTimeout would also end those streams: it
// bounds the connection's reads, not the body's.) The body is set on a
// copy of r: the server tells from its own request's body whether a body
// was left unread, and a connection kept alive after a stalled body
// waited for the idle timeout and read the body's rest as its next
// request.
func bodyDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
			b := &deadlinedBody{ReadCloser: r.Body, within: d, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			if r.ProtoMajor == 1 {
				b.stalled = func() { w.Header().Set("Connection", "close") }
			}
			r2 := *r
			r2.Body = b
			r = &r2
		}
		next.ServeHTTP(w, r)
	})
}

// deadlinedBody lifts its read deadline at the body's end; a read that
// fails past it names the bound and its flag, and calls stalled (if set).
type deadlinedBody struct {
	io.ReadCloser
	within  time.Duration
	lift    func()
	stalled func()
	lifted  bool
}

func (b *deadlinedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, io.EOF) && !b.lifted:
		b.lifted = true
		b.lift()
	case errors.Is(err, os.ErrDeadlineExceeded):
		if b.stalled != nil {
			b.stalled()
			b.stalled = nil
		}
		err = fmt.Errorf("request body not complete within %s of its headers (--body-timeout): %w", b.within, err)
	}
	return n, err
}

// Stream bounds: no one host or identity can hold all of the planner's
// streams (one agent opened 2,000 watches of its host, and one viewer
// could take all 64 live views, issue 26 N9).
const (
	// MaxWatchesPerHost bounds the WatchInstances streams open on one
	// host (its agent holds one; a restart may leave one more briefly).
	MaxWatchesPerHost = 4
	// MaxViewsPerIdentity bounds the live web views (/ui/events) one
	// identity holds open (of ui.MaxStreams in all). Callers without TLS
	// share one identity, "local", and only the overall bound.
	MaxViewsPerIdentity = 8
)

// streamLimits counts the open streams per key and the streams refused.
type streamLimits struct {
	mu      sync.Mutex
	open    map[string]int
	refused atomic.Int64
	max     int
}

func newStreamLimits(max int) *streamLimits {
	return &streamLimits{open: map[string]int{}, max: max}
}

// take holds a stream of key, and reports false (counted) when key holds
// max already; release gives it back.
func (l *streamLimits) take(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		l.refused.Add(1)
		return false
	}
	l.open[key]++
	return true
}

func (l *streamLimits) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// openStreams is the number of streams held.
func (l *streamLimits) openStreams() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.open {
		n += v
	}
	return n
}

// watchRefusal is the error of a watch over its host's bound.
func watchRefusal(host string) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("host %q has %d watch streams open already: at most %d per host (MaxWatchesPerHost); close one first",
		host, MaxWatchesPerHost, MaxWatchesPerHost))
}

// viewsPerIdentity bounds the live web views (the event stream at
// prefix+"events") each identity holds, refusing one more with 429.
func viewsPerIdentity(next http.Handler, path string, l *streamLimits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, _ := r.Context().Value(identityKey{}).(identified)
		if r.URL.Path != path || !who.tls {
			next.ServeHTTP(w, r)
			return
		}
		id := identityOf(r.Context())
		if !l.take(id) {
			http.Error(w, fmt.Sprintf("pinfold: resource_exhausted: identity %s has %d live views open already: at most %d per identity (MaxViewsPerIdentity); close one first",
				id, MaxViewsPerIdentity, MaxViewsPerIdentity), http.StatusTooManyRequests)
			return
		}
		defer l.release(id)
		next.ServeHTTP(w, r)
	})
}

// Per-identity bounds: no one certificate can hold all of the planner's
// connections or calls (issue 26 item 3). They bound the callers with a
// verified client certificate, each by its identity ("viewer:bob", or
// "carol (no role)"). Callers without one (no TLS, on loopback or with
// --insecure; TLS with --tls-no-client-auth) share the identity "local"
// and may do everything anyway: they are not bounded per identity (the
// simulation's 10,000 agents and the benchmarks' 32 clients are such
// callers), only by the connection timeouts above.
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
	// no bound).
	bodies *bodyBudget

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

// connSlotKey is the context key of a connection's connSlot.
type connSlotKey struct{}

// connSlot is one connection's place in its identity's bound: claimed at
// its TLS handshake (AdmitHandshake) or else by its first request (the
// identity is the handshake's, the same for every request on it),
// released when the connection closes.
type connSlot struct {
	lim *identityLimits // the server's; nil: none

	mu              sync.Mutex
	key             string
	held            *streamLimits
	claimed, closed bool
	// extraKey, extraHeld: a place in lim.extra, held by a connection
	// admitted past the bound until it closes.
	extraKey  string
	extraHeld *streamLimits
	// handedOver: the connection is taken from net/http (an agent link):
	// its taker releases the slot when it closes the connection.
	handedOver bool
}

// handOver marks the slot as its connection's taker's to release (before
// the connection is hijacked); takeBack undoes it when the hijack failed.
func (s *connSlot) handOver() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handedOver = true
}

func (s *connSlot) takeBack() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handedOver = false
}

func (s *connSlot) isHandedOver() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handedOver
}

// claim holds a connection of key in l for s's connection, once; false
// when key holds l's bound already.
func (s *connSlot) claim(key string, l *streamLimits) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed || s.closed {
		return true
	}
	if !l.take(key) {
		return false
	}
	s.key, s.held, s.claimed = key, l, true
	return true
}

// claimExtra holds a place of key in l for s's connection, once.
func (s *connSlot) claimExtra(key string, l *streamLimits) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.extraHeld != nil || s.closed {
		return true
	}
	if !l.take(key) {
		return false
	}
	s.extraKey, s.extraHeld = key, l
	return true
}

func (s *connSlot) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.claimed {
		s.held.release(s.key)
		s.claimed = false
	}
	if s.extraHeld != nil {
		s.extraHeld.release(s.extraKey)
		s.extraHeld = nil
	}
}

// AdmitHandshake is a pki.Admit for servers whose handler is Handler's
// (NewHTTPServer): a connection whose client certificate verified takes
// its identity's place in --identity-max-conns when its handshake ends,
// not at its first request, so connections that never send one (an idle
// HTTP/2 connection holds a planner's goroutines and buffers until
// --idle-timeout) count too. Past the bound, as many connections again are
// admitted and refused at their first request, with resource_exhausted
// naming the identity, the bound and the flag; past twice the bound the
// handshake fails (counted as method "(handshake)").
func AdmitHandshake(ctx context.Context, leaf *x509.Certificate) error {
	s, _ := ctx.Value(connSlotKey{}).(*connSlot)
	if s == nil || s.lim == nil || s.lim.conns == nil {
		return nil
	}
	id, err := pki.IdentityOf(leaf)
	key, role := limitKey(id, err, leaf.Subject.CommonName)
	if s.claim(key, s.lim.conns) || s.claimExtra(key, s.lim.extra) {
		return nil
	}
	s.lim.count(limitedKey{limit: "connections", role: role, method: "(handshake)"})
	return fmt.Errorf("identity %s has %d connections open already, and %d more waiting to be refused: at most %d per identity (--identity-max-conns)",
		key, s.lim.lim.ConnsPerIdentity, s.lim.lim.ConnsPerIdentity, s.lim.lim.ConnsPerIdentity)
}

// limitKey is the bounded identity of a verified client certificate and
// its role: its pinfold identity, or its CommonName marked "(no role)"
// with role "none" (as the audit trail names it, identityOf).
func limitKey(id pki.Identity, err error, cn string) (key, role string) {
	if err == nil && id.Name != "" {
		return id.String(), string(id.Role)
	}
	return clip.Text(cn, 200) + " (no role)", "none"
}

// trackConns gives every connection of srv a connSlot in its requests'
// context (and its TLS handshake's), released when the connection closes;
// lim (nil: none) is the handler's, for AdmitHandshake.
func trackConns(srv *http.Server, lim *identityLimits) {
	var slots sync.Map // net.Conn → *connSlot
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		s := &connSlot{lim: lim}
		slots.Store(c, s)
		return context.WithValue(ctx, connSlotKey{}, s)
	}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			if s, ok := slots.LoadAndDelete(c); ok && !(st == http.StateHijacked && s.(*connSlot).isHandedOver()) {
				s.(*connSlot).release()
			}
		}
	}
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
