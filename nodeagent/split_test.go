package nodeagent

import (
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// run, sleep: a runnable / sleeping thread in part p.
func spRun(tid int, p SplitPart) SplitThread   { return SplitThread{TID: tid, Runnable: true, In: p} }
func spSleep(tid int, p SplitPart) SplitThread { return SplitThread{TID: tid, In: p} }

const (
	spRoot  = SplitRoot
	spWhole = SplitWhole
	spFrag  = SplitFrag
)

func TestSplitSweep(t *testing.T) {
	tests := []struct {
		name    string
		spWhole int
		threads []SplitThread
		want    map[int]SplitPart
	}{
		{"no threads", 1, nil, nil},
		{"fragment alone: no children", 0, []SplitThread{spRun(1, spRoot), spRun(2, spRoot)}, nil},
		{"1 thread in the root gets a whole CPU", 1, []SplitThread{spRun(10, spRoot)}, map[int]SplitPart{10: spWhole}},
		{"1 thread in frag gets a whole CPU", 1, []SplitThread{spRun(10, spFrag)}, map[int]SplitPart{10: spWhole}},
		{"1 thread already whole", 1, []SplitThread{spRun(10, spWhole)}, map[int]SplitPart{}},
		{"2 threads, 1 whole CPU, new", 1, []SplitThread{spRun(11, spRoot), spRun(10, spRoot)},
			map[int]SplitPart{10: spWhole, 11: spFrag}},
		{"2 threads, 1 whole CPU, both whole: the higher TID to frag", 1,
			[]SplitThread{spRun(10, spWhole), spRun(11, spWhole)}, map[int]SplitPart{11: spFrag}},
		{"2 threads, 1 whole CPU, both frag: the lower TID to whole", 1,
			[]SplitThread{spRun(10, spFrag), spRun(11, spFrag)}, map[int]SplitPart{10: spWhole}},
		{"2 threads, 1 whole CPU, already split: no churn", 1,
			[]SplitThread{spRun(10, spFrag), spRun(11, spWhole)}, map[int]SplitPart{}},
		{"k threads on k whole CPUs: all whole", 3,
			[]SplitThread{spRun(1, spFrag), spRun(2, spRoot), spRun(3, spWhole), spSleep(4, spFrag)},
			map[int]SplitPart{1: spWhole, 2: spWhole, 4: spWhole}},
		{"k+1 threads, new ones fill whole then frag", 3,
			[]SplitThread{spRun(1, spWhole), spRun(2, spRoot), spRun(3, spRoot), spRun(4, spRoot)},
			map[int]SplitPart{2: spWhole, 3: spWhole, 4: spFrag}},
		{"k+1 threads, all in whole: one to frag", 3,
			[]SplitThread{spRun(1, spWhole), spRun(2, spWhole), spRun(3, spWhole), spRun(4, spWhole)},
			map[int]SplitPart{4: spFrag}},
		{"k+1 threads, 2 in frag: the lower to whole", 3,
			[]SplitThread{spRun(1, spWhole), spRun(2, spWhole), spRun(3, spFrag), spRun(4, spFrag)},
			map[int]SplitPart{3: spWhole}},
		{"many threads, rule holds: no churn", 2,
			[]SplitThread{spRun(1, spFrag), spRun(2, spFrag), spRun(3, spWhole), spRun(4, spWhole), spRun(5, spFrag), spRun(6, spWhole)},
			map[int]SplitPart{}},
		{"many threads, new runnable ones go whole once frag has one", 2,
			[]SplitThread{spRun(1, spWhole), spRun(2, spWhole), spRun(3, spFrag), spRun(4, spRoot), spRun(5, spRoot)},
			map[int]SplitPart{4: spWhole, 5: spWhole}},
		{"many threads, whole short: fill it from frag, lowest TIDs first", 2,
			[]SplitThread{spRun(1, spFrag), spRun(2, spFrag), spRun(3, spFrag), spRun(4, spFrag)},
			map[int]SplitPart{1: spWhole, 2: spWhole}},
		{"sleeping threads count for nothing", 1,
			[]SplitThread{spRun(1, spFrag), spSleep(2, spWhole), spSleep(3, spWhole)},
			map[int]SplitPart{1: spWhole}},
		{"sleeping threads in whole stay once split", 1,
			[]SplitThread{spRun(1, spWhole), spRun(2, spFrag), spSleep(4, spWhole)},
			map[int]SplitPart{}},
		{"a sleeping thread in frag goes to whole: work it wakes to must not leave whole short", 1,
			[]SplitThread{spRun(1, spWhole), spRun(2, spFrag), spSleep(3, spFrag), spSleep(4, spWhole)},
			map[int]SplitPart{3: spWhole}},
		{"a sleeping thread in frag stays while whole has a runnable thread to spare", 1,
			[]SplitThread{spRun(1, spWhole), spRun(2, spFrag), spSleep(3, spFrag), spRun(4, spWhole)},
			map[int]SplitPart{}},
		{"sleeping threads in the root are swept into whole", 1,
			[]SplitThread{spRun(1, spWhole), spRun(2, spFrag), spSleep(3, spRoot), spSleep(4, spRoot)},
			map[int]SplitPart{3: spWhole, 4: spWhole}},
		{"runnable whole short, sleeping frag thread does not count", 2,
			[]SplitThread{spRun(1, spWhole), spRun(2, spFrag), spRun(3, spFrag), spSleep(4, spFrag)},
			map[int]SplitPart{2: spWhole, 4: spWhole}},
		{"no runnable threads: all to whole", 1,
			[]SplitThread{spSleep(1, spFrag), spSleep(2, spRoot), spSleep(3, spWhole)},
			map[int]SplitPart{1: spWhole, 2: spWhole}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitSweep(tt.spWhole, tt.threads)
			if len(got) == 0 && len(tt.want) == 0 {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("SplitSweep(%d, %v) (-want +got):\n%s", tt.spWhole, tt.threads, diff)
			}
		})
	}
}

