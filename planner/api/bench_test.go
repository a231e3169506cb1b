package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
	"github.com/pinfold/pinfold/planner/api/pinfoldv1/pinfoldv1connect"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// benchPlanner starts embedded etcd (with fsync, as in production), a
// planner over it and the API on an httptest server; it registers hosts
// bench hosts (2 NUMA × 32 SMT cores, 512 GiB).
func benchPlanner(b *testing.B, hosts int, noFsync bool) (pinfoldv1connect.PlannerServiceClient, *service.Service) {
	b.Helper()
	dir := b.TempDir()
	port := func() string {
		srv := httptest.NewServer(nil)
		defer srv.Close()
		return srv.URL
	}
	cu, pu := port(), port()
	e, err := state.StartEmbedded(state.EmbedConfig{Name: "bench", Dir: dir, ClientURL: cu, PeerURL: pu, LogLevel: "fatal", UnsafeNoFsync: noFsync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	st, err := state.Open(context.Background(), state.Dial{Endpoints: []string{cu}}, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	svc := service.New(st, nil)
	srv := httptest.NewServer(api.Handler(svc, api.Options{}))
	b.Cleanup(srv.Close)
	cl := pinfoldv1connect.NewPlannerServiceClient(srv.Client(), srv.URL)
	tj, _ := json.Marshal(topologytest.BenchHost().Topology())
	for i := range hosts {
		if _, err := cl.RegisterHost(context.Background(), connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: fmt.Sprintf("host-%05d", i), TopologyJson: tj, MemoryShare: 1})); err != nil {
			b.Fatal(err)
		}
	}
	return cl, svc
}

// BenchmarkDeployBatch: one API request placing 10,000 instances (1.3 CPU
// bound, 1 GiB) over 150 hosts, committed in one etcd transaction.
func BenchmarkDeployBatch(b *testing.B) {
	cl, _ := benchPlanner(b, 150, false)
	ctx := context.Background()
	const n = 10000
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		svc := fmt.Sprintf("batch%d", i)
		resp, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Service: svc, Count: n, Cpu: "1.3", Bind: true, MemoryBytes: 1 << 30}))
		if err != nil || len(resp.Msg.Instances) != n {
			b.Fatalf("deploy: %v", err)
		}
		b.StopTimer()
		if _, err := cl.Remove(ctx, connect.NewRequest(&pinfoldv1.RemoveRequest{Target: svc})); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "instances/s")
}

// BenchmarkConcurrentDeploys: independent one-instance deploy requests
// (0.1 CPU bound, 64 MiB) from many goroutines over 100 hosts.
func BenchmarkConcurrentDeploys(b *testing.B) {
	cl, _ := benchPlanner(b, 100, false)
	ctx := context.Background()
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			svc := fmt.Sprintf("c%d", seq.Add(1)%50)
			if _, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Service: svc, Count: 1, Cpu: "0.1", Bind: true, MemoryBytes: 64 << 20})); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// BenchmarkPlannerMemory10kHosts: heap of a planner holding 10,000
// registered 128-CPU hosts (etcd runs in the same process: the figure
// includes etcd's own heap; fsync is off to register them quickly).
func BenchmarkPlannerMemory10kHosts(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_, svc := benchPlanner(b, 10000, true)
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if n := len(svc.Hosts()); n != 10000 {
			b.Fatalf("%d hosts", n)
		}
		b.ReportMetric(float64(m.HeapInuse)/(1<<20), "MiB-heap")
	}
}
