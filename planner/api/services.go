package api

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// plannedMsgs are instances just planned, without a host's status yet.
func (s *Server) plannedMsgs(ins []model.Instance) []*pinfoldv1.Instance {
	out := make([]*pinfoldv1.Instance, 0, len(ins))
	for _, in := range ins {
		out = append(out, instanceMsg(in, nil, s.sb()))
	}
	return out
}

func instanceMsg(in model.Instance, st *model.Status, shareBase int) *pinfoldv1.Instance {
	return pinfoldv1.NewInstance(in, st, service.InstanceState(in, st), shareBase)
}

func (s *Server) Scale(ctx context.Context, r *connect.Request[pinfoldv1.ScaleRequest]) (*connect.Response[pinfoldv1.ScaleResponse], error) {
	res, err := s.changes.Scale(ctx, r.Msg.Service, int(r.Msg.Count))
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.ScaleResponse{Added: s.plannedMsgs(res.Added), Removed: res.Removed, Count: int32(res.Count),
		NoRoom: res.NoRoom, CappedPerHost: int32(res.CappedPerHost)}
	for _, v := range res.Preempted {
		out.Preempted = append(out.Preempted, &pinfoldv1.Victim{Id: v.ID, Service: v.Service, Host: v.Host, Priority: int32(v.Priority)})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) Rebalance(ctx context.Context, r *connect.Request[pinfoldv1.RebalanceRequest]) (*connect.Response[pinfoldv1.RebalanceResponse], error) {
	m := r.Msg
	res, err := s.changes.Rebalance(ctx, service.RebalanceRequest{Apply: m.Apply, Defragment: m.Defragment, MoveLocalVolumes: m.MoveLocalVolumes,
		Options: balance.Options{BalancingThreshold: m.BalancingThreshold, ActivityThreshold: m.ActivityThreshold, MaxMoves: int(m.MaxMoves)}})
	out := &pinfoldv1.RebalanceResponse{ImbalanceBefore: res.Before, ImbalanceAfter: res.After,
		FragmentedBefore: int32(res.FragmentedBefore), FragmentedAfter: int32(res.FragmentedAfter), Proposed: int32(res.Proposed), NoMove: res.NoMove}
	for _, mv := range res.Moves {
		out.Moves = append(out.Moves, &pinfoldv1.Move{Instance: mv.Instance, Service: mv.Service, From: mv.From, To: mv.To, Why: mv.Why, NewInstance: mv.NewInstance})
	}
	for _, mv := range res.Kept {
		out.Kept = append(out.Kept, &pinfoldv1.Move{Instance: mv.Instance, Service: mv.Service, From: mv.From, Why: mv.Why})
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(out), nil
}

// DeployRequestOf is the service's deploy request for m at the share
// base shareBase; its error is a Connect error (invalid_argument). A
// client checks a request with it and service.CheckDeploy as Deploy does.
func DeployRequestOf(m *pinfoldv1.DeployRequest, shareBase int) (service.DeployRequest, error) {
	p, err := requestPieces(m.Cpu, shareBase, m.Bind)
	if err != nil {
		return service.DeployRequest{}, err
	}
	st, err := alloc.ParseStrategy("strategy", m.Strategy)
	if err != nil {
		return service.DeployRequest{}, toConnect(&service.Error{Code: service.Invalid, Message: err.Error()})
	}
	d := m.Model(p)
	d.Strategy = string(st)
	return service.DeployRequest{Service: m.Service, Deploy: d, Count: int(m.Count), UseBuffer: m.UseBuffer, CreateOnly: m.CreateOnly,
		NoPreempt: m.NoPreempt, DryRun: m.DryRun}, nil
}

func (s *Server) Deploy(ctx context.Context, r *connect.Request[pinfoldv1.DeployRequest]) (*connect.Response[pinfoldv1.DeployResponse], error) {
	req, err := DeployRequestOf(r.Msg, s.sb())
	if err != nil {
		return nil, err
	}
	res, err := s.changes.DeployWithRules(ctx, req)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.DeployResponse{DomainSpread: res.DomainSpread, Instances: s.plannedMsgs(res.Instances), DryRun: res.DryRun, NoRoom: res.NoRoom}
	for _, v := range res.Violations {
		out.Violations = append(out.Violations, &pinfoldv1.Violation{Rule: v.Rule, Detail: v.Detail})
	}
	for _, v := range res.Preempted {
		out.Preempted = append(out.Preempted, &pinfoldv1.Victim{Id: v.ID, Service: v.Service, Host: v.Host, Priority: int32(v.Priority)})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) Resize(ctx context.Context, r *connect.Request[pinfoldv1.ResizeRequest]) (*connect.Response[pinfoldv1.ResizeResponse], error) {
	m := r.Msg
	var to *service.ResizeTo
	if strings.TrimSpace(m.ToCpu) != "" || m.ToMemoryBytes != 0 {
		switch {
		case strings.TrimSpace(m.CpuDelta) != "" || m.MemoryDeltaBytes != 0:
			return nil, invalid("to_cpu = %q, to_memory_bytes = %d: a size is given with cpu_delta = %q, memory_delta_bytes = %d: give a size or deltas, not both",
				m.ToCpu, m.ToMemoryBytes, m.CpuDelta, m.MemoryDeltaBytes)
		case strings.TrimSpace(m.ToCpu) == "" || m.ToMemoryBytes <= 0:
			return nil, invalid("to_cpu = %q, to_memory_bytes = %d: a size needs both (decimal CPUs, and bytes above 0)", m.ToCpu, m.ToMemoryBytes)
		}
		p, err := pieces("to_cpu", m.ToCpu, s.sb(), false)
		if err != nil {
			return nil, err
		}
		to = &service.ResizeTo{Pieces: p, Memory: m.ToMemoryBytes}
	}
	d, err := pieces("cpu_delta", m.CpuDelta, s.sb(), true)
	if err != nil {
		// A change of less than one piece is refused, not rounded to none
		// or up to a piece ("0" itself says no CPU change). Only an amount
		// pieces refuses: 1 piece at a share base that is not a power of
		// ten is written with 4 decimals, a little less than 1 piece
		// (0.0156 of 64 is 0.9984).
		if f, _ := strconv.ParseFloat(strings.TrimSpace(m.CpuDelta), 64); f != 0 && math.Abs(f)*float64(s.sb()) < 1 {
			return nil, invalid("cpu_delta = %q: less than one piece of a CPU, it changes nothing: the smallest step is %s CPU (1 piece; share base %d)",
				m.CpuDelta, alloc.FormatPieces(1, s.sb()), s.sb())
		}
		return nil, err
	}
	if d == 0 && m.MemoryDeltaBytes == 0 && m.Bind == nil && to == nil {
		return nil, invalid("nothing to change: give cpu_delta, memory_delta_bytes, bind, or to_cpu with to_memory_bytes")
	}
	expect := 0
	if strings.TrimSpace(m.ExpectCpu) != "" {
		if expect, err = pieces("expect_cpu", m.ExpectCpu, s.sb(), false); err != nil {
			return nil, err
		}
	}
	if m.ExpectMemoryBytes < 0 {
		return nil, invalid("expect_memory_bytes = %d: want a size in bytes, or 0 for none", m.ExpectMemoryBytes)
	}
	ins, victims, err := s.changes.ResizePreempting(ctx, service.ResizeRequest{Target: m.Target, CPUDelta: d, MemoryDelta: m.MemoryDeltaBytes, Bind: m.Bind,
		ExpectPieces: expect, ExpectMemory: m.ExpectMemoryBytes, To: to, NoPreempt: m.NoPreempt, DryRun: m.DryRun})
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.ResizeResponse{Instances: s.plannedMsgs(ins), DryRun: m.DryRun}
	for _, v := range victims {
		out.Preempted = append(out.Preempted, &pinfoldv1.Victim{Id: v.ID, Service: v.Service, Host: v.Host, Priority: int32(v.Priority)})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) Replace(ctx context.Context, r *connect.Request[pinfoldv1.ReplaceRequest]) (*connect.Response[pinfoldv1.ReplaceResponse], error) {
	var ctr *model.Container
	if r.Msg.Container != nil {
		c := r.Msg.Container.Model()
		ctr = &c
	}
	ins, err := s.changes.Replace(ctx, service.ReplaceRequest{Target: r.Msg.Target, Image: r.Msg.Image, Command: r.Msg.Command,
		Health: r.Msg.Health.Model(), Hosts: r.Msg.Hosts, Pull: r.Msg.Pull, Container: ctr, Edit: r.Msg.Edit.Model()})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.ReplaceResponse{Instances: s.plannedMsgs(ins)}), nil
}

func (s *Server) Remove(ctx context.Context, r *connect.Request[pinfoldv1.RemoveRequest]) (*connect.Response[pinfoldv1.RemoveResponse], error) {
	ids, err := s.changes.Remove(ctx, r.Msg.Target)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.RemoveResponse{Ids: ids}), nil
}

// GetService answers a service's record (service.ServiceRecord); a viewer
// sees the environment's names, never its values, as in ListInstances.
func (s *Server) GetService(ctx context.Context, r *connect.Request[pinfoldv1.GetServiceRequest]) (*connect.Response[pinfoldv1.GetServiceResponse], error) {
	if err := state.ValidateServiceName(r.Msg.Name); err != nil {
		return nil, invalid("name: %v", err)
	}
	svc, n, ok := s.reads.ServiceRecord(r.Msg.Name)
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("service %q is not deployed", r.Msg.Name))
	}
	m := pinfoldv1.NewServiceRecord(svc.Name, svc.Deploy, alloc.FormatPieces(svc.Pieces, s.sb()), n, s.sb())
	return connect.NewResponse(&pinfoldv1.GetServiceResponse{Service: m}), nil
}

