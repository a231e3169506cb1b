package service

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology"
)

// Protocol is the agent protocol version this planner speaks.
const Protocol = 1

// maxAttempts bounds re-planning after conflicts.
const maxAttempts = 50

// Service is the planner's behaviour over a store.
type Service struct {
	st     *state.Store
	params alloc.Params
	log    *slog.Logger

	mu     sync.Mutex
	leases map[string]clientv3.LeaseID
}

// New returns a Service over st.
func New(st *state.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{st: st, params: st.Config().Params(), log: log, leases: map[string]clientv3.LeaseID{}}
}

// Store is the underlying store.
func (s *Service) Store() *state.Store { return s.st }

// Params are the allocation parameters.
func (s *Service) Params() alloc.Params { return s.params }

// retry runs attempt until it does not return state.ErrConflict.
func retry[T any](ctx context.Context, attempt func() (T, error)) (T, error) {
	var zero T
	for i := 0; i < maxAttempts; i++ {
		v, err := attempt()
		if !errors.Is(err, state.ErrConflict) {
			return v, err
		}
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
	}
	return zero, errf(Conflicted, "gave up after %d conflicting attempts; the hosts are changing too fast", maxAttempts)
}

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
}

// RegisterHost stores a host with its topology and capacity. Re-registering
// with the same topology is a no-op apart from agent details; a different
// topology is refused unless forced, and even then refused when running
// instances hold CPUs the new capacity lacks.
func (s *Service) RegisterHost(ctx context.Context, r RegisterHostRequest) (state.HostView, error) {
	h, err := state.NewHost(r.Name, r.Topology, s.st.Config(), r.Settings)
	if err != nil {
		return state.HostView{}, errf(Invalid, "%v", err)
	}
	h.Agent, h.AgentVersion, h.Protocol = r.Agent, r.AgentVersion, r.Protocol
	return retry(ctx, func() (state.HostView, error) {
		old, exists := s.st.Host(r.Name)
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
					h.Agent, h.AgentVersion, h.Protocol = true, r.AgentVersion, r.Protocol
				}
			}
			h.Disabled = old.Host.Disabled
			h.Type, h.Properties, h.FaultDomain, h.UpgradeDomain, h.MaintenanceUntil = old.Host.Type, old.Host.Properties,
				old.Host.FaultDomain, old.Host.UpgradeDomain, old.Host.MaintenanceUntil
			if used := cpusInUse(old.Alloc, h); len(used) > 0 {
				return state.HostView{}, errf(Precond, "host %s: CPUs %s are used by %s and missing from the new registration",
					r.Name, cpuset.Of(used...), s.holders(r.Name, used))
			}
		}
		ops := []clientv3.Op{state.PutJSON(state.HostKey(r.Name), h)}
		if !exists || old.AllocRev == 0 {
			ops = append(ops, state.PutJSON(state.AllocKey(r.Name), state.NewAlloc()))
		}
		if _, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.HostKey(r.Name), old.HostRev)}, ops); err != nil {
			return state.HostView{}, err
		}
		v, _ := s.st.Host(r.Name)
		s.log.Info("host registered", "host", r.Name, "cpus", len(h.CPUs), "memory_bytes", h.MemoryBytes, "agent", h.Agent)
		return v, nil
	})
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
	var ids []string
	for _, v := range s.st.Instances(host) {
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
		h := v.Host
		h.CPUs = maps.Clone(h.CPUs)
		h.NUMAMemory = maps.Clone(h.NUMAMemory)
		sb := s.params.ShareBase
		for _, id := range slices.Sorted(maps.Keys(r.AddCPUs)) {
			p := r.AddCPUs[id]
			if h.Topology != nil && !h.Topology.Online.Contains(id) {
				return state.HostView{}, errf(Invalid, "host %s: add CPU %d: not an online CPU of the host (%s)", r.Name, id, h.Topology.Online)
			}
			if p < 1 || p > 100*sb {
				return state.HostView{}, errf(Invalid, "host %s: CPU %d pieces = %d: want 1..%d", r.Name, id, p, 100*sb)
			}
			if p < v.Alloc.Used[id] {
				return state.HostView{}, errf(Precond, "host %s: CPU %d pieces = %d: below the %d in use", r.Name, id, p, v.Alloc.Used[id])
			}
			h.CPUs[id] = p
		}
		var busy []cpuset.CPUID
		for id := range r.RemoveCPUs.All() {
			if _, ok := h.CPUs[id]; !ok {
				return state.HostView{}, errf(Invalid, "host %s: remove CPU %d: not in the host's capacity", r.Name, id)
			}
			if v.Alloc.Used[id] > 0 {
				busy = append(busy, id)
			}
			delete(h.CPUs, id)
		}
		if len(busy) > 0 {
			return state.HostView{}, errf(Precond, "host %s: cannot remove CPUs %s: in use by %s", r.Name, cpuset.Of(busy...), s.holders(r.Name, busy))
		}
		if len(h.CPUs) == 0 {
			return state.HostView{}, errf(Invalid, "host %s: removing CPUs %s leaves no CPU", r.Name, r.RemoveCPUs)
		}
		if r.MemoryBytes != nil {
			h.MemoryBytes = *r.MemoryBytes
		}
		h.MemoryBytes += r.MemoryDelta
		if h.MemoryBytes <= 0 {
			return state.HostView{}, errf(Invalid, "host %s: memory would be %d bytes: want more than 0", r.Name, h.MemoryBytes)
		}
		if h.MemoryBytes < v.Alloc.MemoryUsed {
			return state.HostView{}, errf(Precond, "host %s: memory %d bytes is below the %d in use", r.Name, h.MemoryBytes, v.Alloc.MemoryUsed)
		}
		for _, n := range slices.Sorted(maps.Keys(r.NUMAMemory)) {
			m := r.NUMAMemory[n]
			if _, ok := h.NUMAMemory[n]; !ok {
				return state.HostView{}, errf(Invalid, "host %s: NUMA node %d: no such NUMA node", r.Name, n)
			}
			if m < v.Alloc.NUMAUsed[n] || m < 0 {
				return state.HostView{}, errf(Precond, "host %s: NUMA node %d memory %d bytes is below the %d in use", r.Name, n, m, v.Alloc.NUMAUsed[n])
			}
			h.NUMAMemory[n] = m
		}
		h.Properties = maps.Clone(h.Properties)
		if h.Properties == nil {
			h.Properties = map[string]placement.Value{}
		}
		for _, k := range slices.Sorted(maps.Keys(r.SetProperties)) {
			if err := placement.ValidatePropertyName(k); err != nil {
				return state.HostView{}, errf(Invalid, "host %s: property %q: %v", r.Name, k, err)
			}
			h.Properties[k] = r.SetProperties[k]
		}
		for _, k := range r.RemoveProperties {
			if _, ok := h.Properties[k]; !ok {
				return state.HostView{}, errf(Invalid, "host %s: remove property %q: the host has no such property", r.Name, k)
			}
			delete(h.Properties, k)
		}
		if r.FaultDomain != nil {
			if err := placement.ValidateFaultDomain(*r.FaultDomain); err != nil {
				return state.HostView{}, errf(Invalid, "host %s: %v", r.Name, err)
			}
			h.FaultDomain = *r.FaultDomain
		}
		if r.UpgradeDomain != nil {
			if strings.ContainsAny(*r.UpgradeDomain, " \t/") {
				return state.HostView{}, errf(Invalid, "host %s: upgrade domain %q: no blanks or slashes", r.Name, *r.UpgradeDomain)
			}
			h.UpgradeDomain = *r.UpgradeDomain
		}
		if r.Type != nil {
			h.Type = *r.Type
		}
		if _, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.HostKey(r.Name), v.HostRev), state.ModRevIs(state.AllocKey(r.Name), v.AllocRev)},
			[]clientv3.Op{state.PutJSON(state.HostKey(r.Name), h)}); err != nil {
			return state.HostView{}, err
		}
		nv, _ := s.st.Host(r.Name)
		return nv, nil
	})
}

