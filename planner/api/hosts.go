package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

func hostMsg(v state.HostView, shareBase int) *pinfoldv1.Host {
	h := &pinfoldv1.Host{Name: v.Host.Name, State: v.State(),
		CapacityCpus: map[int32]int32{}, CapacityMemoryBytes: v.Host.MemoryBytes,
		UsedCpus: map[int32]int32{}, UsedMemoryBytes: v.Alloc.MemoryUsed,
		Agent: v.Host.Agent, AgentVersion: v.Host.AgentVersion, Protocol: int32(v.Host.Protocol),
		Instances: map[string]int32{}, ReservedCpus: v.Host.ReservedCPUs.String(), ReservedMemoryBytes: v.Host.ReservedMem,
		ShareBase: int32(shareBase)}
	h.HostType, h.FaultDomain, h.UpgradeDomain = v.Host.Type, v.Host.FaultDomain, v.Host.UpgradeDomain
	if !v.Host.MaintenanceUntil.IsZero() {
		h.MaintenanceUntil = v.Host.MaintenanceUntil.Format(time.RFC3339)
	}
	h.Draining, h.Stuck, h.NoAgent = v.Host.Draining, v.Host.Stuck, v.Host.NoAgent
	if !v.Host.DrainDeadline.IsZero() {
		h.DrainDeadline = v.Host.DrainDeadline.Format(time.RFC3339)
	}
	if len(v.Host.Properties) > 0 {
		h.Properties = map[string]string{}
		for k, p := range v.Host.Properties {
			h.Properties[k] = p.String()
		}
	}
	if m := v.Metrics; m != nil {
		h.Metrics = &pinfoldv1.HostMetrics{Load1: m.Load1, Load5: m.Load5, Load15: m.Load15, MemTotalBytes: m.MemTotal, MemAvailableBytes: m.MemAvailable}
	}
	for id, p := range v.Host.CPUs {
		h.CapacityCpus[int32(id)] = int32(p)
	}
	for id, p := range v.Alloc.Used {
		h.UsedCpus[int32(id)] = int32(p)
	}
	for _, o := range service.OverNominal(v, shareBase) {
		h.OverNominal = append(h.OverNominal, o.String())
	}
	h.SharedPoolPieces, h.MemoryFirstQuotaPieces = int32(state.SharedPool(v.Host, v.Alloc).Len()*shareBase), int32(v.Alloc.MemoryFirstQuota)
	for svc, n := range v.Alloc.Instances {
		h.Instances[svc] = int32(n)
	}
	if t := v.Host.Topology; t != nil {
		h.TopologyJson, _ = json.Marshal(t)
		for _, n := range t.NUMANodes {
			h.NumaNodes = append(h.NumaNodes, &pinfoldv1.NUMANode{Id: int32(n.ID), Cpus: n.CPUs.String(),
				MemoryBytes: v.Host.NUMAMemory[n.ID], UsedMemoryBytes: v.Alloc.NUMAUsed[n.ID]})
		}
	}
	return h
}

func (s *Server) RegisterHost(ctx context.Context, r *connect.Request[pinfoldv1.RegisterHostRequest]) (*connect.Response[pinfoldv1.RegisterHostResponse], error) {
	m := r.Msg
	var t topology.Topology
	dec := json.NewDecoder(strings.NewReader(string(m.TopologyJson)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, invalid("topology_json: %s", clip.Text(err.Error(), 300))
	}
	reserved, err := cpuset.ParseCPUs(m.ReservedCpus)
	if err != nil {
		return nil, invalid("reserved_cpus = %q: %v", clip.Text(m.ReservedCpus, 200), err)
	}
	v, err := s.agents.RegisterHost(ctx, service.RegisterHostRequest{Name: m.Name, Topology: &t, Force: m.Force, Agent: m.Agent,
		AgentVersion: m.AgentVersion, Protocol: int(m.Protocol), NoAgent: m.NoAgent, Settings: state.CapacitySettings{
			PiecesPerCPU: int(m.PiecesPerCpu), ReservedCPUs: reserved, ReservedMemory: m.ReservedMemoryBytes, MemoryShare: m.MemoryShare}})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.RegisterHostResponse{Host: hostMsg(v, s.sb())}), nil
}

