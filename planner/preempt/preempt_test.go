package preempt_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/preempt"
)

// fleet is a toy resource model for the tests: each host has free CPU and
// memory, each instance holds some; a request fits a host once the free
// plus what the victims held covers it in both. It is monotone, as Fits
// must be.
type fleet struct {
	free map[string][2]int
	held map[string][2]int // by instance ID
	need [2]int
}

func (f fleet) fits(host string, ids []string) bool {
	have := f.free[host]
	for _, id := range ids {
		have[0] += f.held[id][0]
		have[1] += f.held[id][1]
	}
	return have[0] >= f.need[0] && have[1] >= f.need[1]
}

// inst is one instance of a test host: ID, priority, CPU, memory.
type inst struct {
	id       string
	prio     model.Priority
	cpu, mem int
}

func build(need [2]int, hosts map[string][2]int, ins map[string][]inst) (fleet, []preempt.Host) {
	f := fleet{free: hosts, held: map[string][2]int{}, need: need}
	var out []preempt.Host
	for _, name := range sortedKeys(hosts) {
		h := preempt.Host{Name: name}
		for _, in := range ins[name] {
			f.held[in.id] = [2]int{in.cpu, in.mem}
			h.Instances = append(h.Instances, preempt.Candidate{ID: in.id, Service: "svc-" + in.id, Priority: in.prio})
		}
		out = append(out, h)
	}
	return f, out
}

// neverPreempt marks the instances ids of hosts never preempted.
func neverPreempt(hosts []preempt.Host, ids ...string) {
	for i := range hosts {
		for j, c := range hosts[i].Instances {
			if slices.Contains(ids, c.ID) {
				hosts[i].Instances[j].NeverPreempted = true
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

const (
	sys   = model.PrioritySystem
	prod  = model.PriorityProduction
	batch = model.PriorityBatch
	be    = model.PriorityBestEffort
)

func TestChoose(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		need  [2]int
		prio  model.Priority
		hosts map[string][2]int
		ins   map[string][]inst
		never []string // IDs of instances never preempted
		want  string   // "host: id id" or "none"
	}{
		{name: "fits-as-is", need: [2]int{1, 1}, prio: prod,
			hosts: map[string][2]int{"a": {0, 0}, "b": {1, 1}},
			ins:   map[string][]inst{"a": {{"a1", batch, 1, 1}}},
			want:  "b:"},
		{name: "one-batch-instance", need: [2]int{2, 2}, prio: prod,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", batch, 1, 1}, {"a2", batch, 2, 2}, {"a3", batch, 1, 1}}},
			want:  "a: a2"},
		{name: "never-equal-priority", need: [2]int{2, 2}, prio: batch,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", batch, 4, 4}}},
			want:  "none"},
		{name: "never-higher-priority", need: [2]int{1, 1}, prio: prod,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", sys, 4, 4}, {"a2", prod, 4, 4}}},
			want:  "none"},
		{name: "best-effort-before-batch", need: [2]int{2, 2}, prio: prod,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", batch, 2, 2}, {"a2", be, 1, 1}, {"a3", be, 1, 1}}},
			want:  "a: a2 a3"},
		{name: "fewest-across-hosts", need: [2]int{4, 4}, prio: prod,
			hosts: map[string][2]int{"a": {0, 0}, "b": {0, 0}},
			ins: map[string][]inst{"a": {{"a1", batch, 2, 2}, {"a2", batch, 2, 2}},
				"b": {{"b1", batch, 4, 4}}},
			want: "b: b1"},
		{name: "ties-by-id-then-host", need: [2]int{1, 1}, prio: prod,
			hosts: map[string][2]int{"a": {0, 0}, "b": {0, 0}},
			ins: map[string][]inst{"a": {{"x2", batch, 1, 1}, {"x1", batch, 1, 1}},
				"b": {{"x3", batch, 1, 1}}},
			want: "a: x1"},
		{name: "both-dimensions", need: [2]int{2, 2}, prio: prod,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", batch, 2, 0}, {"a2", batch, 0, 2}, {"a3", batch, 1, 1}}},
			want:  "a: a1 a2"},
		{name: "lower-victims-not-enough", need: [2]int{3, 3}, prio: sys,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", be, 1, 1}, {"a2", prod, 2, 2}, {"a3", batch, 1, 1}}},
			want:  "a: a1 a2"}, // a production victim is needed; then by ID
		{name: "never-preempted-skipped", need: [2]int{2, 2}, prio: sys,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", prod, 2, 2}, {"a2", prod, 1, 1}, {"a3", prod, 1, 1}}},
			never: []string{"a1"},
			want:  "a: a2 a3"}, // a1 alone would be the fewest
		{name: "never-preempted-other-host", need: [2]int{2, 2}, prio: sys,
			hosts: map[string][2]int{"a": {0, 0}, "b": {0, 0}},
			ins: map[string][]inst{"a": {{"a1", be, 2, 2}},
				"b": {{"b1", prod, 2, 2}}},
			never: []string{"a1"},
			want:  "b: b1"}, // a1 is best-effort, yet never preempted
		{name: "never-preempted-none", need: [2]int{2, 2}, prio: sys,
			hosts: map[string][2]int{"a": {0, 0}},
			ins:   map[string][]inst{"a": {{"a1", prod, 2, 2}, {"a2", prod, 1, 1}}},
			never: []string{"a1", "a2"},
			want:  "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, hosts := build(tt.need, tt.hosts, tt.ins)
			neverPreempt(hosts, tt.never...)
			c, ok := preempt.Choose(hosts, tt.prio, f.fits, 0)
			if got := show(c, ok); got != tt.want {
				t.Errorf("Choose(%v, prio %s, need %v) = %q, want %q", tt.ins, tt.prio, tt.need, got, tt.want)
			}
		})
	}
}

func show(c preempt.Choice, ok bool) string {
	if !ok {
		return "none"
	}
	s := c.Host + ":"
	for _, id := range c.IDs() {
		s += " " + id
	}
	return s
}

// oracle is the best choice by brute force: every subset of every host's
// strictly lower instances that may be preempted, the best that fits by
// preempt.Compare.
func oracle(hosts []preempt.Host, prio model.Priority, fits preempt.Fits) (preempt.Choice, bool) {
	var best preempt.Choice
	found := false
	for _, h := range hosts {
		var cands []preempt.Candidate
		for _, c := range h.Instances {
			if c.Priority < prio && !c.NeverPreempted {
				cands = append(cands, c)
			}
		}
		for mask := 0; mask < 1<<len(cands); mask++ {
			var set []preempt.Candidate
			for i, c := range cands {
				if mask&(1<<i) != 0 {
					set = append(set, c)
				}
			}
			slices.SortFunc(set, func(a, b preempt.Candidate) int { return compareStr(a.ID, b.ID) })
			c := preempt.Choice{Host: h.Name, Victims: set}
			if fits(h.Name, c.IDs()) && (!found || preempt.Compare(c, best) < 0) {
				best, found = c, true
			}
		}
	}
	return best, found
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestChooseMatchesBruteForce compares Choose with the brute-force oracle
// on random small fleets: the same host and victims, never an instance of
// equal or higher priority nor one never preempted, and the search exact (the budget is ample).
func TestChooseMatchesBruteForce(t *testing.T) {
	t.Parallel()
	prios := []model.Priority{sys, prod, batch, be, -700}
	for seed := uint64(1); seed <= 400; seed++ {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 40))
			hosts := map[string][2]int{}
			ins := map[string][]inst{}
			n := 0
			for h := range 1 + r.IntN(4) {
				name := fmt.Sprintf("h%d", h)
				hosts[name] = [2]int{r.IntN(3), r.IntN(3)}
				for range r.IntN(8) {
					n++
					ins[name] = append(ins[name], inst{fmt.Sprintf("i%02d", r.IntN(90)*100+n), prios[r.IntN(len(prios))], r.IntN(4), r.IntN(4)})
				}
			}
			need := [2]int{1 + r.IntN(8), 1 + r.IntN(8)}
			prio := prios[r.IntN(len(prios))]
			f, hs := build(need, hosts, ins)
			var never []string // every fifth instance, by a rule of its own: the draws above stay as they were
			for _, h := range hs {
				for i, c := range h.Instances {
					if i%5 == 4 {
						never = append(never, c.ID)
					}
				}
			}
			neverPreempt(hs, never...)
			got, gok := preempt.Choose(hs, prio, f.fits, 0)
			want, wok := oracle(hs, prio, f.fits)
			if show(got, gok) != show(want, wok) {
				t.Fatalf("Choose(need %v, prio %s, %v) = %q, brute force %q", need, prio, ins, show(got, gok), show(want, wok))
			}
			if gok && !got.Exact {
				t.Errorf("Choose(need %v, prio %s, %v): not exact with the default budget", need, prio, ins)
			}
			for _, v := range got.Victims {
				if v.Priority >= prio {
					t.Errorf("Choose(prio %s): victim %s has priority %s", prio, v.ID, v.Priority)
				}
				if v.NeverPreempted {
					t.Errorf("Choose(prio %s): victim %s is never preempted", prio, v.ID)
				}
			}
		})
	}
}