// SetEnabled enables or disables a host for new work. Disabling a host whose
// agent is down is recorded and holds when the agent returns.
func (s *Service) SetEnabled(ctx context.Context, name string, enabled bool) (state.HostView, error) {
	return retry(ctx, func() (state.HostView, error) {
		v, ok := s.st.Host(name)
		if !ok {
			return state.HostView{}, errf(NotFound, "host %q is not registered", name)
		}
		h := v.Host
		h.Disabled = !enabled
		if _, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.HostKey(name), v.HostRev)},
			[]clientv3.Op{state.PutJSON(state.HostKey(name), h)}); err != nil {
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
	return retry(ctx, func() (state.HostView, error) {
		v, ok := s.st.Host(name)
		if !ok {
			return state.HostView{}, errf(NotFound, "host %q is not registered", name)
		}
		h := v.Host
		h.MaintenanceUntil = time.Time{}
		if grace > 0 {
			h.MaintenanceUntil = time.Now().Add(grace).UTC().Truncate(time.Second)
		}
		if _, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.HostKey(name), v.HostRev)},
			[]clientv3.Op{state.PutJSON(state.HostKey(name), h)}); err != nil {
			return state.HostView{}, err
		}
		nv, _ := s.st.Host(name)
		return nv, nil
	})
}

