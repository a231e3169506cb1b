package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/agentlink"
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
