package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
)

// ReplaceRequest asks for a blue-green replacement of an instance or of every
// instance of a service with a new image (and optionally command): the
// allocation stays, the generation grows, and each host's agent swaps the
// containers (the new one must pass its health check before the old goes).
type ReplaceRequest struct {
	Target  string
	Image   string
	Command []string
	Health  *model.HealthCheck // nil keeps each instance's check
	// Hosts limits a service's replacement to instances on these hosts (a
	// batch of a rolling replace); empty means every host.
	Hosts []string
	// Pull is the pull policy: model.PullMissing or model.PullAlways.
	Pull string
	// Container replaces each instance's container settings (volumes,
	// restart, labels, …) as a whole (a services file's apply); nil keeps
	// them, less and plus what Edit names.
	Container *model.Container
	// Edit changes each instance's container settings one by one: those
	// it does not name keep each instance's own value (model.Container.Edited).
	Edit model.ContainerEdit
}

// patch is r as the change it makes to each target's spec.
func (r ReplaceRequest) patch() model.SpecPatch {
	return model.SpecPatch{Image: r.Image, Command: r.Command, Health: r.Health, Pull: r.Pull, Container: r.Container, Edit: r.Edit}
}

// Replace records the new image, all or nothing; no resources are planned.
// Every replaced instance gets new containers, even when its image and
// command are unchanged (a restart, or a re-pushed tag with Pull always).
func (s *Service) Replace(ctx context.Context, r ReplaceRequest) ([]model.Instance, error) {
	if r.Image != "" && strings.TrimSpace(r.Image) == "" {
		return nil, errf(Invalid, "image = %q: want an image, or none to keep each instance's", r.Image)
	}
	if r.Pull == "missing" {
		r.Pull = model.PullMissing
	}
	if r.Pull != model.PullMissing && r.Pull != model.PullAlways {
		return nil, errf(Invalid, "pull = %q: want missing (pull only when the host lacks the image) or always", r.Pull)
	}
	if err := validateSpec(model.Spec{Image: cmp.Or(r.Image, "kept"), Command: r.Command, Health: r.Health}); err != nil { // "": each keeps its own
		return nil, err
	}
	if err := r.patch().Validate(); err != nil {
		return nil, errf(Invalid, "%w", err)
	}
	var out []model.Instance
	o := s.once(ctx, "Replace", r)
	err := s.pipe.do(ctx, o.wrap(func(rd reader) (*state.Change, error) {
		out = nil
		targets, err := targets(rd, r.Target)
		if d, ok := rd.Service(r.Target); ok && CodeOf(err) == NotFound && len(r.Hosts) == 0 {
			// Scaled to 0: the record alone changes, and the instances a
			// scale adds get it (an apply of a changed image to a service
			// at count 0 was stuck on "has no instances").
			if r.Health != nil {
				if err := validateHealthPort(r.Health, d.Value.Ports); err != nil {
					return nil, err
				}
			}
			if err := removesSomething(r, []model.Container{d.Value.Container}); err != nil {
				return nil, err
			}
			svc, err := replacedService(d.Value, r)
			if err != nil {
				return nil, err
			}
			c := new(state.Change)
			c.GuardService(d.Value.Name, d.Rev)
			c.PutService(svc)
			return c, nil
		}
		if err != nil {
			return nil, err
		}
		if len(r.Hosts) > 0 {
			targets = slices.DeleteFunc(targets, func(t state.InstanceView) bool { return !slices.Contains(r.Hosts, t.Instance.Host) })
			if len(targets) == 0 {
				return nil, errf(NotFound, "%q has no instances on hosts %s", r.Target, strings.Join(r.Hosts, ", "))
			}
		}
		cs := make([]model.Container, len(targets))
		for i, t := range targets {
			cs[i] = t.Instance.Container
		}
		if err := removesSomething(r, cs); err != nil {
			return nil, err
		}
		c := new(state.Change)
		allocs := map[string]state.Alloc{}
		oldPorts := map[string]map[int]bool{} // per host: ports the replaced containers hold until they go
		grown := desiredGrowth{}
		for _, t := range targets {
			next := t.Instance
			if r.Health != nil {
				if err := validateHealthPort(r.Health, next.Ports); err != nil {
					return nil, err
				}
			}
			next.Spec = next.Spec.Patched(r.patch())
			if err := next.Container.Validate(); err != nil {
				return nil, errf(Invalid, "instance %s: its container settings after this replace: %w", next.ID, err)
			}
			next.Generation++
			next.SpecGeneration = next.Generation
			if model.Dynamic(next.Ports) > 0 {
				// Blue-green on one host: the new container runs beside
				// the old one, so it gets dynamic ports of its own.
				if err := replacePorts(rd, &next, t.Instance, allocs, oldPorts, c); err != nil {
					return nil, err
				}
			}
			c.GuardInstance(next.Host, next.ID, t.Rev)
			c.PutInstance(next)
			out = append(out, next)
			grown.add(t.Instance, next)
		}
		if err := grown.check(rd, "the replace of "+r.Target); err != nil {
			return nil, err
		}
		for _, h := range slices.Sorted(maps.Keys(allocs)) {
			c.PutAlloc(h, allocs[h])
		}
		if d, ok := rd.Service(out[0].Service); ok && r.Target == out[0].Service {
			svc, err := replacedService(d.Value, r)
			if err != nil {
				return nil, err
			}
			c.GuardService(d.Value.Name, d.Rev)
			c.PutService(svc)
		}
		return c, nil
	}, func(rec *state.Request) { rec.Instances = idsOf(out) }))
	if err != nil {
		return nil, err
	}
	if o.repeated() {
		return s.instances(o.replay.Instances), nil
	}
	return out, nil
}

