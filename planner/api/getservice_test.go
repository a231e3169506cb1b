package api

import (
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestGetService: GetService answers the record a deploy wrote (spec, size,
// strategy and rules) with the service's count; a viewer sees the
// environment's names only; an unknown service is NotFound, a bad name
// InvalidArgument.
func TestGetService(t *testing.T) {
	f := newAuditFixture(t)
	ctx := t.Context()
	d := deployReq("web")
	d.Count, d.Cpu, d.Bind, d.Strategy, d.MaxPerHost = 2, "1.5", true, "auto", 3
	d.Constraint, d.AntiAffinitySoft, d.DomainSpread = "HostName != \"h9\"", []string{"batch"}, "off"
	d.Command, d.Network, d.Health = []string{"sleep", "1"}, "host", &pinfoldv1.HealthCheck{Tcp: 80}
	d.Container = &pinfoldv1.ContainerSpec{LogDriver: "splunk", LogOpts: map[string]string{"splunk-token": "t0ps3cret"}}
	if _, err := f.cli.Deploy(ctx, as("admin/alice", d)); err != nil {
		t.Fatal(err)
	}
	// A viewer sees log options by name, never their values (a token).
	logOpts := map[string]string{"admin/alice": "t0ps3cret", "viewer/bob": ""}
	for who, env := range map[string][]string{"admin/alice": d.Env, "viewer/bob": {"SECRET", "MODE"}} {
		t.Run(who, func(t *testing.T) {
			r, err := f.cli.GetService(ctx, as(who, &pinfoldv1.GetServiceRequest{Name: "web"}))
			if err != nil {
				t.Fatal(err)
			}
			m := r.Msg.Service
			if m.Name != "web" || m.Image != "busybox" || !slices.Equal(m.Command, d.Command) || m.Network != "host" || m.Health.GetTcp() != 80 ||
				m.Cpu != "1.5" || !m.Bind || m.MemoryBytes != d.MemoryBytes || m.Strategy != "auto" || m.MaxPerHost != 3 ||
				m.Constraint != d.Constraint || !slices.Equal(m.AntiAffinitySoft, d.AntiAffinitySoft) || m.DomainSpread != "off" || m.Count != 2 || m.ShareBase != 100 {
				t.Errorf("GetService(web) = %v; want the deploy's record with count 2", m)
			}
			if !slices.Equal(m.Env, env) {
				t.Errorf("env = %q, want %q", m.Env, env)
			}
			if got, ok := m.GetContainer().GetLogOpts()["splunk-token"]; !ok || got != logOpts[who] {
				t.Errorf("log option splunk-token = %q (present %t), want %q", got, ok, logOpts[who])
			}
			ins, err := f.cli.ListInstances(ctx, as(who, &pinfoldv1.ListInstancesRequest{Service: "web"}))
			if err != nil || len(ins.Msg.Instances) == 0 || ins.Msg.Instances[0].GetContainer().GetLogOpts()["splunk-token"] != logOpts[who] {
				t.Errorf("ListInstances as %s: %v, %v; want splunk-token %q", who, ins, err, logOpts[who])
			}
		})
	}
	if _, err := f.cli.GetService(ctx, as("viewer/bob", &pinfoldv1.GetServiceRequest{Name: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetService(nope) = %v, want NotFound", err)
	}
	if _, err := f.cli.GetService(ctx, as("viewer/bob", &pinfoldv1.GetServiceRequest{Name: "Bad Name"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("GetService(Bad Name) = %v, want InvalidArgument", err)
	}
}
