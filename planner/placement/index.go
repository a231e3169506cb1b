package placement

import (
	"slices"
	"sync"

	"github.com/pinfold/pinfold/planner/alloc"
)

// Index answers the planner's commonest request, one instance under the
// auto strategy with no rules, without visiting every host: over 10,000
// hosts each visit is several cache misses (the host, its engine view, its
// memo, its instance counts), and the full plan paid them all for every
// deploy. It keeps, for one list of hosts (the planner's schedulable
// hosts in name order), each host's name hash and, per request size, each
// host's room in flat arrays, and scans those.
//
// An Index belongs to one list and never changes it. Built from the index
// of the list before (prev), it copies that list's rooms and counts again
// only the hosts whose view changed (a deploy changes one host); it keeps
// no reference to prev. It is safe for concurrent use.
type Index struct {
	hosts   []*Host
	hash    []uint64 // alloc.NameHash of each host's name
	domains int      // hosts that may take work and have a fault or upgrade domain
	noAgent int      // hosts registered by hand (Host.NoAgent)

	mu    sync.Mutex
	rooms map[roomKey][]int32 // per request size: each host's room, -1 where it may take no work
	// replaced is, per request size, the room of hosts that replaced the
	// list's in a pending copy (a Host never changes: its room stays); a
	// drain's moves ask again for every host its earlier moves changed.
	replaced map[replacedKey]int32
}

// replacedKey is a replacing host and a request size.
type replacedKey struct {
	h *Host
	k roomKey
}

// maxReplaced bounds the rooms of replacing hosts an index keeps (each
// keeps its host, usage and all, from the collector).
const maxReplaced = 4096

// roomKey is a request size: what a host's room depends on.
type roomKey struct {
	pieces int
	bind   bool
	cores  bool
	memory int64
}

// maxRoomSizes bounds the request sizes an index keeps rooms for.
const maxRoomSizes = 8

// NewIndex indexes hosts (sorted by name, never changed afterwards); prev,
// when not nil, is the index of the list these hosts replace, whose rooms
// it carries over when the two lists name the same hosts.
func NewIndex(p alloc.Params, hosts []*Host, prev *Index) *Index {
	x := &Index{hosts: hosts, rooms: map[roomKey][]int32{}, replaced: map[replacedKey]int32{}}
	same := prev != nil && len(prev.hosts) == len(hosts)
	for i := 0; same && i < len(hosts); i++ {
		same = hosts[i] == prev.hosts[i] || hosts[i].Name == prev.hosts[i].Name
	}
	if same {
		x.hash = prev.hash
		prev.mu.Lock()
		for k, old := range prev.rooms {
			rooms := slices.Clone(old)
			for i, h := range hosts {
				if !sameRoom(h, prev.hosts[i]) {
					rooms[i] = roomOf(p, h, k.request())
				}
			}
			x.rooms[k] = rooms
		}
		prev.mu.Unlock()
	} else {
		x.hash = make([]uint64, len(hosts))
		for i, h := range hosts {
			x.hash[i] = alloc.NameHash(h.Name)
		}
	}
	for _, h := range hosts {
		if usable(h) && (h.FaultDomain != "" || h.UpgradeDomain != "") {
			x.domains++
		}
		if h.NoAgent {
			x.noAgent++
		}
	}
	return x
}

// sameRoom reports whether a and b have the same room for every request:
// the same engine view and the same say on taking work (a heartbeat
// replaces a host's placement view but not its engine view).
func sameRoom(a, b *Host) bool {
	return a == b || a.Resources == b.Resources && usable(a) == usable(b)
}

// usable reports whether the rules let h take work at all.
func usable(h *Host) bool { return !h.Disabled && !h.Maintenance }

// roomOf is h's room for r, -1 where it may take no work.
func roomOf(p alloc.Params, h *Host, r alloc.Request) int32 {
	if !usable(h) {
		return -1
	}
	return int32(min(alloc.HostCapacity(p, h.Resources, r).Count, roomCap))
}

// roomCap bounds a stored room; First leaves a request where a host has
// this much room to the full plan, which tells such rooms apart.
const roomCap = 1 << 30

