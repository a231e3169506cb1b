package alloc

import "sync"

// CapacityMemo remembers a host's capacity per request shape, so that a
// host nobody changed is not counted again for every request of the same
// size (the planner answers many one-instance deploys against hosts of
// which one changes at a time). It belongs to one immutable Host: whoever
// derives a changed Host from one with a memo must leave the copy's Memo
// nil. It is safe for concurrent use and holds at most memoEntries shapes.
type CapacityMemo struct {
	mu sync.Mutex
	// entries are few (most hosts see one or two request sizes between
	// changes): a linear scan beats hashing the key, which a deploy over
	// 10,000 hosts did 10,000 times (a fifth of its CPU).
	entries []memoEntry
	next    int // the entry put replaces once memoEntries are held
}

type memoKey struct {
	p    Params
	sh   shape
	bind bool
}

type memoEntry struct {
	k memoKey
	c Capacity
}

// memoEntries bounds a memo: when full, put replaces the oldest entry.
const memoEntries = 32

// NewCapacityMemo returns an empty memo.
func NewCapacityMemo() *CapacityMemo { return &CapacityMemo{} }

func (m *CapacityMemo) get(k memoKey) (Capacity, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.entries {
		if m.entries[i].k == k {
			return m.entries[i].c, true
		}
	}
	return Capacity{}, false
}

func (m *CapacityMemo) put(k memoKey, c Capacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.entries {
		if m.entries[i].k == k {
			m.entries[i].c = c
			return
		}
	}
	if len(m.entries) < memoEntries {
		m.entries = append(m.entries, memoEntry{k, c})
		return
	}
	m.entries[m.next] = memoEntry{k, c}
	m.next = (m.next + 1) % memoEntries
}

// capacityOf is h's capacity for sh, from h's memo when it has one, and
// the working state it counted on (nil when the memo answered), which
// placement may go on with.
func capacityOf(p Params, h *Host, sh shape, bind bool) (Capacity, *hostState) {
	k := memoKey{p, sh, bind}
	if h.Memo != nil {
		if c, ok := h.Memo.get(k); ok {
			return c, nil
		}
	}
	s := newHostState(p, h)
	c := s.capacity(sh, bind)
	if h.Memo != nil {
		h.Memo.put(k, c)
	}
	return c, s
}
