package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// RebalanceRequest asks for moves that reduce imbalance (balance.Plan) and,
// with Defragment, moves that leave fewer CPUs shared in pieces.
type RebalanceRequest struct {
	Options    balance.Options
	Defragment bool
	// Apply starts the moves (blue-green, with health gates); otherwise
	// the result is a dry run.
	Apply bool
	// MoveLocalVolumes lets instances with a host-local volume (a bind
	// mount or a named volume) move; their data stays behind. Without it
	// they stay where they are (RebalanceResult.Kept says so).
	MoveLocalVolumes bool
}

// RebalanceMove is one proposed (or started) move.
type RebalanceMove struct {
	Instance, Service, From, To, Why string
	// NewInstance is the instance started on To (Apply only).
	NewInstance string
}

// RebalanceResult is the proposal with the measures before and after it.
type RebalanceResult struct {
	Moves []RebalanceMove
	// Ratio per resource: the most used host's share / the least used
	// one's (balance.Ratio); -1 stands for infinite (a host uses none).
	Before, After map[string]float64
	// Fragmented is the number of CPUs shared in pieces.
	FragmentedBefore, FragmentedAfter int
	// Proposed is how many moves were planned (Apply: Moves are those
	// started, fewer when the hosts changed meanwhile).
	Proposed int
	// Kept are the instances left where they are on purpose (To is
	// empty), with why: a host-local volume.
	Kept []RebalanceMove
	// NoMove says, when Moves is empty, why: per resource, the threshold
	// that holds; then the candidates the rules refused, with the rule and
	// hosts (at most maxNoMove lines, the rest counted).
	NoMove []string
}

// maxNoMove bounds RebalanceResult.NoMove's refused candidates.
const maxNoMove = 10

// StaysForVolume says why in stays on its host when host-local volumes do
// not move (e.g. "web-1 stays on a: it has a host-local volume (bind
// /data)"); "" when it has none.
func StaysForVolume(in model.Instance) string {
	if v := in.HostLocal(); v != "" {
		return fmt.Sprintf("%s stays on %s: it has a host-local volume (%s)", in.ID, in.Host, v)
	}
	return ""
}

// instancesText is "1 instance" or "n instances".
func instancesText(n int) string {
	if n == 1 {
		return "1 instance"
	}
	return fmt.Sprintf("%d instances", n)
}

// isPerHost reports whether service is placed per host (strategy each or
// fill: a count on every host, as a daemon runs): rebalance never moves
// its instances, since a move leaves its host short and another with one
// too many (a new user's trial: rebalance moved both of a host's `each`
// instances to another host).
func isPerHost(rd interface {
	Service(string) (state.Doc[state.Service], bool)
}, service string) bool {
	d, ok := rd.Service(service)
	return ok && perHost(d.Value.Strategy)
}

