package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
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
// bound is Handler's: a per-request read deadline).
func NewHTTPServer(h http.Handler, t Timeouts) *http.Server {
	t = t.orDefaults()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: t.Header, IdleTimeout: t.Idle, MaxHeaderBytes: MaxHeaderBytes, HTTP2: agentHTTP2()}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // gRPC over h2c on loopback
	return srv
}

// bodyDeadline gives every request with a body until d to send all of
// it: a read past that fails and the connection is dropped. The deadline
// is lifted once the body ends, so that a stream's response (a watch)
// runs as long as it lasts. (http.Server's ReadTimeout would also end
// those streams: it bounds the connection's reads, not the body's.)
func bodyDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
			r.Body = &deadlinedBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlinedBody lifts its read deadline at the body's end.
type deadlinedBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *deadlinedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.lifted {
		b.lifted = true
		b.lift()
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
