package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestNoAgentReason: a host registered by hand says why no agent runs
// there; registering it by hand again (pinfold up once more) with the same
// topology updates only the reason, without the reason it is refused as
// before (already registered); an agent's registration clears it; a
// reason past the bound is refused.
func TestNoAgentReason(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	top := topologytest.Laptop().Topology()
	req := service.RegisterHostRequest{Name: "h1", Topology: top, Settings: state.CapacitySettings{MemoryShare: 1}, NoAgent: "cgroup v2 is not mounted at /sys/fs/cgroup"}
	v, err := s.RegisterHost(ctx, req)
	if err != nil || v.Host.NoAgent != req.NoAgent || v.Host.Agent {
		t.Fatalf("register by hand with a reason = %+v, %v", v.Host, err)
	}
	req.NoAgent = "docker: no engine at unix:///var/run/docker.sock"
	if v, err = s.RegisterHost(ctx, req); err != nil || v.Host.NoAgent != req.NoAgent {
		t.Fatalf("again by hand with a new reason = %q, %v; want the new reason", v.Host.NoAgent, err)
	}
	req.NoAgent = ""
	if _, err := s.RegisterHost(ctx, req); service.CodeOf(err) != service.Exists {
		t.Errorf("again by hand without a reason = %v, want already registered", err)
	}
	if _, err := s.RegisterHost(ctx, service.RegisterHostRequest{Name: "h1", Topology: top, Settings: state.CapacitySettings{MemoryShare: 1},
		NoAgent: strings.Repeat("x", service.MaxNoAgentLen+1)}); service.CodeOf(err) != service.Invalid {
		t.Errorf("a reason of %d bytes = %v, want invalid", service.MaxNoAgentLen+1, err)
	}
	v, err = s.RegisterHost(ctx, service.RegisterHostRequest{Name: "h1", Topology: top, Settings: state.CapacitySettings{MemoryShare: 1},
		Agent: true, AgentVersion: "test", Protocol: model.Protocol})
	if err != nil || !v.Host.Agent || v.Host.NoAgent != "" {
		t.Errorf("an agent's registration = %+v, %v; want the agent and no reason", v.Host, err)
	}
}