// Rebalance plans moves over the schedulable hosts against the cache with
// the moves planned so far laid over it (state.Pending), each through the
// same placement rules as a deploy (hard rules, capacity, domain spread):
// a proposal never breaks a hard rule. With Apply it then starts them.
func (s *Service) Rebalance(ctx context.Context, r RebalanceRequest) (RebalanceResult, error) {
	if err := r.Options.Validate(); err != nil {
		return RebalanceResult{}, errf(Invalid, "%w", err)
	}
	pend := s.st.Pending()
	hosts, items, kept := balanceModel(pend, r.MoveLocalVolumes)
	fragBefore := fragmented(pend)
	var moves []RebalanceMove
	var refused []string // the moves the rules refused, for NoMove
	// The caller's context stops the planning: every try fails at once
	// once it is done, and the call returns its error (a client that left
	// does not keep a planner core busy).
	try := func(it balance.Item, to string) bool {
		if ctx.Err() != nil {
			return false
		}
		v, ok := pend.Instance(it.ID)
		if !ok {
			return false
		}
		c := new(state.Change)
		if _, _, err := s.placeLike(pend, v.Instance, v.Instance.Host, to, "", true, false, c); err != nil {
			refused = append(refused, fmt.Sprintf("%s from %s to %s: %s", it.ID, it.Host, to, refusedBy(err)))
			return false
		}
		release(pend, v, c, nil)
		pend.Add(c)
		return true
	}
	planned, after := balance.Plan(hosts, items, r.Options, try)
	if err := ctx.Err(); err != nil {
		return RebalanceResult{}, fmt.Errorf("rebalance stopped: %w", err)
	}
	for _, m := range planned {
		moves = append(moves, RebalanceMove{Instance: m.Item.ID, Service: m.Item.Service, From: m.Item.Host, To: m.To, Why: m.Why + leftBehind(s.st, m.Item.ID)})
	}
	limit := r.Options.MaxMoves
	if limit == 0 {
		limit = balance.DefaultMaxMoves
	}
	if spread := s.respread(ctx, pend, limit, len(moves), r.MoveLocalVolumes); len(spread) > 0 {
		moves = append(moves, spread...)
		after, _, _ = balanceModel(pend, r.MoveLocalVolumes)
	}
	if r.Defragment {
		moves = append(moves, s.defragment(ctx, pend, r.Options, len(moves), r.MoveLocalVolumes)...)
		if err := ctx.Err(); err != nil {
			return RebalanceResult{}, fmt.Errorf("rebalance stopped: %w", err)
		}
		after, _, _ = balanceModel(pend, r.MoveLocalVolumes)
	}
	out := RebalanceResult{Moves: moves, Before: ratios(hosts), After: ratios(after), FragmentedBefore: fragBefore, FragmentedAfter: fragmented(pend), Kept: kept}
	if len(moves) == 0 {
		out.NoMove = noMove(hosts, r.Options, refused)
	}
	if !r.Apply {
		return out, nil
	}
	out.Proposed = len(out.Moves)
	for i, m := range out.Moves {
		mv, err := s.Move(ctx, m.Instance, m.To)
		if err != nil {
			if i == 0 {
				return out, errf(CodeOf(err), "move 1 of %d (%s from %s to %s): %w; nothing was started", len(moves), m.Instance, m.From, m.To, err)
			}
			// Some moves run already: report them (Proposed says how many
			// were planned); the rest no longer fit the hosts as they are.
			s.log.Warn("rebalance: a move no longer fits; the ones before it were started", "move", i+1, "of", len(moves), "instance", m.Instance, "err", err)
			out.Moves = out.Moves[:i]
			break
		}
		out.Moves[i].NewInstance = mv.To.ID
	}
	s.log.Info("rebalance started", "moves", len(out.Moves))
	return out, nil
}

// defragment proposes moves of instances that hold only a fragment of one
// CPU, each accepted when it lowers the number of CPUs shared in pieces.
func (s *Service) defragment(ctx context.Context, pend *state.Pending, o balance.Options, done int, moveLocal bool) []RebalanceMove {
	limit := o.MaxMoves
	if limit == 0 {
		limit = balance.DefaultMaxMoves
	}
	var out []RebalanceMove
	for _, h := range pend.SchedulablePlacement().Hosts {
		for _, v := range pend.Instances(h.Name) {
			if done+len(out) >= limit || ctx.Err() != nil {
				return out
			}
			in := v.Instance
			if !in.Bind || len(in.CPUs) != 1 || in.Pieces() >= s.params.ShareBase || in.Replaces != "" || !moveLocal && in.HostLocal() != "" || isPerHost(pend, in.Service) {
				continue
			}
			trial := s.st.Pending()
			trial.Add(pend.Change())
			cur, ok := trial.Instance(in.ID)
			if !ok || cur.Instance.Host != h.Name {
				continue
			}
			c := new(state.Change)
			moved, _, err := s.placeLike(trial, cur.Instance, h.Name, "", "", true, false, c)
			if err != nil {
				continue
			}
			release(trial, cur, c, nil)
			before := fragmented(trial)
			trial.Add(c)
			if fragmented(trial) >= before {
				continue
			}
			pend.Add(c)
			out = append(out, RebalanceMove{Instance: in.ID, Service: in.Service, From: h.Name, To: moved.Host,
				Why: "defragment: frees a CPU shared in pieces on " + h.Name + leftBehind(s.st, in.ID)})
		}
	}
	return out
}

