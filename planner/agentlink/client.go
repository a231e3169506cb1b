package agentlink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// ErrUnsupported is Open's error when no agent link can be had this way:
// a planner older than the link answers 404, one behind a proxy that
// drops the upgrade or speaks HTTP/2 to it answers 400. The agent uses
// the Heartbeat and WatchInstances calls instead.
var ErrUnsupported = errors.New("no agent link: the planner is older than the link (404) or a proxy between them does not pass HTTP/1.1 upgrades (400); the Heartbeat and WatchInstances calls serve instead")

// Client opens links to one planner.
type Client struct {
	hc   *http.Client
	base string
}

// NewClient is a client of the planner at baseURL (http:// or https://)
// through hc's transport (its TLS configuration and client certificate).
// hc's Timeout is not applied to a link, which lasts as long as the agent.
func NewClient(hc *http.Client, baseURL string) *Client {
	c := *hc
	c.Timeout = 0
	return &Client{hc: &c, base: strings.TrimSuffix(baseURL, "/")}
}

// Open opens host's link: one request, upgraded. ctx bounds the request
// only; the link lasts until Close or an error.
func (c *Client) Open(ctx context.Context, host string) (*Link, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+Path+"?"+HostParam+"="+url.QueryEscape(host), nil)
	if err != nil {
		return nil, fmt.Errorf("agent link of host %q: %w", host, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Protocol)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("agent link of host %q: %w", host, err))
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			// No planner with links answers the agent's request so: an
			// older planner (404), or a proxy between them that drops
			// the upgrade or speaks HTTP/2 to the planner (400).
			return nil, fmt.Errorf("%w: HTTP %d: %s", ErrUnsupported, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return nil, connect.NewError(codeOfStatus(resp.StatusCode), fmt.Errorf("agent link of host %q: HTTP %d: %s", host, resp.StatusCode, strings.TrimSpace(string(b))))
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("agent link of host %q: the upgraded connection cannot be written (%T)", host, resp.Body)
	}
	return &Link{rwc: rwc, answers: make(chan answer, 1), done: make(chan struct{})}, nil
}

// codeOfStatus is the Connect code of a refusal before the upgrade.
func codeOfStatus(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	}
	return connect.CodeUnavailable
}

// Link is an agent's open link. Receive is called by one goroutine, which
// also delivers the answers Heartbeat waits for; Heartbeat and Close may
// be called from others.
type Link struct {
	rwc     io.ReadWriteCloser
	wmu     sync.Mutex // one frame written at a time
	beat    sync.Mutex // one heartbeat in flight
	answers chan answer

	once sync.Once
	done chan struct{} // closed when the link has ended
	err  error         // why, once done is closed
}

type answer struct {
	msg *pinfoldv1.HeartbeatResponse
	err error
}

// Heartbeat sends req and waits for its answer (delivered by Receive).
func (l *Link) Heartbeat(ctx context.Context, req *pinfoldv1.HeartbeatRequest) (*pinfoldv1.HeartbeatResponse, error) {
	l.beat.Lock()
	defer l.beat.Unlock()
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := l.write(KindHeartbeat, b); err != nil {
		return nil, err
	}
	select {
	case a := <-l.answers:
		return a.msg, a.err
	case <-l.done:
		return nil, l.err
	case <-ctx.Done():
		// Its answer may still come: it is dropped with the link.
		l.end(connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("agent link: no heartbeat answer: %w", ctx.Err())))
		return nil, ctx.Err()
	}
}

func (l *Link) write(k Kind, b []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	select {
	case <-l.done:
		return l.err
	default:
	}
	if err := WriteFrame(l.rwc, k, b); err != nil {
		l.end(connect.NewError(connect.CodeUnavailable, fmt.Errorf("agent link: %w", err)))
		return l.err
	}
	return nil
}

// Receive returns the next desired state the planner sends; an error
// ends the link (the planner's own reason when it sent one).
func (l *Link) Receive() (*pinfoldv1.WatchInstancesResponse, error) {
	for {
		k, b, err := ReadFrame(l.rwc, MaxPlannerFrame)
		if err != nil {
			l.end(connect.NewError(connect.CodeUnavailable, fmt.Errorf("agent link: %w", err)))
			return nil, l.err
		}
		switch k {
		case KindDesired:
			m := &pinfoldv1.WatchInstancesResponse{}
			if err := proto.Unmarshal(b, m); err != nil {
				l.end(fmt.Errorf("agent link: desired state: %w", err))
				return nil, l.err
			}
			return m, nil
		case KindHeartbeatAnswer:
			m := &pinfoldv1.HeartbeatResponse{}
			if err := proto.Unmarshal(b, m); err != nil {
				l.end(fmt.Errorf("agent link: heartbeat answer: %w", err))
				return nil, l.err
			}
			l.deliver(answer{msg: m})
		case KindHeartbeatError:
			l.deliver(answer{err: ParseError(b)})
		case KindError:
			l.end(ParseError(b))
			return nil, l.err
		default:
			l.end(fmt.Errorf("agent link: the planner sent a frame of %s: not one a planner sends", k))
			return nil, l.err
		}
	}
}

// deliver hands a heartbeat's answer to its waiter; one nobody waits for
// (its Heartbeat gave up) is dropped.
func (l *Link) deliver(a answer) {
	select {
	case l.answers <- a:
	default:
	}
}

// Close ends the link.
func (l *Link) Close() error {
	l.end(connect.NewError(connect.CodeCanceled, errors.New("agent link closed")))
	return nil
}

func (l *Link) end(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
		_ = l.rwc.Close()
	})
}
