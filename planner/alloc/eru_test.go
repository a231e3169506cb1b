package alloc_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
)

// This file is a reference implementation of Eru's CPU planning with NUMA
// nodes, written from the description in research/eru.md (§1.2 steps 1-7
// and §1.4), not from Eru's code, to hold pinfold's capacity to "never
// fewer than Eru" on hosts with oversold CPUs.

type eruCore struct{ id, pieces int }

// eruLess is Eru's core order: pieces ascending, ties by CPU ID compared as
// strings ("10" < "2").
func eruLess(a, b eruCore) int {
	return cmp.Or(cmp.Compare(a.pieces, b.pieces), cmp.Compare(strconv.Itoa(a.id), strconv.Itoa(b.id)))
}

// eruFullPlans: a max-heap of the cores by pieces; pop x distinct cores,
// give each sb pieces, push back those with pieces left, until fewer than
// x remain; then the plans sorted by the sum of their cores' positions in
// the ascending list (more-loaded cores first).
func eruFullPlans(sb, x int, asc []eruCore) [][]int {
	pos := map[int]int{}
	left := map[int]int{}
	for i, c := range asc {
		pos[c.id], left[c.id] = i, c.pieces
	}
	var plans [][]int
	for {
		var avail []eruCore
		for _, c := range asc {
			if left[c.id] >= sb {
				avail = append(avail, eruCore{c.id, left[c.id]})
			}
		}
		if len(avail) < x {
			break
		}
		slices.SortStableFunc(avail, func(a, b eruCore) int {
			return cmp.Or(cmp.Compare(b.pieces, a.pieces), cmp.Compare(pos[a.id], pos[b.id]))
		})
		var plan []int
		for _, c := range avail[:x] {
			left[c.id] -= sb
			plan = append(plan, c.id)
		}
		plans = append(plans, plan)
	}
	sum := func(p []int) int {
		n := 0
		for _, id := range p {
			n += pos[id]
		}
		return n
	}
	slices.SortStableFunc(plans, func(a, b []int) int { return cmp.Compare(sum(a), sum(b)) })
	return plans
}

// eruFragPlans: each fragment core in list order gives floor(pieces/f)
// plans.
func eruFragPlans(f int, cores []eruCore) []int {
	var ids []int
	for _, c := range cores {
		for range c.pieces / f {
			ids = append(ids, c.id)
		}
	}
	return ids
}

// eruPlans is Eru's plan list for one CPU set, at most memN long.
func eruPlans(sb, mf int, cores []eruCore, pieces, memN int) []map[int]int {
	x, f := pieces/sb, pieces%sb
	var full, frag []eruCore
	for _, c := range cores {
		switch {
		case c.pieces <= 0:
		case c.pieces >= sb && c.pieces%sb == 0:
			full = append(full, c)
		default:
			frag = append(frag, c)
		}
	}
	slices.SortFunc(full, eruLess)
	slices.SortFunc(frag, eruLess)
	maxFrag := len(full) + len(frag) - x
	if mf >= 0 {
		maxFrag = min(maxFrag, mf)
	}
	var plans []map[int]int
	switch {
	case f == 0:
		for _, p := range eruFullPlans(sb, x, full) {
			m := map[int]int{}
			for _, id := range p {
				m[id] = sb
			}
			plans = append(plans, m)
		}
	case x == 0:
		fr, fu := slices.Clone(frag), full
		for len(fr) < maxFrag && len(fu) > 0 {
			fr, fu = append(fr, fu[0]), fu[1:]
		}
		for _, id := range eruFragPlans(f, fr) {
			plans = append(plans, map[int]int{id: f})
		}
	default:
		fr, fu := slices.Clone(frag), full
		best, bestFr, bestFu := -1, fr, fu
		for {
			if n := min(len(eruFullPlans(sb, x, fu)), len(eruFragPlans(f, fr))); n > best {
				best, bestFr, bestFu = n, slices.Clone(fr), fu
			}
			if len(fu) == 0 || len(fr) >= maxFrag {
				break
			}
			fr, fu = append(fr, fu[0]), fu[1:] // the lowest-piece full core joins the fragment set at its end
		}
		fps, frs := eruFullPlans(sb, x, bestFu), eruFragPlans(f, bestFr)
		for i := range best {
			m := map[int]int{frs[i]: f}
			for _, id := range fps[i] {
				m[id] = sb
			}
			plans = append(plans, m)
		}
	}
	return plans[:min(len(plans), max(memN, 0))]
}

// eruHostCapacity is Eru's count for a host: each NUMA node in ascending ID
// order with its NUMA memory (plans taken off the host), then every CPU
// left, cross-node, with the host's memory left.
func eruHostCapacity(sb, mf int, h *alloc.Host, pieces int, mem int64) int {
	free := map[int]int{}
	for _, c := range h.CPUs {
		free[int(c.ID)] = c.Capacity - c.Used
	}
	cores := func(set func(int) bool) []eruCore {
		var out []eruCore
		for _, c := range h.CPUs {
			if id := int(c.ID); set(id) {
				out = append(out, eruCore{id, free[id]})
			}
		}
		return out
	}
	memLeft := h.MemoryBytes - h.MemoryUsed
	total := 0
	for _, n := range h.NUMANodes {
		plans := eruPlans(sb, mf, cores(func(id int) bool { return n.CPUs.Contains(cpuset.CPUID(id)) }), pieces, int(min(n.MemoryBytes-n.MemoryUsed, memLeft)/mem))
		for _, p := range plans {
			for id, v := range p {
				free[id] -= v
			}
		}
		memLeft -= int64(len(plans)) * mem
		total += len(plans)
	}
	return total + len(eruPlans(sb, mf, cores(func(int) bool { return true }), pieces, int(memLeft/mem)))
}