// leftBehind is what a move of instance id leaves behind: its host-local
// volume ("" when it has none). rd is the state before the moves.
func leftBehind(rd interface {
	Instance(string) (state.InstanceView, bool)
}, id string) string {
	if v, ok := rd.Instance(id); ok {
		if hl := v.Instance.HostLocal(); hl != "" {
			return "; its host-local volume (" + hl + ") stays behind"
		}
	}
	return ""
}

// balanceModel is the schedulable hosts' CPU and memory use and the
// instances that may move (none that is moving already, none with a
// host-local volume unless moveLocal: those are kept, with why).
func balanceModel(rd *state.Pending, moveLocal bool) ([]balance.Host, []balance.Item, []RebalanceMove) {
	var hosts []balance.Host
	var items []balance.Item
	var kept []RebalanceMove
	perHostKept, perHostOrder := map[string]int{}, []string(nil) // per-host services' instances
	for _, ph := range rd.SchedulablePlacement().Hosts {
		v, ok := rd.Host(ph.Name)
		if !ok {
			continue
		}
		h := balance.Host{Name: ph.Name, Capacity: map[string]int64{"memory": v.Host.MemoryBytes}, Used: map[string]int64{"memory": v.Alloc.MemoryUsed}}
		for id, c := range v.Host.CPUs {
			h.Capacity["cpu"] += int64(c)
			h.Used["cpu"] += int64(v.Alloc.Used[id])
		}
		hosts = append(hosts, h)
	}
	// The instances being replaced (a move in flight), found once: asking
	// replacementOf per instance sorted the service's instances each time,
	// O(n²) (issue 36 R1: 197.6 s of a core at 20,777 instances).
	// Each host's instances are read once (a copy of each), for both
	// passes.
	moving := map[string]bool{}
	on := make([][]state.InstanceView, len(hosts))
	for i, h := range hosts {
		on[i] = rd.Instances(h.Name)
		for _, v := range on[i] {
			if r := v.Instance.Replaces; r != "" {
				moving[r] = true
			}
		}
	}
	// Items of one use share one Use map (balance reads it, never writes
	// it): a map per instance was most of a dry run's allocations, and a
	// fleet has few sizes.
	type use struct {
		memory, cpu int64
		bind        bool
	}
	uses := map[use]map[string]int64{}
	for i := range hosts {
		for _, v := range on[i] {
			in := v.Instance
			if in.Replaces != "" || moving[in.ID] {
				continue
			}
			if why := StaysForVolume(in); why != "" && !moveLocal {
				kept = append(kept, RebalanceMove{Instance: in.ID, Service: in.Service, From: in.Host, Why: why})
				continue
			}
			if isPerHost(rd, in.Service) {
				if perHostKept[in.Service] == 0 {
					perHostOrder = append(perHostOrder, in.Service)
				}
				perHostKept[in.Service]++
				continue
			}
			k := use{memory: in.Memory, bind: in.Bind}
			if in.Bind {
				k.cpu = int64(in.Pieces())
			}
			m, ok := uses[k]
			if !ok {
				m = map[string]int64{"memory": k.memory}
				if k.bind {
					m["cpu"] = k.cpu
				}
				uses[k] = m
			}
			items = append(items, balance.Item{ID: in.ID, Service: in.Service, Host: in.Host, Use: m})
		}
	}
	// One line a service placed per host, not one an instance: a daemon
	// on every host of a large fleet would fill the answer.
	slices.Sort(perHostOrder)
	for _, svc := range perHostOrder {
		d, _ := rd.Service(svc)
		kept = append(kept, RebalanceMove{Service: svc, Why: fmt.Sprintf("%s: %s stay where they are: the service is placed per host (strategy %s: a count on every host)",
			svc, instancesText(perHostKept[svc]), d.Value.Strategy)})
	}
	return hosts, items, kept
}