// removesSomething refuses r when a removal its edit names matches no
// setting of cs, the targets' containers (a typo: nothing was changed).
func removesSomething(r ReplaceRequest, cs []model.Container) error {
	if none := r.Edit.Unmatched(cs); len(none) > 0 {
		return errf(Invalid, "%s: %s has no such setting to remove (nothing was changed)", strings.Join(none, ", "), r.Target)
	}
	return nil
}

// replacedService is svc with r's image, pull policy and, where r names
// them, command, health check (scale gives new instances the check the
// others have) and container settings; every setting r does not name
// stays. The merged settings are checked (an edit can pass a limit).
func replacedService(svc state.Service, r ReplaceRequest) (state.Service, error) {
	svc.Spec = svc.Spec.Patched(r.patch())
	if err := svc.Container.Validate(); err != nil {
		return svc, errf(Invalid, "service %s: its container settings after this replace: %w", svc.Name, err)
	}
	return svc, nil
}

// replacePorts gives next (a replacement of old on its host) new dynamic
// host ports, the lowest free ones there: old's are still held while its
// container runs beside the new one, and so are those of the other
// instances this replace swaps on the host (oldPorts, per host). Static
// ports stay (the host's agent stops the old container before it starts
// the new one). It moves the host's usage in allocs from old's ports to
// next's.
func replacePorts(rd reader, next *model.Instance, old model.Instance, allocs map[string]state.Alloc, oldPorts map[string]map[int]bool, c *state.Change) error {
	a, ok := allocs[old.Host]
	if !ok {
		v, found := rd.Host(old.Host)
		if !found {
			return errf(Precond, "instance %s is on host %s, which is not registered", old.ID, old.Host)
		}
		a = v.Alloc.Clone()
		c.GuardView(v)
	}
	if oldPorts[old.Host] == nil {
		oldPorts[old.Host] = map[int]bool{}
	}
	for _, p := range old.HostPorts {
		oldPorts[old.Host][p.Host] = true
	}
	held := oldPorts[old.Host]
	ports, ok := model.AssignPorts(old.Ports, func(p int) bool { return a.Ports[p] > 0 || held[p] })
	if !ok {
		return errf(Exhausted, "instance %s: host %s has no %d free port(s) in %d-%d for the replacement (the old container holds its own until it goes)",
			old.ID, old.Host, model.Dynamic(old.Ports), model.DynamicPortMin, model.DynamicPortMax)
	}
	a.Add(old, -1)
	next.HostPorts = ports
	a.Add(*next, +1)
	allocs[old.Host] = a
	return nil
}