// frag: whether a sleeping thread may sit in pinfold-frag after a sweep of
// an instance with k whole CPUs: while pinfold-whole has a runnable thread
// to spare.
func frag(after []SplitThread, k int) bool {
	n := 0
	for _, th := range after {
		if th.Runnable && th.In == spWhole {
			n++
		}
	}
	return n > k
}

// TestSplitSweepInvariant: after the moves, for every mix of threads, the
// rule holds and a second sweep moves nothing.
func TestSplitSweepInvariant(t *testing.T) {
	parts := []SplitPart{spRoot, spWhole, spFrag}
	for k := 1; k <= 3; k++ {
		for n := 0; n <= 5; n++ {
			// every placement and runnable state of n threads: 6^n
			total := 1
			for range n {
				total *= 6
			}
			for code := range total {
				ts := make([]SplitThread, n)
				c := code
				for i := range ts {
					ts[i] = SplitThread{TID: 100 + i, In: parts[c%3], Runnable: (c/3)%2 == 1}
					c /= 6
				}
				moves := SplitSweep(k, ts)
				after := make([]SplitThread, n)
				runnable := map[SplitPart]int{}
				for i, th := range ts {
					if to, ok := moves[th.TID]; ok {
						th.In = to
					}
					after[i] = th
					if th.In == spRoot {
						t.Fatalf("SplitSweep(%d, %v) left TID %d in the root", k, ts, th.TID)
					}
					if th.Runnable {
						runnable[th.In]++
					}
				}
				for _, th := range after {
					if !th.Runnable && th.In == spFrag && !frag(after, k) {
						t.Fatalf("SplitSweep(%d, %v) = %v left sleeping TID %d in frag with no runnable thread to spare in whole", k, ts, moves, th.TID)
					}
				}
				r := runnable[spWhole] + runnable[spFrag]
				ok := runnable[spWhole] >= k && runnable[spFrag] >= 1
				if r <= k {
					ok = runnable[spFrag] == 0
				}
				if !ok {
					t.Fatalf("SplitSweep(%d, %v) = %v: runnable whole %d, frag %d", k, ts, moves, runnable[spWhole], runnable[spFrag])
				}
				if again := SplitSweep(k, after); len(again) != 0 {
					t.Fatalf("SplitSweep(%d, %v) = %v, then %v moved again", k, ts, moves, again)
				}
				if again := SplitSweep(k, ts); !maps.Equal(again, moves) {
					t.Fatalf("SplitSweep(%d, %v) not deterministic: %v, then %v", k, ts, moves, again)
				}
			}
		}
	}
}

