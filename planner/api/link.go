package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// Bounds of an agent link (package agentlink).
const (
	// LinkFirstBeat bounds the wait for a link's first heartbeat; after
	// each, the next must come within the heartbeat's TTL (at least this
	// long): a link whose agent stopped beating ends with its lease.
	LinkFirstBeat = 15 * time.Second
	// LinkWriteTimeout bounds writing one frame to an agent: one that
	// stops reading loses its link, not a goroutine forever.
	LinkWriteTimeout = 10 * time.Second
	// LinkMinBeat is the least time between two heartbeats of one link
	// that the planner acts on: a faster agent is slowed to it, so that
	// one link costs at most one heartbeat a second.
	LinkMinBeat = time.Second
)

// links serves the agent links (agentlink): each an HTTP/1.1 request
// upgraded and taken from net/http, then served by two goroutines of its
// own, a reader of heartbeats and the host's watch, with no buffer held
// between frames.
type links struct {
	srv       *Server
	authorize bool
	panicked  func(where string, v any) error
	// metrics counts a link's heartbeats as Heartbeat calls (nil: none).
	metrics *Metrics
	// firstBeat is LinkFirstBeat (shorter in tests).
	firstBeat time.Duration

	mu     sync.Mutex
	open   map[*link]struct{}
	closed bool
}

func newLinks(srv *Server, authorize bool, panicked func(string, any) error, metrics *Metrics) *links {
	return &links{srv: srv, authorize: authorize, panicked: panicked, metrics: metrics, firstBeat: LinkFirstBeat, open: map[*link]struct{}{}}
}

// closeAll ends every link (the server's shutdown: hijacked connections
// are not net/http's to close) and refuses new ones.
func (ls *links) closeAll() {
	ls.mu.Lock()
	ls.closed = true
	open := make([]*link, 0, len(ls.open))
	for l := range ls.open {
		open = append(open, l)
	}
	ls.mu.Unlock()
	// Each agent is told why (an error frame, within a second: one that
	// does not read does not hold the others' up).
	err := connect.NewError(connect.CodeUnavailable, errors.New("the planner is shutting down"))
	var wg sync.WaitGroup
	for _, l := range open {
		wg.Go(func() {
			// A write blocked on an agent that does not read ends too.
			_ = l.conn.SetWriteDeadline(time.Now().Add(time.Second))
			l.failWithin(err, time.Second)
		})
	}
	wg.Wait()
}

// count is the number of open links.
func (ls *links) count() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.open)
}

// noLinkHint ends the refusals of a request that reached the planner
// without its upgrade: the agent sends one, so something between them
// (a proxy) changed it. The agent turns to the calls on this 400 and logs
// it; --no-link spares it the try.
const noLinkHint = "a proxy between agent and planner that does not pass HTTP/1.1 upgrades: the agent uses the calls instead, or run it with --no-link"

// refuse answers a link request before its upgrade: a status and text.
func refuseLink(w http.ResponseWriter, status int, format string, args ...any) {
	http.Error(w, "pinfold: "+fmt.Sprintf(format, args...), status)
}

