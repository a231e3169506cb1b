package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/topology"
)

// Key prefixes.
const (
	Prefix          = "/pinfold/v1/"
	ConfigKey       = Prefix + "config"
	HostsPrefix     = Prefix + "hosts/"
	AllocPrefix     = Prefix + "alloc/"
	InstancesPrefix = Prefix + "instances/"
	StatusPrefix    = Prefix + "status/"
	ServicesPrefix  = Prefix + "services/"
	LivePrefix      = Prefix + "live/"
	// CommitsPrefix holds each planner's commit marker (Store.Commit).
	CommitsPrefix = Prefix + "commits/"
	// PlacementKey holds the cluster's placement settings.
	PlacementKey = Prefix + "settings/placement"
)

// HostKey and friends build keys.
func HostKey(h string) string               { return HostsPrefix + h }
func AllocKey(h string) string              { return AllocPrefix + h }
func InstanceKey(h, id string) string       { return InstancesPrefix + h + "/" + id }
func StatusKey(h, id string) string         { return StatusPrefix + h + "/" + id }
func ServiceKey(s string) string            { return ServicesPrefix + s }
func LiveKey(h string) string               { return LivePrefix + h }
func InstancesOfHostPrefix(h string) string { return InstancesPrefix + h + "/" }

// Config is planner-wide and fixed once the store is initialised.
type Config struct {
	ShareBase int `json:"share_base"`
	// MaxFragmentCores caps fragment CPUs per host (-1: none).
	MaxFragmentCores int `json:"max_fragment_cores"`
}

// Params returns the allocation parameters.
func (c Config) Params() alloc.Params {
	return alloc.Params{ShareBase: c.ShareBase, MaxFragmentCores: c.MaxFragmentCores}
}

// Host is a registered host.
type Host struct {
	Name     string             `json:"name"`
	Topology *topology.Topology `json:"topology"`
	// CPUs is the capacity in pieces per CPU (reserved CPUs are absent).
	CPUs map[cpuset.CPUID]int `json:"cpus"`
	// MemoryBytes is the planned memory; NUMAMemory per NUMA node.
	MemoryBytes  int64                       `json:"memory_bytes"`
	NUMAMemory   map[cpuset.NUMANodeID]int64 `json:"numa_memory_bytes"`
	ReservedCPUs cpuset.CPUs                 `json:"reserved_cpus"`
	ReservedMem  int64                       `json:"reserved_memory_bytes"`
	Disabled     bool                        `json:"disabled"`
	// Agent is true once an agent registered the host (then a missing
	// heartbeat means the host is down); hosts added by hand have none.
	Agent        bool   `json:"agent"`
	AgentVersion string `json:"agent_version,omitempty"`
	Protocol     int    `json:"protocol,omitempty"`
	// Placement: the built-in HostType, typed properties, fault and
	// upgrade domains, and a maintenance window (zero: none).
	Type             string                     `json:"host_type,omitempty"`
	Properties       map[string]placement.Value `json:"properties,omitempty"`
	FaultDomain      string                     `json:"fault_domain,omitempty"`
	UpgradeDomain    string                     `json:"upgrade_domain,omitempty"`
	MaintenanceUntil time.Time                  `json:"maintenance_until,omitzero"`
	// Draining: the host is disabled and its instances move to other
	// hosts (Service.Drain); past DrainDeadline (zero: none) an old
	// instance goes once its replacement exists, healthy or not.
	Draining      bool      `json:"draining,omitempty"`
	DrainDeadline time.Time `json:"drain_deadline,omitzero"`
	// DrainStarted is when the drain began: a new drain (after a cancel)
	// starts afresh, its steps not parked by the last one's failures.
	DrainStarted time.Time `json:"drain_started,omitzero"`
	// DrainMoveLocal: the drain moves instances with a host-local volume
	// too (their data stays behind); otherwise they stay and Stuck says so.
	DrainMoveLocal bool `json:"drain_move_local_volumes,omitempty"`
	// Stuck is why the leader's drain or heal of this host makes no
	// progress: the last error of a step that failed (or an internal
	// error), and whether it is parked (retried at a long interval after
	// failing again and again). Cleared when the operation ends or a step
	// succeeds. Written only when the reason changes.
	Stuck string `json:"stuck,omitempty"`
	// NoAgent is why no agent enforces this host's plan, as the one who
	// registered it by hand said (pinfold up, when the agent's
	// prerequisites failed: cgroup v1, no Docker, …). Cleared when an
	// agent registers the host.
	NoAgent string `json:"no_agent,omitempty"`
}

