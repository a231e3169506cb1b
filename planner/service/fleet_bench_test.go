package service

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// Issue 39: every planner operation bounded at 1,000,000 instances. The
// fleets below are built in an in-memory store (state.Memory: the same
// cache, indexes and engine-view memo as the etcd-backed store, held to it
// by state's contract tests), by deploys of model.MaxDeployCount instances
// at a time: what is measured is the planner's reads and planning, not
// etcd's writes (those are BenchmarkDeployBatch's, planner/api).

// fleetSizes are the sizes each fleet benchmark runs at, so that growth
// shows: instances, hosts (100 instances a host, as issue 39's fleet).
var fleetSizes = []struct {
	name             string
	instances, hosts int
}{
	{"100k", 100_000, 1_000},
	{"1M", 1_000_000, 10_000},
}

// bigHost is the fleet's host of bigHostInstances instances (a drain's).
const (
	bigHost          = "big"
	bigHostInstances = 1_000
	fleetSvcSize     = model.MaxDeployCount
)

// fleetBenchEnv, set, runs the fleet benchmarks.
const fleetBenchEnv = "PINFOLD_FLEET_BENCH"

var (
	fleetMu sync.Mutex
	fleets  = map[string]*Service{}
)

// fleet is the fleet of n instances over hosts hosts (128-CPU bench
// hosts, registered by hand): services of fleetSvcSize memory-first
// instances (0.01 CPU, 16 MiB) spread by auto placement, and the host
// bigHost holding bigHostInstances instances of service "pinned" (and its
// share of the others: about 100 more). Built
// once per process and size, shared by the benchmarks that only read it.
func fleet(tb testing.TB, n, hosts int) *Service {
	tb.Helper()
	if os.Getenv(fleetBenchEnv) == "" {
		// Minutes and gigabytes: not in the test command's benchmark
		// tier (go test -bench . ./planner/...), run by hand.
		tb.Skipf("the fleet benchmarks build fleets of 100,000 and 1,000,000 instances (minutes, about 3 GB): set %s=1 to run them", fleetBenchEnv)
	}
	fleetMu.Lock()
	defer fleetMu.Unlock()
	key := fmt.Sprintf("%d/%d", n, hosts)
	if s, ok := fleets[key]; ok {
		return s
	}
	start := time.Now()
	st, err := state.NewMemory(state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	if err != nil {
		tb.Fatal(err)
	}
	s := New(st, nil)
	ctx := context.Background()
	register := func(name string) {
		if _, err := s.RegisterHost(ctx, RegisterHostRequest{Name: name, Topology: topologytest.BenchHost().Topology(),
			Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
			tb.Fatal(err)
		}
	}
	// bigHost alone takes "pinned" (no rule keeps it there: a drain
	// moves it), then the others are registered.
	register(bigHost)
	size := model.Size{Pieces: 1, Memory: 16 << 20}
	if _, err := s.Deploy(ctx, DeployRequest{Service: "pinned", Count: bigHostInstances, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: size}}); err != nil {
		tb.Fatal(err)
	}
	for i := range hosts - 1 {
		register(fmt.Sprintf("h%05d", i))
	}
	for i, left := 0, n-bigHostInstances; left > 0; i++ {
		count := min(left, fleetSvcSize)
		if _, err := s.Deploy(ctx, DeployRequest{Service: fmt.Sprintf("s%03d", i), Count: count, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: size}}); err != nil {
			tb.Fatal(err)
		}
		left -= count
	}
	if got := len(s.st.Instances("")); got != n {
		tb.Fatalf("%d instances, want %d", got, n)
	}
	big := len(s.st.Instances(bigHost))
	if big < bigHostInstances {
		tb.Fatalf("%d instances on %s, want at least %d", big, bigHost, bigHostInstances)
	}
	tb.Logf("fleet of %d instances over %d hosts (%d on %s) built in %s", n, hosts, big, bigHost, time.Since(start).Round(time.Millisecond))
	fleets[key] = s
	return s
}

// forEachFleet runs bench at every fleet size.
func forEachFleet(b *testing.B, bench func(b *testing.B, s *Service)) {
	for _, size := range fleetSizes {
		b.Run(size.name, func(b *testing.B) {
			s := fleet(b, size.instances, size.hosts)
			b.ReportAllocs()
			b.ResetTimer()
			bench(b, s)
		})
	}
}

// BenchmarkFleetHealth is Health (issue 39: ≤ 2 s at 1,000,000 instances).
func BenchmarkFleetHealth(b *testing.B) {
	now := time.Now()
	forEachFleet(b, func(b *testing.B, s *Service) {
		for range b.N {
			if ws := s.Health(now); len(ws) != 0 {
				b.Fatalf("health warns: %v", ws[0])
			}
		}
	})
}

