package service

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology"
)

// RegisterHostRequest registers (or re-registers) a host.
type RegisterHostRequest struct {
	Name     string
	Topology *topology.Topology
	Settings state.CapacitySettings
	// Force allows re-registering with a different topology.
	Force bool
	// Agent marks a registration by the host's agent.
	Agent        bool
	AgentVersion string
	Protocol     int
	// NoAgent, for a registration by hand, is why no agent runs there
	// (Host.NoAgent). A registration by hand of a host registered already
	// with the same topology that gives it only updates the reason.
	NoAgent string
}

// RegisterHost stores a host with its topology and capacity. Re-registering
// with the same topology is a no-op apart from agent details; a different
// topology is refused unless forced, and even then refused when running
// instances hold CPUs the new capacity lacks.
func (s *Service) RegisterHost(ctx context.Context, r RegisterHostRequest) (state.HostView, error) {
	if err := ValidateAgentVersion(r.AgentVersion); err != nil {
		return state.HostView{}, err
	}
	if len(r.NoAgent) > MaxNoAgentLen || strings.ContainsRune(r.NoAgent, 0) {
		return state.HostView{}, errf(Invalid, "no_agent = %q: want at most %d bytes of text", clip(r.NoAgent), MaxNoAgentLen)
	}
	if r.Agent {
		r.NoAgent = "" // an agent registers: the reason is past
	}
	if r.Agent && r.Protocol != model.Protocol {
		return state.HostView{}, errf(Precond, "host %s: its agent (version %q) speaks protocol %d and this planner speaks %d: run agent and planner of one release",
			clip(r.Name), r.AgentVersion, r.Protocol, model.Protocol)
	}
	h, err := state.NewHost(r.Name, r.Topology, s.st.Config(), r.Settings)
	if err != nil {
		return state.HostView{}, errf(Invalid, "%w", err)
	}
	h.Agent, h.AgentVersion, h.Protocol, h.NoAgent = r.Agent, r.AgentVersion, r.Protocol, r.NoAgent
	return retry(ctx, func() (state.HostView, error) {
		old, exists := s.st.Host(r.Name)
		if exists && !r.Agent && !r.Force && r.NoAgent != "" && sameTopology(old.Host.Topology, r.Topology) {
			// pinfold up again on a host whose agent cannot start: the
			// registration stays, the reason is the new one.
			if old.Host.NoAgent == r.NoAgent {
				return old, nil
			}
			var c state.Change
			c.GuardHost(r.Name, old.HostRev)
			next := old.Host
			next.NoAgent = r.NoAgent
			c.PutHost(next)
			if _, err := s.commit(ctx, &c); err != nil {
				return state.HostView{}, err
			}
			v, _ := s.st.Host(r.Name)
			return v, nil
		}
		if exists && !r.Agent && !r.Force {
			return state.HostView{}, errf(Exists, "host %s is already registered; use --force to replace its registration", r.Name)
		}
		if exists {
			if !sameTopology(old.Host.Topology, r.Topology) && !r.Force {
				return state.HostView{}, errf(Exists, "host %s is registered with a different topology (online %s vs %s); use --force to replace it",
					r.Name, old.Host.Topology.Online, r.Topology.Online)
			}
			if sameTopology(old.Host.Topology, r.Topology) && !r.Force {
				h = old.Host // keep capacity changes made with SetHost
				if r.Agent {
					o := old.Host
					if o.Agent && o.AgentVersion == r.AgentVersion && o.Protocol == r.Protocol && o.NoAgent == "" {
						// Nothing changed: no write (and no event with
						// it; the call is sampled as one that changed
						// nothing). An agent re-registering in a loop
						// rewrote its host's record every time (issue 36).
						return old, nil
					}
					leaving := o.Protocol == model.Protocol && r.Protocol != model.Protocol
					if o.Agent && o.NoAgent == "" && !leaving && !s.versions.take(r.Name, s.clock(), AgentRecordEvery) {
						// Only the version or protocol changed, sooner than
						// AgentRecordEvery after the last such rewrite.
						return old, nil
					}
					h.Agent, h.AgentVersion, h.Protocol, h.NoAgent = true, r.AgentVersion, r.Protocol, ""
				}
			}
			h.Disabled = old.Host.Disabled
			h.Type, h.Properties, h.FaultDomain, h.UpgradeDomain, h.MaintenanceUntil = old.Host.Type, old.Host.Properties,
				old.Host.FaultDomain, old.Host.UpgradeDomain, old.Host.MaintenanceUntil
			if used := cpusInUse(old.Alloc, h); len(used) > 0 {
				why := ""
				if held := cpuset.Of(used...).Intersect(h.ReservedCPUs); !held.IsEmpty() {
					why = fmt.Sprintf(" (reserved CPUs %s)", held)
				}
				return state.HostView{}, errf(Precond, "host %s: CPUs %s are used by %s and missing from the new registration%s",
					r.Name, cpuset.Of(used...), s.holders(r.Name, used), why)
			}
			if err := usageFits(old.Alloc, h); err != nil {
				return state.HostView{}, err
			}
		}
		var c state.Change
		c.GuardHost(r.Name, old.HostRev)
		if exists {
			c.GuardAlloc(r.Name, old.AllocRev) // the usage checked above
		}
		c.PutHost(h)
		if !exists || old.AllocRev == 0 {
			c.PutAlloc(r.Name, state.NewAlloc())
		}
		if _, err := s.commit(ctx, &c); err != nil {
			return state.HostView{}, err
		}
		v, _ := s.st.Host(r.Name)
		s.log.Info("host registered", "host", r.Name, "cpus", len(h.CPUs), "memory_bytes", h.MemoryBytes, "agent", h.Agent)
		return v, nil
	})
}

