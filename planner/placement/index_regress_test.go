package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
)

func idxHost(name string, free, cpus int, mem int64, svc int) *Host {
	r := &alloc.Host{Name: name, MemoryBytes: mem, Instances: map[string]int{}}
	for c := range cpus {
		cpu := alloc.CPU{ID: cpuset.CPUID(c), Capacity: 100}
		if c >= free {
			cpu.Used = 100
		}
		r.CPUs = append(r.CPUs, cpu)
	}
	if svc > 0 {
		r.Instances["svc"] = svc
	}
	return &Host{Name: name, Resources: r}
}

// idxWant is what a regression expects of the index: to decline the
// request (the full plan answers it), or to answer it as the full plan
// does.
type idxWant int

const (
	idxDeclines idxWant = iota
	idxAnswers
)

func idxCompare(t *testing.T, x *Index, s Settings, hosts []*Host, r Request, w idxWant) {
	t.Helper()
	got, ok := x.First(params, s, hosts, r)
	want, err := PlanValid(params, s, hosts, r)
	switch {
	case !ok && w == idxDeclines:
		return
	case !ok:
		t.Fatalf("declined; want the full plan's answer %v (%v)", placementsOf(want), err)
	case w == idxDeclines:
		t.Fatalf("answered %v; want a decline (the full plan: %v, %v)", got.Placements, placementsOf(want), err)
	}
	if err != nil {
		t.Fatalf("index placed %v, full plan refused: %v", got.Placements, err)
	}
	if d := cmp.Diff(want.Placements, got.Placements); d != "" || want.Spread != "" || len(want.Violations) > 0 {
		t.Fatalf("index differs from the full plan (-full +index) spread %q violations %v:\n%s", want.Spread, want.Violations, d)
	}
}

func placementsOf(r *Result) []alloc.Placement {
	if r == nil || r.Result == nil {
		return nil
	}
	return r.Placements
}

// Regressions found by an attack on the room index (2026-11-26); each
// failed before its fix. Each says whether the index must decline or
// answer: a check that accepted either passed an index that declines
// everything (issue 37).

// Rooms above 1<<30 (memory-first, tiny memory per instance): the index
// capped them and so tied hosts the full plan orders by room; it now
// declines.
func TestIndexRoomAboveCap(t *testing.T) {
	a := idxHost("a", 1, 1, 1<<31, 0)
	b := idxHost("b", 1, 1, 1<<32, 0)
	hosts := []*Host{a, b}
	x := NewIndex(params, hosts, nil)
	r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, MemoryBytes: 1}}
	idxCompare(t, x, Settings{}, hosts, r, idxDeclines)
}

// MaxPerHost above the int32 range: the index truncated it (1<<32+1 → 1).
func TestIndexMaxPerHostTruncated(t *testing.T) {
	a := idxHost("a", 2, 4, 8<<30, 0)
	b := idxHost("b", 4, 4, 8<<30, 0)
	hosts := []*Host{a, b}
	x := NewIndex(params, hosts, nil)
	r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, Pieces: 100, Bind: true, MemoryBytes: 1 << 20, MaxPerHost: 1<<32 + 1}}
	idxCompare(t, x, Settings{}, hosts, r, idxAnswers)
}

// A pending copy whose replaced hosts gained a fault domain: the index's
// domain count is its own list's, so it called the request plain; it now
// declines where a replaced host brings a domain under a spread.
func TestIndexPendingGainsDomain(t *testing.T) {
	a := idxHost("a", 8, 8, 8<<30, 0)
	b := idxHost("b", 2, 8, 8<<30, 0)
	c := idxHost("c", 1, 8, 8<<30, 1)
	hosts := []*Host{a, b, c}
	x := NewIndex(params, hosts, nil)
	a2, c2 := *a, *c
	a2.FaultDomain, c2.FaultDomain = "fd:/dc1", "fd:/dc1"
	pending := []*Host{&a2, b, &c2}
	r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, Pieces: 100, Bind: true, MemoryBytes: 1 << 20, Seed: 5}}
	idxCompare(t, x, Settings{}, pending, r, idxDeclines)
}

// A pending copy in which a host in maintenance with a fault domain
// leaves maintenance.
func TestIndexPendingLeavesMaintenance(t *testing.T) {
	a := idxHost("a", 8, 8, 8<<30, 0)
	b := idxHost("b", 2, 8, 8<<30, 0)
	c := idxHost("c", 1, 8, 8<<30, 1)
	a.FaultDomain, c.FaultDomain = "fd:/dc1", "fd:/dc1"
	a.Maintenance, c.Maintenance = true, true
	hosts := []*Host{a, b, c}
	x := NewIndex(params, hosts, nil)
	a2, c2 := *a, *c
	a2.Maintenance, c2.Maintenance = false, false
	pending := []*Host{&a2, b, &c2}
	r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, Pieces: 100, Bind: true, MemoryBytes: 1 << 20, Seed: 5}}
	idxCompare(t, x, Settings{}, pending, r, idxDeclines)
}
