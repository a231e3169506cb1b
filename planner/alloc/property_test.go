package alloc_test

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// randomHost draws a host: 1..24 CPUs (or a topology fixture), sometimes
// NUMA nodes, sometimes oversold CPUs, random existing usage.
func randomHost(r *rand.Rand, name string, sb int) *alloc.Host {
	h := &alloc.Host{Name: name, Instances: map[string]int{}}
	var numaSets []cpuset.CPUs
	if r.IntN(4) == 0 {
		shapes := []topologytest.Shape{topologytest.Laptop(), topologytest.SMTOffSparse(), topologytest.MemoryOnlyDiscontig(), topologytest.EPYC7402()}
		t := shapes[r.IntN(len(shapes))].Topology()
		h.Topology = t
		for _, c := range t.CPUs {
			h.CPUs = append(h.CPUs, alloc.CPU{ID: c.ID, Capacity: sb})
		}
		for _, n := range t.NUMANodes {
			numaSets = append(numaSets, n.CPUs)
		}
	} else {
		n := 1 + r.IntN(24)
		oversold := r.IntN(5) == 0
		for i := range n {
			c := sb
			if oversold && r.IntN(2) == 0 {
				c = sb * (2 + r.IntN(2))
			}
			h.CPUs = append(h.CPUs, alloc.CPU{ID: cpuset.CPUID(i * (1 + r.IntN(2))), Capacity: c})
		}
		slices.SortFunc(h.CPUs, func(a, b alloc.CPU) int { return int(a.ID) - int(b.ID) })
		h.CPUs = slices.CompactFunc(h.CPUs, func(a, b alloc.CPU) bool { return a.ID == b.ID })
		if len(h.CPUs) >= 2 && r.IntN(2) == 0 {
			cut := 1 + r.IntN(len(h.CPUs)-1)
			var a, b []cpuset.CPUID
			for i, c := range h.CPUs {
				if i < cut {
					a = append(a, c.ID)
				} else {
					b = append(b, c.ID)
				}
			}
			numaSets = []cpuset.CPUs{cpuset.Of(a...), cpuset.Of(b...)}
		}
	}
	for i := range h.CPUs {
		switch r.IntN(4) {
		case 0:
			h.CPUs[i].Used = r.IntN(h.CPUs[i].Capacity + 1)
		case 1:
			h.CPUs[i].Used = h.CPUs[i].Capacity
		}
	}
	h.MemoryBytes = int64(1+r.IntN(64)) * GiB
	h.MemoryUsed = r.Int64N(h.MemoryBytes / 2)
	for i, s := range numaSets {
		mem := h.MemoryBytes / int64(len(numaSets))
		h.NUMANodes = append(h.NUMANodes, alloc.NUMANode{ID: cpuset.NUMANodeID(i * 2), CPUs: s, MemoryBytes: mem, MemoryUsed: r.Int64N(mem/2 + 1)})
	}
	return h
}

func randomRequest(r *rand.Rand, sb int) alloc.Request {
	pieces := 1 + r.IntN(4*sb)
	if r.IntN(3) == 0 {
		pieces = sb * (1 + r.IntN(3)) // integer requests
	}
	return alloc.Request{Service: "svc", Count: 1, Pieces: pieces, Bind: r.IntN(6) != 0, MemoryBytes: int64(1+r.IntN(8)) * GiB / 4}
}