// ListHosts answers one page of hosts (service.HostsPage): a call's
// memory and message are the page's, not the cluster's.
func (s *Server) ListHosts(_ context.Context, r *connect.Request[pinfoldv1.ListHostsRequest]) (*connect.Response[pinfoldv1.ListHostsResponse], error) {
	hosts, next, err := s.reads.HostsPage(int(r.Msg.PageSize), r.Msg.PageToken)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.ListHostsResponse{Hosts: make([]*pinfoldv1.Host, 0, len(hosts)), NextPageToken: next}
	for _, v := range hosts {
		h := hostMsg(v, s.sb())
		h.TopologyJson = nil // list stays small; GetHost carries it
		out.Hosts = append(out.Hosts, h)
	}
	return connect.NewResponse(out), nil
}

func (s *Server) GetHost(_ context.Context, r *connect.Request[pinfoldv1.GetHostRequest]) (*connect.Response[pinfoldv1.GetHostResponse], error) {
	v, ok := s.reads.Host(r.Msg.Name)
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("host %q is not registered", r.Msg.Name))
	}
	out := &pinfoldv1.GetHostResponse{Host: hostMsg(v, s.sb())}
	for _, iv := range s.reads.Instances(r.Msg.Name, "") {
		out.Instances = append(out.Instances, instanceMsg(iv.Instance, iv.Status, s.sb()))
	}
	s.withPriorities(out.Instances)
	return connect.NewResponse(out), nil
}

func (s *Server) SetHost(ctx context.Context, r *connect.Request[pinfoldv1.SetHostRequest]) (*connect.Response[pinfoldv1.SetHostResponse], error) {
	m := r.Msg
	remove, err := cpuset.ParseCPUs(m.RemoveCpus)
	if err != nil {
		return nil, invalid("remove_cpus = %q: %v", clip.Text(m.RemoveCpus, 200), err)
	}
	req := service.SetHostRequest{Name: m.Name, RemoveCPUs: remove, MemoryBytes: m.MemoryBytes, MemoryDelta: m.MemoryDeltaBytes,
		AddCPUs: map[cpuset.CPUID]int{}, NUMAMemory: map[cpuset.NUMANodeID]int64{}, RemoveProperties: m.RemoveProperties,
		FaultDomain: m.FaultDomain, UpgradeDomain: m.UpgradeDomain, Type: m.HostType}
	if len(m.SetProperties) > 0 {
		req.SetProperties = map[string]placement.Value{}
		for k, v := range m.SetProperties {
			req.SetProperties[k] = placement.ParseValue(v)
		}
	}
	for id, p := range m.AddCpus {
		req.AddCPUs[cpuset.CPUID(id)] = int(p)
	}
	for id, b := range m.NumaMemoryBytes {
		req.NUMAMemory[cpuset.NUMANodeID(id)] = b
	}
	v, err := s.changes.SetHost(ctx, req)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.SetHostResponse{Host: hostMsg(v, s.sb())}), nil
}

func (s *Server) SetHostEnabled(ctx context.Context, r *connect.Request[pinfoldv1.SetHostEnabledRequest]) (*connect.Response[pinfoldv1.SetHostEnabledResponse], error) {
	v, err := s.changes.SetEnabled(ctx, r.Msg.Name, r.Msg.Enabled)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.SetHostEnabledResponse{Host: hostMsg(v, s.sb())}), nil
}