func (ls *links) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Query().Get(agentlink.HostParam)
	switch {
	case r.ProtoMajor != 1:
		refuseLink(w, http.StatusBadRequest, "the agent link is an HTTP/1.1 upgrade; this request came over HTTP/%d (%s)", r.ProtoMajor, noLinkHint)
		return
	case r.Method != http.MethodGet:
		refuseLink(w, http.StatusMethodNotAllowed, "the agent link is a GET request; this one is %s", r.Method)
		return
	case !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), agentlink.Protocol):
		refuseLink(w, http.StatusBadRequest, "the agent link needs the headers Connection: Upgrade and Upgrade: %s (Upgrade = %q; %s)", agentlink.Protocol, r.Header.Get("Upgrade"), noLinkHint)
		return
	case host == "":
		refuseLink(w, http.StatusBadRequest, "query parameter %s is missing: the agent link is of one host", agentlink.HostParam)
		return
	case len(host) > service.MaxNameLen:
		refuseLink(w, http.StatusBadRequest, "%s = %q: longer than %d bytes", agentlink.HostParam, host[:64]+"…", service.MaxNameLen)
		return
	}
	if ls.authorize {
		who, _ := r.Context().Value(identityKey{}).(identified)
		switch {
		case who.err != nil:
			refuseLink(w, http.StatusUnauthorized, "%s: %v", agentlink.Path, who.err)
			return
		case who.id.Role == pki.RoleAdmin:
		case who.id.Role == pki.RoleAgent && who.id.Name == host:
		default:
			refuseLink(w, http.StatusForbidden, "identity %s may not open the agent link of host %q: an agent acts only for its own host", who.id, host)
			return
		}
	}
	if ls.srv.watches != nil {
		if !ls.srv.watches.take(host) {
			refuseLink(w, http.StatusTooManyRequests, "%s", watchRefusal(host).(*connect.Error).Message())
			return
		}
	}
	release := func() {
		if ls.srv.watches != nil {
			ls.srv.watches.release(host)
		}
	}
	// The connection keeps its place in its identity's bound until the
	// link ends (trackConns lets a handed-over slot go with the link).
	slot, _ := r.Context().Value(connSlotKey{}).(*connSlot)
	if slot != nil {
		slot.handOver()
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		if slot != nil {
			slot.takeBack()
		}
		release()
		refuseLink(w, http.StatusInternalServerError, "the connection cannot be taken for the agent link: %v", err)
		return
	}
	// Bytes the client sent after its request (it should wait for the
	// answer; none is lost if it did not).
	var in io.Reader = conn
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Reader.Peek(n)
		in = io.MultiReader(bytes.NewReader(bytes.Clone(b)), conn)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	l := &link{ls: ls, host: host, conn: conn, in: in, ctx: ctx, cancel: cancel, release: func() {
		release()
		if slot != nil {
			slot.release()
		}
	}}
	// Registered under the lock closeAll takes: a link taken while the
	// server shuts down is refused here, not left open past closeAll.
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 37\r\n\r\npinfold: the planner is shutting down")
		_ = conn.Close()
		l.release()
		return
	}
	ls.open[l] = struct{}{}
	ls.mu.Unlock()
	_ = conn.SetDeadline(time.Time{})
	_ = conn.SetWriteDeadline(time.Now().Add(LinkWriteTimeout))
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+agentlink.Protocol+"\r\n\r\n"); err != nil {
		l.end(err)
		return
	}
	go l.read()
	go l.watch()
}

// headerHas reports whether h's field name lists token (comma-separated,
// case-insensitive).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// link is one agent's open link.
type link struct {
	ls      *links
	host    string
	conn    net.Conn
	in      io.Reader
	ctx     context.Context
	cancel  context.CancelFunc
	release func()

	wmu  sync.Mutex
	once sync.Once
}