// ResizeRequest changes instances by deltas: one instance (ID) or every
// instance of a service.
type ResizeRequest struct {
	Target      string
	CPUDelta    int   // pieces
	MemoryDelta int64 // bytes
	Bind        *bool // nil keeps the mode
	// ExpectPieces and ExpectMemory (each 0: none): the size a service
	// target's record, or an instance target, must have, else the resize
	// is refused (Conflicted): a delta computed from an earlier read is
	// added once.
	ExpectPieces int
	ExpectMemory int64
	// To, when set, replaces the deltas: each instance is brought to this
	// size by its own delta, one already at it (and at Bind) is left alone,
	// and a service's record takes it.
	To *ResizeTo
	// NoPreempt: an instance that does not grow on its host fails the
	// resize rather than stop lower-priority instances there.
	NoPreempt bool `json:",omitempty"`
	// DryRun plans the resize, victims included, and commits nothing: the
	// instances at their new size and the victims, as the resize would
	// give them. It neither records nor replays a request ID.
	DryRun bool `json:",omitempty"`
}

// ResizeTo is a size a resize brings its targets to.
type ResizeTo struct {
	Pieces int
	Memory int64
}

// Resize resizes in place, all or nothing: if any instance does not fit,
// nothing changes. Lowering memory below an instance's use is planned like
// any resize; its agent shrinks it guided by pressure, or refuses.
func (s *Service) Resize(ctx context.Context, r ResizeRequest) ([]model.Instance, error) {
	out, _, err := s.ResizePreempting(ctx, r)
	return out, err
}

