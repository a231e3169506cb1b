package state

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestPlacedListCarriesOver: after one host's usage changes, the next
// schedulable list is the one before with that host replaced (the others
// are the same views), and equals a list built from scratch.
func TestPlacedListCarriesOver(t *testing.T) {
	s, _ := startStore(t, 0)
	ctx := context.Background()
	var c Change
	for i := range 20 {
		h, err := NewHost(fmt.Sprintf("h%02d", i), topologytest.Laptop().Topology(), s.cfg, CapacitySettings{MemoryShare: 1})
		if err != nil {
			t.Fatal(err)
		}
		c.PutHost(h)
	}
	if _, err := s.Commit(ctx, &c); err != nil {
		t.Fatal(err)
	}
	first := waitPlaced(t, s, func(p *Placed) bool { return len(p.Hosts) == 20 })
	var a Alloc
	a.Add(model.Instance{ID: "web-1", Service: "web", Host: "h07", Allocation: model.Allocation{Memory: 64 << 20, NUMANode: -1, CPUQuota: 10}}, +1)
	var c2 Change
	c2.PutAlloc("h07", a)
	if _, err := s.Commit(ctx, &c2); err != nil {
		t.Fatal(err)
	}
	got := waitPlaced(t, s, func(p *Placed) bool { return p.Hosts[7].Resources.Instances["web"] == 1 })
	for i := range got.Hosts {
		if same := got.Hosts[i] == first.Hosts[i]; same != (i != 7) {
			t.Errorf("host %s: the same view as the list before: %v, want %v", got.Hosts[i].Name, same, i != 7)
		}
	}
	s.m.mu.Lock()
	s.m.list, s.m.prev = nil, nil // build the next from scratch
	s.m.mu.Unlock()
	want := s.SchedulablePlacement()
	for i := range want.Hosts {
		if got.Hosts[i] != want.Hosts[i] || got.Rev(i) != want.Rev(i) {
			t.Errorf("host %d: carried over %s %+v, from scratch %s %+v", i, got.Hosts[i].Name, got.Rev(i), want.Hosts[i].Name, want.Rev(i))
		}
	}
}

// waitPlaced is the store's schedulable list once ok holds for it.
func waitPlaced(t *testing.T, s *Store, ok func(*Placed) bool) *Placed {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := s.SchedulablePlacement()
		if len(p.Hosts) > 0 && ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the schedulable list never reached the state wanted (%d hosts)", len(p.Hosts))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