// read serves the agent's heartbeats, one at a time, at most one per
// LinkMinBeat, until the link ends.
func (l *link) read() {
	defer l.recover("agent link heartbeat")
	idle, last := l.ls.firstBeat, time.Time{}
	for {
		_ = l.conn.SetReadDeadline(time.Now().Add(idle))
		k, b, err := agentlink.ReadFrame(l.in, agentlink.MaxAgentFrame)
		switch {
		case errors.Is(err, agentlink.ErrFrameTooLarge):
			l.fail(connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("agent link of host %q: %w", l.host, err)))
			return
		case errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF):
			l.end(err)
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			l.fail(connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("agent link of host %q: no heartbeat within %s", l.host, idle)))
			return
		case err != nil:
			l.fail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("agent link of host %q: %w", l.host, err)))
			return
		case k != agentlink.KindHeartbeat:
			l.fail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("agent link of host %q: a frame of %s: an agent sends only heartbeats (kind %d)", l.host, k, agentlink.KindHeartbeat)))
			return
		}
		if wait := time.Until(last.Add(LinkMinBeat)); wait > 0 {
			time.Sleep(wait)
		}
		last = time.Now()
		req := &pinfoldv1.HeartbeatRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			l.fail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("agent link of host %q: heartbeat: %w", l.host, err)))
			return
		}
		if err := checkBounds(req); err != nil {
			l.fail(err)
			return
		}
		if req.Host != l.host {
			l.fail(connect.NewError(connect.CodePermissionDenied, fmt.Errorf("agent link of host %q: a heartbeat of host %q: a link carries only its own host's", l.host, req.Host)))
			return
		}
		accepted := false
		err = l.deep("agent link heartbeat", func() error {
			start := time.Now()
			resp, err := l.ls.srv.heartbeat(l.ctx, req)
			if l.ls.metrics != nil {
				l.ls.metrics.observe(procedurePrefix+"Heartbeat", start, err)
			}
			if err != nil {
				return l.write(agentlink.KindHeartbeatError, agentlink.ErrorText(err))
			}
			accepted = true
			b, _ := proto.Marshal(resp)
			return l.write(agentlink.KindHeartbeatAnswer, b)
		})
		if err != nil {
			l.end(err)
			return
		}
		// Only a heartbeat the planner took renews the link, for its TTL:
		// a refused one's TTL (over 10 minutes, or 68 years) held the
		// link open that long without another frame.
		if accepted {
			idle = max(time.Duration(req.TtlSeconds)*time.Second, l.ls.firstBeat)
		}
	}
}

// watch sends the host's desired set, then again after each change.
func (l *link) watch() {
	defer l.recover("agent link watch")
	err := l.ls.srv.agents.WatchInstances(l.ctx, l.host, func(rev int64, h state.HostView, ins []state.InstanceView) error {
		return l.deep("agent link watch", func() error {
			b, err := proto.Marshal(l.ls.srv.desiredMsg(rev, h, ins))
			if err != nil {
				return err
			}
			return l.write(agentlink.KindDesired, b)
		})
	})
	if l.ctx.Err() != nil {
		return
	}
	if service.CodeOf(err) != "" {
		err = toConnect(err)
	} else if connect.CodeOf(err) == connect.CodeUnknown {
		err = connect.NewError(connect.CodeUnavailable, err)
	}
	l.fail(err)
}

// deep runs f, the link's work between two waits (a heartbeat's etcd
// write, a desired set's encoding), on a goroutine of its own and waits
// for it: the link's two goroutines stay as shallow as their waits, so
// their stacks shrink to the least the runtime gives (2 KiB) and stay
// there, instead of keeping the depth of the last heartbeat (8 to 16 KiB
// each, 10,000 agents: 300 MiB). A panic in f is f's error.
func (l *link) deep(where string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- connect.NewError(connect.CodeInternal, l.ls.panicked(where, v))
			}
		}()
		done <- f()
	}()
	return <-done
}

func (l *link) recover(where string) {
	if v := recover(); v != nil {
		l.fail(connect.NewError(connect.CodeInternal, l.ls.panicked(where, v)))
	}
}

// write sends one frame within LinkWriteTimeout.
func (l *link) write(k agentlink.Kind, b []byte) error {
	return l.writeWithin(k, b, LinkWriteTimeout)
}

func (l *link) writeWithin(k agentlink.Kind, b []byte, d time.Duration) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.ctx.Err(); err != nil {
		return err
	}
	_ = l.conn.SetWriteDeadline(time.Now().Add(d))
	return agentlink.WriteFrame(l.conn, k, b)
}

// fail tells the agent why its link ends (if it still reads), then ends it.
func (l *link) fail(err error) { l.failWithin(err, LinkWriteTimeout) }

func (l *link) failWithin(err error, d time.Duration) {
	_ = l.writeWithin(agentlink.KindError, agentlink.ErrorText(err), d)
	l.end(err)
}

// end closes the link and gives back what it holds, once.
func (l *link) end(error) {
	l.once.Do(func() {
		l.cancel()
		// Its places are given back before the agent can see the end
		// (EOF): an agent that opens its link again at once is not
		// refused for the places of the link it just lost.
		l.release()
		l.ls.mu.Lock()
		delete(l.ls.open, l)
		l.ls.mu.Unlock()
		_ = l.conn.Close()
	})
}