// SetPlacementSettings validates and stores the cluster's placement settings.
func (s *Service) SetPlacementSettings(ctx context.Context, ps placement.Settings) (placement.Settings, error) {
	if err := ps.Validate(); err != nil {
		return ps, errf(Invalid, "%v", err)
	}
	if _, err := s.st.Commit(ctx, nil, []clientv3.Op{state.PutJSON(state.PlacementKey, ps)}); err != nil {
		return ps, err
	}
	return ps, nil
}

// RemoveHost unregisters a host that runs no instances.
func (s *Service) RemoveHost(ctx context.Context, name string) error {
	_, err := retry(ctx, func() (struct{}, error) {
		v, ok := s.st.Host(name)
		if !ok {
			return struct{}{}, errf(NotFound, "host %q is not registered", name)
		}
		if ins := s.st.Instances(name); len(ins) > 0 {
			return struct{}{}, errf(Precond, "host %s runs %d instances (e.g. %s); remove them first", name, len(ins), ins[0].Instance.ID)
		}
		_, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.HostKey(name), v.HostRev), state.ModRevIs(state.AllocKey(name), v.AllocRev)},
			[]clientv3.Op{clientv3.OpDelete(state.HostKey(name)), clientv3.OpDelete(state.AllocKey(name)), clientv3.OpDelete(state.LiveKey(name))})
		return struct{}{}, err
	})
	return err
}

// DeployRequest asks for new instances of a service.
type DeployRequest struct {
	Service    string
	Image      string
	Command    []string
	Env        []string
	Network    string // Docker network mode; "": the engine's default
	Count      int
	Pieces     int
	Bind       bool
	Memory     int64
	MemorySoft int64
	Strategy   alloc.Strategy
	MaxPerHost int
	Health     *state.HealthCheck
	Rules      state.Rules
	UseBuffer  bool
}

// DeployResult is a deploy's instances and what the placement rules said.
type DeployResult struct {
	Instances    []state.Instance
	DomainSpread string
	Violations   []placement.Violation
}

// networkName is Docker's rule for a network's name.
var networkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

// ValidateNetwork checks a Docker network mode: "" (the engine's default),
// host, none, bridge or a network's name. "container:ID" is refused: it
// would tie an instance to a container pinfold does not manage.
func ValidateNetwork(n string) error {
	if n == "" || networkName.MatchString(n) {
		return nil
	}
	return errf(Invalid, "network = %q: want host, none, bridge or a network's name (letters, digits, _ . -)", n)
}

// ValidateHealth checks a health check's fields.
func ValidateHealth(h *state.HealthCheck) error {
	if h == nil {
		return nil
	}
	n := 0
	if len(h.Exec) > 0 {
		n++
	}
	if h.TCP != 0 {
		n++
		if h.TCP < 1 || h.TCP > 65535 {
			return errf(Invalid, "health tcp = %d: want a port 1..65535", h.TCP)
		}
	}
	if h.HTTP != "" {
		n++
		port, _, _ := strings.Cut(h.HTTP, "/")
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return errf(Invalid, "health http = %q: want PORT[/PATH], e.g. 8080/healthz", h.HTTP)
		}
	}
	if n != 1 {
		return errf(Invalid, "health check: want exactly one of exec, tcp, http (got %d)", n)
	}
	if h.Timeout != "" {
		if d, err := time.ParseDuration(h.Timeout); err != nil || d <= 0 || d > time.Hour {
			return errf(Invalid, "health timeout = %q: want a duration in (0, 1h], e.g. 30s", h.Timeout)
		}
	}
	return nil
}

