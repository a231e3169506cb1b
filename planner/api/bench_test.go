package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
	"github.com/pinfold/pinfold/test/testenv"
)

// benchPlanner starts embedded etcd (with fsync, as in production), a
// planner over it and the API on an httptest server; it registers hosts
// bench hosts (2 NUMA × 32 SMT cores, 512 GiB).
func benchPlanner(b *testing.B, hosts int, noFsync bool) (pinfoldv1connect.PlannerServiceClient, *service.Service) {
	b.Helper()
	dir := b.TempDir()
	port := func() string { return fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(b)) }
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
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < hosts; i = int(next.Add(1)) - 1 {
				if _, err := cl.RegisterHost(context.Background(), connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: fmt.Sprintf("host-%05d", i), TopologyJson: tj, MemoryShare: 1})); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
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
		resp, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: svc, Count: n, Cpu: "1.3", Bind: true, MemoryBytes: 1 << 30}))
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

// clients is how many concurrent API clients the pipeline benchmarks run.
const clients = 32

// latencies collects per-request latencies from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// report adds requests/s, p50 and p99 (ms) and the process's CPU time per
// request (µs: API, planner and the embedded etcd together) to b.
func (l *latencies) report(b *testing.B, cpu0 time.Duration) {
	b.Helper()
	slices.Sort(l.d)
	q := func(f float64) float64 { return float64(l.d[int(f*float64(len(l.d)-1))]) / 1e6 }
	b.ReportMetric(float64(len(l.d))/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(len(l.d)), "cpu-µs/req")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parallel runs op b.N times from clients goroutines, op i getting index i.
func parallel(b *testing.B, op func(i int) error) *latencies {
	b.Helper()
	var next atomic.Int64
	l := &latencies{}
	var wg sync.WaitGroup
	b.ResetTimer()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t := time.Now()
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
				l.add(time.Since(t))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	return l
}

// BenchmarkConcurrentDeploys: independent one-instance deploy requests
// (0.1 CPU bound, 64 MiB) from 32 clients over 100 hosts.
func BenchmarkConcurrentDeploys(b *testing.B) { concurrentDeploys(b, 100) }

// BenchmarkConcurrentDeploys10kHosts is BenchmarkConcurrentDeploys over
// 10,000 hosts; run both in one go to compare the rates on one machine.
func BenchmarkConcurrentDeploys10kHosts(b *testing.B) { concurrentDeploys(b, 10000) }

func concurrentDeploys(b *testing.B, hosts int) {
	cl, _ := benchPlanner(b, hosts, false)
	ctx := context.Background()
	cpu0 := processCPU()
	l := parallel(b, func(i int) error {
		_, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: fmt.Sprintf("c%d", i%50), Count: 1, Cpu: "0.1", Bind: true, MemoryBytes: 64 << 20}))
		return err
	})
	l.report(b, cpu0)
}

// deployed places n one-instance deploys (0.1 CPU bound, 64 MiB) over the
// planner's hosts and returns their instance IDs.
func deployed(b *testing.B, cl pinfoldv1connect.PlannerServiceClient, n int) []string {
	b.Helper()
	var ids []string
	for i := 0; i < n; i += 500 {
		resp, err := cl.Deploy(context.Background(), connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: fmt.Sprintf("r%d", i), Count: int32(min(500, n-i)), Cpu: "0.1", Bind: true, MemoryBytes: 64 << 20}))
		if err != nil {
			b.Fatal(err)
		}
		for _, in := range resp.Msg.Instances {
			ids = append(ids, in.Id)
		}
	}
	return ids
}

// BenchmarkConcurrentResizes: one-instance resizes (+0.01 CPU, +1 MiB)
// from 32 clients, each on its own instance, over 100 hosts.
func BenchmarkConcurrentResizes(b *testing.B) {
	cl, _ := benchPlanner(b, 100, false)
	ids := deployed(b, cl, min(b.N, 20000))
	ctx := context.Background()
	cpu0 := processCPU()
	l := parallel(b, func(i int) error {
		_, err := cl.Resize(ctx, connect.NewRequest(&pinfoldv1.ResizeRequest{Target: ids[i%len(ids)], CpuDelta: "0.01", MemoryDeltaBytes: 1 << 20}))
		return err
	})
	l.report(b, cpu0)
}

// BenchmarkConcurrentRemoves: one-instance removes from 32 clients over
// 100 hosts.
func BenchmarkConcurrentRemoves(b *testing.B) {
	cl, _ := benchPlanner(b, 100, false)
	ids := deployed(b, cl, b.N)
	ctx := context.Background()
	cpu0 := processCPU()
	l := parallel(b, func(i int) error {
		_, err := cl.Remove(ctx, connect.NewRequest(&pinfoldv1.RemoveRequest{Target: ids[i]}))
		return err
	})
	l.report(b, cpu0)
}

// BenchmarkPacedDeploys500: one-instance deploys sent at a steady 500 a
// second (open loop: a slow answer does not slow the sender), the latency
// each one saw.
func BenchmarkPacedDeploys500(b *testing.B) {
	cl, _ := benchPlanner(b, 100, false)
	ctx := context.Background()
	const rate = 500
	l := &latencies{}
	var wg sync.WaitGroup
	cpu0 := processCPU()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
		wg.Go(func() {
			t := time.Now()
			if _, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: fmt.Sprintf("p%d", i%50), Count: 1, Cpu: "0.1", Bind: true, MemoryBytes: 64 << 20})); err != nil {
				b.Error(err)
				return
			}
			l.add(time.Since(t))
		})
	}
	wg.Wait()
	b.StopTimer()
	l.report(b, cpu0)
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

// BenchmarkPlannerMemory33kInstances: heap of a planner holding 33,000
// instances on 100 hosts (the measurement: 845 MB of RSS), etcd
// in the same process (fsync off, to deploy them quickly).
// KiB-heap/instance divides the whole heap, hosts and etcd's own included;
// KiB-added/instance divides what the instances added to the same planner
// with its hosts registered and none deployed (the cache, the indexes,
// etcd's log and index of them: what each instance costs).
func BenchmarkPlannerMemory33kInstances(b *testing.B) {
	heap := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapInuse)
	}
	for i := 0; i < b.N; i++ {
		cl, svc := benchPlanner(b, 100, true)
		before := heap()
		const n = 33000
		deployed(b, cl, n)
		if got := len(svc.Instances("", "")); got != n {
			b.Fatalf("%d instances", got)
		}
		after := heap()
		b.ReportMetric(after/(1<<20), "MiB-heap")
		b.ReportMetric(after/1024/n, "KiB-heap/instance")
		b.ReportMetric((after-before)/1024/n, "KiB-added/instance")
	}
}

// BenchmarkRegisterHost8192: one agent registration of the 8,192-CPU
// topology topologytest.Wide through the API (decode, validate, store in
// etcd without fsync, so that the figure is CPU). cpu-ms/op is this
// process's CPU per registration: the planner's, etcd's and the client's
// together, an upper bound of the planner's.
func BenchmarkRegisterHost8192(b *testing.B) {
	cl, _ := benchPlanner(b, 0, true)
	tj, err := json.Marshal(topologytest.Wide())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(tj)))
	cpu0 := processCPU()
	i := 0
	for b.Loop() {
		if _, err := cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: fmt.Sprintf("wide-%d", i), TopologyJson: tj,
			MemoryShare: 1, Agent: true, AgentVersion: "bench", Protocol: model.Protocol})); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
}
