package service

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// DeployRequest asks for Count new instances of a service, wanted as
// the model.Deploy it embeds (spec, size, strategy, max per host, rules).
type DeployRequest struct {
	Service string
	model.Deploy
	Count     int
	UseBuffer bool
	// CreateOnly refuses the deploy (Exists) when the service exists
	// already: a new service is created once, however many callers try.
	CreateOnly bool
	// NoPreempt: when the deploy does not fit, fail rather than stop
	// instances of lower-priority services to make room (planPreempt).
	NoPreempt bool
	// DryRun plans the deploy, victims included, and commits nothing.
	DryRun bool
	// recorded, when set, is the strategy kept in the service's record
	// instead of Strategy (scale adds instances with auto to a service
	// deployed with a per-host strategy, which stays its strategy).
	recorded string
	// scale, when set, is what Scale read before this deploy: the plan
	// refuses (errScaleChanged) when the service's record or its number of
	// instances is no longer that, so that a resize, replace or other
	// scale committed in between is neither undone nor added to twice.
	scale *scaleRead
}

// deployDigest is the form of a deploy request whose digest its request
// ID records: the layout DeployRequest had before it embedded
// model.Deploy (c14b09e), so that a deploy repeated with its request ID
// on a planner of the other version, during an upgrade, is still the same
// call. A field added since is left out while it is zero.
type deployDigest struct {
	Service string
	model.Spec
	Count      int
	Pieces     int
	Bind       bool
	WholeCores bool
	Memory     int64
	MemorySoft int64
	Strategy   string
	MaxPerHost int
	Rules      model.Rules
	UseBuffer  bool
	CreateOnly bool
	Priority   model.Priority `json:",omitempty"`
	Source     string         `json:",omitempty"`
	NoPreempt  bool           `json:",omitempty"`
	// NeverPreempted is model.Scheduling's.
	NeverPreempted bool `json:",omitempty"`
}

func (r DeployRequest) digestForm() deployDigest {
	return deployDigest{Service: r.Service, Spec: r.Spec, Count: r.Count, Pieces: r.Pieces, Bind: r.Bind, WholeCores: r.WholeCores,
		Memory: r.Memory, MemorySoft: r.MemorySoft, Strategy: r.Strategy, MaxPerHost: r.MaxPerHost, Rules: r.Rules,
		UseBuffer: r.UseBuffer, CreateOnly: r.CreateOnly, Priority: r.Priority, Source: r.Source, NoPreempt: r.NoPreempt, NeverPreempted: r.NeverPreempted}
}

// scaleRead is the service's record and instance count a scale read.
type scaleRead struct {
	record state.Service
	have   int
}

// errScaleChanged: the service changed between a scale's read and its
// deploy's plan; Scale reads again.
var errScaleChanged = errors.New("the service changed while it was being scaled")

// DeployResult is a deploy's instances and what the placement rules said.
type DeployResult struct {
	Instances    []model.Instance
	DomainSpread string
	Violations   []placement.Violation
	// NoRoom: for a service placed per host (each, fill), the hosts the
	// rules allow that had no room for one more, so got none.
	NoRoom []string
	// Preempted are the instances of lower-priority services the deploy
	// stopped to make room, by host then ID (a dry run's: would stop).
	// A repeated request reports their IDs only.
	Preempted []Victim
	// DryRun: nothing was committed.
	DryRun bool
}

// Deploy plans and commits new instances, all or nothing.
func (s *Service) Deploy(ctx context.Context, r DeployRequest) ([]model.Instance, error) {
	res, err := s.DeployWithRules(ctx, r)
	if err != nil {
		return nil, err
	}
	return res.Instances, nil
}

