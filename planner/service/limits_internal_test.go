package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

// TestBounds: every string a request carries is bounded, and what an error
// repeats of it is cut to 200 characters; each case is refused as
// invalid_argument before anything is planned or stored.
func TestBounds(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 25<<20)
	s := &Service{params: alloc.DefaultParams()}
	deploy := func(r DeployRequest) error {
		r.Service, r.Pieces, r.Memory = "web", 100, 1<<30
		if r.Count == 0 {
			r.Count = 1
		}
		_, err := s.DeployWithRules(context.Background(), r)
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"25 MB image", deploy(DeployRequest{Deploy: model.Deploy{Spec: model.Spec{Image: long}}}), "longer than 512 bytes"},
		{"newline in image", deploy(DeployRequest{Deploy: model.Deploy{Spec: model.Spec{Image: "busybox\nrm"}}}), "no blanks, newlines or NULs"},
		{"newline in env", deploy(DeployRequest{Deploy: model.Deploy{Spec: model.Spec{Image: "i", Env: []string{"A=1\nB=2"}}}}), "no NULs (and no newlines in env)"},
		{"env without =", deploy(DeployRequest{Deploy: model.Deploy{Spec: model.Spec{Image: "i", Env: []string{"A"}}}}), "want NAME=VALUE"},
		{"command too long", deploy(DeployRequest{Deploy: model.Deploy{Spec: model.Spec{Image: "i", Command: []string{long[:70<<10]}}}}), "want at most 65536"},
		{"constraint too long", deploy(DeployRequest{Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Rules: model.Rules{Constraint: long[:5000]}}}), "longer than 4096 bytes"},
		{"count over one transaction", deploy(DeployRequest{Count: 900_000, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}}}), "want at most 50000 per deploy"},
		{"state not a state", validateStatus(model.Status{State: "definitely-not-a-state"}), `state = "definitely-not-a-state"`},
		{"negative pid", validateStatus(model.Status{State: "running", PID: -5}), "pid = -5"},
		{"20 MB status error", validateStatus(model.Status{State: "error", Error: long[:20<<20]}), "want at most 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if CodeOf(tc.err) != Invalid || !strings.Contains(tc.err.Error(), tc.want) {
				t.Errorf("err = %.300v, want invalid_argument containing %q", tc.err, tc.want)
			}
			if n := len(tc.err.Error()); n > 1000 {
				t.Errorf("the error repeats %d bytes of the input", n)
			}
		})
	}
	if err := validateStatus(model.Status{State: "running", PID: 7, Generation: 2, CPUGot: 170}); err != nil {
		t.Errorf("a good report refused: %v", err)
	}
	if err := validateSpec(model.Spec{Image: "registry.example/app:1.2", Command: []string{"sh", "-c", "echo hi\nexit 0"}, Env: []string{"A=1"}}); err != nil {
		t.Errorf("a good spec refused: %v", err)
	}
}

// TestAgentVersionBounded: the version an agent reports through a
// heartbeat or a registration is refused past MaxAgentVersionLen bytes or
// with control characters, before anything is looked up or stored (a
// 3 MB version was stored and served by every host listing, issue 26 N6).
func TestAgentVersionBounded(t *testing.T) {
	t.Parallel()
	s := &Service{params: alloc.DefaultParams()}
	ctx := context.Background()
	long := strings.Repeat("v", 3<<20)
	for _, tt := range []struct {
		name, version, want string
	}{
		{"3 MB", long, "want at most 128"},
		{"129 bytes", long[:MaxAgentVersionLen+1], "129 bytes, want at most 128"},
		{"newline", "v1.2\nforged log line", "no control characters"},
	} {
		for method, call := range map[string]func() error{
			"heartbeat": func() error { return s.Heartbeat(ctx, "h1", tt.version, model.Protocol, time.Minute, nil) },
			"register": func() error {
				_, err := s.RegisterHost(ctx, RegisterHostRequest{Name: "h1", Agent: true, AgentVersion: tt.version, Protocol: model.Protocol})
				return err
			},
		} {
			t.Run(method+"/"+tt.name, func(t *testing.T) {
				err := call()
				if CodeOf(err) != Invalid || !strings.Contains(err.Error(), "agent_version") || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("err = %.300v, want invalid_argument on agent_version with %q", err, tt.want)
				}
				if err != nil && len(err.Error()) > 1000 {
					t.Errorf("the error repeats %d bytes", len(err.Error()))
				}
			})
		}
	}
	if err := ValidateAgentVersion("v1.2.3-45-gdeadbeef-dirty"); err != nil {
		t.Errorf("a good version refused: %v", err)
	}
}