// checkPlacements verifies the invariants of a set of new placements on h.
func checkPlacements(t *testing.T, p alloc.Params, h *alloc.Host, r alloc.Request, pls []alloc.Placement) {
	t.Helper()
	used := map[cpuset.CPUID]int{}
	capa := map[cpuset.CPUID]int{}
	for _, c := range h.CPUs {
		used[c.ID], capa[c.ID] = c.Used, c.Capacity
	}
	mem := h.MemoryUsed
	numaMem := map[cpuset.NUMANodeID]int64{}
	for _, n := range h.NUMANodes {
		numaMem[n.ID] = n.MemoryUsed
	}
	x, f := r.Pieces/p.ShareBase, r.Pieces%p.ShareBase
	for _, pl := range pls {
		mem += pl.Memory
		if !r.Bind {
			if len(pl.CPUs) != 0 || pl.CPUQuota != r.Pieces {
				t.Fatalf("memory-first placement %+v", pl)
			}
			continue
		}
		wholes, frags, total := 0, 0, 0
		for id, v := range pl.CPUs {
			if _, ok := capa[id]; !ok {
				t.Fatalf("placement uses CPU %d not on host", id)
			}
			used[id] += v
			total += v
			switch {
			case v == p.ShareBase:
				wholes++
			case v > 0 && v < p.ShareBase:
				frags++
			default:
				t.Fatalf("placement gives %d pieces of CPU %d (share base %d)", v, id, p.ShareBase)
			}
		}
		if total != r.Pieces || wholes != x || frags != min(f, 1) {
			t.Fatalf("placement %v: %d pieces, %d whole, %d fragments; want %d, %d, %d", pl.CPUs, total, wholes, frags, r.Pieces, x, min(f, 1))
		}
		if pl.NUMANode >= 0 {
			i := slices.IndexFunc(h.NUMANodes, func(n alloc.NUMANode) bool { return n.ID == pl.NUMANode })
			if i < 0 {
				t.Fatalf("placement on unknown NUMA node %d", pl.NUMANode)
			}
			for id := range pl.CPUs {
				if !h.NUMANodes[i].CPUs.Contains(id) {
					t.Fatalf("NUMA-local placement on node %d uses CPU %d outside it", pl.NUMANode, id)
				}
			}
			numaMem[pl.NUMANode] += pl.Memory
		}
	}
	for id, u := range used {
		if u > capa[id] {
			t.Fatalf("CPU %d oversold: %d of %d pieces", id, u, capa[id])
		}
	}
	if mem > h.MemoryBytes {
		t.Fatalf("host memory oversold: %d of %d", mem, h.MemoryBytes)
	}
	for _, n := range h.NUMANodes {
		if numaMem[n.ID] > n.MemoryBytes {
			t.Fatalf("NUMA node %d memory oversold: %d of %d", n.ID, numaMem[n.ID], n.MemoryBytes)
		}
	}
}

// TestCapacityIsExact: for random hosts and requests, placing exactly the
// capacity succeeds and respects every limit, one more fails, and planning
// twice gives the same result.
func TestCapacityIsExact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 3000 {
		sb := []int{10, 100, 1000}[r.IntN(3)]
		p := alloc.Params{ShareBase: sb, MaxFragmentCores: []int{-1, -1, 0, 1, 3}[r.IntN(5)]}
		h := randomHost(r, fmt.Sprintf("h%d", i), sb)
		req := randomRequest(r, sb)
		c := alloc.HostCapacity(p, h, req)
		memo := *h
		memo.Memo = alloc.NewCapacityMemo()
		for range 2 { // cold, then from the memo
			if got := alloc.HostCapacity(p, &memo, req); got != c {
				t.Fatalf("#%d capacity %+v with a memo, %+v without", i, got, c)
			}
		}
		if c.Count > 200000 {
			continue // memory-first with a tiny request: nothing to learn
		}
		if c.Count > 0 {
			req.Count = c.Count
			res, err := alloc.Plan(p, []*alloc.Host{h}, req)
			if err != nil {
				t.Fatalf("#%d capacity %d but Plan failed: %v\nhost %+v\nreq %+v", i, c.Count, err, h, req)
			}
			if len(res.Placements) != c.Count {
				t.Fatalf("#%d %d placements for capacity %d", i, len(res.Placements), c.Count)
			}
			checkPlacements(t, p, h, req, res.Placements)
			again, _ := alloc.Plan(p, []*alloc.Host{h}, req)
			if diff := cmp.Diff(res, again); diff != "" {
				t.Fatalf("#%d not deterministic:\n%s", i, diff)
			}
		}
		req.Count = c.Count + 1
		if _, err := alloc.Plan(p, []*alloc.Host{h}, req); err == nil {
			t.Fatalf("#%d capacity %d but %d were placed\nhost %+v\nreq %+v", i, c.Count, req.Count, h, req)
		}
	}
}