// Alloc is a host's usage.
type Alloc struct {
	Used       map[cpuset.CPUID]int        `json:"used"`
	MemoryUsed int64                       `json:"memory_used"`
	NUMAUsed   map[cpuset.NUMANodeID]int64 `json:"numa_memory_used"`
	Instances  map[string]int              `json:"instances"`
	// MemoryFirstQuota is the CPU quota (pieces) of the host's
	// memory-first instances: committed against its shared pool.
	MemoryFirstQuota int `json:"memory_first_quota,omitempty"`
	// MemoryFirst counts them by quota (pieces): the largest is the floor
	// of the shared pool (alloc.Host.PoolFloor).
	MemoryFirst map[int]int `json:"memory_first,omitempty"`
	// WholeCores counts, per CPU, the whole-cores instances that hold it
	// (at most 1): no other instance gets a piece of such a CPU, whatever
	// its capacity or the overbooking (alloc.CPU.WholeCores).
	WholeCores map[cpuset.CPUID]int `json:"whole_cores,omitempty"`
	// Ports counts, per host port, the instances that hold it
	// (model.Allocation.HostPorts): a port held is not given again.
	Ports map[int]int `json:"ports,omitempty"`
}

// Metrics are a host's measured load and memory, as its agent last sent them.
type Metrics struct {
	AgentVersion string  `json:"agent_version"`
	Load1        float64 `json:"load1"`
	Load5        float64 `json:"load5"`
	Load15       float64 `json:"load15"`
	MemTotal     uint64  `json:"mem_total"`
	MemAvailable uint64  `json:"mem_available"`
}

// Service is a deployed service's record: its name and the deploy as
// wanted (model.Deploy), flat in the document.
type Service struct {
	Name string `json:"name"`
	model.Deploy
}

// NewAlloc is an empty usage document.
func NewAlloc() Alloc {
	return Alloc{Used: map[cpuset.CPUID]int{}, NUMAUsed: map[cpuset.NUMANodeID]int64{}, Instances: map[string]int{}}
}

// Clone deep-copies a.
func (a Alloc) Clone() Alloc {
	return Alloc{Used: maps.Clone(a.Used), MemoryUsed: a.MemoryUsed, NUMAUsed: maps.Clone(a.NUMAUsed), Instances: maps.Clone(a.Instances), MemoryFirstQuota: a.MemoryFirstQuota, MemoryFirst: maps.Clone(a.MemoryFirst),
		WholeCores: maps.Clone(a.WholeCores), Ports: maps.Clone(a.Ports)}
}

// Add charges (sign +1) or releases (-1) an instance's resources.
func (a *Alloc) Add(in model.Instance, sign int) {
	if a.Used == nil {
		*a = NewAlloc()
	}
	for id, v := range in.CPUs {
		a.Used[id] += sign * v
		if a.Used[id] == 0 {
			delete(a.Used, id)
		}
	}
	if in.WholeCores {
		if a.WholeCores == nil {
			a.WholeCores = map[cpuset.CPUID]int{}
		}
		for id := range in.CPUs {
			a.WholeCores[id] += sign
			if a.WholeCores[id] == 0 {
				delete(a.WholeCores, id)
			}
		}
		if len(a.WholeCores) == 0 {
			a.WholeCores = nil
		}
	}
	for _, p := range in.HostPorts {
		if a.Ports == nil {
			a.Ports = map[int]int{}
		}
		a.Ports[p.Host] += sign
		if a.Ports[p.Host] == 0 {
			delete(a.Ports, p.Host)
		}
	}
	if len(a.Ports) == 0 {
		a.Ports = nil
	}
	a.MemoryUsed += int64(sign) * in.Memory
	if !in.Bind {
		a.MemoryFirstQuota += sign * in.CPUQuota
		if a.MemoryFirst == nil {
			a.MemoryFirst = map[int]int{}
		}
		a.MemoryFirst[in.CPUQuota] += sign
		if a.MemoryFirst[in.CPUQuota] == 0 {
			delete(a.MemoryFirst, in.CPUQuota)
		}
		if len(a.MemoryFirst) == 0 {
			a.MemoryFirst = nil
		}
	}
	if in.NUMANode >= 0 {
		a.NUMAUsed[in.NUMANode] += int64(sign) * in.Memory
		if a.NUMAUsed[in.NUMANode] == 0 {
			delete(a.NUMAUsed, in.NUMANode)
		}
	}
	a.Instances[in.Service] += sign
	if a.Instances[in.Service] == 0 {
		delete(a.Instances, in.Service)
	}
}