// CheckDeploy makes every check a deploy makes of its own values before
// it reads the cluster: the name, sizes, spec (image, command, env,
// health, ports, container settings), count, strategy and placement
// rules, and the CPU amount against p's share base. A caller that sends
// several requests (apply -f) checks them all with it before it sends
// the first, so that one bad value changes nothing.
func CheckDeploy(p alloc.Params, r DeployRequest) error {
	if err := state.ValidateNewServiceName(r.Service); err != nil {
		return errf(Invalid, "service: %w", err)
	}
	if r.MemorySoft < 0 || r.MemorySoft > r.Memory {
		return errf(Invalid, "memory soft limit = %s: want 0..memory (%s)", alloc.FormatBytes(r.MemorySoft), alloc.FormatBytes(r.Memory))
	}
	if r.Memory < MinInstanceMemory {
		return errf(Invalid, "memory = %s: want at least %s (the Docker engine's smallest memory limit)", alloc.FormatBytes(r.Memory), alloc.FormatBytes(MinInstanceMemory))
	}
	if r.Spec.Image == "" {
		return errf(Invalid, "image = \"\": required (the container image the instances run, e.g. debian:12)")
	}
	if err := validateSpec(r.Spec); err != nil {
		return err
	}
	// A replace checks the port its health check names against each
	// instance's ports (instances.go); a deploy against its own.
	if err := validateHealthPort(r.Spec.Health, r.Spec.Ports); err != nil {
		return err
	}
	if err := validateRules(r.Rules); err != nil {
		return err
	}
	if err := r.Scheduling.Validate(); err != nil {
		return errf(Invalid, "%v", err)
	}
	if err := model.ValidateSource(r.Source); err != nil {
		return errf(Invalid, "%v", err)
	}
	if r.Count > MaxDeployCount {
		return errf(Invalid, "count = %d: want at most %d per deploy (one transaction holds them all)", r.Count, MaxDeployCount)
	}
	req := placementRequest(r)
	if err := alloc.ValidateRequest(p, req.Request); err != nil {
		return fromAlloc(err)
	}
	if err := alloc.Enforceable(p, "cpu", r.Pieces); err != nil {
		return fromAlloc(err)
	}
	if err := req.Validate(); err != nil {
		return fromAlloc(err)
	}
	return nil
}

// noRoom are the hosts a deploy of a service placed per host (each, fill:
// count on every host) left short for want of room, by name: those the
// capacity rule eliminated and the candidates that took none (each skips
// a host without room for count), less those that already hold count
// (fill tops up only). A new user's trial: "placed 2 instances on 2
// hosts", the third host, full, not named.
func noRoom(res *placement.Result, placed *state.Placed, service string, count int, st alloc.Strategy) []string {
	short := map[string]bool{}
	for _, e := range res.Eliminations {
		if e.Rule == placement.RuleCapacity {
			for _, h := range e.Hosts {
				short[h] = true
			}
		}
	}
	if res.Result != nil {
		for h := range res.Capacity {
			short[h] = true
		}
		for _, p := range res.Placements {
			delete(short, p.Host)
		}
	}
	for h := range short {
		if i, ok := placed.Index(h); ok && st == alloc.Fill && placed.Hosts[i].Resources.Instances[service] >= count {
			delete(short, h)
		}
	}
	return slices.Sorted(maps.Keys(short))
}

// placementRequest is what a deploy asks of placement (no seed).
func placementRequest(r DeployRequest) placement.Request {
	req := placement.NewRequest(r.Service, r.Count, r.Deploy)
	req.UseBuffer = r.UseBuffer
	return req
}