// BenchmarkFleetVerify is the audit of every host's documents (issue 39:
// ≤ 2 s at 1,000,000 instances).
func BenchmarkFleetVerify(b *testing.B) {
	forEachFleet(b, func(b *testing.B, s *Service) {
		for range b.N {
			if bad := Verify(s.st, s.params.ShareBase); len(bad) != 0 {
				b.Fatalf("audit: %s", bad[0])
			}
		}
	})
}

// BenchmarkFleetRebalanceDryRun is a viewer's dry-run rebalance (issue
// 39: ≤ 2 s at 1,000,000 instances).
func BenchmarkFleetRebalanceDryRun(b *testing.B) {
	forEachFleet(b, func(b *testing.B, s *Service) {
		for range b.N {
			if _, err := s.Rebalance(context.Background(), RebalanceRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFleetPages is a listing's pages: the first and a middle page of
// every instance, of one service's, and the first page of hosts.
func BenchmarkFleetPages(b *testing.B) {
	b.Run("InstancesFirst", func(b *testing.B) {
		forEachFleet(b, func(b *testing.B, s *Service) {
			for range b.N {
				if ins, _, err := s.InstancesPage("", "", 0, ""); err != nil || len(ins) != DefaultPageSize {
					b.Fatal(len(ins), err)
				}
			}
		})
	})
	b.Run("InstancesMiddle", func(b *testing.B) {
		forEachFleet(b, func(b *testing.B, s *Service) {
			token := encodeToken(instanceToken+"\x01\x01", fmt.Sprintf("h%05d", (len(s.st.Hosts())-1)/2), "-") // before its first ID
			for range b.N {
				if ins, _, err := s.InstancesPage("", "", 0, token); err != nil || len(ins) != DefaultPageSize {
					b.Fatal(len(ins), err)
				}
			}
		})
	})
	b.Run("ServiceMiddle", func(b *testing.B) {
		forEachFleet(b, func(b *testing.B, s *Service) {
			token := encodeToken(instanceToken+"\x01\x01s000", fmt.Sprintf("h%05d", (len(s.st.Hosts())-1)/2), "-")
			for range b.N {
				if ins, _, err := s.InstancesPage("", "s000", 0, token); err != nil || len(ins) != DefaultPageSize {
					b.Fatal(len(ins), err)
				}
			}
		})
	})
	b.Run("HostsFirst", func(b *testing.B) {
		forEachFleet(b, func(b *testing.B, s *Service) {
			for range b.N {
				if hs, _, err := s.HostsPage(0, ""); err != nil || len(hs) == 0 {
					b.Fatal(len(hs), err)
				}
			}
		})
	})
}

// BenchmarkFleetExportPlan is the plan export of every host.
func BenchmarkFleetExportPlan(b *testing.B) {
	forEachFleet(b, func(b *testing.B, s *Service) {
		for range b.N {
			if err := s.ExportPlan(func([]byte) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFleetCapacity is every host's room for one more instance.
func BenchmarkFleetCapacity(b *testing.B) {
	forEachFleet(b, func(b *testing.B, s *Service) {
		for range b.N {
			if _, err := s.Capacity(DeployRequest{Service: "s000", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "i"}, Size: model.Size{Pieces: 1, Memory: 16 << 20}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// planOnly plans jobs one after another as the pipeline plans a group
// (each against the cache plus the changes planned before it), and
// commits nothing: the fleet stays as it was for the next iteration.
func planOnly(tb testing.TB, s *Service, jobs []planFunc) {
	tb.Helper()
	pend := s.st.Pending()
	for i, job := range jobs {
		c, err := job(pend)
		if err != nil {
			tb.Fatalf("job %d: %v", i, err)
		}
		if c.Len() == 0 {
			tb.Fatalf("job %d planned nothing", i)
		}
		pend.Add(c)
	}
}

// BenchmarkFleetDrainPlan plans the moves of a drain of bigHost's 1,000
// instances, as drainTick does (issue 39: ≤ 1 s at 1,000,000 instances).
func BenchmarkFleetDrainPlan(b *testing.B) {
	forEachFleet(b, func(b *testing.B, s *Service) {
		for range b.N {
			ins := s.st.Instances(bigHost)
			jobs := make([]planFunc, len(ins))
			moved := make([][]Moved, len(ins))
			for i, iv := range ins {
				jobs[i] = s.moveJob(iv.Instance.ID, "", true, "DrainMove", &moved[i])
			}
			planOnly(b, s, jobs)
		}
	})
}

// BenchmarkFleetHealPlan plans the heal of 100 dead hosts' instances at
// once, as Heal does for each.
func BenchmarkFleetHealPlan(b *testing.B) {
	forEachFleet(b, func(b *testing.B, s *Service) {
		for range b.N {
			var jobs []planFunc
			var moved []Moved
			for i := range 100 {
				host := fmt.Sprintf("h%05d", i)
				for _, iv := range s.st.Instances(host) {
					jobs = append(jobs, s.healJob(iv.Instance.ID, host, false, &moved))
				}
			}
			planOnly(b, s, jobs)
		}
	})
}
