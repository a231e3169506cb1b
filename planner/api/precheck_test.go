package api

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// garbage is a client codec that sends size bytes no server can decode in
// place of every request (named as the codec it stands in for).
type garbage struct {
	name string
	size int
}

func (g garbage) Name() string { return g.name }

func (g garbage) Marshal(any) ([]byte, error) {
	return bytes.Repeat([]byte{0xff, '{'}, g.size/2), nil
}

func (g garbage) Unmarshal(b []byte, m any) error {
	if g.name == "json" {
		return strictJSON{}.Unmarshal(b, m)
	}
	return proto.Unmarshal(b, m.(proto.Message))
}

// protocols are the API's wire protocols, each with a client codec that
// sends an undecodable request of 4 MiB less a little (under the limit).
func protocols() map[string][]connect.ClientOption {
	const size = 4<<20 - 1024
	return map[string][]connect.ClientOption{
		"connect+json":  {connect.WithCodec(garbage{"json", size})},
		"connect+proto": {connect.WithCodec(garbage{"proto", size})},
		"grpc":          {connect.WithGRPC(), connect.WithCodec(garbage{"proto", size})},
		"grpc-web":      {connect.WithGRPCWeb(), connect.WithCodec(garbage{"proto", size})},
	}
}

// TestRefusedBeforeRead: a call its caller may never make is refused
// (Unauthenticated, PermissionDenied) before a byte of its body is read,
// in every protocol: a viewer's malformed 4 MiB settings call gets
// PermissionDenied, not InvalidArgument (issue 26 item 4, N11). Before,
// the body was read and decoded first.
func TestRefusedBeforeRead(t *testing.T) {
	f := newAuditFixture(t)
	for proto, opts := range protocols() {
		cli := pinfoldv1connect.NewPlannerServiceClient(f.srv.Client(), f.srv.URL, opts...)
		for _, tc := range []struct {
			who, want string
			code      connect.Code
			call      func(ctx context.Context, who string) error
		}{
			{"viewer/bob", "identity viewer:bob may not call SetPlacementSettings", connect.CodePermissionDenied, func(ctx context.Context, who string) error {
				_, err := cli.SetPlacementSettings(ctx, as(who, &pinfoldv1.PlacementSettings{}))
				return err
			}},
			{"viewer/bob", "identity viewer:bob may not call Deploy", connect.CodePermissionDenied, func(ctx context.Context, who string) error {
				_, err := cli.Deploy(ctx, as(who, &pinfoldv1.DeployRequest{}))
				return err
			}},
			{"viewer/bob", "identity viewer:bob may not call Heartbeat", connect.CodePermissionDenied, func(ctx context.Context, who string) error {
				_, err := cli.Heartbeat(ctx, as(who, &pinfoldv1.HeartbeatRequest{}))
				return err
			}},
			{"agent/h1", "identity agent:h1 may not call ListHosts", connect.CodePermissionDenied, func(ctx context.Context, who string) error {
				_, err := cli.ListHosts(ctx, as(who, &pinfoldv1.ListHostsRequest{}))
				return err
			}},
			{"agent/h1", "identity agent:h1 may not call Rebalance", connect.CodePermissionDenied, func(ctx context.Context, who string) error {
				_, err := cli.Rebalance(ctx, as(who, &pinfoldv1.RebalanceRequest{}))
				return err
			}},
			{"viewer/bob", "identity viewer:bob may not call WatchInstances", connect.CodePermissionDenied, func(ctx context.Context, who string) error {
				s, err := cli.WatchInstances(ctx, as(who, &pinfoldv1.WatchInstancesRequest{}))
				if err != nil {
					return err
				}
				defer s.Close()
				for s.Receive() {
				}
				return s.Err()
			}},
			{"", "no verified client certificate", connect.CodeUnauthenticated, func(ctx context.Context, who string) error {
				_, err := cli.Deploy(ctx, as(who, &pinfoldv1.DeployRequest{}))
				return err
			}},
			{"/mallory", "mallory", connect.CodeUnauthenticated, func(ctx context.Context, who string) error {
				_, err := cli.SetPlacementSettings(ctx, as(who, &pinfoldv1.PlacementSettings{}))
				return err
			}},
		} {
			t.Run(proto+"/"+tc.who+"/"+tc.want, func(t *testing.T) {
				f.read.Store(0)
				err := tc.call(t.Context(), tc.who)
				if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("call = %v, want %v naming %q", err, tc.code, tc.want)
				}
				if n := f.read.Load(); n != 0 {
					t.Errorf("%d bytes of the request read, want none", n)
				}
			})
		}
	}
}