// request is a one-instance request of size k.
func (k roomKey) request() alloc.Request {
	return alloc.Request{Count: 1, Pieces: k.pieces, Bind: k.bind, WholeCores: k.cores, MemoryBytes: k.memory}
}

// replacedRoom is the room for r of h, which replaced one of the index's
// hosts in a pending copy: counted once, then kept.
func (x *Index) replacedRoom(p alloc.Params, h *Host, r alloc.Request) int32 {
	k := roomKey{r.Pieces, r.Bind, r.WholeCores && r.Bind, r.MemoryBytes}
	x.mu.Lock()
	room, ok := x.replaced[replacedKey{h, k}]
	x.mu.Unlock()
	if ok {
		return room
	}
	room = roomOf(p, h, k.request())
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.replaced) >= maxReplaced {
		clear(x.replaced)
	}
	x.replaced[replacedKey{h, k}] = room
	return room
}

// roomsFor is every host's room for r's size: kept (carried over from the
// index before), or counted now.
func (x *Index) roomsFor(p alloc.Params, r alloc.Request) []int32 {
	k := roomKey{r.Pieces, r.Bind, r.WholeCores && r.Bind, r.MemoryBytes}
	x.mu.Lock()
	defer x.mu.Unlock()
	if rooms, ok := x.rooms[k]; ok {
		return rooms
	}
	rooms := make([]int32, len(x.hosts))
	for i, h := range x.hosts {
		rooms[i] = roomOf(p, h, k.request())
	}
	if len(x.rooms) >= maxRoomSizes {
		clear(x.rooms)
	}
	x.rooms[k] = rooms
	return rooms
}

// Plain reports whether r under s is a request First answers (a request
// with ports is not: the Ports rule and the port assignment are Plan's): one
// instance, auto, no placement rule, no buffer or overbooking, and a
// domain spread that has nothing to spread over.
func (x *Index) Plain(s Settings, r Request) bool {
	spread, _ := ParseSpread(string(r.DomainSpread))
	return r.Count == 1 && (r.Strategy == alloc.Auto || r.Strategy == "") && r.Fixed == nil && r.Rank == nil && r.Limit == nil && len(r.Ports) == 0 &&
		r.Constraint == "" && r.Policy == "" && len(r.HostsOrder) == 0 &&
		len(r.Affinity.Hard)+len(r.Affinity.Soft)+len(r.AntiAffinity.Hard)+len(r.AntiAffinity.Soft) == 0 &&
		len(s.Buffer)+len(s.Overbooking) == 0 && (spread == SpreadOff || x.domains == 0)
}

// firstCandidates is how many of the best hosts First looks at for one
// that does not run the service yet; past them it leaves the request to
// the full plan.
const firstCandidates = 32

// First places a Plain request as Plan would, over hosts: the index's own
// list, or a copy of it in which some hosts were replaced (the planner's
// pending changes). ok is false when it cannot say (the request is not
// Plain, or the hosts are another list): plan in full then. Its Result
// holds what a deploy reads (Placements, no Violations, no Spread);
// Eliminations and the engine's per-host Capacity are not worked out.
//
// Auto puts one instance on the host with the fewest instances of the
// service, then the most room, then the least tie key: any host without
// the service beats every host with it. First keeps, in one scan of the
// flat arrays, the best hosts by room and tie key, and takes the first of
// them that runs none of the service; when each of those runs some, one
// more scan finds the least host in auto's whole order (the count of the
// service read from every host with room: each host's map, not the flat
// arrays). TestIndexIsTheFullPlan.
func (x *Index) First(p alloc.Params, s Settings, hosts []*Host, r Request) (*Result, bool) {
	return x.first(p, s, hosts, r, "")
}

// FirstWithout is First over hosts without the host named skip (a move's
// or a heal's: the instance never goes back to the host it leaves), as
// Plan over the list with that host removed would place
// (TestIndexWithoutIsTheFullPlan). A skip the list does not name removes
// nothing.
func (x *Index) FirstWithout(p alloc.Params, s Settings, hosts []*Host, r Request, skip string) (*Result, bool) {
	return x.first(p, s, hosts, r, skip)
}

// NoAgent is how many of the index's hosts were registered by hand
// (Host.NoAgent).
func (x *Index) NoAgent() int { return x.noAgent }