// usageFits refuses a registration whose capacity is below what the
// host's instances use: pieces of a CPU, memory, or a NUMA node's memory.
func usageFits(used state.Alloc, h state.Host) error {
	for _, id := range slices.Sorted(maps.Keys(used.Used)) {
		if c, ok := h.CPUs[id]; ok && used.Used[id] > c {
			return errf(Precond, "host %s: CPU %d would have %d pieces; its instances use %d", h.Name, id, c, used.Used[id])
		}
	}
	if used.MemoryUsed > h.MemoryBytes {
		return errf(Precond, "host %s: memory would be %s; its instances use %s", h.Name, alloc.FormatBytes(h.MemoryBytes), alloc.FormatBytes(used.MemoryUsed))
	}
	for _, n := range slices.Sorted(maps.Keys(used.NUMAUsed)) {
		if used.NUMAUsed[n] > h.NUMAMemory[n] {
			return errf(Precond, "host %s: NUMA node %d memory would be %s; its instances use %s", h.Name, n, alloc.FormatBytes(h.NUMAMemory[n]), alloc.FormatBytes(used.NUMAUsed[n]))
		}
	}
	return nil
}

func sameTopology(a, b *topology.Topology) bool {
	if a == nil || b == nil {
		return a == b
	}
	if !a.Online.Equal(b.Online) || len(a.NUMANodes) != len(b.NUMANodes) || a.MemoryBytes() != b.MemoryBytes() {
		return false
	}
	for i := range a.NUMANodes {
		if a.NUMANodes[i].ID != b.NUMANodes[i].ID || !a.NUMANodes[i].CPUs.Equal(b.NUMANodes[i].CPUs) {
			return false
		}
	}
	return true
}