// TestEruReferenceExample: the reference reproduces the example the planner
// once lost (12 CPUs at 300 pieces in 2 NUMA nodes, 1.5 CPU + 1 GiB: Eru 13,
// of which one cross-node on CPU 2's 100 pieces and a fragment of CPU 6),
// and pinfold now places as many.
func TestEruReferenceExample(t *testing.T) {
	t.Parallel()
	free := []int{226, 1, 200, 0, 300, 300, 100, 300, 300, 210, 85, 0}
	h := &alloc.Host{Name: "m", MemoryBytes: 64 * GiB}
	for i, v := range free {
		h.CPUs = append(h.CPUs, alloc.CPU{ID: cpuset.CPUID(i), Capacity: 300, Used: 300 - v})
	}
	h.NUMANodes = []alloc.NUMANode{{ID: 0, CPUs: cpuset.Of[cpuset.CPUID](0, 1, 2, 3, 4, 5), MemoryBytes: 32 * GiB}, {ID: 1, CPUs: cpuset.Of[cpuset.CPUID](6, 7, 8, 9, 10, 11), MemoryBytes: 32 * GiB}}
	p := alloc.Params{ShareBase: 100, MaxFragmentCores: -1}
	if eru := eruHostCapacity(100, -1, h, 150, GiB); eru != 13 {
		t.Fatalf("reference: %d, want Eru's 13", eru)
	}
	req := alloc.Request{Service: "s", Count: 13, Pieces: 150, Bind: true, MemoryBytes: GiB, Strategy: alloc.Auto}
	if got := alloc.HostCapacity(p, h, req).Count; got != 13 {
		t.Fatalf("capacity %d, want 13", got)
	}
	res, err := alloc.Plan(p, []*alloc.Host{h}, req)
	if err != nil {
		t.Fatal(err)
	}
	cross := res.Placements[12]
	if cross.NUMANode != -1 || cross.CPUs[2] != 100 || cross.CPUs[6] != 50 {
		t.Errorf("13th instance %v, want cross-node [2:100 6:50]", cross.Allocation)
	}
	checkPlacements(t, p, h, req, res.Placements)
}

// TestNeverBelowEruWithNUMA: on random hosts of two NUMA nodes with
// oversold CPUs (up to 3 share bases of pieces), pinfold's capacity is never
// below the reference's, and Plan places exactly that many. No fragment cap:
// Eru applies maxshare per CPU set, pinfold per host, so a cap is not
// comparable.
func TestNeverBelowEruWithNUMA(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(2026, 11))
	better, cases := 0, 20000
	for i := range cases {
		sb := []int{10, 100, 100, 1000}[r.IntN(4)]
		p := alloc.Params{ShareBase: sb, MaxFragmentCores: -1}
		h := &alloc.Host{Name: fmt.Sprintf("h%d", i), MemoryBytes: int64(4+r.IntN(60)) * GiB}
		per := 2 + r.IntN(7)
		var sets [2][]cpuset.CPUID
		for id := range 2 * per {
			c := sb * (1 + r.IntN(3))
			used := 0
			switch r.IntN(4) {
			case 0:
				used = r.IntN(c + 1)
			case 1:
				used = sb * r.IntN(c/sb+1)
			}
			h.CPUs = append(h.CPUs, alloc.CPU{ID: cpuset.CPUID(id), Capacity: c, Used: used})
			sets[id/per] = append(sets[id/per], cpuset.CPUID(id))
		}
		h.MemoryUsed = r.Int64N(h.MemoryBytes / 4)
		for n, s := range sets {
			h.NUMANodes = append(h.NUMANodes, alloc.NUMANode{ID: cpuset.NUMANodeID(n), CPUs: cpuset.Of(s...), MemoryBytes: h.MemoryBytes / 2})
		}
		pieces := sb/10 + r.IntN(3*sb)
		mem := int64(1+r.IntN(4)) * GiB / 2
		eru := eruHostCapacity(sb, -1, h, pieces, mem)
		req := alloc.Request{Service: "s", Pieces: pieces, Bind: true, MemoryBytes: mem, Strategy: alloc.Auto}
		got := alloc.HostCapacity(p, h, req).Count
		if got < eru {
			var free []int
			for _, c := range h.CPUs {
				free = append(free, c.Capacity-c.Used)
			}
			t.Fatalf("#%d capacity %d below Eru's %d: share base %d, free %v, NUMA %v, %d pieces + %d bytes", i, got, eru, sb, free, sets, pieces, mem)
		}
		if got > eru {
			better++
		}
		if got > 0 {
			req.Count = got
			res, err := alloc.Plan(p, []*alloc.Host{h}, req)
			if err != nil {
				t.Fatalf("#%d capacity %d but Plan failed: %v", i, got, err)
			}
			checkPlacements(t, p, h, req, res.Placements)
		}
	}
	t.Logf("%d of %d hosts: pinfold places more than Eru, none fewer", better, cases)
}
