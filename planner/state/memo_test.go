package state

import (
	"fmt"
	"slices"
	"testing"
)

// memoHosts are n registered hosts' views, h00, h01, …, each at revisions
// (i+1, i+1), and their sorted names.
func memoHosts(n int) (map[string]HostView, []string) {
	views := map[string]HostView{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("h%02d", i)
		views[name] = HostView{Host: testHost(name), HostRev: int64(i + 1), Alloc: NewAlloc(), AllocRev: int64(i + 1), state: "up"}
		names = append(names, name)
	}
	return views, names
}

func TestViewMemo_Engine(t *testing.T) {
	tests := []struct {
		name string
		drop func(m *viewMemo)
		same bool // the engine view after drop is the one before
	}{
		{"nothing dropped", func(*viewMemo) {}, true},
		{"registration or usage changed", func(m *viewMemo) { m.drop("h1") }, false},
		{"heartbeat changed", func(m *viewMemo) { m.dropPlaced("h1") }, true},
		{"another host changed", func(m *viewMemo) { m.drop("h2") }, true},
		{"reload", func(m *viewMemo) { m.reset() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newViewMemo()
			h := testHost("h1")
			first := m.engine("h1", h, NewAlloc())
			if first == nil || first.Memo == nil {
				t.Fatalf("engine(h1) = %+v, want a view with a capacity memo", first)
			}
			tt.drop(m)
			if same := m.engine("h1", h, NewAlloc()) == first; same != tt.same {
				t.Errorf("engine(h1) after the drop is the view before: %v, want %v", same, tt.same)
			}
		})
	}
}

func TestViewMemo_PlacedList(t *testing.T) {
	const n = 12
	tests := []struct {
		name string
		// change changes the memo and the views after the first list.
		change func(m *viewMemo, views map[string]HostView)
		names  func(names []string) []string // the second list's names
		built  []string                      // the views built for the second list
		cached bool                          // the second list is the first
	}{
		{"unchanged", func(*viewMemo, map[string]HostView) {}, nil, nil, true},
		{"usage changed", func(m *viewMemo, v map[string]HostView) {
			h := v["h03"]
			h.AllocRev = 100
			v["h03"] = h
			m.drop("h03")
		}, nil, []string{"h03"}, false},
		{"two heartbeats", func(m *viewMemo, _ map[string]HostView) { m.dropPlaced("h01"); m.dropPlaced("h07") }, nil, []string{"h01", "h07"}, false},
		{"a host left the set", func(m *viewMemo, _ map[string]HostView) { m.dropPlaced("h05") },
			func(names []string) []string { return slices.Delete(slices.Clone(names), 5, 6) }, nil, false},
		{"reload", func(m *viewMemo, _ map[string]HostView) { m.reset() }, nil,
			[]string{"h00", "h01", "h02", "h03", "h04", "h05", "h06", "h07", "h08", "h09", "h10", "h11"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			views, names := memoHosts(n)
			var built []string
			view := func(name string) HostView {
				built = append(built, name)
				return views[name]
			}
			m := newViewMemo()
			first := m.placedList(names, view)
			if len(built) != n {
				t.Fatalf("first list built %d views, want %d", len(built), n)
			}
			built = nil
			tt.change(m, views)
			next := names
			if tt.names != nil {
				next = tt.names(names)
			}
			got := m.placedList(next, view)
			slices.Sort(built)
			if !slices.Equal(built, tt.built) {
				t.Errorf("second list built the views of %v, want %v", built, tt.built)
			}
			if (got == first) != tt.cached {
				t.Errorf("second list is the first: %v, want %v", got == first, tt.cached)
			}
			if len(got.Hosts) != len(next) {
				t.Fatalf("second list has %d hosts, want %d", len(got.Hosts), len(next))
			}
			for i, name := range next {
				v := views[name]
				if got.Hosts[i].Name != name || got.Rev(i) != (Revs{v.HostRev, v.AllocRev}) {
					t.Errorf("Hosts[%d] = %s at %+v, want %s at %+v", i, got.Hosts[i].Name, got.Rev(i), name, Revs{v.HostRev, v.AllocRev})
				}
				if j, ok := first.Index(name); ok && !slices.Contains(tt.built, name) && got.Hosts[i] != first.Hosts[j] {
					t.Errorf("host %s: rebuilt, want the view of the list before", name)
				}
			}
		})
	}
}