// Fits reports whether in can be added to a host h with usage a, naming the
// first resource that would be oversold.
func (a Alloc) Fits(h Host, in model.Instance) error {
	for _, id := range slices.Sorted(maps.Keys(in.CPUs)) {
		if a.Used[id]+in.CPUs[id] > h.CPUs[id] {
			return fmt.Errorf("CPU %d: %d pieces used + %d > capacity %d", id, a.Used[id], in.CPUs[id], h.CPUs[id])
		}
	}
	if a.MemoryUsed+in.Memory > h.MemoryBytes {
		return fmt.Errorf("memory: %d bytes used + %d > capacity %d", a.MemoryUsed, in.Memory, h.MemoryBytes)
	}
	if in.NUMANode >= 0 && a.NUMAUsed[in.NUMANode]+in.Memory > h.NUMAMemory[in.NUMANode] {
		return fmt.Errorf("NUMA node %d memory: %d bytes used + %d > capacity %d", in.NUMANode, a.NUMAUsed[in.NUMANode], in.Memory, h.NUMAMemory[in.NUMANode])
	}
	return nil
}

// CapacitySettings turn a topology into planned capacity.
type CapacitySettings struct {
	PiecesPerCPU   int         // 0 = the share base
	ReservedCPUs   cpuset.CPUs // kept for the system
	ReservedMemory int64       // bytes kept for the system
	MemoryShare    float64     // share of MemTotal offered (0 = 0.9)
}

// NewHost computes a host's capacity from its topology.
func NewHost(name string, t *topology.Topology, cfg Config, s CapacitySettings) (Host, error) {
	if err := ValidateHostName(name); err != nil {
		return Host{}, err
	}
	if t == nil {
		return Host{}, fmt.Errorf("state: host %s: topology is required", name)
	}
	if err := t.Validate(); err != nil {
		return Host{}, fmt.Errorf("state: host %s: %w", name, err)
	}
	pieces := s.PiecesPerCPU
	if pieces == 0 {
		pieces = cfg.ShareBase
	}
	if err := ValidatePieces(pieces, cfg.ShareBase); err != nil {
		return Host{}, fmt.Errorf("state: host %s: %w", name, err)
	}
	if !s.ReservedCPUs.IsSubsetOf(t.Online) {
		return Host{}, fmt.Errorf("state: host %s: reserved CPUs = %q: %s are not online", name, s.ReservedCPUs, s.ReservedCPUs.Difference(t.Online))
	}
	share := s.MemoryShare
	if share == 0 {
		share = 0.9
	}
	if share <= 0 || share > 1 {
		return Host{}, fmt.Errorf("state: host %s: memory share = %v: want more than 0 and at most 1", name, share)
	}
	total := t.MemoryBytes()
	if s.ReservedMemory < 0 || s.ReservedMemory >= total {
		return Host{}, fmt.Errorf("state: host %s: reserved memory = %d: want 0..%d", name, s.ReservedMemory, total-1)
	}
	h := Host{Name: name, Topology: t, CPUs: map[cpuset.CPUID]int{}, NUMAMemory: map[cpuset.NUMANodeID]int64{},
		ReservedCPUs: s.ReservedCPUs, ReservedMem: s.ReservedMemory}
	for id := range t.Online.Difference(s.ReservedCPUs).All() {
		h.CPUs[id] = pieces
	}
	if len(h.CPUs) == 0 {
		return Host{}, fmt.Errorf("state: host %s: no CPU left after reserving %s", name, s.ReservedCPUs)
	}
	usable := int64(float64(total)*share) - s.ReservedMemory
	if usable <= 0 {
		return Host{}, fmt.Errorf("state: host %s: no memory left (MemTotal %d × %v − reserved %d)", name, total, share, s.ReservedMemory)
	}
	h.MemoryBytes = usable
	for _, n := range t.NUMANodes {
		if total > 0 {
			h.NUMAMemory[n.ID] = int64(float64(usable) * float64(n.MemoryBytes) / float64(total))
		}
	}
	return h, nil
}

