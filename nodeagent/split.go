package nodeagent

import (
	"slices"
)

// SplitPart is where a thread of a split instance sits: the container's
// cgroup itself (threads start there: the container's first process, new
// threads of a thread moved nowhere yet, `docker exec`), or one of the two
// threaded children the split scheme creates under it.
type SplitPart int

const (
	// SplitRoot is the container's cgroup itself.
	SplitRoot SplitPart = iota
	// SplitWhole is the child "pinfold-whole": cpuset = the instance's
	// whole CPUs, no cap of its own.
	SplitWhole
	// SplitFrag is the child "pinfold-frag": cpuset = the shared CPU,
	// cpu.max = the fragment.
	SplitFrag
)

// String is the part's child cgroup name ("" for the container's cgroup).
func (p SplitPart) String() string {
	switch p {
	case SplitWhole:
		return SplitWholeName
	case SplitFrag:
		return SplitFragName
	case SplitRoot:
		return "root"
	}
	return "unknown"
}

// The split scheme's threaded child cgroups, under the container's cgroup.
const (
	SplitWholeName = "pinfold-whole"
	SplitFragName  = "pinfold-frag"
)

// SplitThread is one thread of a split instance as the agent observed it.
type SplitThread struct {
	TID      int
	Runnable bool // state R in /proc/<tid>/stat
	In       SplitPart
}

// SplitSweep says which threads of an instance holding whole whole CPUs and
// a fragment of a shared CPU to move, and where: TID → destination, only the
// threads that move (nil or empty: nothing to do). It is pure.
//
// The caps on the shared CPU sum to at most one CPU only if the instance
// uses the shared CPU through "pinfold-frag" alone, and the plan is met only
// if both children have work; so, with n runnable threads:
//  1. n <= whole: every thread goes to "pinfold-whole" (a one-thread
//     instance gets a whole CPU, min(1, plan), not its fragment);
//  2. otherwise at least whole runnable threads sit in "pinfold-whole" and at
//     least one in "pinfold-frag". Threads that already satisfy that stay
//     where they are (no churn): runnable threads in the container's cgroup
//     fill "pinfold-whole" up to whole, then "pinfold-frag" up to one, then
//     go to "pinfold-whole"; if "pinfold-frag" still has none, the highest
//     runnable TID in "pinfold-whole" moves there; if "pinfold-whole" still
//     has fewer than whole, the lowest runnable TIDs in "pinfold-frag" move
//     there (keeping the highest);
//  3. sleeping threads in the container's cgroup go to "pinfold-whole";
//     sleeping threads in "pinfold-whole" stay; sleeping threads in
//     "pinfold-frag" stay only while "pinfold-whole" holds more than whole
//     runnable threads, else they go to "pinfold-whole". A thread pool
//     hands work between its threads (a Go program's runtime wakes the
//     thread it parked last), so a sleeping thread is where work may wake
//     next. Woken in "pinfold-frag" it gives that child work back after its
//     own thread handed off (good), but if the work came from
//     "pinfold-whole" with no runnable thread to spare there, that child
//     sits short until the next sweep: the instance loses whole CPUs, not
//     a fragment.
//
// Ties are broken by TID, lowest first. whole < 1 (a fragment alone: the
// container's cpuset and cpu.max already make its share exact, there are no
// children) gives no moves.
func SplitSweep(whole int, threads []SplitThread) map[int]SplitPart {
	if whole < 1 || len(threads) == 0 {
		return nil
	}
	ts := slices.Clone(threads)
	slices.SortFunc(ts, func(a, b SplitThread) int { return a.TID - b.TID })
	n := 0
	for _, t := range ts {
		if t.Runnable {
			n++
		}
	}
	moves := map[int]SplitPart{}
	if n <= whole { // 1.
		for _, t := range ts {
			if t.In != SplitWhole {
				moves[t.TID] = SplitWhole
			}
		}
		return moves
	}
	// 2. Where each runnable thread ends up, starting from where it is.
	at := map[int]SplitPart{}
	count := map[SplitPart]int{}
	for _, t := range ts {
		if t.Runnable && t.In != SplitRoot {
			at[t.TID] = t.In
			count[t.In]++
		}
	}
	for _, t := range ts {
		if !t.Runnable || t.In != SplitRoot {
			continue
		}
		to := SplitWhole
		if count[SplitWhole] >= whole && count[SplitFrag] < 1 {
			to = SplitFrag
		}
		at[t.TID] = to
		count[to]++
	}
	if count[SplitFrag] < 1 { // then count[SplitWhole] = n > whole
		for i := len(ts) - 1; i >= 0; i-- {
			if t := ts[i]; t.Runnable && at[t.TID] == SplitWhole {
				at[t.TID] = SplitFrag
				count[SplitWhole]--
				count[SplitFrag]++
				break
			}
		}
	}
	for _, t := range ts { // count[SplitFrag] - 1 >= whole - count[SplitWhole], as n > whole
		if count[SplitWhole] >= whole {
			break
		}
		if t.Runnable && at[t.TID] == SplitFrag && count[SplitFrag] > 1 {
			at[t.TID] = SplitWhole
			count[SplitWhole]++
			count[SplitFrag]--
		}
	}
	for _, t := range ts {
		to, ok := at[t.TID]
		if !ok { // 3.
			if t.In == SplitWhole || (t.In == SplitFrag && count[SplitWhole] > whole) {
				continue
			}
			to = SplitWhole
		}
		if to != t.In {
			moves[t.TID] = to
		}
	}
	return moves
}

// SplitBusy is how much of its share a child of a split instance must
// have used since the last sweep to count as busy, SplitIdle the CPU
// below which a whole instance counts as idle, and SplitWaiting the part
// of the interval below which the threads of "pinfold-whole" count as
// never waiting for a CPU.
const (
	SplitBusy    = 0.8
	SplitIdle    = 0.02
	SplitWaiting = 0.1
)

// SplitQuiet says whether a sweep of a split instance holding whole whole
// CPUs and frag of a shared one (0 < frag < 1) may skip reading its
// threads, from what its children did over the interval (CPUs: µs of CPU
// per µs): both children busy (each ≥ SplitBusy of its share: each holds
// a runnable thread, the sweep's whole aim); the instance idle (under
// SplitIdle CPU: no thread to place; one that wakes is seen by the next
// sweep, once it used CPU); or "pinfold-whole" busy, "pinfold-frag" idle
// and no thread of "pinfold-whole" waiting for a CPU (waitedWhole, the
// part of the interval some thread there was runnable and not running:
// the kernel's cpu.pressure "some"; negative when the kernel does not
// say) — the instance's demand fits its whole CPUs, a thread moved to
// the fragment would leave one idle (one busy thread of a 1.7 plan).
// Anything else needs the threads read. It is pure: the sweep's cost at
// 50 instances × 40 threads fell from 2,000 reads of /proc a round to 100
// of cpu.stat, and 50 of cpu.pressure where the fragment idles (issue 35
// item 6).
func SplitQuiet(whole int, frag, usedWhole, usedFrag, waitedWhole float64) bool {
	if usedWhole+usedFrag < SplitIdle {
		return true
	}
	wholeBusy := usedWhole >= SplitBusy*float64(whole)
	if wholeBusy && usedFrag < SplitIdle && waitedWhole >= 0 && waitedWhole < SplitWaiting {
		return true
	}
	return wholeBusy && usedFrag >= SplitBusy*frag
}