// TestRefusedBeforeReadRecorded: a call refused before it is read is
// counted in the metrics and recorded (sampled) in the event log like one
// the authorizer refuses after. Before, a malformed request was refused
// by its decoding, counted nowhere and recorded nowhere.
func TestRefusedBeforeReadRecorded(t *testing.T) {
	f := newAuditFixtureWith(t, Options{Authorize: true})
	m := f.metrics
	stop := f.runEvents(t)
	cli := pinfoldv1connect.NewPlannerServiceClient(f.srv.Client(), f.srv.URL, protocols()["connect+json"]...)
	const calls = service.RefusedEventsPerMinute + 5
	for range calls {
		if _, err := cli.Deploy(t.Context(), as("viewer/bob", &pinfoldv1.DeployRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("viewer deploy = %v, want permission denied", err)
		}
	}
	if _, err := cli.SetPlacementSettings(t.Context(), as("", &pinfoldv1.PlacementSettings{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("settings with no certificate = %v, want unauthenticated", err)
	}
	if _, err := cli.ListHosts(t.Context(), as("agent/h1", &pinfoldv1.ListHostsRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("agent ListHosts = %v, want permission denied", err)
	}
	stop()
	for _, c := range []struct {
		method, code string
		want         float64
	}{{"Deploy", "permission_denied", calls}, {"SetPlacementSettings", "unauthenticated", 1}, {"ListHosts", "permission_denied", 1}} {
		var got dto.Metric
		if err := m.requests.WithLabelValues(c.method, c.code).Write(&got); err != nil {
			t.Fatal(err)
		}
		if got := got.GetCounter().GetValue(); got != c.want {
			t.Errorf("pinfold_planner_requests_total{method=%s,code=%s} = %v, want %v", c.method, c.code, got, c.want)
		}
	}
	counted, _ := f.svc.RefusedCalls()
	if got := counted[service.RefusalKey{Identity: "viewer:bob", Method: "Deploy"}]; got != calls {
		t.Errorf("refused calls counted for viewer:bob Deploy = %d, want %d", got, calls)
	}
	deploys, settings := 0, 0
	perMinute := map[time.Time]int{} // the sampling's windows: the calls may straddle two
	for _, ev := range f.events(t) {
		switch {
		case ev.Identity == "viewer:bob" && ev.Kind == "Deploy":
			deploys++
			perMinute[ev.Time.UTC().Truncate(time.Minute)]++
			if want := "permission_denied: identity viewer:bob may not call Deploy"; ev.Outcome != want {
				t.Errorf("event outcome %q, want %q", ev.Outcome, want)
			}
		case ev.Identity == "(no certificate)" && ev.Kind == "SetPlacementSettings":
			settings++
		case ev.Kind == "ListHosts":
			t.Errorf("a read recorded: %+v", ev)
		}
	}
	// Sampled: at most RefusedEventsPerMinute a minute, all of them
	// when the calls fell in one minute (in two, each minute's own).
	sampled := len(perMinute) <= 2 && (len(perMinute) == 1 && deploys == service.RefusedEventsPerMinute || len(perMinute) == 2 && deploys < calls+1)
	for _, n := range perMinute {
		sampled = sampled && n <= service.RefusedEventsPerMinute
	}
	if !sampled || settings != 1 {
		t.Errorf("events: %d of viewer:bob's Deploy in minutes %v (want %d in a minute, sampled), %d of the settings call with no certificate (want 1)",
			deploys, perMinute, service.RefusedEventsPerMinute, settings)
	}
}

// TestAllowedAfterRead: what needs the request is still decided after it
// is decoded: an agent for its own host, a viewer's dry run; a refusal
// there names the host, and a malformed request of a caller who may call
// the method is InvalidArgument.
func TestAllowedAfterRead(t *testing.T) {
	f := newAuditFixture(t)
	ctx := t.Context()
	if _, err := f.cli.ListHosts(ctx, as("viewer/bob", &pinfoldv1.ListHostsRequest{})); err != nil {
		t.Errorf("viewer ListHosts: %v", err)
	}
	if _, err := f.cli.Heartbeat(ctx, as("agent/h1", &pinfoldv1.HeartbeatRequest{Host: "h1", TtlSeconds: 10})); err != nil {
		t.Errorf("agent h1 Heartbeat for h1: %v", err)
	}
	_, err := f.cli.Heartbeat(ctx, as("agent/h2", &pinfoldv1.HeartbeatRequest{Host: "h1", TtlSeconds: 10}))
	if want := `identity agent:h2 may not call Heartbeat for host "h1"`; connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), want) {
		t.Errorf("agent h2 Heartbeat for h1 = %v, want permission denied naming %q", err, want)
	}
	if _, err := f.cli.Rebalance(ctx, as("viewer/bob", &pinfoldv1.RebalanceRequest{})); err != nil {
		t.Errorf("viewer Rebalance dry run: %v", err)
	}
	if _, err := f.cli.Rebalance(ctx, as("viewer/bob", &pinfoldv1.RebalanceRequest{Apply: true})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("viewer Rebalance apply = %v, want permission denied", err)
	}
	bad := pinfoldv1connect.NewPlannerServiceClient(f.srv.Client(), f.srv.URL, protocols()["connect+json"]...)
	if _, err := bad.Heartbeat(ctx, as("agent/h2", &pinfoldv1.HeartbeatRequest{})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("agent's malformed Heartbeat = %v, want invalid argument (read: the host is in the request)", err)
	}
}

// TestEveryMethodHasAccess: every method of the service is in
// methodAccess, the one table both checks read, and no entry names a
// method the service lacks; a role the table refuses a method is refused
// it by authorize for any request (the checks cannot disagree).
func TestEveryMethodHasAccess(t *testing.T) {
	t.Parallel()
	methods := pinfoldv1.File_pinfold_v1_planner_proto.Services().ByName("PlannerService").Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		name := string(md.Name())
		acc, ok := methodAccess[name]
		if !ok {
			t.Errorf("%s: not in methodAccess", name)
			continue
		}
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, role := range pki.Roles {
			if !mayEverCall(role, acc) && connect.CodeOf(authorize(pki.Identity{Name: "h1", Role: role}, name, mt.New().Interface())) != connect.CodePermissionDenied {
				t.Errorf("%s %s: refused before the request is read, allowed after", role, name)
			}
		}
	}
	for name := range methodAccess {
		if methods.ByName(protoreflect.Name(name)) == nil {
			t.Errorf("methodAccess lists %s, not a method of the service", name)
		}
	}
}
