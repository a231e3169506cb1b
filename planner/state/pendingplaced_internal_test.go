package state

import (
	"context"
	"fmt"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// TestPendingPlacedIsRebuilt: the schedulable list a Pending keeps and
// builds on, Add after Add, is the one built from scratch for the same
// pending changes (every host's view and revisions), and a change of the
// store under it is seen. Control: with Add not marking the hosts it
// changes as stale, or the list kept after the store's list changed, the
// kept list differs from the one built from scratch.
func TestPendingPlacedIsRebuilt(t *testing.T) {
	m, err := NewMemory(Config{ShareBase: 100}, model.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx := context.Background()
	var c Change
	for i := range 6 {
		h, err := NewHost(fmt.Sprintf("h%d", i), topologytest.Laptop().Topology(), m.cfg, CapacitySettings{MemoryShare: 1})
		if err != nil {
			t.Fatal(err)
		}
		c.PutHost(h)
	}
	if _, err := m.Commit(ctx, &c); err != nil {
		t.Fatal(err)
	}
	use := func(host string, n int) *Change {
		v, _ := m.Host(host)
		a := v.Alloc.Clone()
		a.Add(model.Instance{ID: fmt.Sprintf("web-%s-%d", host, n), Service: "web", Host: host, Allocation: model.Allocation{Memory: int64(n) << 20, NUMANode: -1, CPUQuota: 10}}, +1)
		var c Change
		c.PutAlloc(host, a)
		return &c
	}
	p := m.Pending()
	check := func(t *testing.T) {
		t.Helper()
		got := p.SchedulablePlacement()
		fresh := &Pending{base: p.base, c: p.c}
		want := fresh.SchedulablePlacement()
		if len(got.Hosts) != len(want.Hosts) {
			t.Fatalf("%d hosts, from scratch %d", len(got.Hosts), len(want.Hosts))
		}
		for i := range want.Hosts {
			g, w := got.Hosts[i], want.Hosts[i]
			if g.Name != w.Name || g.Resources.MemoryUsed != w.Resources.MemoryUsed || got.Rev(i) != want.Rev(i) {
				t.Errorf("host %d: kept %s (memory %d, %+v), from scratch %s (memory %d, %+v)",
					i, g.Name, g.Resources.MemoryUsed, got.Rev(i), w.Name, w.Resources.MemoryUsed, want.Rev(i))
			}
		}
	}
	for _, st := range []struct {
		name string
		do   func()
	}{
		{"first change", func() { p.Add(use("h1", 1)) }},
		{"another host", func() { p.Add(use("h3", 2)) }},
		{"the first host again", func() { p.Add(use("h1", 3)) }},
		{"nothing new", func() {}},
		{"the store changed under it", func() {
			if _, err := m.Commit(ctx, use("h4", 4)); err != nil {
				t.Fatal(err)
			}
		}},
		{"after the store's change", func() { p.Add(use("h5", 5)) }},
	} {
		t.Run(st.name, func(t *testing.T) {
			st.do()
			check(t)
		})
	}
}