// cpusInUse lists CPUs with usage that h does not offer.
func cpusInUse(a state.Alloc, h state.Host) []cpuset.CPUID {
	var out []cpuset.CPUID
	for id, v := range a.Used {
		if _, ok := h.CPUs[id]; !ok && v > 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// holders names the instances on host that hold any of cpus.
func (s *Service) holders(host string, cpus []cpuset.CPUID) string {
	return holders(s.st.Instances(host), cpus)
}

// holders names the instances of ins that hold any of cpus.
func holders(ins []state.InstanceView, cpus []cpuset.CPUID) string {
	var ids []string
	for _, v := range ins {
		for _, c := range cpus {
			if v.Instance.CPUs[c] > 0 {
				ids = append(ids, v.Instance.ID)
				break
			}
		}
	}
	if len(ids) == 0 {
		return "instances"
	}
	return "instances " + fmt.Sprint(ids)
}

// SetHostRequest changes a host's capacity without touching its instances.
// Nil/zero fields are left alone.
type SetHostRequest struct {
	Name string
	// AddCPUs adds (or re-prices) CPUs with the given pieces; RemoveCPUs
	// takes CPUs out of capacity (refused while instances use them).
	AddCPUs    map[cpuset.CPUID]int
	RemoveCPUs cpuset.CPUs
	// Memory: absolute value, or a delta.
	MemoryBytes *int64
	MemoryDelta int64
	// NUMAMemory sets a NUMA node's memory (absolute).
	NUMAMemory map[cpuset.NUMANodeID]int64
	// Placement: properties to set and to remove, domains and the host
	// type (nil keeps them).
	SetProperties    map[string]placement.Value
	RemoveProperties []string
	FaultDomain      *string
	UpgradeDomain    *string
	Type             *string
}

// SetHost applies r.
func (s *Service) SetHost(ctx context.Context, r SetHostRequest) (state.HostView, error) {
	return retry(ctx, func() (state.HostView, error) {
		v, ok := s.st.Host(r.Name)
		if !ok {
			return state.HostView{}, errf(NotFound, "host %q is not registered", r.Name)
		}
		h, err := r.apply(v, s.st.Instances(r.Name), s.params.ShareBase)
		if err != nil {
			return state.HostView{}, err
		}
		var c state.Change
		c.GuardView(v)
		c.PutHost(h)
		if _, err := s.commit(ctx, &c); err != nil {
			return state.HostView{}, err
		}
		nv, _ := s.st.Host(r.Name)
		return nv, nil
	})
}

// apply is the host v with r applied, refused (and nothing changed) when
// r is invalid or takes away capacity that instances ins use. Pure.
func (r SetHostRequest) apply(v state.HostView, ins []state.InstanceView, shareBase int) (state.Host, error) {
	h := v.Host
	h.CPUs = maps.Clone(h.CPUs)
	h.NUMAMemory = maps.Clone(h.NUMAMemory)
	h.Properties = maps.Clone(h.Properties)
	if h.Properties == nil {
		h.Properties = map[string]placement.Value{}
	}
	if err := r.applyCPUs(&h, v.Alloc, ins, shareBase); err != nil {
		return state.Host{}, err
	}
	if err := r.applyMemory(&h, v.Alloc); err != nil {
		return state.Host{}, err
	}
	return h, r.applyPlacement(&h)
}

func (r SetHostRequest) applyCPUs(h *state.Host, used state.Alloc, ins []state.InstanceView, sb int) error {
	for _, id := range slices.Sorted(maps.Keys(r.AddCPUs)) {
		p := r.AddCPUs[id]
		if h.Topology != nil && !h.Topology.Online.Contains(id) {
			return errf(Invalid, "host %s: add CPU %d: not an online CPU of the host (%s)", r.Name, id, h.Topology.Online)
		}
		if err := state.ValidatePieces(p, sb); err != nil {
			return errf(Invalid, "host %s: CPU %d: %w", r.Name, id, err)
		}
		if p < used.Used[id] {
			return errf(Precond, "host %s: CPU %d pieces = %d: below the %d in use", r.Name, id, p, used.Used[id])
		}
		h.CPUs[id] = p
	}
	var busy []cpuset.CPUID
	for id := range r.RemoveCPUs.All() {
		if _, ok := h.CPUs[id]; !ok {
			return errf(Invalid, "host %s: remove CPU %d: not in the host's capacity", r.Name, id)
		}
		if used.Used[id] > 0 {
			busy = append(busy, id)
		}
		delete(h.CPUs, id)
	}
	if len(busy) > 0 {
		return errf(Precond, "host %s: cannot remove CPUs %s: in use by %s", r.Name, cpuset.Of(busy...), holders(ins, busy))
	}
	if len(h.CPUs) == 0 {
		return errf(Invalid, "host %s: removing CPUs %s leaves no CPU", r.Name, r.RemoveCPUs)
	}
	if ah := state.AllocHost(*h, used); ah.PoolFloor() > ah.SharedPool().Len()*sb {
		return errf(Precond, "host %s: removing CPUs %s leaves a shared pool of %d CPUs (%s), below a memory-first quota of %s CPUs on it",
			r.Name, r.RemoveCPUs, ah.SharedPool().Len(), ah.SharedPool(), alloc.FormatPieces(ah.PoolFloor(), sb))
	}
	return nil
}

func (r SetHostRequest) applyMemory(h *state.Host, used state.Alloc) error {
	before := h.MemoryBytes
	if r.MemoryBytes != nil {
		h.MemoryBytes = *r.MemoryBytes
	}
	if r.MemoryDelta > 0 && h.MemoryBytes > math.MaxInt64-r.MemoryDelta || r.MemoryDelta < 0 && h.MemoryBytes < math.MinInt64-r.MemoryDelta {
		return errf(Invalid, "host %s: memory %s %s overflows", r.Name, alloc.FormatBytes(h.MemoryBytes), signedBytes(r.MemoryDelta))
	}
	h.MemoryBytes += r.MemoryDelta
	if h.MemoryBytes <= 0 || h.MemoryBytes > MaxHostMemory {
		return errf(Invalid, "host %s: memory would be %s: want more than 0 and at most 1 PiB", r.Name, alloc.FormatBytes(h.MemoryBytes))
	}
	// Only a change that lowers the memory is held to what is in use: a
	// host already above its memory (a heal used the overbooking) may
	// still have its properties set, or its memory raised.
	if h.MemoryBytes < used.MemoryUsed && h.MemoryBytes < before {
		return errf(Precond, "host %s: memory %s is below the %s in use", r.Name, alloc.FormatBytes(h.MemoryBytes), alloc.FormatBytes(used.MemoryUsed))
	}
	for _, n := range slices.Sorted(maps.Keys(r.NUMAMemory)) {
		m := r.NUMAMemory[n]
		if _, ok := h.NUMAMemory[n]; !ok {
			return errf(Invalid, "host %s: NUMA node %d: no such NUMA node", r.Name, n)
		}
		if m > MaxHostMemory {
			return errf(Invalid, "host %s: NUMA node %d memory %s: want at most 1 PiB", r.Name, n, alloc.FormatBytes(m))
		}
		if m < used.NUMAUsed[n] || m < 0 {
			return errf(Precond, "host %s: NUMA node %d memory %s is below the %s in use", r.Name, n, alloc.FormatBytes(m), alloc.FormatBytes(used.NUMAUsed[n]))
		}
		h.NUMAMemory[n] = m
	}
	return nil
}

func (r SetHostRequest) applyPlacement(h *state.Host) error {
	for _, k := range slices.Sorted(maps.Keys(r.SetProperties)) {
		if err := placement.ValidatePropertyName(k); err != nil {
			return errf(Invalid, "host %s: property %q: %w", r.Name, k, err)
		}
		if v := r.SetProperties[k].String(); len(v) > MaxPropertyLen {
			return errf(Invalid, "host %s: property %q = %q: longer than %d bytes", r.Name, k, clip(v), MaxPropertyLen)
		}
		h.Properties[k] = r.SetProperties[k]
	}
	if len(h.Properties) > MaxProperties {
		return errf(Invalid, "host %s: %d properties: want at most %d", r.Name, len(h.Properties), MaxProperties)
	}
	for _, k := range r.RemoveProperties {
		if _, ok := h.Properties[k]; !ok {
			return errf(Invalid, "host %s: remove property %q: the host has no such property", r.Name, k)
		}
		delete(h.Properties, k)
	}
	if r.FaultDomain != nil {
		if err := placement.ValidateFaultDomain(*r.FaultDomain); err != nil {
			return errf(Invalid, "host %s: %w", r.Name, err)
		}
		h.FaultDomain = *r.FaultDomain
	}
	if r.UpgradeDomain != nil {
		if strings.ContainsAny(*r.UpgradeDomain, " \t/") {
			return errf(Invalid, "host %s: upgrade domain %q: no blanks or slashes", r.Name, *r.UpgradeDomain)
		}
		h.UpgradeDomain = *r.UpgradeDomain
	}
	if r.Type != nil {
		if len(*r.Type) > MaxHostTypeLen || strings.ContainsAny(*r.Type, " \t\r\n\x00") {
			return errf(Invalid, "host %s: host type %q: want at most %d bytes without blanks", r.Name, clip(*r.Type), MaxHostTypeLen)
		}
		h.Type = *r.Type
	}
	return nil
}

// SetEnabled enables or disables a host for new work. Disabling a host whose
// agent is down is recorded and holds when the agent returns. Enabling a
// draining host ends its drain, as drain --cancel does (moves in flight
// settle): a host that takes work must not have it moved off again.
func (s *Service) SetEnabled(ctx context.Context, name string, enabled bool) (state.HostView, error) {
	return s.changeHost(ctx, name, func(h *state.Host) {
		h.Disabled = !enabled
		if enabled && h.Draining {
			h.Draining, h.DrainDeadline, h.DrainMoveLocal = false, time.Time{}, false
			if strings.HasPrefix(h.Stuck, "drain") { // a dead host's heal keeps its reason
				h.Stuck = ""
			}
		}
	})
}

// changeHost commits change to host name's registration, reading it again
// and retrying when it changed meanwhile.
func (s *Service) changeHost(ctx context.Context, name string, change func(*state.Host)) (state.HostView, error) {
	return retry(ctx, func() (state.HostView, error) {
		v, ok := s.st.Host(name)
		if !ok {
			return state.HostView{}, errf(NotFound, "host %q is not registered", name)
		}
		h := v.Host
		change(&h)
		var c state.Change
		c.GuardHost(name, v.HostRev)
		c.PutHost(h)
		if _, err := s.commit(ctx, &c); err != nil {
			return state.HostView{}, err
		}
		nv, _ := s.st.Host(name)
		return nv, nil
	})
}

// SetMaintenance puts a host in maintenance until now+grace (it keeps its
// instances, takes nothing new, and is not reported down before the grace
// ends), or ends it (grace < 0).
func (s *Service) SetMaintenance(ctx context.Context, name string, grace time.Duration) (state.HostView, error) {
	if grace == 0 || grace > 30*24*time.Hour {
		return state.HostView{}, errf(Invalid, "maintenance grace = %s: want 1s..720h", grace)
	}
	until := time.Time{}
	if grace > 0 {
		until = time.Now().Add(grace).UTC().Truncate(time.Second)
	}
	return s.changeHost(ctx, name, func(h *state.Host) { h.MaintenanceUntil = until })
}

// RemoveHost unregisters a host. Its instances are placed again on other
// hosts first (the host is disabled so that nothing new lands on it); when
// one cannot be placed, nothing changes and the error names it (a dry run
// first; only a host changing between it and the moves can leave the host
// disabled with some instances moved, and the error says so).
// The removed host's agent, if it still runs, removes their containers.
func (s *Service) RemoveHost(ctx context.Context, name string) ([]Moved, error) {
	if _, ok := s.st.Host(name); !ok {
		return nil, errf(NotFound, "host %q is not registered", name)
	}
	var moved []Moved
	if ins := s.st.Instances(name); len(ins) > 0 {
		// First a dry run of placing every instance elsewhere (the cache
		// with the earlier ones laid over it): a removal that cannot
		// happen changes nothing.
		pend := s.st.Pending()
		for _, v := range ins {
			c := new(state.Change)
			if _, _, err := s.placeLike(pend, v.Instance, name, "", "", false, true, c); err != nil {
				return nil, errf(Precond, "host %s is not removed (nothing changed): instance %s cannot be placed on another host: %w", name, v.Instance.ID, err)
			}
			release(pend, v, c, nil)
			pend.Add(c)
		}
		if _, err := s.SetEnabled(ctx, name, false); err != nil {
			return nil, err
		}
		m, err := s.Heal(ctx, name, true)
		moved = m
		if err != nil {
			return moved, errf(Precond, "host %s stays registered (now disabled): the hosts changed since the dry run and not every instance could be placed elsewhere: %w", name, err)
		}
	}
	_, err := retry(ctx, func() (struct{}, error) {
		v, ok := s.st.Host(name)
		if !ok {
			return struct{}{}, errf(NotFound, "host %q is not registered", name)
		}
		if ins := s.st.Instances(name); len(ins) > 0 {
			return struct{}{}, errf(Precond, "host %s runs %d instances (e.g. %s) placed on it meanwhile; try again", name, len(ins), ins[0].Instance.ID)
		}
		var c state.Change
		c.GuardView(v)
		c.DeleteHost(name)
		_, err := s.commit(ctx, &c)
		return struct{}{}, err
	})
	return moved, err
}