// DeployWithRules plans through the placement rules and commits, all or
// nothing; a request the rules cannot place fails with a *PlacementError
// carrying the elimination report.
func (s *Service) DeployWithRules(ctx context.Context, r DeployRequest) (DeployResult, error) {
	if err := CheckDeploy(s.params, r); err != nil {
		return DeployResult{}, err
	}
	req := placementRequest(r)
	// A random seed per request spreads concurrent requests over equally
	// good hosts, so they rarely collide on one host's revision.
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	req.Seed = binary.LittleEndian.Uint64(seed[:]) | 1
	recorded := string(req.Strategy)
	if r.recorded != "" {
		recorded = r.recorded
	}
	var out DeployResult
	var hosts int
	o := s.once(ctx, "Deploy", r.digestForm())
	if r.DryRun {
		o.call = nil // a dry run neither records its request ID nor replays it
	}
	err := s.pipe.do(ctx, o.wrap(func(rd reader) (*state.Change, error) {
		hit("deploy")
		var scaled state.Doc[state.Service]
		if r.scale != nil {
			d, ok := rd.Service(r.Service)
			if !ok || !reflect.DeepEqual(d.Value, r.scale.record) || countInstances(rd.ServiceInstances(r.Service)) != r.scale.have {
				return nil, errScaleChanged
			}
			scaled = d
		}
		placed := rd.SchedulablePlacement()
		settings := rd.PlacementSettings()
		if st := req.Strategy; (st == alloc.Each || st == alloc.Fill) && r.Count*len(placed.Hosts) > MaxDeployCount {
			// Count is per host: one transaction holds count × hosts (the
			// attack review of issue 38: scale --count 2000 of an each
			// service on 3 hosts added 6,000 in one call).
			return nil, errf(Invalid, "count = %d per host (strategy %s) on %d schedulable hosts: up to %d instances, want at most %d per deploy or scale (one transaction holds them all): a smaller count, or --max-per-host",
				r.Count, st, len(placed.Hosts), r.Count*len(placed.Hosts), MaxDeployCount)
		}
		// One instance, auto, no rules: the room index finds the host the
		// full plan would without visiting every host (placement.Index).
		res, ok := (*placement.Result)(nil), false
		if x := placed.RoomIndex(s.params); x != nil {
			res, ok = x.First(s.params, settings, placed.Hosts, req)
		}
		if ok {
			s.indexed.Add(1)
		}
		if ok && s.checkIndex {
			full, err := placement.PlanValid(s.params, settings, placed.Hosts, req)
			if err != nil || !reflect.DeepEqual(full.Placements, res.Placements) || full.Spread != "" || len(full.Violations) > 0 {
				return nil, fmt.Errorf("room index: placed %v, the full plan %v (error %v)", res.Placements, placementsOf(full), err)
			}
		}
		var pre preemption
		if !ok {
			var err error
			if res, err = placement.PlanValid(s.params, settings, placed.Hosts, req); err != nil { // validated above, once
				var found bool
				if r.NoPreempt || !isNoRoom(err) {
					return nil, s.placementError(rd, err)
				}
				if pre, res, found = planPreempt(s.params, rd, placed, settings, req); !found {
					return nil, s.placementError(rd, err)
				}
			}
		}
		c := new(state.Change)
		if r.scale != nil {
			c.GuardService(r.Service, scaled.Rev) // another planner's change too
		}
		if r.CreateOnly {
			if d, ok := rd.Service(r.Service); ok {
				return nil, errf(Exists, "service %q exists already (deployed with image %s): scale or resize it, or remove it first", r.Service, d.Value.Image)
			}
			c.GuardService(r.Service, 0) // and nobody creates it before this commits
		}
		if d, ok := rd.Service(r.Service); ok && d.Value.Priority != r.Priority && r.scale == nil {
			// A deploy adds instances to a service as it is: it does not
			// lower (or raise) the priority of the instances running.
			return nil, errf(Invalid, "priority = %s: service %q runs with priority %s: deploy more with --priority %s, or remove and deploy it (apply --recreate) to change it",
				r.Priority, r.Service, d.Value.Priority, d.Value.Priority)
		}
		if d, ok := rd.Service(r.Service); ok && d.Value.NeverPreempted != r.NeverPreempted && r.scale == nil {
			// Likewise whether its instances may be preempted: one
			// record, one answer for all of them.
			return nil, errf(Invalid, "never_preempted = %t: service %q runs with never_preempted %t: deploy more with it %t, or remove and deploy it (apply --recreate) to change it",
				r.NeverPreempted, r.Service, d.Value.NeverPreempted, d.Value.NeverPreempted)
		}
		allocs := map[string]state.Alloc{}
		desired := map[string]int64{} // each host's desired set with the new instances (DesiredSize)
		docSize := int64(0)           // one new instance's document, measured once: they differ in IDs and CPUs only
		// open is host's usage as this change leaves it so far.
		open := func(host string) (state.Alloc, error) {
			if a, ok := allocs[host]; ok {
				return a, nil
			}
			// The host's documents now, which must be the ones the
			// plan read: otherwise plan again from the new ones.
			v, found := rd.Host(host)
			i, planned := placed.Index(host)
			if !found || !planned || (state.Revs{Host: v.HostRev, Alloc: v.AllocRev}) != placed.Rev(i) {
				return state.Alloc{}, state.ErrConflict
			}
			c.GuardView(v)
			desired[host] = v.DesiredBytes
			return v.Alloc.Clone(), nil
		}
		// The victims go in the same change as the instances that take
		// their room: no commit ever has both (nothing is oversold), and
		// each victim's agent stops its container when it leaves the
		// host's desired set.
		for _, v := range pre.victims {
			a, err := open(v.Instance.Host)
			if err != nil {
				return nil, err
			}
			a.Add(v.Instance, -1)
			allocs[v.Instance.Host] = a
			c.GuardInstance(v.Instance.Host, v.Instance.ID, v.Rev)
			c.DeleteInstance(v.Instance.Host, v.Instance.ID)
			c.PutEvent(s.stamp(state.Event{Identity: "planner", Kind: "Preempted", Subject: v.Instance.ID, Host: v.Instance.Host, Service: v.Instance.Service,
				Outcome: fmt.Sprintf("preempted by %s (priority %s) for its deploy: %s has priority %s", r.Service, r.Priority, v.Instance.Service, priorityOf(rd, v.Instance.Service))}))
		}
		var ins []model.Instance
		for _, p := range res.Placements {
			a, err := open(p.Host)
			if err != nil {
				return nil, err
			}
			in := model.Instance{ID: newID(r.Service), Service: r.Service, Host: p.Host, Spec: r.Spec, Generation: 1, Allocation: p.Allocation}
			in.MemorySoft = r.MemorySoft
			if docSize == 0 {
				b, _ := json.Marshal(in)
				docSize = int64(len(b)) + desiredSlack
			}
			if desired[p.Host] += docSize; desired[p.Host] > maxDesiredBytes {
				return nil, errf(Exhausted, "host %s: its desired set would be %s with %s's instances of %s each, over the %s its agent reads (agentlink.MaxPlannerFrame): deploy fewer there (--max-per-host) or with a smaller spec (environment, labels)",
					p.Host, alloc.FormatBytes(desired[p.Host]), r.Service, alloc.FormatBytes(docSize), alloc.FormatBytes(maxDesiredBytes))
			}
			a.Add(in, +1)
			allocs[p.Host] = a
			c.PutInstance(in)
			ins = append(ins, in)
		}
		for _, h := range slices.Sorted(maps.Keys(allocs)) {
			c.PutAlloc(h, allocs[h])
		}
		rec := state.Service{Name: r.Service, Deploy: r.Deploy}
		rec.Strategy = recorded
		if d, ok := rd.Service(r.Service); ok {
			rec.Source = d.Value.Source // more instances: the service's project stays
		}
		c.PutService(rec)
		out, hosts = DeployResult{Instances: ins, DomainSpread: string(res.Spread), Violations: res.Violations, Preempted: pre.Victims(rd)}, len(allocs)
		if st := req.Strategy; st == alloc.Each || st == alloc.Fill {
			out.NoRoom = noRoom(res, placed, r.Service, r.Count, st)
		}
		if r.scale != nil {
			// A scale tops up the hosts the service runs on, all or
			// nothing (seed 5 of the CI simulation: a scale to 3 per host
			// answered done with every host left at 2, the capacity rule
			// having set them aside); a host it does not run on yet may
			// stay empty, named in NoRoom.
			for _, h := range out.NoRoom {
				if i, ok := placed.Index(h); ok && placed.Hosts[i].Resources.Instances[r.Service] > 0 {
					e := errf(Exhausted, "scale of %s to %d per host: host %s runs %d and has no room for more; nothing was changed",
						r.Service, r.Count, h, placed.Hosts[i].Resources.Instances[r.Service])
					e.Eliminations = []placement.Elimination{{Rule: placement.RuleCapacity, Hosts: []string{h}}}
					return nil, e
				}
			}
		}
		if r.DryRun {
			out.DryRun = true
			return new(state.Change), nil // nothing to write
		}
		return c, nil
	}, func(rec *state.Request) {
		rec.Instances = idsOf(out.Instances)
		for _, v := range out.Preempted {
			rec.Removed = append(rec.Removed, v.ID)
		}
	}))
	if err != nil {
		return DeployResult{}, err
	}
	if o.repeated() {
		var pre []Victim
		for _, id := range o.replay.Removed {
			pre = append(pre, Victim{ID: id})
		}
		return DeployResult{Instances: s.instances(o.replay.Instances), Preempted: pre}, nil
	}
	if out.DryRun {
		return out, nil
	}
	if len(out.Preempted) > 0 {
		s.log.Info("preempted", "service", r.Service, "priority", r.Priority.String(), "victims", victimList(out.Preempted))
	}
	s.log.Info("deployed", "service", r.Service, "instances", len(out.Instances), "hosts", hosts, "domain_spread", out.DomainSpread, "violations", len(out.Violations))
	return out, nil
}

