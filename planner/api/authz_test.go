package api

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestAuthorize: identity × method × host → allowed or denied.
func TestAuthorize(t *testing.T) {
	t.Parallel()
	admin, viewer, h1, h2 := pki.Identity{Name: "alice", Role: pki.RoleAdmin}, pki.Identity{Name: "bob", Role: pki.RoleViewer},
		pki.Identity{Name: "h1", Role: pki.RoleAgent}, pki.Identity{Name: "h2", Role: pki.RoleAgent}
	reg := func(host string, agent bool) any { return &pinfoldv1.RegisterHostRequest{Name: host, Agent: agent} }
	for _, tc := range []struct {
		id     pki.Identity
		method string
		msg    any
		ok     bool
	}{
		{admin, "Deploy", &pinfoldv1.DeployRequest{}, true},
		{admin, "ReportStatus", &pinfoldv1.ReportStatusRequest{Host: "h1"}, true},
		{admin, "RegisterHost", reg("h9", false), true},
		{viewer, "ListHosts", &pinfoldv1.ListHostsRequest{}, true},
		{viewer, "ListInstances", &pinfoldv1.ListInstancesRequest{}, true},
		{viewer, "GetHost", &pinfoldv1.GetHostRequest{Name: "h1"}, true},
		{viewer, "Deploy", &pinfoldv1.DeployRequest{}, false},
		{viewer, "SetHostEnabled", &pinfoldv1.SetHostEnabledRequest{Name: "h1"}, false},
		{viewer, "WatchInstances", &pinfoldv1.WatchInstancesRequest{Host: "h1"}, false},
		{h1, "RegisterHost", reg("h1", true), true},
		{h1, "Heartbeat", &pinfoldv1.HeartbeatRequest{Host: "h1"}, true},
		{h1, "ReportStatus", &pinfoldv1.ReportStatusRequest{Host: "h1"}, true},
		{h1, "WatchInstances", &pinfoldv1.WatchInstancesRequest{Host: "h1"}, true},
		{h2, "WatchInstances", &pinfoldv1.WatchInstancesRequest{Host: "h1"}, false},
		{h2, "ReportStatus", &pinfoldv1.ReportStatusRequest{Host: "h1"}, false},
		{h2, "Heartbeat", &pinfoldv1.HeartbeatRequest{Host: "h1"}, false},
		{h2, "RegisterHost", reg("h1", true), false},
		{h1, "RegisterHost", reg("h1", false), false}, // agents register as agents
		{h1, "SetHostEnabled", &pinfoldv1.SetHostEnabledRequest{Name: "h1"}, false},
		{h1, "RemoveHost", &pinfoldv1.RemoveHostRequest{Name: "h1"}, false},
		{h1, "ListInstances", &pinfoldv1.ListInstancesRequest{Host: "h2"}, false},
		{h1, "Deploy", &pinfoldv1.DeployRequest{}, false},
		{viewer, "Rebalance", &pinfoldv1.RebalanceRequest{}, true}, // a dry run changes nothing
		{viewer, "Rebalance", &pinfoldv1.RebalanceRequest{Apply: true}, false},
		{h1, "Rebalance", &pinfoldv1.RebalanceRequest{}, false},
		{viewer, "ExportPlan", &pinfoldv1.ExportPlanRequest{}, true},
	} {
		err := authorize(tc.id, tc.method, tc.msg)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s %s: %v, want allowed", tc.id, tc.method, err)
		case !tc.ok && connect.CodeOf(err) != connect.CodePermissionDenied:
			t.Errorf("%s %s = %v, want permission denied", tc.id, tc.method, err)
		}
	}
	err := authorize(h2, "ReportStatus", &pinfoldv1.ReportStatusRequest{Host: "h1"})
	if want := `identity agent:h2 may not call ReportStatus for host "h1"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("denial = %v, want it to name identity, method and host", err)
	}
	// A refusal echoes at most a clip of the host named (issue 36 N12: a
	// 3 MB name came back whole in a 403).
	if err := authorize(h2, "RegisterHost", reg(strings.Repeat("x", 3<<20), true)); err == nil || len(err.Error()) > 4096 {
		t.Errorf("a refused registration of a 3 MB host name: %d bytes of error, want at most 4 KiB", len(fmt.Sprint(err)))
	}
	// An agent registers what it observes, never a capacity setting
	// (issue 36 AG1); an admin may set each.
	full := &pinfoldv1.RegisterHostRequest{Name: "h1", Agent: true, AgentVersion: "1.0", Protocol: 1, TopologyJson: []byte("{}")}
	if err := authorize(h1, "RegisterHost", full); err != nil {
		t.Errorf("h1 registering what it observes: %v", err)
	}
	for _, tc := range []struct {
		set  func(*pinfoldv1.RegisterHostRequest)
		want string
	}{
		{func(m *pinfoldv1.RegisterHostRequest) { m.PiecesPerCpu = 10000 }, "pieces_per_cpu = 10000"},
		{func(m *pinfoldv1.RegisterHostRequest) { m.ReservedCpus = "0-3" }, `reserved_cpus = "0-3"`},
		{func(m *pinfoldv1.RegisterHostRequest) { m.ReservedMemoryBytes = 1 << 30 }, "reserved_memory_bytes = 1073741824"},
		{func(m *pinfoldv1.RegisterHostRequest) { m.MemoryShare = 1 }, "memory_share = 1"},
		{func(m *pinfoldv1.RegisterHostRequest) { m.Force = true }, "force = true"},
		{func(m *pinfoldv1.RegisterHostRequest) { m.NoAgent = "x" }, `no_agent = "x"`},
	} {
		m := &pinfoldv1.RegisterHostRequest{Name: "h1", Agent: true}
		tc.set(m)
		err := authorize(h1, "RegisterHost", m)
		if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "identity agent:h1 may not set "+tc.want+" in RegisterHost") {
			t.Errorf("h1 registering with %s = %v, want permission denied naming the field and value", tc.want, err)
		}
		m.Agent = false
		if err := authorize(admin, "RegisterHost", m); err != nil {
			t.Errorf("admin registering with %s: %v, want allowed", tc.want, err)
		}
	}
	// The methods that change the cluster are admin only.
	for _, m := range []string{"Deploy", "Resize", "Remove", "Replace", "Scale", "DrainHost", "SetHost", "SetHostEnabled", "SetHostMaintenance", "SetPlacementSettings", "RemoveHost"} {
		if methodAccess[m] != adminOnly {
			t.Errorf("%s is listed as not admin-only", m)
		}
	}
}
