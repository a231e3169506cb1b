package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// testSecrets are set by TestViewerReadsNoSecret's deploy, one per kind
// of secret field.
var testSecrets = []string{"hunter2-env", "tok-logopt", "pw-label", "hc-secret"}

// TestViewerReadsNoSecret walks every method a viewer may call (read and
// dry run, from methodAccess: a new one fails until it is listed here) as
// a viewer after an admin deployed a service with a secret in its
// environment, a log option, a secret label and a health command, and
// fails on any answer holding one (issue 36 N7: GetHost returned
// SECRET=hunter2, ListEvents log tokens). Control: the same walk as the
// admin must find every secret somewhere, or the walk checks too little.
func TestViewerReadsNoSecret(t *testing.T) {
	f := newAuditFixture(t)
	stop := f.runEvents(t)
	ctx := t.Context()
	d := deployReq("web")
	d.Env = []string{"SECRET=hunter2-env", "MODE=fast"}
	d.Health = &pinfoldv1.HealthCheck{Exec: []string{"sh", "-c", "wget -q --header 'X-Key: hc-secret' localhost"}}
	d.Container = &pinfoldv1.ContainerSpec{LogDriver: "splunk", LogOpts: map[string]string{"splunk-token": "tok-logopt"},
		Labels: map[string]string{"db.password": "pw-label", "team": "web"}}
	if _, err := f.cli.Deploy(ctx, as("admin/alice", d)); err != nil {
		t.Fatal(err)
	}
	stop() // the deploy's event is written
	name := f.svc.Instances("", "web")[0].Instance.ID
	unary := func(call func(context.Context, string) (proto.Message, error)) func(string) (proto.Message, error) {
		return func(who string) (proto.Message, error) { return call(ctx, who) }
	}
	calls := map[string]func(who string) (proto.Message, error){
		"ListHosts": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.ListHosts(ctx, as(who, &pinfoldv1.ListHostsRequest{}))
			return msgOf(r, err)
		}),
		"GetHost": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.GetHost(ctx, as(who, &pinfoldv1.GetHostRequest{Name: "h1"}))
			return msgOf(r, err)
		}),
		"ListInstances": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.ListInstances(ctx, as(who, &pinfoldv1.ListInstancesRequest{}))
			return msgOf(r, err)
		}),
		"Capacity": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.Capacity(ctx, as(who, &pinfoldv1.CapacityRequest{Service: "web", Cpu: "1", MemoryBytes: 64 << 20}))
			return msgOf(r, err)
		}),
		"Health": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.Health(ctx, as(who, &pinfoldv1.HealthRequest{}))
			return msgOf(r, err)
		}),
		"GetPlacementSettings": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.GetPlacementSettings(ctx, as(who, &pinfoldv1.GetPlacementSettingsRequest{}))
			return msgOf(r, err)
		}),
		"ListEvents": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.ListEvents(ctx, as(who, &pinfoldv1.ListEventsRequest{}))
			return msgOf(r, err)
		}),
		"GetService": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.GetService(ctx, as(who, &pinfoldv1.GetServiceRequest{Name: "web"}))
			return msgOf(r, err)
		}),
		"Rebalance": unary(func(ctx context.Context, who string) (proto.Message, error) {
			r, err := f.cli.Rebalance(ctx, as(who, &pinfoldv1.RebalanceRequest{}))
			return msgOf(r, err)
		}),
		"ExportPlan": unary(func(ctx context.Context, who string) (proto.Message, error) {
			st, err := f.cli.ExportPlan(ctx, as(who, &pinfoldv1.ExportPlanRequest{}))
			if err != nil {
				return nil, err
			}
			all := &pinfoldv1.ExportPlanResponse{}
			for st.Receive() {
				all.PlanJson = append(all.PlanJson, st.Msg().PlanJson...)
			}
			return all, st.Err()
		}),
	}
	for m, acc := range methodAccess {
		if _, ok := calls[m]; !ok && mayEverCall(pki.RoleViewer, acc) {
			t.Errorf("%s: a viewer may call it, and the walk does not: add it", m)
		}
	}
	seenByAdmin := map[string]string{}
	for m, call := range calls {
		for _, who := range []string{"viewer/bob", "admin/alice"} {
			resp, err := call(who)
			if err != nil {
				t.Errorf("%s as %s: %v", m, who, err)
				continue
			}
			text := protojson.Format(resp)
			if pj, ok := resp.(*pinfoldv1.ExportPlanResponse); ok {
				text = string(pj.PlanJson)
			}
			for _, s := range testSecrets {
				switch {
				case who == "viewer/bob" && strings.Contains(text, s):
					t.Errorf("%s as a viewer holds the secret %q: %.300s", m, s, text[max(0, strings.Index(text, s)-150):])
				case who == "admin/alice" && strings.Contains(text, s):
					seenByAdmin[s] = m
				}
			}
		}
	}
	for _, s := range testSecrets {
		if seenByAdmin[s] == "" {
			t.Errorf("control: no answer to the admin holds %q: the walk cannot see that secret", s)
		}
	}
	t.Logf("the admin read each secret in: %v (instance %s)", seenByAdmin, name)
}

func msgOf[T any](r *connect.Response[T], err error) (proto.Message, error) {
	if err != nil {
		return nil, err
	}
	return any(r.Msg).(proto.Message), nil
}

// TestRedactText: an event's request text loses the same fields; a text
// cut at its bound is hidden whole.
func TestRedactText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"service":"web","env":["A=1","B"]}`, `{"env":["A","B"],"service":"web"}`},
		{`{"container":{"log_opts":{"splunk-token":"x"},"labels":{"vault.Token":"y","team":"web"}}}`,
			`{"container":{"labels":{"team":"web","vault.Token":""},"log_opts":{"splunk-token":""}}}`},
		{`{"health":{"exec":["sh","-c","x"]}}`, `{"health":{"exec":["` + HiddenCommand + `"]}}`},
		{`{"service":"web"}`, `{"service":"web"}`},
		{`{"service":"web","env":["A=`, HiddenRequest},
	} {
		if got := redactText(tc.in); got != tc.want {
			t.Errorf("redactText(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
