package alloc

import "testing"

// TestMemoBounded: a memo answers what was put, holds at most memoEntries
// shapes, and replaces the oldest when full.
func TestMemoBounded(t *testing.T) {
	m := NewCapacityMemo()
	key := func(i int) memoKey { return memoKey{DefaultParams(), shape{sb: 100, x: i}, true} }
	for i := range memoEntries + 8 {
		m.put(key(i), Capacity{Count: i})
	}
	if len(m.entries) != memoEntries {
		t.Fatalf("memo holds %d entries, want at most %d", len(m.entries), memoEntries)
	}
	for i := range memoEntries + 8 {
		c, ok := m.get(key(i))
		if want := i >= 8; ok != want || ok && c.Count != i {
			t.Errorf("get(shape %d) = %d, %v; want found %v with %d", i, c.Count, ok, want, i)
		}
	}
	m.put(key(20), Capacity{Count: 99})
	if c, _ := m.get(key(20)); c.Count != 99 {
		t.Errorf("put over a held shape: get = %d, want 99", c.Count)
	}
}