// MaxDesiredBytes bounds a host's desired set, as the planner stores its
// instances: the agent reads at most agentlink.MaxPlannerFrame of it in one
// frame (the wire form is smaller than the stored JSON, so the bound errs
// on the safe side). A deploy, replace or resize past it is refused,
// naming the host and the sizes (desiredGrowth for the last two; moves
// are not checked) (issue 36 A2: 1,200 instances of 60 KiB of environment each made a
// 73.8 MB set the agent refused every second, for ever).
const MaxDesiredBytes = agentlink.MaxPlannerFrame

// maxDesiredBytes is MaxDesiredBytes; tests lower it.
var maxDesiredBytes int64 = MaxDesiredBytes

// desiredSlack is added to each new instance's measured document: their
// IDs and CPU maps differ a little from the one measured.
const desiredSlack = 64

// desiredGrowth is, per host, how many bytes a change that rewrites
// instances in place (replace, resize) adds to the host's desired set:
// each new document's size less the one it replaces. A deploy measures
// its own (it writes new documents only).
type desiredGrowth map[string]int64

// add counts next, written over old on its host.
func (g desiredGrowth) add(old, next model.Instance) {
	g[next.Host] += instanceBytes(next) - instanceBytes(old)
}

// instanceBytes is in's document as the planner stores it.
func instanceBytes(in model.Instance) int64 {
	b, _ := json.Marshal(in)
	return int64(len(b))
}

