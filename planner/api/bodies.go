package api

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// Request body budgets: the bytes of request bodies that the calls in
// flight have read and hold, per identity and in all (issue 36 N3b).
// --max-request-bytes bounds one request, and --identity-max-conns one
// identity's connections, but not what many concurrent requests hold:
// one identity's 64 HTTP/2 connections of 100 streams each, each stream
// sending 4 MiB slowly, held 25 GiB.
const (
	// MaxBodyBytesPerIdentity bounds the request body bytes one
	// identity's calls in flight hold (callers with a verified client
	// certificate; those without share only the overall bound). Eight
	// requests of the largest size; an agent's or a CLI's calls hold a
	// few KiB.
	MaxBodyBytesPerIdentity = 32 << 20
	// MaxBodyBytesInFlight bounds the request body bytes all calls in
	// flight hold together.
	MaxBodyBytesInFlight = 256 << 20
	// bodyChunk is the most one read of a body takes from a budget
	// ahead of the bytes arriving (a read that returns fewer gives the
	// rest back at once).
	bodyChunk = 32 << 10
)

// bodyBudget counts the request body bytes held per identity and in all.
// A call holds the bytes it read until it ends: connect keeps the message
// it decoded from them, and the handler its request.
type bodyBudget struct {
	perIdentity, overall int64 // 0: no bound

	mu    sync.Mutex
	held  map[string]int64 // by identity; bounded by the identities with calls in flight
	total int64
	// peak is the most held at once, for the tests.
	peak atomic.Int64
}

func newBodyBudget(perIdentity, overall int64) *bodyBudget {
	return &bodyBudget{perIdentity: perIdentity, overall: overall, held: map[string]int64{}}
}

// take holds up to n more bytes for key ("": a caller not bounded per
// identity) and reports how many it holds; none when no byte fits, with
// the bound that is full: "identity" or "overall".
func (b *bodyBudget) take(key string, n int64) (int64, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overall > 0 {
		if room := b.overall - b.total; room < n {
			n = max(room, 0)
			if n == 0 {
				return 0, "overall"
			}
		}
	}
	if key != "" && b.perIdentity > 0 {
		if room := b.perIdentity - b.held[key]; room < n {
			n = max(room, 0)
			if n == 0 {
				return 0, "identity"
			}
		}
	}
	b.total += n
	if key != "" {
		b.held[key] += n
	}
	if b.total > b.peak.Load() {
		b.peak.Store(b.total)
	}
	return n, ""
}

// give returns n bytes of key's.
func (b *bodyBudget) give(key string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if key != "" {
		if b.held[key] -= n; b.held[key] <= 0 {
			delete(b.held, key)
		}
	}
}

// heldBy is the bytes key holds, and all callers.
func (b *bodyBudget) heldBy(key string) (int64, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[key], b.total
}

// full is the bound ("identity", "overall") with no byte left for key, or "".
func (b *bodyBudget) full(key string) string {
	n, bound := b.take(key, 1)
	b.give(key, n)
	return bound
}

// refusal is the error of a call over bound, naming it.
func (b *bodyBudget) refusal(key, bound string) error {
	held, total := b.heldBy(key)
	var msg string
	if bound == "identity" {
		msg = fmt.Sprintf("identity %s holds %d bytes of request bodies in calls in flight already: at most %d per identity (MaxBodyBytesPerIdentity); wait for its calls to finish",
			key, held, b.perIdentity)
	} else {
		msg = fmt.Sprintf("the planner holds %d bytes of request bodies in calls in flight already: at most %d in all (MaxBodyBytesInFlight); retry later",
			total, b.overall)
	}
	return connect.NewError(connect.CodeResourceExhausted, errors.New(msg))
}

// budgetedBody holds each byte it reads in its budget until release: a
// read over the budget fails with refused's error (the body is not read
// further).
type budgetedBody struct {
	io.ReadCloser
	b       *bodyBudget
	key     string
	refused func(bound string) error

	mu   sync.Mutex
	held int64
	err  error
}

func (x *budgetedBody) Read(p []byte) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return 0, x.err
	}
	if len(p) == 0 {
		return x.ReadCloser.Read(p)
	}
	got, bound := x.b.take(x.key, int64(min(len(p), bodyChunk)))
	if got == 0 {
		x.err = x.refused(bound)
		return 0, x.err
	}
	n, err := x.ReadCloser.Read(p[:got])
	x.b.give(x.key, got-int64(n))
	x.held += int64(n)
	return n, err
}

// release gives back all the body's bytes; later reads hold none.
func (x *budgetedBody) release() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.b.give(x.key, x.held)
	x.held = 0
	if x.err == nil {
		x.err = errors.New("request body read after its call ended")
	}
}

// gzipName is the encoding the planner accepts compressed requests in.
const gzipName = "gzip"

// boundedGzip is the handler option replacing connect's gzip with one
// whose decompressor stops at maxBytes+1 bytes. connect bounds a
// decompressed message by WithReadMaxBytes (compression.go, Decompress:
// an io.LimitReader of readMaxBytes+1), but past that bound it reads the
// rest of the decompressor into io.Discard to say how large the message
// was: a 4 MiB body of gzip can decompress to 4 GiB, seconds of a core
// for a refusal. Stopped here, the refusal costs at most maxBytes of
// decompression.
func boundedGzip(maxBytes int) connect.HandlerOption {
	limit := int64(maxBytes) + 1
	return connect.WithCompression(gzipName,
		func() connect.Decompressor { return &limitedGzip{limit: limit} },
		func() connect.Compressor { return gzip.NewWriter(io.Discard) })
}

