package state

import (
	"sync"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
)

// placedIndex builds a list's placement index on first use, from the
// index built last (indexLine), so that each list counts again only the
// hosts that changed since.
type placedIndex struct {
	once  sync.Once
	x     *placement.Index
	hosts []*placement.Host
	line  *indexLine
}

// indexLine is the store's most recently built placement index.
type indexLine struct {
	mu   sync.Mutex
	last *placement.Index
}

// RoomIndex is the placement index of p's hosts (placement.Index: one-instance
// deploys without visiting every host); a Pending list shares the index of
// the store's list it was made from, whose hosts its own replace in part
// (placement.Index.First takes that). Nil for a list made by hand.
func (p *Placed) RoomIndex(params alloc.Params) *placement.Index {
	if p.index == nil {
		return nil
	}
	pi := p.index
	pi.once.Do(func() {
		pi.line.mu.Lock()
		prev := pi.line.last
		pi.line.mu.Unlock()
		pi.x = placement.NewIndex(params, pi.hosts, prev)
		pi.line.mu.Lock()
		pi.line.last = pi.x
		pi.line.mu.Unlock()
		pi.hosts = nil
	})
	return pi.x
}
