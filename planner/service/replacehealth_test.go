package service_test

import (
	"context"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestReplaceKeepsHealthInRecord: a service's replace with a health check
// records the check in the service's record, so that a scale gives new
// instances the check the replaced ones have (before, the record kept the
// deploy's check, and a services file's diff never settled).
func TestReplaceKeepsHealthInRecord(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	if _, err := s.Deploy(ctx, service.DeployRequest{Service: "web", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "busybox"}, Size: model.Size{Pieces: 50, Memory: GiB}}}); err != nil {
		t.Fatal(err)
	}
	hc := &model.HealthCheck{TCP: 8080}
	if _, err := s.Replace(ctx, service.ReplaceRequest{Target: "web", Image: "busybox:2", Health: hc}); err != nil {
		t.Fatal(err)
	}
	svc, n, ok := s.ServiceRecord("web")
	if !ok || n != 1 || svc.Image != "busybox:2" || svc.Health == nil || svc.Health.TCP != 8080 {
		t.Fatalf("record after replace = %+v (count %d, %v); want image busybox:2 and the TCP 8080 check", svc, n, ok)
	}
	res, err := s.Scale(ctx, "web", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Added) != 1 || res.Added[0].Health == nil || res.Added[0].Health.TCP != 8080 {
		t.Errorf("scaled-up instance %+v; want the TCP 8080 check", res.Added)
	}
}