// Deploy plans and commits new instances, all or nothing.
func (s *Service) Deploy(ctx context.Context, r DeployRequest) ([]state.Instance, error) {
	res, err := s.DeployWithRules(ctx, r)
	if err != nil {
		return nil, err
	}
	return res.Instances, nil
}

// DeployWithRules plans through the placement rules and commits, all or
// nothing; a request the rules cannot place fails with a *PlacementError
// carrying the elimination report.
func (s *Service) DeployWithRules(ctx context.Context, r DeployRequest) (DeployResult, error) {
	if err := state.ValidateServiceName(r.Service); err != nil {
		return DeployResult{}, errf(Invalid, "service: %v", err)
	}
	if r.MemorySoft < 0 || r.MemorySoft > r.Memory {
		return DeployResult{}, errf(Invalid, "memory soft limit = %d: want 0..memory (%d)", r.MemorySoft, r.Memory)
	}
	if err := ValidateHealth(r.Health); err != nil {
		return DeployResult{}, err
	}
	if err := ValidateNetwork(r.Network); err != nil {
		return DeployResult{}, err
	}
	req := placement.Request{Request: alloc.Request{Service: r.Service, Count: r.Count, Pieces: r.Pieces, Bind: r.Bind, MemoryBytes: r.Memory,
		Strategy: r.Strategy, MaxPerHost: r.MaxPerHost}, Constraint: r.Rules.Constraint, Affinity: r.Rules.Affinity, AntiAffinity: r.Rules.AntiAffinity,
		Policy: placement.Policy(r.Rules.Policy), HostsOrder: r.Rules.HostsOrder, DomainSpread: placement.Spread(r.Rules.DomainSpread), UseBuffer: r.UseBuffer}
	// A random seed per request spreads concurrent requests over equally
	// good hosts, so they rarely collide on one host's revision.
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	req.Seed = binary.LittleEndian.Uint64(seed[:]) | 1
	if req.Strategy == "" {
		req.Strategy = alloc.Auto
	}
	if err := alloc.ValidateRequest(s.params, req.Request); err != nil {
		return DeployResult{}, fromAlloc(err)
	}
	if err := req.Validate(); err != nil {
		return DeployResult{}, fromAlloc(err)
	}
	var rules *state.Rules
	if r.Rules.Constraint != "" || r.Rules.Policy != "" || r.Rules.DomainSpread != "" || len(r.Rules.Affinity.Hard)+len(r.Rules.Affinity.Soft)+
		len(r.Rules.AntiAffinity.Hard)+len(r.Rules.AntiAffinity.Soft) > 0 {
		rr := r.Rules
		rules = &rr
	}
	return retry(ctx, func() (DeployResult, error) {
		views := s.st.Schedulable()
		hosts := make([]*placement.Host, len(views))
		byName := make(map[string]state.HostView, len(views))
		for i, v := range views {
			hosts[i] = PlacementHost(v)
			byName[v.Host.Name] = v
		}
		res, err := placement.Plan(s.params, s.st.PlacementSettings(), hosts, req)
		if err != nil {
			return DeployResult{}, s.placementError(err)
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		allocs := map[string]state.Alloc{}
		var out []state.Instance
		for _, p := range res.Placements {
			a, ok := allocs[p.Host]
			if !ok {
				v := byName[p.Host]
				a = v.Alloc.Clone()
				cmps = append(cmps, state.ModRevIs(state.AllocKey(p.Host), v.AllocRev), state.ModRevIs(state.HostKey(p.Host), v.HostRev))
			}
			in := state.Instance{ID: newID(r.Service), Service: r.Service, Host: p.Host, Bind: r.Bind, CPUs: p.CPUs,
				CPUQuota: p.CPUQuota, NUMANode: p.NUMANode, Memory: p.MemoryBytes, MemorySoft: r.MemorySoft,
				Image: r.Image, Command: r.Command, Env: r.Env, Network: r.Network, Desired: "running", Generation: 1, Health: r.Health}
			a.Add(in, +1)
			allocs[p.Host] = a
			ops = append(ops, state.PutJSON(state.InstanceKey(p.Host, in.ID), in))
			out = append(out, in)
		}
		for _, h := range slices.Sorted(maps.Keys(allocs)) {
			ops = append(ops, state.PutJSON(state.AllocKey(h), allocs[h]))
		}
		ops = append(ops, state.PutJSON(state.ServiceKey(r.Service), state.Service{Name: r.Service, Image: r.Image, Command: r.Command, Env: r.Env, Network: r.Network,
			Pieces: r.Pieces, Bind: r.Bind, Memory: r.Memory, MemorySoft: r.MemorySoft, Strategy: string(req.Strategy), MaxPerHost: r.MaxPerHost, Rules: rules}))
		if _, err := s.st.Commit(ctx, cmps, ops); err != nil {
			return DeployResult{}, err
		}
		s.log.Info("deployed", "service", r.Service, "instances", len(out), "hosts", len(allocs), "domain_spread", res.Spread, "violations", len(res.Violations))
		return DeployResult{Instances: out, DomainSpread: string(res.Spread), Violations: res.Violations}, nil
	})
}

// PlacementHost is a host as the placement rules see it.
func PlacementHost(v state.HostView) *placement.Host {
	h := &placement.Host{Name: v.Host.Name, Type: v.Host.Type, Properties: v.Host.Properties, FaultDomain: v.Host.FaultDomain,
		UpgradeDomain: v.Host.UpgradeDomain, Disabled: v.Host.Disabled, Maintenance: !v.Host.MaintenanceUntil.IsZero(),
		Resources: state.AllocHost(v.Host, v.Alloc)}
	if v.Metrics != nil {
		h.LoadAvg = v.Metrics.Load1
	}
	return h
}

// placementError turns a placement failure into an error carrying the
// elimination report; the hosts the schedulable index left out are listed
// under Disabled, Maintenance and Down.
func (s *Service) placementError(err error) error {
	var pe *placement.Error
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Invalid {
		return errf(Invalid, "%s", pe.Message)
	}
	un := s.st.Unschedulable()
	var elims []placement.Elimination
	for _, e := range pe.Eliminations {
		switch e.Rule {
		case placement.RuleDisabled:
			e.Hosts = append(e.Hosts, un["disabled"]...)
		case placement.RuleMaintenance:
			e.Hosts = append(e.Hosts, un["maintenance"]...)
			elims = append(elims, e)
			e = placement.Elimination{Rule: "Down", Hosts: append(slices.Clone(un["down"]), un["protocol"]...)}
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
	return &Error{Code: Exhausted, Message: strings.TrimRight(b.String(), "\n"), Eliminations: elims}
}

func newID(service string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return service + "-" + hex.EncodeToString(b[:])
}

// ReplaceRequest asks for a blue-green replacement of an instance or of every
// instance of a service with a new image (and optionally command): the
// allocation stays, the generation grows, and each host's agent swaps the
// containers (the new one must pass its health check before the old goes).
type ReplaceRequest struct {
	Target  string
	Image   string
	Command []string
	Health  *state.HealthCheck // nil keeps each instance's check
	// Hosts limits a service's replacement to instances on these hosts (a
	// batch of a rolling replace); empty means every host.
	Hosts []string
}

// Replace records the new image, all or nothing; no resources are planned.
func (s *Service) Replace(ctx context.Context, r ReplaceRequest) ([]state.Instance, error) {
	if strings.TrimSpace(r.Image) == "" {
		return nil, errf(Invalid, "image = %q: a replacement needs an image", r.Image)
	}
	if err := ValidateHealth(r.Health); err != nil {
		return nil, err
	}
	return retry(ctx, func() ([]state.Instance, error) {
		targets, err := s.targets(r.Target)
		if err != nil {
			return nil, err
		}
		if len(r.Hosts) > 0 {
			targets = slices.DeleteFunc(targets, func(t state.InstanceView) bool { return !slices.Contains(r.Hosts, t.Instance.Host) })
			if len(targets) == 0 {
				return nil, errf(NotFound, "%q has no instances on hosts %s", r.Target, strings.Join(r.Hosts, ", "))
			}
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		var out []state.Instance
		for _, t := range targets {
			next := t.Instance
			next.Image = r.Image
			if r.Command != nil {
				next.Command = r.Command
			}
			if r.Health != nil {
				next.Health = r.Health
			}
			next.Generation++
			cmps = append(cmps, state.ModRevIs(state.InstanceKey(next.Host, next.ID), t.Rev))
			ops = append(ops, state.PutJSON(state.InstanceKey(next.Host, next.ID), next))
			out = append(out, next)
		}
		if d, ok := s.st.Service(out[0].Service); ok && r.Target == out[0].Service {
			svc := d.Value
			svc.Image = r.Image
			if r.Command != nil {
				svc.Command = r.Command
			}
			cmps = append(cmps, state.ModRevIs(state.ServiceKey(svc.Name), d.Rev))
			ops = append(ops, state.PutJSON(state.ServiceKey(svc.Name), svc))
		}
		if _, err := s.st.Commit(ctx, cmps, ops); err != nil {
			return nil, err
		}
		return out, nil
	})
}

// ResizeRequest changes instances by deltas: one instance (ID) or every
// instance of a service.
type ResizeRequest struct {
	Target      string
	CPUDelta    int   // pieces
	MemoryDelta int64 // bytes
	Bind        *bool // nil keeps the mode
	// Force lowers memory below the instance's current use (the kernel
	// then reclaims, and may OOM-kill).
	Force bool
}

// Resize resizes in place, all or nothing: if any instance does not fit,
// nothing changes.
func (s *Service) Resize(ctx context.Context, r ResizeRequest) ([]state.Instance, error) {
	return retry(ctx, func() ([]state.Instance, error) {
		targets, err := s.targets(r.Target)
		if err != nil {
			return nil, err
		}
		views := map[string]state.HostView{}
		allocs := map[string]state.Alloc{}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		var out []state.Instance
		for _, t := range targets {
			in := t.Instance
			v, ok := views[in.Host]
			if !ok {
				v, ok = s.st.Host(in.Host)
				if !ok {
					return nil, errf(Precond, "instance %s is on host %s, which is not registered", in.ID, in.Host)
				}
				views[in.Host] = v
				allocs[in.Host] = v.Alloc.Clone()
				cmps = append(cmps, state.ModRevIs(state.AllocKey(in.Host), v.AllocRev), state.ModRevIs(state.HostKey(in.Host), v.HostRev))
			}
			a := allocs[in.Host]
			bind := in.Bind
			if r.Bind != nil {
				bind = *r.Bind
			}
			cur := alloc.Placement{Host: in.Host, CPUs: in.CPUs, NUMANode: in.NUMANode, MemoryBytes: in.Memory, CPUQuota: in.CPUQuota}
			pl, err := alloc.PlanResize(s.params, state.AllocHost(v.Host, a), alloc.Resize{Host: in.Host, Current: cur, CurrentBind: in.Bind,
				CPUDelta: r.CPUDelta, MemoryDelta: r.MemoryDelta, Bind: bind})
			if err != nil {
				return nil, fromAlloc(err)
			}
			a.Add(in, -1)
			if st := t.Status; st != nil && pl.MemoryBytes < st.MemoryCurrent && !r.Force {
				return nil, errf(Precond, "memory of %s: %s is below its current use %s (memory.current, reported by host %s); the kernel would reclaim and may OOM-kill it: use --force to lower it anyway",
					in.ID, fmtBytes(pl.MemoryBytes), fmtBytes(st.MemoryCurrent), in.Host)
			}
			next := in
			next.CPUs, next.CPUQuota, next.NUMANode, next.Memory, next.Bind = pl.CPUs, pl.CPUQuota, pl.NUMANode, pl.MemoryBytes, bind
			if next.MemorySoft > next.Memory {
				next.MemorySoft = next.Memory
			}
			next.Generation++
			next.Previous = &state.Previous{Generation: next.Generation, Bind: in.Bind, CPUs: in.CPUs, CPUQuota: in.CPUQuota,
				NUMANode: in.NUMANode, Memory: in.Memory, MemorySoft: in.MemorySoft}
			next.RolledBack = ""
			a.Add(next, +1)
			allocs[in.Host] = a
			cmps = append(cmps, state.ModRevIs(state.InstanceKey(in.Host, in.ID), t.Rev))
			ops = append(ops, state.PutJSON(state.InstanceKey(in.Host, in.ID), next))
			out = append(out, next)
		}
		for _, h := range slices.Sorted(maps.Keys(allocs)) {
			ops = append(ops, state.PutJSON(state.AllocKey(h), allocs[h]))
		}
		if _, err := s.st.Commit(ctx, cmps, ops); err != nil {
			return nil, err
		}
		return out, nil
	})
}

// targets resolves an instance ID or a service name.
func (s *Service) targets(target string) ([]state.InstanceView, error) {
	if v, ok := s.st.Instance(target); ok {
		return []state.InstanceView{v}, nil
	}
	var out []state.InstanceView
	for _, v := range s.st.Instances("") {
		if v.Instance.Service == target {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		if _, ok := s.st.Service(target); ok {
			return nil, errf(NotFound, "service %q has no instances", target)
		}
		return nil, errf(NotFound, "no instance or service named %q", target)
	}
	return out, nil
}

// Remove deletes an instance, or every instance of a service (and the
// service), releasing their resources in one transaction.
func (s *Service) Remove(ctx context.Context, target string) ([]string, error) {
	return retry(ctx, func() ([]string, error) {
		targets, err := s.targets(target)
		if err != nil {
			if _, ok := s.st.Service(target); ok && CodeOf(err) == NotFound {
				d, _ := s.st.Service(target)
				_, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.ServiceKey(target), d.Rev)}, []clientv3.Op{clientv3.OpDelete(state.ServiceKey(target))})
				return nil, err
			}
			return nil, err
		}
		allocs := map[string]state.Alloc{}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		var ids []string
		for _, t := range targets {
			in := t.Instance
			a, ok := allocs[in.Host]
			if !ok {
				v, _ := s.st.Host(in.Host)
				a = v.Alloc.Clone()
				cmps = append(cmps, state.ModRevIs(state.AllocKey(in.Host), v.AllocRev))
			}
			a.Add(in, -1)
			allocs[in.Host] = a
			cmps = append(cmps, state.ModRevIs(state.InstanceKey(in.Host, in.ID), t.Rev))
			ops = append(ops, clientv3.OpDelete(state.InstanceKey(in.Host, in.ID)), clientv3.OpDelete(state.StatusKey(in.Host, in.ID)))
			ids = append(ids, in.ID)
		}
		for _, h := range slices.Sorted(maps.Keys(allocs)) {
			if _, ok := s.st.Host(h); ok {
				ops = append(ops, state.PutJSON(state.AllocKey(h), allocs[h]))
			}
		}
		if d, ok := s.st.Service(target); ok {
			ops = append(ops, clientv3.OpDelete(state.ServiceKey(target)))
			cmps = append(cmps, state.ModRevIs(state.ServiceKey(target), d.Rev))
		}
		if _, err := s.st.Commit(ctx, cmps, ops); err != nil {
			return nil, err
		}
		return ids, nil
	})
}

// Capacity is a dry run of a deploy against the live state.
func (s *Service) Capacity(r DeployRequest) (map[string]alloc.Capacity, error) {
	req := alloc.Request{Service: r.Service, Count: 1, Pieces: r.Pieces, Bind: r.Bind, MemoryBytes: r.Memory, Strategy: alloc.Auto}
	if req.Service == "" {
		req.Service = "capacity"
	}
	if err := alloc.ValidateRequest(s.params, req); err != nil {
		return nil, fromAlloc(err)
	}
	out := map[string]alloc.Capacity{}
	for _, v := range s.st.Schedulable() {
		out[v.Host.Name] = alloc.HostCapacity(s.params, state.AllocHost(v.Host, v.Alloc), req)
	}
	return out, nil
}

// Heartbeat keeps host's live key on an etcd lease of ttl; a host whose
// agent stops calling is marked down when the lease expires. It also records
// the agent's version and protocol (an incompatible protocol keeps the host
// out of planning).
func (s *Service) Heartbeat(ctx context.Context, host, version string, protocol int, ttl time.Duration, m *state.Metrics) error {
	v, ok := s.st.Host(host)
	if !ok {
		return errf(NotFound, "host %q is not registered", host)
	}
	if ttl < time.Second || ttl > 10*time.Minute {
		return errf(Invalid, "heartbeat ttl = %s: want 1s..10m", ttl)
	}
	if !v.Host.Agent || v.Host.AgentVersion != version || v.Host.Protocol != protocol {
		h := v.Host
		h.Agent, h.AgentVersion, h.Protocol = true, version, protocol
		if _, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.HostKey(host), v.HostRev)}, []clientv3.Op{state.PutJSON(state.HostKey(host), h)}); err != nil && !errors.Is(err, state.ErrConflict) {
			return err
		}
		if protocol != Protocol {
			s.log.Warn("agent speaks another protocol: no new work for its host", "host", host, "protocol", protocol, "want", Protocol)
		}
	}
	cli := s.st.Client()
	s.mu.Lock()
	lease, ok := s.leases[host]
	s.mu.Unlock()
	live := version
	if m != nil {
		m.AgentVersion = version
		live = string(mustJSON(m))
	}
	if ok {
		if _, err := cli.KeepAliveOnce(ctx, lease); err == nil {
			if v.Live && m == nil {
				return nil
			}
			if v.Live {
				if _, err := cli.Put(ctx, state.LiveKey(host), live, clientv3.WithLease(lease)); err != nil {
					return fmt.Errorf("heartbeat %s: metrics: %w", host, err)
				}
				return nil
			}
		}
	}
	g, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return fmt.Errorf("heartbeat %s: grant lease: %w", host, err)
	}
	if _, err := cli.Put(ctx, state.LiveKey(host), live, clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("heartbeat %s: %w", host, err)
	}
	s.mu.Lock()
	s.leases[host] = g.ID
	s.mu.Unlock()
	return nil
}