// ResizePreempting is Resize, with the instances it stopped: an instance
// that does not fit its host at the new size stops the fewest instances of
// strictly lower-priority services on that host (preempt.OnHost), unless
// r.NoPreempt; the victims leave in the same change. A repeated request
// gives the victims' IDs only.
func (s *Service) ResizePreempting(ctx context.Context, r ResizeRequest) ([]model.Instance, []Victim, error) {
	var out []model.Instance
	var victims []Victim
	o := s.once(ctx, "Resize", r)
	if r.DryRun {
		o.call = nil // a dry run neither records its request ID nor replays it
	}
	err := s.pipe.do(ctx, o.wrap(func(rd reader) (*state.Change, error) {
		out, victims = nil, nil
		stopped := map[string]bool{}
		targets, err := targets(rd, r.Target)
		if _, ok := rd.Service(r.Target); ok && CodeOf(err) == NotFound {
			targets, err = nil, nil // scaled to 0: the record alone changes (below)
		}
		if err != nil {
			return nil, err
		}
		if r.ExpectPieces > 0 || r.ExpectMemory > 0 {
			what, pieces, memory := "the service", 0, int64(0)
			if d, ok := rd.Service(r.Target); ok {
				pieces, memory = d.Value.Pieces, d.Value.Memory
			} else if len(targets) == 1 && targets[0].Instance.ID == r.Target {
				what, pieces, memory = "the instance", targets[0].Instance.Pieces(), targets[0].Instance.Memory
			} else {
				return nil, errf(Precond, "resize %s: an expected size is given, but %s is no service or instance", r.Target, r.Target)
			}
			if r.ExpectPieces > 0 && pieces != r.ExpectPieces || r.ExpectMemory > 0 && memory != r.ExpectMemory {
				return nil, errf(Conflicted, "resize %s: %s is %s CPUs and %s now, not the %s CPUs and %s expected: another change came first (read it again)",
					r.Target, what, alloc.FormatPieces(pieces, s.params.ShareBase), alloc.FormatBytes(memory),
					alloc.FormatPieces(r.ExpectPieces, s.params.ShareBase), alloc.FormatBytes(r.ExpectMemory))
			}
		}
		views := map[string]state.HostView{}
		allocs := map[string]state.Alloc{}
		c := new(state.Change)
		var sized []model.Instance // each target after the resize, one left alone included
		grown := desiredGrowth{}   // a resize records the previous allocation: documents grow
		for _, t := range targets {
			in := t.Instance
			v, ok := views[in.Host]
			if !ok {
				v, ok = rd.Host(in.Host)
				if !ok {
					return nil, errf(Precond, "instance %s is on host %s, which is not registered", in.ID, in.Host)
				}
				views[in.Host] = v
				allocs[in.Host] = v.Alloc.Clone()
				c.GuardView(v)
			}
			a := allocs[in.Host]
			bind := in.Bind
			if r.Bind != nil {
				bind = *r.Bind
			}
			cpuDelta, memDelta := r.CPUDelta, r.MemoryDelta
			if r.To != nil {
				cpuDelta, memDelta = r.To.Pieces-in.Pieces(), r.To.Memory-in.Memory
				if cpuDelta == 0 && memDelta == 0 && bind == in.Bind {
					sized = append(sized, in)
					continue // at the size already: no change for its host
				}
			}
			rz := alloc.Resize{Host: in.Host, Current: in.Allocation, CPUDelta: cpuDelta, MemoryDelta: memDelta, Bind: bind}
			pl, err := alloc.PlanResize(s.params, state.AllocHost(v.Host, a), rz)
			if ae := (*alloc.Error)(nil); err != nil && errors.As(err, &ae) && ae.Code == alloc.CodeResizeNoFit && !r.NoPreempt {
				// Room on its own host: stop lower-priority instances there.
				if vs, without, found := resizeVictims(s.params, rd, v, a, in, rz, targets, stopped); found {
					a = without
					for _, vv := range vs {
						stopped[vv.Instance.ID] = true
						c.GuardInstance(vv.Instance.Host, vv.Instance.ID, vv.Rev)
						c.DeleteInstance(vv.Instance.Host, vv.Instance.ID)
						prio := priorityOf(rd, vv.Instance.Service)
						c.PutEvent(s.stamp(state.Event{Identity: "planner", Kind: "Preempted", Subject: vv.Instance.ID, Host: vv.Instance.Host, Service: vv.Instance.Service,
							Outcome: fmt.Sprintf("preempted by %s (%s, priority %s) for its resize: %s has priority %s", in.ID, in.Service, priorityOf(rd, in.Service), vv.Instance.Service, prio)}))
						victims = append(victims, Victim{ID: vv.Instance.ID, Service: vv.Instance.Service, Host: vv.Instance.Host, Priority: prio})
					}
					pl, err = alloc.PlanResize(s.params, state.AllocHost(v.Host, a), rz)
				}
			}
			if err != nil {
				return nil, s.toSizeErr(fromAlloc(err), r, in, bind)
			}
			if err := alloc.Enforceable(s.params, "cpu of "+in.ID, pl.Allocation.Pieces()); err != nil {
				return nil, fromAlloc(err)
			}
			if pl.Memory < MinInstanceMemory {
				return nil, errf(Invalid, "memory of %s: %s %s = %s: want at least %s (the Docker engine's smallest memory limit)",
					in.ID, alloc.FormatBytes(in.Memory), signedBytes(memDelta), alloc.FormatBytes(pl.Memory), alloc.FormatBytes(MinInstanceMemory))
			}
			// Memory below what the instance uses is not refused here: the
			// agent shrinks it guided by memory.pressure, and a shrink it
			// gives up comes back as a refusal that rolls this back.
			a.Add(in, -1)
			next := in
			next.Allocation = pl.Allocation
			next.HostPorts = in.HostPorts // a resize keeps the ports
			next.MemorySoft = min(in.MemorySoft, next.Memory)
			next.Generation++
			next.Previous = &model.Previous{Generation: next.Generation, Allocation: in.Allocation}
			next.RolledBack = ""
			a.Add(next, +1)
			allocs[in.Host] = a
			c.GuardInstance(in.Host, in.ID, t.Rev)
			c.PutInstance(next)
			out = append(out, next)
			sized = append(sized, next)
			grown.add(in, next)
		}
		if err := grown.check(rd, "the resize of "+r.Target); err != nil {
			return nil, err
		}
		for _, h := range slices.Sorted(maps.Keys(allocs)) {
			c.PutAlloc(h, allocs[h])
		}
		if d, ok := rd.Service(r.Target); ok && r.To != nil && len(targets) > 0 {
			// Brought to one size, the instances left alone included: the
			// record takes it, and the mode and whole cores of an instance
			// at it (one left alone included; with no bind given each
			// instance kept its own): a record that kept the mode or
			// whole_cores of an earlier deploy beside a size no instance of
			// it has (whole cores unbound, or at a fraction of a CPU) is no
			// size a scale takes.
			svc, old := d.Value, d.Value
			svc.Pieces, svc.Memory = r.To.Pieces, r.To.Memory
			svc.Bind, svc.WholeCores = sized[0].Bind, sized[0].WholeCores
			svc.MemorySoft = min(svc.MemorySoft, svc.Memory)
			if svc.Pieces != old.Pieces || svc.Bind != old.Bind || svc.Memory != old.Memory || svc.MemorySoft != old.MemorySoft || svc.WholeCores != old.WholeCores {
				c.GuardService(svc.Name, d.Rev)
				c.PutService(svc)
			}
		} else if d, ok := rd.Service(r.Target); ok && len(out) > 0 {
			// The service's size follows (scale deploys at it), whole
			// cores included: the instances of a service deployed twice
			// may differ, and a record of one's CPUs with another's
			// whole_cores is no size a deploy takes.
			svc := d.Value
			svc.Pieces, svc.Bind, svc.Memory, svc.MemorySoft = out[0].Pieces(), out[0].Bind, out[0].Memory, out[0].MemorySoft
			svc.WholeCores = out[0].WholeCores
			c.GuardService(svc.Name, d.Rev)
			c.PutService(svc)
		} else if ok && len(targets) == 0 {
			// Scaled to 0: the record's size changes, checked as an
			// instance's would be; the instances a scale adds get it.
			svc, err := s.resizedService(d.Value, r)
			if err != nil {
				return nil, err
			}
			c.GuardService(svc.Name, d.Rev)
			c.PutService(svc)
		}
		if r.DryRun {
			return new(state.Change), nil // planned, victims chosen: nothing to write
		}
		return c, nil
	}, func(rec *state.Request) {
		rec.Instances = idsOf(out)
		for _, v := range victims {
			rec.Removed = append(rec.Removed, v.ID)
		}
	}))
	if err != nil {
		return nil, nil, err
	}
	if o.repeated() {
		var vs []Victim
		for _, id := range o.replay.Removed {
			vs = append(vs, Victim{ID: id})
		}
		return s.instances(o.replay.Instances), vs, nil
	}
	if r.DryRun {
		return out, victims, nil
	}
	if len(victims) > 0 {
		s.log.Info("preempted", "resize", r.Target, "victims", victimList(victims))
	}
	return out, victims, nil
}