// limitedGzip is a gzip reader that fails past limit bytes.
type limitedGzip struct {
	gz    gzip.Reader
	limit int64
	n     int64
	ok    bool
}

func (z *limitedGzip) Read(p []byte) (int, error) {
	if !z.ok {
		return 0, errors.New("gzip: no stream")
	}
	if z.n >= z.limit {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("message decompresses to more than %d bytes (--max-request-bytes)", z.limit-1))
	}
	if int64(len(p)) > z.limit-z.n {
		p = p[:z.limit-z.n]
	}
	n, err := z.gz.Read(p)
	z.n += int64(n)
	return n, err
}

func (z *limitedGzip) Reset(r io.Reader) error {
	z.n, z.ok = 0, false
	if err := z.gz.Reset(r); err != nil {
		return err
	}
	z.ok = true
	return nil
}

func (z *limitedGzip) Close() error {
	if !z.ok {
		return nil
	}
	return z.gz.Close()
}

// budgetBody holds r's body bytes in l's budget until next returns, as
// key's ("": a caller not bounded per identity) and in all. A call whose
// identity (or the planner) holds its budget already is refused before
// its body is read, and a body that reaches it is refused at that read
// (connect answers the read's error as it is), both with
// resource_exhausted naming the bound, counted (limit "body", role) and
// recorded as limitIdentities' refusals are.
func (l *identityLimits) budgetBody(next http.Handler, w http.ResponseWriter, r *http.Request, key, role string, rec unreadRecorder) {
	if l.bodies == nil || r.Body == nil || r.Body == http.NoBody {
		next.ServeHTTP(w, r)
		return
	}
	method := methodLabel(r.URL.Path)
	refuse := func(bound string) error {
		err := l.bodies.refusal(key, bound)
		l.count(limitedKey{limit: "body", role: role, method: method})
		if strings.HasPrefix(r.URL.Path, procedurePrefix) && method != "(other)" {
			rec.limited(r.Context(), r.URL.Path, time.Now(), err)
		}
		return err
	}
	if bound := l.bodies.full(key); bound != "" {
		writeLimited(w, r, refuse(bound))
		return
	}
	if compressedMessages(r.Header) {
		writeLimited(w, r, connect.NewError(connect.CodeInvalidArgument, errors.New(
			"compressed messages are accepted in unary Connect calls only (Content-Encoding: gzip), where the planner counts what they decompress to against the caller's request body budget")))
		return
	}
	body := &budgetedBody{ReadCloser: r.Body, b: l.bodies, key: key, refused: refuse}
	defer body.release()
	r2 := *r // the server's own request keeps its body (see bodyDeadline)
	r2.Body = body
	if enc := r.Header.Get("Content-Encoding"); enc == gzipName && l.messageMax > 0 {
		// Decompressed here, not by connect: what a body decompresses
		// to is held as its bytes are (a 4 KiB gzip body of 4 MiB of
		// zeros held 4 MiB outside the budget; a viewer's 1,900 of them
		// took the planner from 0.37 to 2.0 GB, attack review).
		plain := &budgetedBody{ReadCloser: &gunzipBody{src: body, gz: limitedGzip{limit: l.messageMax + 1}}, b: l.bodies, key: key, refused: refuse}
		defer plain.release()
		r2.Body = plain
		r2.Header = r.Header.Clone()
		r2.Header.Del("Content-Encoding")
		r2.Header.Del("Content-Length")
		r2.ContentLength = -1
	}
	next.ServeHTTP(w, &r2)
}

// compressedMessages reports whether a request's messages are compressed
// one by one (gRPC's grpc-encoding, a Connect stream's
// Connect-Content-Encoding): connect would decompress them where their
// size is not held against the caller's budget.
func compressedMessages(h http.Header) bool {
	for _, k := range []string{"Grpc-Encoding", "Connect-Content-Encoding"} {
		if v := h.Get(k); v != "" && v != "identity" {
			return true
		}
	}
	return false
}

// gunzipBody is a unary Connect call's gzip body, decompressed by the
// decompressor connect's gzip would use (limitedGzip: failing past
// limit bytes, --max-request-bytes + 1), its header read at the first
// Read.
type gunzipBody struct {
	src     io.ReadCloser
	gz      limitedGzip
	started bool
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	if !g.started {
		g.started = true
		if err := g.gz.Reset(g.src); err != nil {
			return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("request body: Content-Encoding gzip: %w", err))
		}
	}
	return g.gz.Read(p)
}

func (g *gunzipBody) Close() error { return g.src.Close() }

// writeLimited answers r with err (resource_exhausted), in the call's
// protocol, or 429.
func writeLimited(w http.ResponseWriter, r *http.Request, err error) {
	errs := connect.NewErrorWriter()
	if errs.IsSupported(r) {
		_ = errs.Write(w, r, err) // a write error is the client's gone: nothing to answer
		return
	}
	http.Error(w, "pinfold: resource_exhausted: "+errorMessage(err), http.StatusTooManyRequests)
}