// TestOnHostBudget: past its budget the search is greedy and still
// minimal in the weaker sense: it fits, and no single victim can be
// spared.
func TestOnHostBudget(t *testing.T) {
	t.Parallel()
	h := preempt.Host{Name: "a"}
	hosts := map[string][2]int{"a": {0, 0}}
	var ins []inst
	for i := range 20 {
		ins = append(ins, inst{fmt.Sprintf("i%02d", i), batch, 1, 1})
	}
	f, hs := build([2]int{6, 6}, hosts, map[string][]inst{"a": ins})
	h = hs[0]
	for _, tt := range []struct {
		name   string
		budget int
		exact  bool
	}{{"ample", 1 << 20, true}, {"short", 10, false}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, ok := preempt.OnHost(h, prod, f.fits, tt.budget)
			if !ok || c.Exact != tt.exact || len(c.Victims) != 6 || !f.fits("a", c.IDs()) {
				t.Fatalf("OnHost(20 batch of 1, need 6, budget %d) = %q exact %v, want 6 victims exact %v", tt.budget, show(c, ok), c.Exact, tt.exact)
			}
			for i := range c.Victims {
				less := slices.Delete(slices.Clone(c.IDs()), i, i+1)
				if f.fits("a", less) {
					t.Errorf("OnHost(budget %d): victims %v fit without %s", tt.budget, c.IDs(), c.Victims[i].ID)
				}
			}
		})
	}
}
