package state

import (
	"context"
	"maps"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// TestOldUsageGetsWholeCoresMarks: a usage document written before the
// whole-cores marks (an upgrade) holds a whole-cores instance's CPUs
// unmarked; a store that loads it derives the marks from the instances,
// so the engine keeps those cores whole. Without deriveWholeCores the
// loaded usage has no marks.
func TestOldUsageGetsWholeCoresMarks(t *testing.T) {
	s, cu := startStore(t, 0)
	ctx := context.Background()
	in := model.Instance{ID: "wc-1", Service: "wc", Host: "h1", Generation: 1,
		Allocation: model.Allocation{Bind: true, WholeCores: true, CPUs: map[cpuset.CPUID]int{0: 100, 4: 100}, Memory: 1 << 30}}
	plain := model.Instance{ID: "web-1", Service: "web", Host: "h1", Generation: 1,
		Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{1: 50}, Memory: 1 << 30}}
	a := NewAlloc()
	a.Add(in, +1)
	a.Add(plain, +1)
	a.WholeCores = nil // as an older planner wrote it
	var c Change
	c.PutInstance(in)
	c.PutInstance(plain)
	c.PutAlloc("h1", a)
	if _, err := s.Commit(ctx, &c); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, Dial{Endpoints: []string{cu}}, s.Config(), model.Protocol, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	again.mu.RLock()
	got := again.c.allocs["h1"].Value.WholeCores
	again.mu.RUnlock()
	if want := map[cpuset.CPUID]int{0: 1, 4: 1}; !maps.Equal(got, want) {
		t.Errorf("loaded usage's whole-cores marks = %v, want %v", got, want)
	}
}