func TestSplitQuiet(t *testing.T) {
	const unknown = -1.0 // the kernel has no pressure files
	for _, tc := range []struct {
		name               string
		whole              int
		frag, usedW, usedF float64
		waitedW            float64
		want               bool
	}{
		{"both busy", 1, 0.7, 1.0, 0.7, unknown, true},
		{"both busy enough", 2, 0.3, 1.6, 0.24, 0.5, true},
		{"idle", 1, 0.7, 0.01, 0.005, unknown, true},
		{"fragment's child idle, nothing waits", 1, 0.7, 1.0, 0.0, 0.0, true},
		{"fragment's child idle, little waits", 2, 0.7, 1.9, 0.01, 0.09, true},
		{"fragment's child idle, a thread waits", 1, 0.7, 1.0, 0.0, 0.1, false},
		{"fragment's child idle, pressure unknown", 1, 0.7, 1.0, 0.0, unknown, false},
		{"fragment's child almost idle", 1, 0.7, 1.0, 0.02, 0.0, false},
		{"whole child short", 2, 0.5, 1.0, 0.5, 0.0, false},
		{"whole child short, fragment idle", 2, 0.5, 1.0, 0.0, 0.0, false},
		{"one thread in the fragment's child", 1, 0.7, 0.0, 0.7, 0.0, false},
		{"just over idle", 1, 0.7, 0.02, 0.0, unknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SplitQuiet(tc.whole, tc.frag, tc.usedW, tc.usedF, tc.waitedW); got != tc.want {
				t.Errorf("SplitQuiet(%d, %v, %v, %v, %v) = %v, want %v", tc.whole, tc.frag, tc.usedW, tc.usedF, tc.waitedW, got, tc.want)
			}
		})
	}
}

func TestPressureSome(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   uint64
		wantOK bool
	}{
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=99", 1234, true},
		{"full avg10=0.00 avg60=0.00 avg300=0.00 total=99\nsome avg10=1.50 avg60=0.20 avg300=0.00 total=7", 7, true},
		{"some avg10=0.00 avg60=0.00 avg300=0.00", 0, false},
		{"some total=x", 0, false},
		{"", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := pressureSome(tc.in)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("pressureSome(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestBusyTicks(t *testing.T) {
	for _, tc := range []struct {
		since, every time.Duration
		want         uint64
	}{
		{250 * time.Millisecond, 250 * time.Millisecond, splitBusyTicks},
		{100 * time.Millisecond, 250 * time.Millisecond, splitBusyTicks},
		{time.Second, 250 * time.Millisecond, 4 * splitBusyTicks},
		{260 * time.Millisecond, 250 * time.Millisecond, splitBusyTicks},
		{2 * time.Second, 250 * time.Millisecond, 8 * splitBusyTicks},
		{time.Second, 0, splitBusyTicks},
	} {
		if got := busyTicks(tc.since, tc.every); got != tc.want {
			t.Errorf("busyTicks(%s, %s) = %d, want %d", tc.since, tc.every, got, tc.want)
		}
	}
}
