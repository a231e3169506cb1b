package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/nodeagent/checkpoint"
	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

func backoff(ctx context.Context, attempt int) {
	d := min(time.Duration(1<<min(attempt, 5))*200*time.Millisecond, 5*time.Second)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (a *Agent) register(ctx context.Context) error {
	tj, _ := json.Marshal(a.topo)
	for i := 0; ; i++ {
		resp, err := a.planner.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: a.cfg.Host, TopologyJson: tj,
			Agent: true, AgentVersion: a.cfg.Version, Protocol: model.Protocol}))
		if err == nil {
			if sb := int(resp.Msg.Host.ShareBase); sb > 0 {
				a.mu.Lock()
				a.host.ShareBase = sb
				a.mu.Unlock()
			}
			a.log.Info("host registered", "host", a.cfg.Host, "cpus", a.topo.Online, "numa_nodes", len(a.topo.NUMANodes))
			return nil
		}
		var ce *connect.Error
		if errors.As(err, &ce) && (ce.Code() == connect.CodeInvalidArgument || ce.Code() == connect.CodeAlreadyExists || ce.Code() == connect.CodeFailedPrecondition) {
			return fmt.Errorf("register host %s: %w", a.cfg.Host, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.log.Warn("planner unreachable; retrying registration", "err", err)
		backoff(ctx, i)
	}
}

// heartbeats keeps the lease alive and sends the host's metrics when they
// changed enough to matter (or every metricsEvery), so a large fleet does
// not write to etcd on every beat.
func (a *Agent) heartbeats(ctx context.Context, beat func(context.Context, *pinfoldv1.HeartbeatRequest) error) {
	every := a.cfg.HeartbeatTTL / 3
	var sent *pinfoldv1.HostMetrics
	var sentAt time.Time
	for i := 0; ctx.Err() == nil; {
		req := &pinfoldv1.HeartbeatRequest{Host: a.cfg.Host, AgentVersion: a.cfg.Version,
			Protocol: model.Protocol, TtlSeconds: int32(a.cfg.HeartbeatTTL / time.Second)}
		m, err := a.cfg.Metrics(ctx)
		if err != nil {
			a.log.Debug("host metrics unavailable", "err", err)
		} else if MetricsChanged(sent, m) || time.Since(sentAt) > metricsEvery {
			req.Metrics = m
		}
		err = beat(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Warn("heartbeat failed", "err", err)
			i++
			backoff(ctx, i)
			continue
		}
		if req.Metrics != nil {
			sent, sentAt = req.Metrics, time.Now()
		}
		i = 0
		select {
		case <-time.After(every):
		case <-ctx.Done():
		}
	}
}

// callBeat sends a heartbeat with the API's call.
func (a *Agent) callBeat(ctx context.Context, req *pinfoldv1.HeartbeatRequest) error {
	_, err := a.planner.Heartbeat(ctx, connect.NewRequest(req))
	return err
}

// linked heartbeats and keeps the desired set current over the agent's
// link, opened again with backoff after each interruption; with a planner
// that has no link, over the API's calls (heartbeats and watch).
func (a *Agent) linked(ctx context.Context) {
	// While no link is open the agent heartbeats with calls: a link that
	// cannot be opened (its host's slots held by links of a crashed run,
	// the planner overloaded) must not let the host's lease lapse and its
	// instances be moved away.
	var stopCalls context.CancelFunc
	callBeats := func(on bool) {
		switch {
		case on && stopCalls == nil:
			var c context.Context
			c, stopCalls = context.WithCancel(ctx)
			go a.heartbeats(c, a.callBeat)
		case !on && stopCalls != nil:
			stopCalls()
			stopCalls = nil
		}
	}
	defer callBeats(false)
	for i := 0; ctx.Err() == nil; i++ {
		// The request is bounded by the TTL (the link, once open, is
		// not): a planner that takes the connection and never answers
		// (stopped, overloaded, a proxy holding the upgrade) held the
		// agent here for good, sending no heartbeat.
		octx, ocancel := context.WithTimeout(ctx, a.cfg.HeartbeatTTL)
		l, err := a.cfg.OpenLink(octx, a.cfg.Host)
		ocancel()
		if errors.Is(err, agentlink.ErrUnsupported) {
			callBeats(false)
			a.log.Warn("no agent link: heartbeating and watching with calls until the agent restarts", "err", err)
			go a.heartbeats(ctx, a.callBeat)
			a.watch(ctx)
			return
		}
		if err != nil {
			a.log.Warn("agent link failed; keeping the last desired state, heartbeating with calls meanwhile", "err", err)
			callBeats(true)
			backoff(ctx, i)
			continue
		}
		callBeats(false)
		lctx, cancel := context.WithCancel(ctx)
		go a.heartbeats(lctx, func(c context.Context, req *pinfoldv1.HeartbeatRequest) error {
			c, done := context.WithTimeout(c, a.cfg.HeartbeatTTL)
			defer done()
			_, err := l.Heartbeat(c, req)
			return err
		})
		go func() {
			<-lctx.Done()
			_ = l.Close()
		}()
		for {
			m, err := l.Receive()
			if err != nil {
				if ctx.Err() == nil {
					a.log.Warn("agent link interrupted; keeping the last desired state", "err", err)
				}
				break
			}
			i = 0
			a.received(m)
		}
		cancel()
		callBeats(true)
		backoff(ctx, i)
	}
}

// watch keeps the desired set current from the planner's stream.
func (a *Agent) watch(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		stream, err := a.planner.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: a.cfg.Host}))
		if err != nil {
			a.log.Warn("watch failed; keeping the last desired state", "err", err)
			backoff(ctx, i)
			continue
		}
		for stream.Receive() {
			i = 0
			a.received(stream.Msg())
		}
		if err := stream.Err(); err != nil && ctx.Err() == nil {
			a.log.Warn("watch interrupted; keeping the last desired state", "err", err)
		}
		stream.Close()
		backoff(ctx, i)
	}
}

// received takes a desired state from the planner and checkpoints it.
func (a *Agent) received(m *pinfoldv1.WatchInstancesResponse) {
	ds := make([]model.Instance, 0, len(m.Instances))
	sb := 0
	for _, msg := range m.Instances {
		ds = append(ds, msg.Model())
		sb = int(msg.ShareBase)
	}
	cpus, err := cpuset.ParseCPUs(m.Cpus)
	if err != nil || cpus.IsEmpty() {
		a.log.Warn("the planner sent no usable host CPUs; keeping the ones known", "cpus", m.Cpus, "err", err)
	}
	shared, perr := cpuset.ParseCPUs(m.SharedPool)
	if perr != nil {
		a.log.Warn("the planner sent no usable shared pool; computing it here", "shared_pool", m.SharedPool, "err", perr)
	}
	a.mu.Lock()
	if err == nil && !cpus.IsEmpty() {
		a.host.CPUs = cpus
	}
	a.host.Pool = shared
	if sb > 0 {
		a.host.ShareBase = sb
	}
	a.desired, a.haveDes, a.rev, a.fenced = ds, true, m.Revision, false
	cp := checkpoint.State{Host: a.cfg.Host, Revision: m.Revision, ShareBase: a.host.ShareBase, CPUs: a.host.CPUs, Pool: a.host.Pool, Desired: ds}
	a.mu.Unlock()
	if a.cfg.StateDir != "" {
		if err := checkpoint.Save(a.cfg.StateDir, cp); err != nil {
			a.log.Warn("checkpoint not saved", "err", err)
		}
	}
	a.wake()
}
