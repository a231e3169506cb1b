package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

func openAs(t *testing.T, srv *httptest.Server, who, host string) (*agentlink.Link, error) {
	t.Helper()
	l, err := agentlink.NewClient(&http.Client{Transport: newCertTransport(who)}, srv.URL).Open(t.Context(), host)
	if err == nil {
		t.Cleanup(func() { _ = l.Close() })
	}
	return l, err
}

// TestLinkAuthorization: with authorization on, a link is an agent's for
// its own host (or an admin's); another host's agent, a viewer and a
// caller without a verified certificate are refused before the upgrade,
// with the reason.
func TestLinkAuthorization(t *testing.T) {
	srv := certServerOf(t, streamPlanner{}, Options{Authorize: true})
	for _, tc := range []struct {
		who  string
		code connect.Code
		text string
	}{
		{"agent/h1", 0, ""},
		{"admin/root", 0, ""},
		{"agent/h2", connect.CodePermissionDenied, `identity agent:h2 may not open the agent link of host "h1"`},
		{"viewer/bob", connect.CodePermissionDenied, "identity viewer:bob may not open the agent link"},
		{"", connect.CodeUnauthenticated, "no verified client certificate"},
	} {
		t.Run(tc.who, func(t *testing.T) {
			l, err := openAs(t, srv, tc.who, "h1")
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("%s: %v", tc.who, err)
				}
				if m, err := l.Receive(); err != nil || m.Revision != 1 {
					t.Errorf("%s: first desired state %v, %v", tc.who, m, err)
				}
				return
			}
			if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("%s: %v, want %s naming %q", tc.who, err, tc.code, tc.text)
			}
		})
	}
}

// TestLinkHoldsItsConnectionSlot: a link's connection keeps its place in
// its identity's bound of connections while the link is open (net/http
// forgets a taken connection: without the hand-over the agent's place was
// free at once), and gives it back when the link ends.
func TestLinkHoldsItsConnectionSlot(t *testing.T) {
	srv := certServerOf(t, streamPlanner{}, Options{Authorize: true, Limits: Limits{ConnsPerIdentity: 1}})
	l, err := openAs(t, srv, "agent/h1", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Receive(); err != nil {
		t.Fatal(err)
	}
	_, err = openAs(t, srv, "agent/h1", "h1")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "identity agent:h1 has 1 connections open already") {
		t.Fatalf("a second connection of agent:h1 beside its link = %v, want resource_exhausted naming the bound", err)
	}
	_ = l.Close()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err = openAs(t, srv, "agent/h1", "h1"); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("agent:h1 after its link closed: %v", err)
		}
	}
}

// ttlPlanner takes heartbeats with a TTL of 1 s to 10 min and refuses
// others, as the service does.
type ttlPlanner struct{ streamPlanner }

func (ttlPlanner) Heartbeat(_ context.Context, _, _ string, _ int, ttl time.Duration, _ *state.Metrics) error {
	if ttl < time.Second || ttl > 10*time.Minute {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("heartbeat ttl = %s: want 1s..10m", ttl))
	}
	return nil
}

// firstBeatWithin is h (Handler's) with its links' first heartbeat due
// within d.
func firstBeatWithin(h http.Handler, d time.Duration) http.Handler {
	h.(limitedHandler).links.firstBeat = d
	return h
}

// TestLinkRefusedHeartbeatKeepsItsDeadline: only a heartbeat the planner
// took renews the link for its TTL. A refused heartbeat of a TTL of 68
// years held the link (its host's place among MaxWatchesPerHost, its
// identity's connection) open without another frame.
func TestLinkRefusedHeartbeatKeepsItsDeadline(t *testing.T) {
	srv := httptest.NewUnstartedServer(firstBeatWithin(Handler(ttlPlanner{}, Options{}), time.Second))
	srv.Config = NewHTTPServer(srv.Config.Handler, Timeouts{})
	srv.Start()
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name string
		ttl  int32
		open bool // still open after 3 s
	}{
		{"refused, 68 years", 1<<31 - 1, false},
		{"refused, 11 minutes", 11 * 60, false},
		{"taken, 30 s", 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := agentlink.NewClient(&http.Client{}, srv.URL).Open(t.Context(), "h1")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ended := make(chan error, 1)
			go func() {
				for {
					if _, err := l.Receive(); err != nil {
						ended <- err
						return
					}
				}
			}()
			_, err = l.Heartbeat(t.Context(), &pinfoldv1.HeartbeatRequest{Host: "h1", Protocol: 1, TtlSeconds: tc.ttl})
			if tc.open != (err == nil) {
				t.Fatalf("heartbeat of TTL %d s = %v", tc.ttl, err)
			}
			select {
			case err := <-ended:
				if tc.open || connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "no heartbeat within 1s") {
					t.Errorf("the link ended with %v, want it %s", err, map[bool]string{true: "open", false: "ended with deadline_exceeded naming 1s"}[tc.open])
				}
			case <-time.After(3 * time.Second):
				if !tc.open {
					t.Errorf("the link is open 3 s after a refused heartbeat of TTL %d s, with no heartbeat due within 1 s", tc.ttl)
				}
			}
		})
	}
}

// TestLinkWithoutHeartbeatEndsNamingIt: a link whose agent sends no
// heartbeat ends with deadline_exceeded naming the bound. (A read past
// its deadline was matched with errors.Is against a target whose own Is
// method errors.Is never calls: the link ended as invalid_argument, "i/o
// timeout", as if the agent had sent a bad frame.)
func TestLinkWithoutHeartbeatEndsNamingIt(t *testing.T) {
	srv := httptest.NewUnstartedServer(firstBeatWithin(Handler(streamPlanner{}, Options{}), time.Second))
	srv.Config = NewHTTPServer(srv.Config.Handler, Timeouts{})
	srv.Start()
	t.Cleanup(srv.Close)
	l, err := agentlink.NewClient(&http.Client{}, srv.URL).Open(t.Context(), "h1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for {
		if _, err = l.Receive(); err != nil {
			break
		}
	}
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), `agent link of host "h1": no heartbeat within 1s`) {
		t.Errorf("a link without a heartbeat ended with %v, want deadline_exceeded naming the bound", err)
	}
}
