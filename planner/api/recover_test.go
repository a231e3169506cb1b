package api_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// panicky is the real service whose Rebalance and WatchInstances panic,
// as a handler's defect would.
type panicky struct{ *service.Service }

func (panicky) Rebalance(context.Context, service.RebalanceRequest) (service.RebalanceResult, error) {
	panic("injected panic in Rebalance")
}

func (panicky) WatchInstances(context.Context, string, func(int64, state.HostView, []state.InstanceView) error) error {
	panic("injected panic in WatchInstances")
}

// TestHandlerPanicIsThatCallsInternalError: a panic in a unary handler or
// a stream is the caller's internal error (CodeInternal, saying so), not
// a dropped connection the CLI reads as "planner unreachable"; it is
// counted, and the next call is served. Without connect.WithRecover in
// api.Handler the client sees the connection end (CodeUnavailable or
// CodeUnknown) and the first check fails.
func TestHandlerPanicIsThatCallsInternalError(t *testing.T) {
	c := statetest.Start(t, 1)
	st := c.Open(t, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	svc := service.New(st, nil)
	ctx := context.Background()
	if _, err := svc.RegisterHost(ctx, service.RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(), Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(panicky{svc}, api.Options{}))
	t.Cleanup(srv.Close)
	cl := pinfoldv1connect.NewPlannerServiceClient(srv.Client(), srv.URL)
	_, err := cl.Rebalance(ctx, connect.NewRequest(&pinfoldv1.RebalanceRequest{}))
	if connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "internal error of the planner") {
		t.Fatalf("a panicking Rebalance = %v (%s), want CodeInternal naming the internal error", err, connect.CodeOf(err))
	}
	stream, err := cl.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: "h1"}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if connect.CodeOf(stream.Err()) != connect.CodeInternal {
		t.Errorf("a panicking stream ended with %v, want CodeInternal", stream.Err())
	}
	if svc.Panics() != 2 {
		t.Errorf("%d panics counted, want 2", svc.Panics())
	}
	if _, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{})); err != nil {
		t.Errorf("the next call: %v", err)
	}
}
