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
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/pki"
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
// MaxUnservedConns bounds the connections the planner holds before their
// first request: those still in their TLS handshake or sending nothing,
// whoever opens them (each holds a file, a goroutine and buffers until
// its handshake or --header-timeout ends it). Past it a new connection is
// closed at once. An agent's connection sends its first request right
// after its handshake: 10,000 agents reconnecting at once wait at most a
// retry.
const MaxUnservedConns = 4096

// maxUnservedConns is MaxUnservedConns, lowered by tests.
var maxUnservedConns int64 = MaxUnservedConns

func trackConns(srv *http.Server, lim *identityLimits) {
	var slots sync.Map // net.Conn → *connSlot
	var fresh sync.Map // net.Conn → struct{}: accepted, no request read yet
	var unserved atomic.Int64
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		s := &connSlot{lim: lim}
		slots.Store(c, s)
		return context.WithValue(ctx, connSlotKey{}, s)
	}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		// Connections before their first request (a TLS handshake in
		// progress, or nothing sent yet) are bounded in all: no
		// identity is known yet to bound them by (attack review: 19,990
		// connections that sent nothing took the planner's files from
		// 20 to 15,289 of its 20,000).
		if st == http.StateNew {
			if unserved.Add(1) > maxUnservedConns {
				unserved.Add(-1)
				_ = c.Close() // its serve goroutine fails at once
				return
			}
			fresh.Store(c, struct{}{})
		} else if _, ok := fresh.LoadAndDelete(c); ok {
			unserved.Add(-1)
		}
		if st == http.StateClosed || st == http.StateHijacked {
			if s, ok := slots.LoadAndDelete(c); ok && !(st == http.StateHijacked && s.(*connSlot).isHandedOver()) {
				s.(*connSlot).release()
			}
		}
	}
}
