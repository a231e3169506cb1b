// Package workload is the workload matrix: the programs people deploy,
// defined once for every tier that measures what an instance gets and sees
// (the kernel tier in the guest and natively, the e2e tier with Docker, the
// share model). A Load runs as a process (Run) started inside the
// instance's cgroup; it reports what it saw to a file (Report).
//
// Each Load is named by a spec string, "kind:arg:arg", so that a test can
// pass it to a helper process through the environment:
//
//	spin:N           N busy OS threads (a C program's threads; run it with
//	                 GOMAXPROCS=N+1, a P left for the reporter)
//	go:N             a Go program with N busy goroutines, GOMAXPROCS left
//	                 to the runtime (it re-reads affinity and cpu.max)
//	bursty:N:ON:OFF  N OS threads, each ON ms of CPU work then OFF ms asleep
//	                 (request-like); demand N×ON/(ON+OFF)
//	pool:N           a Go thread pool: one producer hands 1 ms items to N
//	                 workers over a channel, default GOMAXPROCS
//	forks:N:MS       N loops each starting a process that burns MS ms of CPU
//	                 and exits (make -j)
//	subcg:N          makes its own sub-cgroup, moves itself there, enables
//	                 the cpu controller as systemd would, then N busy threads
//	idle             sleeps
package workload

import (
	"fmt"
	"strconv"
	"strings"
)

// Load is one instance's workload.
type Load struct {
	Kind string
	N    int // threads, goroutines, workers or loops
	On   int // bursty: ms of CPU work per burst; forks: ms per process
	Off  int // bursty: ms asleep between bursts
}

// Kinds of Load.
const (
	Spin   = "spin"
	Go     = "go"
	Bursty = "bursty"
	Pool   = "pool"
	Forks  = "forks"
	SubCG  = "subcg"
	Idle   = "idle"
)

// String is the Load's spec, as Parse reads it.
func (l Load) String() string {
	switch l.Kind {
	case Idle:
		return Idle
	case Bursty:
		return fmt.Sprintf("%s:%d:%d:%d", l.Kind, l.N, l.On, l.Off)
	case Forks:
		return fmt.Sprintf("%s:%d:%d", l.Kind, l.N, l.On)
	}
	return fmt.Sprintf("%s:%d", l.Kind, l.N)
}

// Parse reads a Load's spec; the error names the spec and what is wrong.
func Parse(spec string) (Load, error) {
	f := strings.Split(spec, ":")
	want := map[string]int{Spin: 1, Go: 1, Pool: 1, SubCG: 1, Bursty: 3, Forks: 2, Idle: 0}
	n, ok := want[f[0]]
	if !ok {
		return Load{}, fmt.Errorf("workload %q: unknown kind %q (want spin, go, bursty, pool, forks, subcg or idle)", spec, f[0])
	}
	if len(f)-1 != n {
		return Load{}, fmt.Errorf("workload %q: %s takes %d numbers, got %d", spec, f[0], n, len(f)-1)
	}
	nums := make([]int, 3)
	for i, s := range f[1:] {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 1024 {
			return Load{}, fmt.Errorf("workload %q: field %d = %q: want a whole number 1..1024", spec, i+1, s)
		}
		nums[i] = v
	}
	if f[0] == Forks && nums[0] > 64 {
		return Load{}, fmt.Errorf("workload %q: forks takes at most 64 loops (each a process at a time), got %d", spec, nums[0])
	}
	return Load{Kind: f[0], N: nums[0], On: nums[1], Off: nums[2]}, nil
}

// Demand is the CPUs the load would use with no cap on as many CPUs as it
// likes: what min(plan, demand) is taken of.
func (l Load) Demand() float64 {
	switch l.Kind {
	case Idle:
		return 0
	case Bursty:
		return float64(l.N*l.On) / float64(l.On+l.Off)
	}
	return float64(l.N)
}

// GoRuntime reports whether the load is a Go program whose GOMAXPROCS is
// left to the runtime (what it sees is part of the result).
func (l Load) GoRuntime() bool { return l.Kind == Go || l.Kind == Pool }

// Case is one row of the matrix: the two instances' loads, a (the larger
// plan) and b.
type Case struct {
	Name string
	A, B Load
}

// Matrix is the workload matrix. Its busy rows are the mechanism's best
// case; every other row is what a user deploys.
var Matrix = []Case{
	{"busy 2/2", Load{Kind: Spin, N: 2}, Load{Kind: Spin, N: 2}},
	{"busy 2/16", Load{Kind: Spin, N: 2}, Load{Kind: Spin, N: 16}},
	{"busy 64/64", Load{Kind: Spin, N: 64}, Load{Kind: Spin, N: 64}},
	{"go 1", Load{Kind: Go, N: 1}, Load{Kind: Go, N: 1}},
	{"go 4", Load{Kind: Go, N: 4}, Load{Kind: Go, N: 4}},
	{"go 16", Load{Kind: Go, N: 16}, Load{Kind: Go, N: 16}},
	{"bursty 4x5/20", Load{Kind: Bursty, N: 4, On: 5, Off: 20}, Load{Kind: Bursty, N: 4, On: 5, Off: 20}},
	{"bursty 8x5/20", Load{Kind: Bursty, N: 8, On: 5, Off: 20}, Load{Kind: Bursty, N: 8, On: 5, Off: 20}},
	{"bursty 16x5/20", Load{Kind: Bursty, N: 16, On: 5, Off: 20}, Load{Kind: Bursty, N: 16, On: 5, Off: 20}},
	{"bursty 4x10/10", Load{Kind: Bursty, N: 4, On: 10, Off: 10}, Load{Kind: Bursty, N: 4, On: 10, Off: 10}},
	{"pool 8", Load{Kind: Pool, N: 8}, Load{Kind: Pool, N: 8}},
	{"forks 4x20", Load{Kind: Forks, N: 4, On: 20}, Load{Kind: Forks, N: 4, On: 20}},
	{"subcg 2", Load{Kind: SubCG, N: 2}, Load{Kind: SubCG, N: 2}},
	{"busy 4 / idle", Load{Kind: Spin, N: 4}, Load{Kind: Idle}},
	{"idle / go 4", Load{Kind: Idle}, Load{Kind: Go, N: 4}},
}