// toSizeErr puts the size a resize to a size asked for, and the
// instance's own, before a refusal of the instance's delta: the request
// named no delta (resize.cpu_delta = "-0.5" alone names a value nobody
// sent). Other errors, and a resize by deltas, pass unchanged.
func (s *Service) toSizeErr(err error, r ResizeRequest, in model.Instance, bind bool) error {
	var e *Error
	if r.To == nil || !errors.As(err, &e) || e.Code != Invalid {
		return err
	}
	sb := s.params.ShareBase
	e.Message = fmt.Sprintf("to_cpu = %q, to_memory_bytes = %d, bind = %t: instance %s (%s CPUs %s, %s) by its own delta: %s",
		alloc.FormatPieces(r.To.Pieces, sb), r.To.Memory, bind, in.ID, alloc.FormatPieces(in.Pieces(), sb), bindWord(in.Bind),
		alloc.FormatBytes(in.Memory), e.Message)
	return e
}

// bindWord is a CPU mode for messages.
func bindWord(bind bool) string {
	if bind {
		return "bound"
	}
	return "memory-first"
}

// targets resolves an instance ID or a service name.
func targets(rd reader, target string) ([]state.InstanceView, error) {
	if v, ok := rd.Instance(target); ok {
		return []state.InstanceView{v}, nil
	}
	out := rd.ServiceInstances(target)
	if len(out) == 0 {
		if _, ok := rd.Service(target); ok {
			return nil, errf(NotFound, "service %q has no instances", target)
		}
		return nil, errf(NotFound, "no instance or service named %q", target)
	}
	return out, nil
}