// TestSequentialNeverOversells deploys one instance at a time, applying each
// placement to the host, until the host is full.
func TestSequentialNeverOversells(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	for i := range 300 {
		p := alloc.DefaultParams()
		h := randomHost(r, "h", p.ShareBase)
		req := randomRequest(r, p.ShareBase)
		req.Bind = true
		orig := *h
		for step := 0; step < 500; step++ {
			res, err := alloc.Plan(p, []*alloc.Host{h}, req)
			if err != nil {
				break
			}
			checkPlacements(t, p, h, req, res.Placements)
			h = apply(h, res.Placements[0])
		}
		_ = orig
		if alloc.HostCapacity(p, h, req).Count != 0 {
			t.Fatalf("#%d host not full after the loop", i)
		}
	}
}

// apply returns a copy of h with pl's usage added.
func apply(h *alloc.Host, pl alloc.Placement) *alloc.Host {
	c := *h
	c.CPUs = slices.Clone(h.CPUs)
	c.NUMANodes = slices.Clone(h.NUMANodes)
	for i := range c.CPUs {
		c.CPUs[i].Used += pl.CPUs[c.CPUs[i].ID]
	}
	c.MemoryUsed += pl.Memory
	for i := range c.NUMANodes {
		if c.NUMANodes[i].ID == pl.NUMANode {
			c.NUMANodes[i].MemoryUsed += pl.Memory
		}
	}
	return &c
}

// eruCapacity is a reference implementation of Eru's per-host count for one
// CPU set (research/eru.md §1.2 steps 2-7, with rounding fixed): full cores
// are those with pieces a positive multiple of the share base, fragment cores
// the rest; the split is searched by moving the least-loaded full cores into
// the fragment set.
func eruCapacity(sb, mf int, free []int, pieces int, memN int) int {
	full, frag := []int{}, []int{}
	for _, v := range free {
		switch {
		case v <= 0:
		case v >= sb && v%sb == 0:
			full = append(full, v)
		default:
			frag = append(frag, v)
		}
	}
	sort.Ints(full)
	x, f := pieces/sb, pieces%sb
	fullPlans := func(cores []int) int { // heap: pop x cores with most pieces
		if x == 0 {
			return 1 << 30
		}
		h := &maxHeap{}
		for _, v := range cores {
			heap.Push(h, v)
		}
		n := 0
		for h.Len() >= x {
			var took []int
			for range x {
				took = append(took, heap.Pop(h).(int)-sb)
			}
			for _, v := range took {
				if v >= sb {
					heap.Push(h, v)
				}
			}
			n++
		}
		return n
	}
	fragPlans := func(cores []int) int {
		n := 0
		for _, v := range cores {
			n += v / f
		}
		return n
	}
	maxFrag := len(full) + len(frag) - x
	if mf >= 0 {
		maxFrag = min(maxFrag, mf)
	}
	best := 0
	switch {
	case f == 0:
		best = fullPlans(full)
	default:
		fr := slices.Clone(frag)
		fu := slices.Clone(full)
		for {
			best = max(best, min(fullPlans(fu), fragPlans(fr)))
			if len(fu) == 0 || len(fr) >= maxFrag {
				break
			}
			fr = append(fr, fu[0])
			fu = fu[1:]
		}
	}
	return min(best, memN)
}

type maxHeap []int

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *maxHeap) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}

// TestNeverBelowEru compares capacity with the Eru reference on hosts
// without NUMA information (one CPU set).
func TestNeverBelowEru(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(42, 1))
	better := 0
	for i := range 5000 {
		p := alloc.Params{ShareBase: 100, MaxFragmentCores: []int{-1, -1, 0, 1, 2, 4}[r.IntN(6)]}
		h := randomHost(r, "h", 100)
		h.NUMANodes, h.Topology = nil, nil
		req := randomRequest(r, 100)
		req.Bind = true
		var free []int
		for _, c := range h.CPUs {
			free = append(free, c.Capacity-c.Used)
		}
		memN := int((h.MemoryBytes - h.MemoryUsed) / req.MemoryBytes)
		eru := eruCapacity(p.ShareBase, p.MaxFragmentCores, free, req.Pieces, memN)
		got := alloc.HostCapacity(p, h, req).Count
		if got < eru {
			t.Fatalf("#%d capacity %d below Eru's %d: free %v, %d pieces, MF %d, memN %d", i, got, eru, free, req.Pieces, p.MaxFragmentCores, memN)
		}
		if got > eru {
			better++
		}
	}
	t.Logf("capacity above Eru's on %d of 5000 random hosts", better)
}