// check refuses the change (what, e.g. "the replace of web") when it
// grows a host's desired set past maxDesiredBytes, naming the host and
// the sizes; hosts by name. A change that does not grow a host's set is
// never refused for it, so a host above the bound (an older planner's
// deploy) may still be shrunk.
func (g desiredGrowth) check(rd reader, what string) error {
	for _, h := range slices.Sorted(maps.Keys(g)) {
		v, ok := rd.Host(h)
		if !ok || g[h] <= 0 {
			continue
		}
		if after := v.DesiredBytes + g[h]; after > maxDesiredBytes {
			return errf(Exhausted, "host %s: its desired set would be %s (%s now, %s more) with %s, over the %s its agent reads (agentlink.MaxPlannerFrame): use a smaller spec (command, environment, labels), or fewer instances there",
				h, alloc.FormatBytes(after), alloc.FormatBytes(v.DesiredBytes), alloc.FormatBytes(g[h]), what, alloc.FormatBytes(maxDesiredBytes))
		}
	}
	return nil
}

// placementsOf is r's placements, nil for no result.
func placementsOf(r *placement.Result) []alloc.Placement {
	if r == nil || r.Result == nil {
		return nil
	}
	return r.Placements
}

// placementError turns a placement failure into an error carrying the
// elimination report; the hosts the schedulable index left out are listed
// under Disabled, Maintenance and Down.
func (s *Service) placementError(rd reader, err error) error {
	var pe *placement.Error
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Invalid {
		return errf(Invalid, "%s", pe.Message)
	}
	un := rd.Unschedulable()
	var elims []placement.Elimination
	for _, e := range pe.Eliminations {
		switch e.Rule {
		case placement.RuleDisabled:
			e.Hosts = append(e.Hosts, un["disabled"]...)
		case placement.RuleMaintenance:
			e.Hosts = append(e.Hosts, un["maintenance"]...)
			elims = append(elims, e)
			e = placement.Elimination{Rule: placement.RuleDown, Hosts: append(slices.Clone(un["down"]), un["protocol"]...)}
		}
		if e.Hosts == nil {
			e.Hosts = []string{}
		}
		elims = append(elims, e)
	}
	var b strings.Builder
	b.WriteString(pe.Message)
	b.WriteString("\nElimination sequence (rules in the order applied):\n")
	b.WriteString(placement.Report(elims))
	return &Error{Code: Exhausted, Message: strings.TrimRight(b.String(), "\n"), Eliminations: elims, Cause: pe}
}

func newID(service string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return service + "-" + hex.EncodeToString(b[:])
}

// Capacity is a dry run of a deploy against the live state: per
// schedulable host, how many instances of r it may take under the same
// rules and settings a deploy of r applies (placement.Capacity): buffer,
// overbooking (with UseBuffer), constraint, hard affinity, max per host.
func (s *Service) Capacity(r DeployRequest) (map[string]placement.HostRoom, error) {
	// The hard rules and max per host decide a host's room; a policy,
	// hosts order or domain spread only orders or spreads what fits.
	d := model.Deploy{Size: r.Size, Rules: model.Rules{Constraint: r.Rules.Constraint, Affinity: r.Rules.Affinity, AntiAffinity: r.Rules.AntiAffinity}, Scheduling: model.Scheduling{Strategy: string(alloc.Auto), MaxPerHost: r.MaxPerHost}}
	req := placement.NewRequest(r.Service, 1, d)
	req.UseBuffer = r.UseBuffer
	if req.Service == "" {
		req.Service = "capacity"
	}
	if r.Memory < MinInstanceMemory {
		// What a deploy refuses is not counted as room.
		return nil, errf(Invalid, "memory = %d: want at least %d (6 MiB, the Docker engine's smallest memory limit)", r.Memory, MinInstanceMemory)
	}
	if err := alloc.Enforceable(s.params, "cpu", r.Pieces); err != nil {
		return nil, fromAlloc(err)
	}
	if err := validateRules(r.Rules); err != nil {
		return nil, err
	}
	out, err := placement.Capacity(s.params, s.st.PlacementSettings(), s.st.SchedulablePlacement().Hosts, req)
	if err != nil {
		var pe *placement.Error
		if errors.As(err, &pe) {
			return nil, errf(Invalid, "%s", pe.Message)
		}
		return nil, err
	}
	return out, nil
}