// ValidatePieces checks a CPU's capacity in pieces against the share base:
// 1..100×shareBase, and above the share base a multiple of it. A CPU whose
// free pieces are not a multiple of the share base gives fragments only,
// never a whole CPU (as Eru counts an oversold CPU), so 1500 pieces with a
// share base of 1000 would silently take no whole-CPU instance; 2000 gives
// two. Below the share base a CPU gives fragments only, by design.
func ValidatePieces(pieces, shareBase int) error {
	switch {
	case pieces < 1 || pieces > 100*shareBase:
		return fmt.Errorf("pieces per CPU = %d: want 1..%d", pieces, 100*shareBase)
	case pieces > shareBase && pieces%shareBase != 0:
		return fmt.Errorf("pieces per CPU = %d: above the share base (%d) it must be a multiple of it (%d or %d): a CPU whose pieces are not a multiple of the share base gives fragments only, never a whole CPU; to overbook CPUs use the cluster's overbooking (pinfold settings --overbooking cpu=0.5)",
			pieces, shareBase, pieces/shareBase*shareBase, (pieces/shareBase+1)*shareBase)
	}
	return nil
}

// ValidateHostName accepts DNS-like names (letters, digits, - . _), 1..253 bytes.
func ValidateHostName(name string) error {
	if name == "" || len(name) > 253 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") != "" ||
		strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return fmt.Errorf("state: host name %q: want 1..253 letters, digits, '-', '.' or '_', dots only between labels", clipName(name))
	}
	return nil
}

func clipName(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// ValidateServiceName is like ValidateHostName without dots, at most 63
// bytes (model.ValidateServiceName).
func ValidateServiceName(name string) error { return model.ValidateServiceName(name) }

// ValidateNewServiceName is ValidateServiceName for a service to be made
// (model.ValidateNewServiceName): not ending as an instance ID does.
func ValidateNewServiceName(name string) error { return model.ValidateNewServiceName(name) }

// AllocHost builds the allocation engine's view of a host.
func AllocHost(h Host, a Alloc) *alloc.Host {
	out := &alloc.Host{Name: h.Name, MemoryBytes: h.MemoryBytes, MemoryUsed: a.MemoryUsed,
		Topology: h.Topology, Instances: maps.Clone(a.Instances), MemoryFirst: maps.Clone(a.MemoryFirst),
		Ports: maps.Clone(a.Ports)}
	if out.MemoryFirst == nil && a.MemoryFirstQuota > 0 {
		// A usage document from before the counts by quota: the sum
		// bounds the largest from above.
		out.MemoryFirst = map[int]int{a.MemoryFirstQuota: 1}
	}
	ids := slices.Sorted(maps.Keys(h.CPUs))
	out.CPUs = make([]alloc.CPU, len(ids))
	for i, id := range ids {
		out.CPUs[i] = alloc.CPU{ID: id, Capacity: h.CPUs[id], Used: a.Used[id], WholeCores: a.WholeCores[id] > 0}
	}
	if h.Topology != nil && h.Topology.NUMASource == topology.SourceSysfs {
		all := cpuset.Of(ids...)
		for _, n := range h.Topology.NUMANodes {
			cpus := n.CPUs.Intersect(all)
			if cpus.IsEmpty() {
				continue // memory-only nodes and nodes whose CPUs are all reserved
			}
			out.NUMANodes = append(out.NUMANodes, alloc.NUMANode{ID: n.ID, CPUs: cpus, MemoryBytes: h.NUMAMemory[n.ID], MemoryUsed: a.NUMAUsed[n.ID]})
		}
	}
	return out
}

// SharedPool is the host's memory-first shared pool (alloc.Host's
// SharedPool: the CPUs no instance holds pieces of, less the isolated
// ones), computed once here for the planner's views and the host's agent.
func SharedPool(h Host, a Alloc) cpuset.CPUs {
	return AllocHost(h, a).SharedPool()
}
