package pinfoldv1

import (
	"math"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// This file is written by hand: the one conversion between the domain model
// and the wire, used by the planner's API server and by the agent alike.

// NewInstance is in's wire form, with its host's observed status (nil: none
// yet) and the state derived from both; shareBase is the planner's pieces
// per CPU.
func NewInstance(in model.Instance, st *model.Status, state string, shareBase int) *Instance {
	m := &Instance{Id: in.ID, Service: in.Service, Host: in.Host, Cpus: make(map[int32]int32, len(in.CPUs)),
		NumaNode: int32(in.NUMANode), MemoryBytes: in.Memory, MemorySoftBytes: in.MemorySoft, Bind: in.Bind, WholeCores: in.WholeCores,
		CpuQuotaPieces: int32(in.CPUQuota), ShareBase: int32(shareBase),
		Image: in.Image, Command: in.Command, Env: in.Env, Network: in.Network, Health: NewHealthCheck(in.Health),
		Generation: in.Generation, RolledBack: in.RolledBack, State: state, SpecGeneration: in.SpecGeneration, Replaces: in.Replaces, Pull: in.Pull,
		Container: NewContainerSpec(in.Container), Ports: NewPorts(in.Ports), HostPorts: NewPorts(in.HostPorts)}
	for id, p := range in.CPUs {
		m.Cpus[int32(id)] = int32(p)
	}
	if st != nil {
		m.ContainerId, m.Pid, m.Error = st.ContainerID, int32(st.PID), st.Error
		m.ObservedGeneration, m.MemoryCurrentBytes, m.RefusedGeneration = st.Generation, st.MemoryCurrent, st.Refused
		m.CpuGotPieces = int32(st.CPUGot)
		m.Applied = NewApplied(st.Applied)
	}
	return m
}

// Model is the desired instance m describes (its observed fields aside).
func (m *Instance) Model() model.Instance {
	in := model.Instance{ID: m.Id, Service: m.Service, Host: m.Host, Generation: m.Generation, RolledBack: m.RolledBack,
		SpecGeneration: m.SpecGeneration, Replaces: m.Replaces,
		Spec: model.Spec{Image: m.Image, Command: m.Command, Env: m.Env, Network: m.Network, Health: m.Health.Model(), Pull: m.Pull,
			Container: m.Container.Model(), Ports: PortsModel(m.Ports)},
		Allocation: model.Allocation{Bind: m.Bind, WholeCores: m.WholeCores, CPUs: make(map[cpuset.CPUID]int, len(m.Cpus)), CPUQuota: int(m.CpuQuotaPieces),
			NUMANode: cpuset.NUMANodeID(m.NumaNode), Memory: m.MemoryBytes, MemorySoft: m.MemorySoftBytes, HostPorts: PortsModel(m.HostPorts)}}
	for id, p := range m.Cpus {
		in.CPUs[cpuset.CPUID(id)] = int(p)
	}
	return in
}

// NewContainerSpec is c's wire form (nil when c sets nothing).
func NewContainerSpec(c model.Container) *ContainerSpec {
	if c.IsZero() {
		return nil
	}
	return &ContainerSpec{Volumes: c.Volumes, Restart: c.Restart, Labels: c.Labels, User: c.User, Workdir: c.Workdir, ReadOnly: c.ReadOnly,
		CapAdd: c.CapAdd, CapDrop: c.CapDrop, LogDriver: c.LogDriver, LogOpts: c.LogOpts}
}

// Model is the container settings m describes (none when m is nil).
func (m *ContainerSpec) Model() model.Container {
	if m == nil {
		return model.Container{}
	}
	c := model.Container{Volumes: m.Volumes, Restart: m.Restart, Labels: m.Labels, User: m.User, Workdir: m.Workdir, ReadOnly: m.ReadOnly,
		CapAdd: m.CapAdd, CapDrop: m.CapDrop, LogDriver: m.LogDriver, LogOpts: m.LogOpts}
	if len(c.Labels) == 0 {
		c.Labels = nil
	}
	if len(c.LogOpts) == 0 {
		c.LogOpts = nil
	}
	return c
}

// NewContainerEdit is e's wire form (nil when e names nothing).
func NewContainerEdit(e model.ContainerEdit) *ContainerEdit {
	if e.IsZero() {
		return nil
	}
	return &ContainerEdit{Volumes: e.Volumes, VolumesRm: e.VolumesRm, Restart: e.Restart, Labels: e.Labels, LabelsRm: e.LabelsRm,
		User: e.User, Workdir: e.Workdir, ReadOnly: e.ReadOnly, CapAdd: e.CapAdd, CapAddRm: e.CapAddRm, CapDrop: e.CapDrop,
		CapDropRm: e.CapDropRm, LogDriver: e.LogDriver, LogOpts: e.LogOpts, LogOptsRm: e.LogOptsRm}
}

// Model is the edit m describes (one naming nothing when m is nil).
func (m *ContainerEdit) Model() model.ContainerEdit {
	if m == nil {
		return model.ContainerEdit{}
	}
	e := model.ContainerEdit{Volumes: m.Volumes, VolumesRm: m.VolumesRm, Restart: m.Restart, Labels: m.Labels, LabelsRm: m.LabelsRm,
		User: m.User, Workdir: m.Workdir, ReadOnly: m.ReadOnly, CapAdd: m.CapAdd, CapAddRm: m.CapAddRm, CapDrop: m.CapDrop,
		CapDropRm: m.CapDropRm, LogDriver: m.LogDriver, LogOpts: m.LogOpts, LogOptsRm: m.LogOptsRm}
	if len(e.Labels) == 0 {
		e.Labels = nil
	}
	if len(e.LogOpts) == 0 {
		e.LogOpts = nil
	}
	return e
}

// NewHealthCheck is h's wire form (nil for nil).
func NewHealthCheck(h *model.HealthCheck) *HealthCheck {
	if h == nil {
		return nil
	}
	return &HealthCheck{Exec: h.Exec, Tcp: int32(h.TCP), Http: h.HTTP, Timeout: h.Timeout, Port: h.Port}
}

// Model is the check m describes; nil when m is nil or empty.
func (m *HealthCheck) Model() *model.HealthCheck {
	if m == nil || len(m.Exec) == 0 && m.Tcp == 0 && m.Http == "" && m.Timeout == "" && m.Port == "" {
		return nil
	}
	return &model.HealthCheck{Exec: m.Exec, TCP: int(m.Tcp), HTTP: m.Http, Timeout: m.Timeout, Port: m.Port}
}

// NewPorts is ports' wire form (nil for none).
func NewPorts(ports []model.Port) []*Port {
	var out []*Port
	for _, p := range ports {
		out = append(out, &Port{Name: p.Name, Host: int32(p.Host), Container: int32(p.Container)})
	}
	return out
}

// PortsModel is the ports m describes (nil for none).
func PortsModel(m []*Port) []model.Port {
	var out []model.Port
	for _, p := range m {
		if p != nil {
			out = append(out, model.Port{Name: p.Name, Host: int(p.Host), Container: int(p.Container)})
		}
	}
	return out
}

// NewApplied is a's wire form (nil for nil).
func NewApplied(a *model.Applied) *Applied {
	if a == nil {
		return nil
	}
	return &Applied{Cpus: a.CPUs, Mems: a.Mems, CpuQuota: a.CPUQuota, CpuWeight: a.CPUWeight, MemoryBytes: a.MemoryBytes}
}

// Model is what m reports (nil for nil).
func (m *Applied) Model() *model.Applied {
	if m == nil {
		return nil
	}
	return &model.Applied{CPUs: m.Cpus, Mems: m.Mems, CPUQuota: m.CpuQuota, CPUWeight: m.CpuWeight, MemoryBytes: m.MemoryBytes}
}

// NewReportStatusRequest is the report of st for instance id on host.
func NewReportStatusRequest(host, id string, st model.Status) *ReportStatusRequest {
	return &ReportStatusRequest{Host: host, Id: id, State: st.State, ContainerId: st.ContainerID, Pid: int32(st.PID),
		Generation: st.Generation, Error: st.Error, RefusedGeneration: st.Refused, MemoryCurrentBytes: st.MemoryCurrent,
		Applied: NewApplied(st.Applied), CpuGotPieces: int32(st.CPUGot)}
}

// Status is what m reports.
func (m *ReportStatusRequest) Status() model.Status {
	return model.Status{State: m.State, ContainerID: m.ContainerId, PID: int(m.Pid), Generation: m.Generation, Error: m.Error,
		Refused: m.RefusedGeneration, MemoryCurrent: m.MemoryCurrentBytes, Applied: m.Applied.Model(), CPUGot: int(m.CpuGotPieces)}
}

// Model is the deploy m asks for (model.Deploy), its CPU amount given in
// pieces: the caller parses m.Cpu at its share base. It is the one wire →
// model conversion of a deploy's spec, size, strategy and rules.
func (m *DeployRequest) Model(pieces int) model.Deploy {
	return model.Deploy{Spec: model.Spec{Image: m.GetImage(), Command: m.GetCommand(), Env: m.GetEnv(), Network: m.GetNetwork(), Health: m.GetHealth().Model(),
		Container: m.GetContainer().Model(), Ports: PortsModel(m.GetPorts())}, Size: model.Size{Pieces: pieces, Bind: m.GetBind(), WholeCores: m.GetWholeCores(), Memory: m.GetMemoryBytes(), MemorySoft: m.GetMemorySoftBytes()}, Rules: model.Rules{Constraint: m.GetConstraint(), Affinity: model.Affinity{Hard: m.GetAffinityHard(), Soft: m.GetAffinitySoft()},
		AntiAffinity: model.Affinity{Hard: m.GetAntiAffinityHard(), Soft: m.GetAntiAffinitySoft()},
		Policy:       m.GetPlacementPolicy(), HostsOrder: m.GetHostsOrder(), DomainSpread: m.GetDomainSpread()}, Scheduling: model.Scheduling{Strategy: m.GetStrategy(), MaxPerHost: int(m.GetMaxPerHost()), Priority: model.Priority(m.GetPriority()), NeverPreempted: m.GetNeverPreempted()},
		Source: m.GetSource()}
}

// NewDeployRequest is the wire form of a deploy of count instances of
// service wanted as d, its CPU amount written cpu (decimal CPUs, as
// alloc.FormatPieces writes d.Pieces): the one model → wire conversion of
// a deploy (the services file's and compose file's deploys).
func NewDeployRequest(service string, count int, d model.Deploy, cpu string) *DeployRequest {
	return &DeployRequest{Service: service, Count: int32(min(max(count, 0), math.MaxInt32)),
		Image: d.Image, Command: d.Command, Env: d.Env, Network: d.Network, Health: NewHealthCheck(d.Health), Container: NewContainerSpec(d.Container),
		Ports: NewPorts(d.Ports), Cpu: cpu, Bind: d.Bind, WholeCores: d.WholeCores, MemoryBytes: d.Memory, MemorySoftBytes: d.MemorySoft,
		Strategy: d.Strategy, MaxPerHost: int32(min(max(d.MaxPerHost, 0), model.MaxMaxPerHost)), Priority: int32(d.Priority), NeverPreempted: d.NeverPreempted,
		Constraint: d.Rules.Constraint, AffinityHard: d.Rules.Affinity.Hard, AffinitySoft: d.Rules.Affinity.Soft,
		AntiAffinityHard: d.Rules.AntiAffinity.Hard, AntiAffinitySoft: d.Rules.AntiAffinity.Soft,
		PlacementPolicy: d.Rules.Policy, HostsOrder: d.Rules.HostsOrder, DomainSpread: d.Rules.DomainSpread, Source: d.Source}
}

// NewServiceRecord is the wire form of service name's record, wanted as d
// with count instances now; cpu is d.Pieces in decimal CPUs at shareBase.
func NewServiceRecord(name string, d model.Deploy, cpu string, count, shareBase int) *ServiceRecord {
	return &ServiceRecord{Name: name, Image: d.Image, Command: d.Command, Env: d.Env, Network: d.Network,
		Health: NewHealthCheck(d.Health), Pull: d.Pull, Cpu: cpu, Bind: d.Bind, WholeCores: d.WholeCores, MemoryBytes: d.Memory,
		MemorySoftBytes: d.MemorySoft, Strategy: d.Strategy, MaxPerHost: int32(min(max(d.MaxPerHost, 0), model.MaxMaxPerHost)), Priority: int32(d.Priority), NeverPreempted: d.NeverPreempted,
		Count: int32(min(max(count, 0), math.MaxInt32)), ShareBase: int32(shareBase),
		Container: NewContainerSpec(d.Container), Ports: NewPorts(d.Ports),
		Constraint: d.Rules.Constraint, AffinityHard: d.Rules.Affinity.Hard, AffinitySoft: d.Rules.Affinity.Soft,
		AntiAffinityHard: d.Rules.AntiAffinity.Hard, AntiAffinitySoft: d.Rules.AntiAffinity.Soft,
		PlacementPolicy: d.Rules.Policy, HostsOrder: d.Rules.HostsOrder, DomainSpread: d.Rules.DomainSpread, Source: d.Source}
}

// Model is the deploy the record holds (model.Deploy), its CPU amount
// given in pieces: the caller parses m.Cpu at m.ShareBase.
func (m *ServiceRecord) Model(pieces int) model.Deploy {
	return model.Deploy{
		Spec: model.Spec{Image: m.GetImage(), Command: m.GetCommand(), Env: m.GetEnv(), Network: m.GetNetwork(), Health: m.GetHealth().Model(),
			Pull: m.GetPull(), Container: m.GetContainer().Model(), Ports: PortsModel(m.GetPorts())},
		Size:       model.Size{Pieces: pieces, Bind: m.GetBind(), WholeCores: m.GetWholeCores(), Memory: m.GetMemoryBytes(), MemorySoft: m.GetMemorySoftBytes()},
		Scheduling: model.Scheduling{Strategy: m.GetStrategy(), MaxPerHost: int(m.GetMaxPerHost()), Priority: model.Priority(m.GetPriority()), NeverPreempted: m.GetNeverPreempted()},
		Rules: model.Rules{Constraint: m.GetConstraint(), Affinity: model.Affinity{Hard: m.GetAffinityHard(), Soft: m.GetAffinitySoft()},
			AntiAffinity: model.Affinity{Hard: m.GetAntiAffinityHard(), Soft: m.GetAntiAffinitySoft()},
			Policy:       m.GetPlacementPolicy(), HostsOrder: m.GetHostsOrder(), DomainSpread: m.GetDomainSpread()},
		Source: m.GetSource(),
	}
}