// ListInstances answers one page of instances (service.InstancesPage).
func (s *Server) ListInstances(ctx context.Context, r *connect.Request[pinfoldv1.ListInstancesRequest]) (*connect.Response[pinfoldv1.ListInstancesResponse], error) {
	ins, next, err := s.reads.InstancesPage(r.Msg.Host, r.Msg.Service, int(r.Msg.PageSize), r.Msg.PageToken)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.ListInstancesResponse{Instances: make([]*pinfoldv1.Instance, 0, len(ins)), NextPageToken: next}
	for _, iv := range ins {
		out.Instances = append(out.Instances, instanceMsg(iv.Instance, iv.Status, s.sb()))
	}
	s.withPriorities(out.Instances)
	return connect.NewResponse(out), nil
}

// withPriorities sets each listed instance's priority and whether it is
// never preempted, its service's (read once per service of the list).
func (s *Server) withPriorities(ins []*pinfoldv1.Instance) {
	type prio struct {
		p     int32
		never bool
	}
	of := map[string]prio{}
	for _, m := range ins {
		p, ok := of[m.Service]
		if !ok {
			p = prio{int32(s.reads.Priority(m.Service)), s.reads.NeverPreempted(m.Service)}
			of[m.Service] = p
		}
		m.Priority, m.NeverPreempted = p.p, p.never
	}
}