// fragmented counts the schedulable hosts' CPUs shared in pieces (some
// used, not all).
func fragmented(rd *state.Pending) int {
	n := 0
	for _, ph := range rd.SchedulablePlacement().Hosts {
		v, ok := rd.Host(ph.Name)
		if !ok {
			continue
		}
		for id, c := range v.Host.CPUs {
			if u := v.Alloc.Used[id]; u > 0 && u < c {
				n++
			}
		}
	}
	return n
}

func ratios(hosts []balance.Host) map[string]float64 {
	out := map[string]float64{}
	for _, r := range balance.Resources {
		v := balance.Ratio(hosts, r)
		if math.IsInf(v, 1) {
			v = -1
		}
		out[r] = v
	}
	return out
}

// noMove says why a proposal has no move: per resource, the balancing
// threshold that holds or the activity threshold the most used host is
// below; then the candidates the rules refused (refused), at most
// maxNoMove of them.
func noMove(hosts []balance.Host, o balance.Options, refused []string) []string {
	balancing, activity := o.BalancingThreshold, o.ActivityThreshold
	if balancing == 0 {
		balancing = balance.DefaultBalancing
	}
	if activity == 0 {
		activity = balance.DefaultActivity
	}
	var out []string
	for _, r := range balance.Resources {
		ratio, most := balance.Ratio(hosts, r), 0.0
		for _, h := range hosts {
			most = max(most, h.Share(r))
		}
		switch {
		case ratio <= balancing:
			out = append(out, fmt.Sprintf("%s: the most/least used host's share is %.2f, within the balancing threshold %g", r, ratio, balancing))
		case most < activity:
			out = append(out, fmt.Sprintf("%s: most/least used %s, but the most used host uses %.1f %%, below the activity threshold %g (a nearly idle cluster is left alone)", r, ratioText(ratio), 100*most, activity))
		default:
			out = append(out, fmt.Sprintf("%s: most/least used %s, above the balancing threshold %g: no move lowers it that the rules allow", r, ratioText(ratio), balancing))
		}
	}
	for i, why := range refused {
		if i == maxNoMove {
			out = append(out, fmt.Sprintf("and %d more moves refused", len(refused)-maxNoMove))
			break
		}
		out = append(out, "refused: "+why)
	}
	return out
}

// ratioText is a ratio as the proposal prints it ("infinite" for +Inf).
func ratioText(r float64) string {
	if math.IsInf(r, 1) {
		return "infinite (a host uses none)"
	}
	return fmt.Sprintf("%.2f", r)
}

// refusedBy is why placement refused a move: the rules and the hosts
// each eliminated (at most 3 named), or the error's first line.
func refusedBy(err error) string {
	var se *Error
	if errors.As(err, &se) && len(se.Eliminations) > 0 {
		parts := make([]string, 0, len(se.Eliminations))
		for _, e := range se.Eliminations {
			if len(e.Hosts) == 0 || e.Rule == placement.RuleOwnHost {
				continue // a rule that eliminated nothing, or the host it leaves
			}
			hosts := strings.Join(e.Hosts[:min(len(e.Hosts), 3)], ", ")
			if len(e.Hosts) > 3 {
				hosts += fmt.Sprintf(" and %d more", len(e.Hosts)-3)
			}
			parts = append(parts, fmt.Sprintf("%s eliminated %s", e.Rule, hosts))
		}
		if len(parts) > 0 {
			return strings.Join(parts, "; ")
		}
	}
	first, _, _ := strings.Cut(err.Error(), "\n")
	return first
}