func (s *Server) SetHostMaintenance(ctx context.Context, r *connect.Request[pinfoldv1.SetHostMaintenanceRequest]) (*connect.Response[pinfoldv1.SetHostMaintenanceResponse], error) {
	if !r.Msg.Off && (r.Msg.GraceSeconds < 1 || r.Msg.GraceSeconds > 30*24*3600) {
		return nil, invalid("grace_seconds = %d: want 1..2592000 (30 days), or off", r.Msg.GraceSeconds)
	}
	grace := time.Duration(r.Msg.GraceSeconds) * time.Second
	if r.Msg.Off {
		grace = -1
	}
	v, err := s.changes.SetMaintenance(ctx, r.Msg.Name, grace)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.SetHostMaintenanceResponse{Host: hostMsg(v, s.sb())}), nil
}

func settingsMsg(ps placement.Settings) *pinfoldv1.PlacementSettings {
	m := &pinfoldv1.PlacementSettings{BufferPercent: ps.Buffer, OverbookingPercent: ps.Overbooking, ConstraintPriorities: map[string]int32{},
		DownGraceSeconds: int64(ps.Grace() / time.Second)}
	for r, p := range ps.Priorities {
		m.ConstraintPriorities[r] = int32(p)
	}
	return m
}

func (s *Server) GetPlacementSettings(context.Context, *connect.Request[pinfoldv1.GetPlacementSettingsRequest]) (*connect.Response[pinfoldv1.PlacementSettings], error) {
	return connect.NewResponse(settingsMsg(s.reads.PlacementSettings())), nil
}

func (s *Server) SetPlacementSettings(ctx context.Context, r *connect.Request[pinfoldv1.PlacementSettings]) (*connect.Response[pinfoldv1.PlacementSettings], error) {
	if g := r.Msg.DownGraceSeconds; g < 0 || g > int64(placement.MaxDownGrace/time.Second) {
		return nil, toConnect(&service.Error{Code: service.Invalid, Message: fmt.Sprintf("down_grace_seconds = %d: want 0 (the default, %s) ..%d", g, placement.DefaultDownGrace, int64(placement.MaxDownGrace/time.Second))})
	}
	ps := placement.Settings{Buffer: r.Msg.BufferPercent, Overbooking: r.Msg.OverbookingPercent, DownGrace: time.Duration(r.Msg.DownGraceSeconds) * time.Second}
	if len(r.Msg.ConstraintPriorities) > 0 {
		ps.Priorities = map[placement.Rule]placement.Priority{}
		for k, v := range r.Msg.ConstraintPriorities {
			ps.Priorities[k] = placement.Priority(v)
		}
	}
	out, err := s.changes.SetPlacementSettings(ctx, ps)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(settingsMsg(out)), nil
}

func (s *Server) RemoveHost(ctx context.Context, r *connect.Request[pinfoldv1.RemoveHostRequest]) (*connect.Response[pinfoldv1.RemoveHostResponse], error) {
	moved, err := s.changes.RemoveHost(ctx, r.Msg.Name)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.RemoveHostResponse{}
	for _, m := range moved {
		out.Moved = append(out.Moved, &pinfoldv1.Move{Instance: m.From.ID, Service: m.From.Service, From: m.From.Host, To: m.To.Host, NewInstance: m.To.ID,
			Why: "its host was removed" + m.OverbookedNote()})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) DrainHost(ctx context.Context, r *connect.Request[pinfoldv1.DrainHostRequest]) (*connect.Response[pinfoldv1.DrainHostResponse], error) {
	d := r.Msg.DeadlineSeconds
	if d < 0 || d > 30*24*3600 {
		return nil, toConnect(&service.Error{Code: service.Invalid, Message: fmt.Sprintf("deadline_seconds = %d: want 0 (none) ..%d", d, 30*24*3600)})
	}
	v, err := s.changes.DrainHost(ctx, service.DrainRequest{Host: r.Msg.Name, Deadline: time.Duration(d) * time.Second, Cancel: r.Msg.Cancel,
		MoveLocalVolumes: r.Msg.MoveLocalVolumes}, time.Now())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.DrainHostResponse{Host: hostMsg(v, s.sb())}), nil
}