func (s *Server) Capacity(_ context.Context, r *connect.Request[pinfoldv1.CapacityRequest]) (*connect.Response[pinfoldv1.CapacityResponse], error) {
	m := r.Msg
	p, err := requestPieces(m.Cpu, s.sb(), m.Bind)
	if err != nil {
		return nil, err
	}
	caps, err := s.reads.Capacity(service.DeployRequest{Service: m.Service, UseBuffer: m.UseBuffer, Deploy: model.Deploy{Size: model.Size{Pieces: p, Bind: m.Bind, WholeCores: m.WholeCores, Memory: m.MemoryBytes}, Rules: model.Rules{Constraint: m.Constraint, Affinity: model.Affinity{Hard: m.AffinityHard}, AntiAffinity: model.Affinity{Hard: m.AntiAffinityHard}}, Scheduling: model.Scheduling{MaxPerHost: int(m.MaxPerHost)}}})
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pinfoldv1.CapacityResponse{Capacity: map[string]int32{}, Limit: map[string]string{}}
	for _, h := range slices.Sorted(maps.Keys(caps)) {
		c := caps[h]
		out.Capacity[h] = int32(min(c.Count, 1<<30))
		out.Total += int64(min(c.Count, 1<<30))
		out.Limit[h] = c.Limit
	}
	return connect.NewResponse(out), nil
}
