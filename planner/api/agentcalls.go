package api

import (
	"context"
	"maps"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

func (s *Server) Heartbeat(ctx context.Context, r *connect.Request[pinfoldv1.HeartbeatRequest]) (*connect.Response[pinfoldv1.HeartbeatResponse], error) {
	resp, err := s.heartbeat(ctx, r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// heartbeat serves a heartbeat, of a call or of an agent link.
func (s *Server) heartbeat(ctx context.Context, m *pinfoldv1.HeartbeatRequest) (*pinfoldv1.HeartbeatResponse, error) {
	ttl := time.Duration(m.TtlSeconds) * time.Second
	var met *state.Metrics
	if hm := m.Metrics; hm != nil {
		met = &state.Metrics{Load1: hm.Load1, Load5: hm.Load5, Load15: hm.Load15, MemTotal: hm.MemTotalBytes, MemAvailable: hm.MemAvailableBytes}
	}
	if err := s.agents.Heartbeat(ctx, m.Host, m.AgentVersion, int(m.Protocol), ttl, met); err != nil {
		return nil, toConnect(err)
	}
	return &pinfoldv1.HeartbeatResponse{PlannerProtocol: model.Protocol}, nil
}

func (s *Server) ReportStatus(ctx context.Context, r *connect.Request[pinfoldv1.ReportStatusRequest]) (*connect.Response[pinfoldv1.ReportStatusResponse], error) {
	m := r.Msg
	err := s.agents.ReportStatus(ctx, m.Host, m.Id, m.Status())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pinfoldv1.ReportStatusResponse{}), nil
}

// WatchInstances sends the host's desired set, then again after each change
// to the host's instances, until the client goes away.
func (s *Server) WatchInstances(ctx context.Context, r *connect.Request[pinfoldv1.WatchInstancesRequest], stream *connect.ServerStream[pinfoldv1.WatchInstancesResponse]) error {
	if s.watches != nil {
		if !s.watches.take(r.Msg.Host) {
			return watchRefusal(r.Msg.Host)
		}
		defer s.watches.release(r.Msg.Host)
	}
	err := s.agents.WatchInstances(ctx, r.Msg.Host, func(rev int64, h state.HostView, ins []state.InstanceView) error {
		return stream.Send(s.desiredMsg(rev, h, ins))
	})
	switch {
	case err == nil || ctx.Err() != nil:
		return ctx.Err()
	case service.CodeOf(err) != "":
		return toConnect(err)
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// desiredMsg is a host's desired set at rev, as a watch or a link sends it.
func (s *Server) desiredMsg(rev int64, h state.HostView, ins []state.InstanceView) *pinfoldv1.WatchInstancesResponse {
	msg := &pinfoldv1.WatchInstancesResponse{Revision: rev, Cpus: cpuset.Of(slices.Collect(maps.Keys(h.Host.CPUs))...).String(),
		SharedPool: state.SharedPool(h.Host, h.Alloc).String()}
	for _, iv := range ins {
		msg.Instances = append(msg.Instances, instanceMsg(iv.Instance, iv.Status, s.sb()))
	}
	return msg
}