// Remove deletes an instance, or every instance of a service (and the
// service), releasing their resources in one transaction.
func (s *Service) Remove(ctx context.Context, target string) ([]string, error) {
	var ids []string
	o := s.once(ctx, "Remove", target)
	err := s.pipe.do(ctx, o.wrap(func(rd reader) (*state.Change, error) {
		ids = nil
		c := new(state.Change)
		targets, err := targets(rd, target)
		if err != nil {
			d, ok := rd.Service(target)
			if !ok || CodeOf(err) != NotFound {
				return nil, err
			}
			c.GuardService(target, d.Rev)
			c.DeleteService(target)
			return c, nil
		}
		allocs := map[string]state.Alloc{}
		for _, t := range targets {
			in := t.Instance
			a, ok := allocs[in.Host]
			if !ok {
				v, _ := rd.Host(in.Host)
				a = v.Alloc.Clone()
				c.GuardAlloc(in.Host, v.AllocRev)
			}
			a.Add(in, -1)
			allocs[in.Host] = a
			c.GuardInstance(in.Host, in.ID, t.Rev)
			c.DeleteInstance(in.Host, in.ID)
			ids = append(ids, in.ID)
		}
		for _, h := range slices.Sorted(maps.Keys(allocs)) {
			if _, ok := rd.Host(h); ok {
				c.PutAlloc(h, allocs[h])
			}
		}
		if d, ok := rd.Service(target); ok {
			c.GuardService(target, d.Rev)
			c.DeleteService(target)
		}
		return c, nil
	}, func(rec *state.Request) { rec.Removed = ids }))
	if err != nil {
		return nil, err
	}
	if o.repeated() {
		return o.replay.Removed, nil
	}
	return ids, nil
}

// resizedService is the record of a service with no instances after r:
// its size plus r's deltas, refused as an instance's resize would be
// (alloc.PlanResize's checks of the request): a bound size of no CPU, a
// negative one, whole cores unbound or at a fraction of a CPU, a fraction
// no host can enforce, or too little memory. A memory-first record may
// have no CPU (best effort), as its instances may. Whether a host has
// room is the scale's question.
func (s *Service) resizedService(svc state.Service, r ResizeRequest) (state.Service, error) {
	sb := s.params.ShareBase
	if r.To != nil {
		r.CPUDelta, r.MemoryDelta = r.To.Pieces-svc.Pieces, r.To.Memory-svc.Memory
	}
	pieces, memory := svc.Pieces+r.CPUDelta, svc.Memory+r.MemoryDelta
	bind := svc.Bind
	if r.Bind != nil {
		bind = *r.Bind
	}
	cpuErr := func(why string) error {
		return errf(Invalid, "cpu of service %s: %s %s = %s: %s",
			svc.Name, alloc.FormatPieces(svc.Pieces, sb), signedPieces(r.CPUDelta, sb), alloc.FormatPieces(pieces, sb), why)
	}
	switch {
	case bind && pieces < 1:
		return svc, cpuErr("a bound service must keep more than 0")
	case pieces < 0:
		return svc, cpuErr("want 0 (best effort, memory-first) or more")
	case svc.WholeCores && !bind:
		return svc, errf(Invalid, "bind of service %s = false: it holds whole cores (whole_cores): it stays bound", svc.Name)
	case svc.WholeCores && pieces%sb != 0:
		return svc, cpuErr("it holds whole cores (whole_cores): it resizes by whole CPUs")
	}
	if err := alloc.Enforceable(s.params, "cpu of service "+svc.Name, pieces); err != nil {
		return svc, fromAlloc(err)
	}
	if memory < MinInstanceMemory {
		return svc, errf(Invalid, "memory of service %s: %s %s = %s: want at least %s (the Docker engine's smallest memory limit)",
			svc.Name, alloc.FormatBytes(svc.Memory), signedBytes(r.MemoryDelta), alloc.FormatBytes(memory), alloc.FormatBytes(MinInstanceMemory))
	}
	svc.Pieces, svc.Memory, svc.Bind = pieces, memory, bind
	svc.MemorySoft = min(svc.MemorySoft, memory)
	return svc, nil
}

// signedPieces is a CPU change for messages: "+0.5", "-1".
func signedPieces(d, shareBase int) string {
	if d >= 0 {
		return "+" + alloc.FormatPieces(d, shareBase)
	}
	return alloc.FormatPieces(d, shareBase)
}

// signedBytes is a memory change for messages: "+64 MiB", "-1 GiB".
func signedBytes(d int64) string {
	if d >= 0 {
		return "+" + alloc.FormatBytes(d)
	}
	return alloc.FormatBytes(d)
}
