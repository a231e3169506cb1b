package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
)

// maxBruteForce bounds the lower-priority instances of one host the
// preempt step's brute force tries every subset of (2^n plans).
const maxBruteForce = 10

// opPreempt deploys one instance of the probe at a priority above some
// running instance's, sized so that it does not fit without stopping
// anything, and checks preemption's invariants:
//   - a dry run names the victims the deploy then stops, and changes
//     nothing;
//   - no victim's service has the preemptor's priority or a higher one,
//     nor is never preempted;
//   - the victims are on the host the instance takes, and the audit is
//     clean right after (nothing oversold while both were planned);
//   - on small fleets (at most maxBruteForce candidates a host), no set of
//     lower-priority instances of any host with a lower highest priority,
//     or as high and fewer, would have made room (brute force, with the
//     same single-host plan the service uses), and the deploy is refused
//     only when no set would.
//
// The probe is removed after.
func (w *world) opPreempt() (op, bool) {
	prio := map[string]model.Priority{}
	never := map[string]bool{}
	lowest := model.MaxPriority
	for _, in := range w.instances() {
		d, _ := w.st.Service(in.Service)
		prio[in.Service] = d.Value.Priority
		never[in.Service] = d.Value.NeverPreempted
		lowest = min(lowest, d.Value.Priority)
	}
	var above []model.Priority
	for _, p := range []model.Priority{model.PriorityBatch, model.PriorityProduction, model.PrioritySystem} {
		if p > lowest {
			above = append(above, p)
		}
	}
	if len(above) == 0 {
		return op{}, false
	}
	r := service.DeployRequest{Service: probe, Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "img:preempt"},
		Size:       model.Size{Pieces: pickFrom(w.preempting, []int{200, 400, 800}), Bind: true, Memory: pickFrom(w.preempting, []int64{GiB, 2 * GiB, 4 * GiB})},
		Scheduling: model.Scheduling{Strategy: "auto", Priority: pickFrom(w.preempting, above)}}}
	r.Rules.DomainSpread = string(placement.SpreadOff)
	what := fmt.Sprintf("%s at %s", describe(r), r.Priority)
	plain := r
	plain.NoPreempt, plain.DryRun = true, true
	if _, err := w.svc.DeployWithRules(w.ctx, plain); err == nil {
		w.stats("preempt-fits").Done++
		return op{kind: "preempt", what: what + ": fits without preemption"}, true
	}
	best, oracle := w.preemptOracle(r)
	before := w.snapshot()
	dry := r
	dry.DryRun = true
	dres, derr := w.svc.DeployWithRules(w.ctx, dry)
	if d := before.diff(w.snapshot()); d != "" {
		w.fail("preempt: the dry run of %s changed the store: %s", what, d)
	}
	res, err := w.svc.DeployWithRules(w.ctx, r)
	if (err == nil) != (derr == nil) {
		w.fail("preempt: %s: the deploy said %v, its dry run %v", what, err, derr)
	}
	if err != nil {
		w.outcome(op{kind: "preempt", want: service.Exhausted}, err, before)
		if oracle && best.n >= 0 {
			w.fail("preempt: %s refused (%v), yet stopping %d instances (highest priority %s) on %s makes room", what, err, best.n, best.max, best.host)
		}
		return op{kind: "preempt", what: what + ": refused"}, true
	}
	w.stats("preempt").Done++
	w.note(fmt.Sprintf("preempt: %s: victims %v", what, res.Preempted))
	if !slices.Equal(res.Preempted, dres.Preempted) {
		w.fail("preempt: %s stopped %v, its dry run named %v", what, res.Preempted, dres.Preempted)
	}
	if len(res.Preempted) == 0 || len(res.Instances) != 1 {
		w.fail("preempt: %s placed %d instances with victims %v, though it did not fit without", what, len(res.Instances), res.Preempted)
	}
	got := choice{n: len(res.Preempted), max: model.MinPriority - 1}
	for _, v := range res.Preempted {
		if v.Priority >= r.Priority || prio[v.Service] != v.Priority {
			w.fail("preempt: %s (priority %s) stopped %s of %s at priority %s (recorded %s)", what, r.Priority, v.ID, v.Service, v.Priority, prio[v.Service])
		}
		if never[v.Service] {
			w.fail("preempt: %s stopped %s of %s, which is never preempted", what, v.ID, v.Service)
		}
		if v.Host != res.Instances[0].Host {
			w.fail("preempt: %s took %s and stopped %s on %s", what, res.Instances[0].Host, v.ID, v.Host)
		}
		got.max, got.host = max(got.max, v.Priority), v.Host
	}
	if bad := service.Verify(w.st, shareBase); len(bad) > 0 {
		w.fail("preempt: audit after %s: %s", what, strings.Join(bad, "\n"))
	}
	if oracle && (best.n < 0 || best.max < got.max || best.max == got.max && best.n < got.n) {
		w.fail("preempt: %s stopped %d instances (highest priority %s) on %s; brute force: %d (highest %s) on %s", what, got.n, got.max, got.host, best.n, best.max, best.host)
	}
	if oracle {
		w.stats("preempt-brute-force").Done++
	}
	if _, err := w.svc.Remove(w.ctx, probe); err != nil {
		w.fail("removing the probe: %v", err)
	}
	return op{kind: "preempt", what: what}, true
}

func pickFrom[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// choice is a victim set's rank: its highest priority, then its size
// (n < 0: none fits).
type choice struct {
	n    int
	max  model.Priority
	host string
}

// preemptOracle is the best victim set for r over every subset of every
// schedulable host's instances of lower priority (not in a move, not of
// a service never preempted), each
// tried with a single-host plan of one instance of r on the host without
// them; false when some host has more than maxBruteForce candidates.
func (w *world) preemptOracle(r service.DeployRequest) (choice, bool) {
	best := choice{n: -1}
	one := placement.NewRequest(r.Service, 1, r.Deploy)
	settings := w.st.PlacementSettings()
	for _, ph := range w.st.SchedulablePlacement().Hosts {
		v, ok := w.st.Host(ph.Name)
		if !ok {
			continue
		}
		var cands []model.Instance
		var prios []model.Priority
		for _, x := range w.st.Instances(ph.Name) {
			d, _ := w.st.Service(x.Instance.Service)
			if d.Value.Priority >= r.Priority || d.Value.NeverPreempted || x.Instance.Replaces != "" || len(w.st.Replacements(x.Instance.ID)) > 0 {
				continue
			}
			cands, prios = append(cands, x.Instance), append(prios, d.Value.Priority)
		}
		if len(cands) > maxBruteForce {
			return choice{}, false
		}
		for mask := 1; mask < 1<<len(cands); mask++ {
			c := choice{max: model.MinPriority - 1, host: ph.Name}
			a := v.Alloc.Clone()
			for i, in := range cands {
				if mask&(1<<i) != 0 {
					a.Add(in, -1)
					c.n++
					c.max = max(c.max, prios[i])
				}
			}
			if best.n >= 0 && (c.max > best.max || c.max == best.max && c.n >= best.n) {
				continue
			}
			hv := v
			hv.Alloc, hv.Resources = a, state.AllocHost(v.Host, a)
			if _, err := placement.PlanValid(w.svc.Params(), settings, []*placement.Host{hv.PlacementHost()}, one); err == nil {
				best = c
			}
		}
	}
	return best, true
}