func (x *Index) first(p alloc.Params, s Settings, hosts []*Host, r Request, skip string) (*Result, bool) {
	if !x.Plain(s, r) || len(hosts) != len(x.hosts) {
		return nil, false
	}
	rooms := x.roomsFor(p, r.Request)
	type cand struct {
		room int32
		tie  uint64
		i    int
	}
	better := func(a, b cand) bool {
		if a.room != b.room {
			return a.room > b.room
		}
		if a.tie != b.tie {
			return a.tie < b.tie
		}
		return hosts[a.i].Name < hosts[b.i].Name
	}
	var capAt int32 // a host without the service takes at most this many (0: no cap)
	if r.MaxPerHost > 0 && r.MaxPerHost < roomCap {
		capAt = int32(r.MaxPerHost)
	}
	spread, _ := ParseSpread(string(r.DomainSpread))
	// room is host i's room for r (0: none), ok false where the index
	// cannot say.
	room := func(i int) (int32, bool) {
		room := rooms[i]
		if h := hosts[i]; h != x.hosts[i] { // a pending change replaced it
			if h.Name != x.hosts[i].Name || h.NoAgent != x.hosts[i].NoAgent || spread != SpreadOff && usable(h) && (h.FaultDomain != "" || h.UpgradeDomain != "") {
				return 0, false // another list, or hosts the index did not count
			}
			if !sameRoom(h, x.hosts[i]) {
				room = x.replacedRoom(p, h, r.Request)
			}
		}
		if room >= roomCap { // rooms this large are not told apart here
			return 0, false
		}
		if room <= 0 || skip != "" && hosts[i].Name == skip {
			return 0, true
		}
		return room, true
	}
	top := make([]cand, 0, firstCandidates)
	worst := 0 // the index in top of its worst when full
	for i := range rooms {
		room, ok := room(i)
		if !ok {
			return nil, false
		}
		if room == 0 {
			continue
		}
		if capAt > 0 && room > capAt {
			room = capAt
		}
		if len(top) == firstCandidates && room < top[worst].room {
			continue
		}
		c := cand{room, alloc.TieKey(r.Seed, x.hash[i]), i}
		if len(top) < firstCandidates {
			top = append(top, c)
			if len(top) == firstCandidates {
				worst = worstOf(top, better)
			}
			continue
		}
		if better(c, top[worst]) {
			top[worst] = c
			worst = worstOf(top, better)
		}
	}
	slices.SortFunc(top, func(a, b cand) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	pick := -1
	for _, c := range top {
		if hosts[c.i].Resources.Instances[r.Service] <= 0 {
			pick = c.i
			break
		}
	}
	if pick < 0 {
		// Each of the best (every host with room, when fewer) runs the
		// service: auto's whole order, the count of the service first (a
		// count below 0 is none, as the engine has it), each host's room
		// capped at max per host less that count.
		type full struct {
			cand
			existing int
		}
		var best full
		for i := range rooms {
			room, _ := room(i) // every host was read above
			if room == 0 {
				continue
			}
			existing := max(0, hosts[i].Resources.Instances[r.Service])
			if r.MaxPerHost > 0 && int64(existing)+int64(room) > int64(r.MaxPerHost) {
				room = int32(max(r.MaxPerHost-existing, 0))
				if room == 0 {
					continue
				}
			}
			c := full{cand{room, alloc.TieKey(r.Seed, x.hash[i]), i}, existing}
			if pick < 0 || c.existing < best.existing || c.existing == best.existing && better(c.cand, best.cand) {
				best, pick = c, i
			}
		}
	}
	if pick < 0 {
		return nil, false
	}
	req := r.Request
	req.Strategy = alloc.Auto
	ar, err := alloc.PlanValid(p, []*alloc.Host{hosts[pick].Resources}, req)
	if err != nil || len(ar.Placements) != 1 {
		return nil, false
	}
	return &Result{Result: &alloc.Result{Placements: ar.Placements}}, true
}

// worstOf is the index of the worst of top.
func worstOf[T any](top []T, better func(a, b T) bool) int {
	w := 0
	for i := 1; i < len(top); i++ {
		if better(top[w], top[i]) {
			w = i
		}
	}
	return w
}
