package service_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestVerifyNoFalseAlarms: the audit runs while deploys and removes
// commit; a host's usage and its instances change in one revision, and
// the audit reads them at one revision: it never reports a violation
// (reading usage and instances one after another, it did, under ordinary
// load).
func TestVerifyNoFalseAlarms(t *testing.T) {
	s := newMemService(t)
	ctx := context.Background()
	register(t, s, "h1", topologytest.Laptop().Topology())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ins, err := s.Deploy(ctx, service.DeployRequest{Service: "churn", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 20, Memory: 8 << 20}}})
				if err == nil {
					_, err = s.Remove(ctx, ins[0].ID)
				}
				if err != nil {
					t.Errorf("churn: %v", err)
					return
				}
			}
		})
	}
	var audits int
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); audits++ {
		if bad := service.Verify(s.Store(), 100); len(bad) > 0 {
			t.Errorf("audit %d under churn: %v", audits, bad)
			break
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d audits", audits)
}
