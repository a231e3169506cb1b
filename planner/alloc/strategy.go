package alloc

import (
	"cmp"
	"container/heap"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// Strategy is a deploy strategy from seed 004: how a request's count is
// spread over the hosts that can take it.
type Strategy string

const (
	// Auto levels the service's instance counts: each new instance goes to
	// the host with the fewest instances of the service (ties: the placement
	// policy's rank, more remaining capacity, then host name).
	Auto Strategy = "auto"
	// Each puts Count on every host that can take Count.
	Each Strategy = "each"
	// Fill tops every host up to Count instances, all or nothing; hosts that
	// already have Count are left alone.
	Fill Strategy = "fill"
	// Global puts each new instance where the share of capacity used after
	// one more is lowest (ties: host name).
	Global Strategy = "global"
	// Drained fills the hosts with the least remaining capacity first.
	Drained Strategy = "drained"
)

// Strategies lists the strategies in documentation order.
var Strategies = []Strategy{Auto, Each, Fill, Global, Drained}

// ParseStrategy accepts a strategy name; "" means Auto.
func ParseStrategy(field, s string) (Strategy, error) {
	if s == "" {
		return Auto, nil
	}
	if slices.Contains(Strategies, Strategy(s)) {
		return Strategy(s), nil
	}
	return "", invalid(field, s, "want one of auto, each, fill, global, drained")
}

// candidate is one host as the strategies see it.
type candidate struct {
	name     string
	cap      Capacity
	room     int    // instances it may still take: capacity, capped by max_per_host
	free     int    // room before max_per_host: what Drained orders by
	existing int    // the service's instances already there
	capped   bool   // room is limited by max_per_host
	limitWhy string // room is limited by Request.Limit, for this reason
	used     uint64 // for Global: used amount of the planned resource
	total    uint64 // for Global: total amount of it
	rank     int    // from Request.Rank: lower first
	tie      uint64 // tie-break key from Request.Seed (0: by name)
	placed   int    // Auto and Global: new instances given to it so far
}

// NameHash is FNV-1a of a host's name: what TieKey mixes with a seed.
// Callers that order many hosts keep it beside the host, so that breaking
// ties needs no pass over the names (placement.Index).
func NameHash(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return h
}

// TieKey is the tie-break key of the host whose NameHash is nameHash under
// seed: 0 for seed 0 (ties go by name), else the two mixed (splitmix64's
// finalizer), a different order of equal hosts for every seed.
func TieKey(seed, nameHash uint64) uint64 {
	if seed == 0 {
		return 0
	}
	z := seed ^ nameHash
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// tieLess orders two candidates that are otherwise equal.
func tieLess(a, b *candidate) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	if a.tie != b.tie {
		return a.tie < b.tie
	}
	return a.name < b.name
}

// spread decides how many new instances each candidate gets.
func spread(r Request, per uint64, cands []*candidate) (map[string]int, *Error) {
	counts := map[string]int{}
	switch r.Strategy {
	case Each:
		for _, c := range cands {
			if c.room >= r.Count {
				counts[c.name] = r.Count
			}
		}
		if len(counts) == 0 {
			return nil, shortage(CodeNoHost, fmt.Sprintf("no host can take %d instances of %s (strategy each)", r.Count, r.Service), cands, r.Count)
		}
	case Fill:
		var short []*candidate
		for _, c := range cands {
			if need := r.Count - c.existing; need > 0 {
				if c.room < need {
					short = append(short, c)
				}
				counts[c.name] = need
			}
		}
		if len(short) > 0 {
			return nil, shortage(CodeFillImpossible, fmt.Sprintf("cannot fill every host up to %d instances of %s; nothing was placed", r.Count, r.Service), short, 0)
		}
	case Drained:
		if err := enough(r, cands); err != nil {
			return nil, err
		}
		order := slices.Clone(cands)
		slices.SortStableFunc(order, func(a, b *candidate) int {
			// The least remaining capacity first: max_per_host caps how many
			// a host takes, not how full it is (capped, the fuller host
			// and the emptier one would tie).
			if a.free != b.free {
				return cmp.Compare(a.free, b.free)
			}
			if tieLess(a, b) {
				return -1
			}
			return 1
		})
		left := r.Count
		for _, c := range order {
			if t := min(left, c.room); t > 0 {
				counts[c.name] = t
				left -= t
			}
		}
	case Auto, Global:
		if err := enough(r, cands); err != nil {
			return nil, err
		}
		h := &candHeap{global: r.Strategy == Global, per: per}
		for _, c := range cands {
			c.placed = 0
			if c.room > 0 {
				h.items = append(h.items, c)
			}
		}
		heap.Init(h)
		for range r.Count {
			c := h.items[0]
			c.placed++
			c.used += per
			if c.placed == c.room {
				heap.Pop(h)
			} else {
				heap.Fix(h, 0)
			}
		}
		for _, c := range cands {
			if c.placed > 0 {
				counts[c.name] = c.placed
			}
		}
	}
	return counts, nil
}

func enough(r Request, cands []*candidate) *Error {
	total := 0
	for _, c := range cands {
		total += c.room
	}
	if total >= r.Count {
		return nil
	}
	instances := "instances"
	if r.Count == 1 {
		instances = "instance"
	}
	return shortage(CodeInsufficient, fmt.Sprintf("need %d %s of %s, the hosts can take %d", r.Count, instances, r.Service, total), cands, r.Count)
}

// shortage builds an error naming, per host, how many it can take and what
// runs out; at most 20 hosts are listed by name in the message.
func shortage(code Code, head string, cands []*candidate, _ int) *Error {
	e := &Error{Code: code}
	var parts []string
	for _, c := range cands {
		e.Hosts = append(e.Hosts, c.name)
		if len(parts) < 20 {
			why := c.cap.Why()
			switch {
			case c.capped:
				why = "max_per_host"
			case c.limitWhy != "":
				why = c.limitWhy
			}
			parts = append(parts, fmt.Sprintf("%s takes %d (%s)", c.name, c.room, why))
		}
	}
	if len(cands) == 0 {
		parts = append(parts, "no hosts")
	}
	if len(cands) > len(parts) && len(cands) > 0 {
		parts = append(parts, fmt.Sprintf("and %d more hosts", len(cands)-len(parts)))
	}
	e.Message = head + ": " + strings.Join(parts, ", ")
	return e
}

// candHeap orders candidates for Auto (fewest instances of the service, then
// most room, then name) and Global (lowest share used after one more, then name).
type candHeap struct {
	items  []*candidate
	global bool
	per    uint64
}

func (h *candHeap) Len() int      { return len(h.items) }
func (h *candHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *candHeap) Push(x any)    { h.items = append(h.items, x.(*candidate)) }
func (h *candHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

func (h *candHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if h.global {
		// (a.used+per)/a.total < (b.used+per)/b.total, exactly, in 128 bits.
		ah, al := bits.Mul64(a.used+h.per, b.total)
		bh, bl := bits.Mul64(b.used+h.per, a.total)
		if ah != bh || al != bl {
			return ah < bh || (ah == bh && al < bl)
		}
		return tieLess(a, b)
	}
	na, nb := a.existing+a.placed, b.existing+b.placed
	if na != nb {
		return na < nb
	}
	if a.rank != b.rank { // a placement policy ranks before remaining room
		return a.rank < b.rank
	}
	ra, rb := a.room-a.placed, b.room-b.placed
	if ra != rb {
		return ra > rb
	}
	return tieLess(a, b)
}
