package api

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestSubjectOfServiceExact: a request's service field names a service
// exactly (state.Event.ServiceExact), a target an instance or a service;
// so --service web lists a real instance's resize, not the refused deploy
// of a service named web-0123456789 (issue 36).
func TestSubjectOfServiceExact(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		msg       proto.Message
		wantExact bool
		listed    bool // under --service web
	}{
		{"refused deploy of a name shaped like web's instance", "Deploy", &pinfoldv1.DeployRequest{Service: "web-0123456789"}, true, false},
		{"scale of web", "Scale", &pinfoldv1.ScaleRequest{Service: "web"}, true, true},
		{"resize of web's instance", "Resize", &pinfoldv1.ResizeRequest{Target: "web-0123456789"}, false, true},
		{"replace of web", "Replace", &pinfoldv1.ReplaceRequest{Target: "web"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			subject, host, service, exact := subjectOf(tt.method, tt.msg)
			if exact != tt.wantExact {
				t.Errorf("subjectOf(%s, %v) exact = %v, want %v", tt.method, tt.msg, exact, tt.wantExact)
			}
			ev := state.Event{Kind: tt.method, Subject: subject, Host: host, Service: service, ServiceExact: exact}
			if got := state.EventMatches("web", "")(ev); got != tt.listed {
				t.Errorf("event %+v under --service web: %v, want %v", ev, got, tt.listed)
			}
		})
	}
}