// ReportStatus records what an agent observed for one of its instances.
func (s *Service) ReportStatus(ctx context.Context, host, id string, st state.Status) error {
	if _, ok := s.st.Host(host); !ok {
		return errf(NotFound, "host %q is not registered", host)
	}
	v, ok := s.st.Instance(id)
	if !ok || v.Instance.Host != host {
		return errf(NotFound, "instance %q is not on host %s", id, host)
	}
	if _, err := s.st.Client().Put(ctx, state.StatusKey(host, id), string(mustJSON(st))); err != nil {
		return err
	}
	if in := v.Instance; st.Refused != 0 && st.Refused == in.Generation && in.Previous != nil && in.Previous.Generation == in.Generation {
		return s.rollBack(ctx, id, st.Error)
	}
	return nil
}

// rollBack undoes a resize its host refused: the instance gets its previous
// allocation back (if that still fits; a deploy may have taken what the
// resize released), under a new generation, and records why.
func (s *Service) rollBack(ctx context.Context, id, why string) error {
	_, err := retry(ctx, func() (struct{}, error) {
		v, ok := s.st.Instance(id)
		if !ok || v.Instance.Previous == nil {
			return struct{}{}, nil
		}
		in := v.Instance
		h, ok := s.st.Host(in.Host)
		if !ok {
			return struct{}{}, nil
		}
		p := in.Previous
		a := h.Alloc.Clone()
		a.Add(in, -1)
		next := in
		next.Bind, next.CPUs, next.CPUQuota, next.NUMANode, next.Memory, next.MemorySoft = p.Bind, p.CPUs, p.CPUQuota, p.NUMANode, p.Memory, p.MemorySoft
		next.Previous = nil
		next.Generation++
		if err := a.Fits(h.Host, next); err != nil {
			// Keep the refused allocation; the host keeps reporting why.
			s.log.Warn("resize refused by host, and the previous allocation no longer fits", "instance", id, "host", in.Host, "refusal", why, "err", err)
			next = in
			next.Previous = nil
			next.RolledBack = fmt.Sprintf("resize to generation %d refused by host %s (%s); the previous allocation no longer fits (%v)", in.Generation, in.Host, why, err)
			_, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.InstanceKey(in.Host, id), v.Rev)}, []clientv3.Op{state.PutJSON(state.InstanceKey(in.Host, id), next)})
			return struct{}{}, err
		}
		a.Add(next, +1)
		next.RolledBack = fmt.Sprintf("resize to generation %d refused by host %s: %s; rolled back to the previous allocation", in.Generation, in.Host, why)
		_, err := s.st.Commit(ctx, []clientv3.Cmp{state.ModRevIs(state.InstanceKey(in.Host, id), v.Rev), state.ModRevIs(state.AllocKey(in.Host), h.AllocRev)},
			[]clientv3.Op{state.PutJSON(state.InstanceKey(in.Host, id), next), state.PutJSON(state.AllocKey(in.Host), a)})
		if err == nil {
			s.log.Warn("resize refused by host; rolled back", "instance", id, "host", in.Host, "refusal", why)
		}
		return struct{}{}, err
	})
	return err
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%dB", b)
	}
}
