package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// agent is one simulated node agent.
type agent struct {
	name string
	cl   pinfoldv1connect.PlannerServiceClient
	link *agentlink.Client // -protocol link
	// closeIdle closes the idle connections of cl (-protocol link).
	closeIdle func()
	// streamAt and beatAt are the last time (UnixNano) its stream
	// delivered its first message and a heartbeat was accepted.
	streamAt, beatAt atomic.Int64
}

// sim is the running fleet.
type sim struct {
	cfg     config
	topo    []byte
	agents  []*agent
	beats   atomic.Int64
	beatErr atomic.Int64
	// seen is, per instance ID, when an agent's stream first carried it.
	seen sync.Map
	slow []string // slow deploys (see report.SlowDeploys)
}

// backoff is the real agent's: 200 ms doubling to 5 s, with jitter.
func backoff(ctx context.Context, attempt int) {
	d := min(time.Duration(1<<min(attempt, 5))*200*time.Millisecond, 5*time.Second)
	d = d/2 + rand.N(d/2+1)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (s *sim) register(ctx context.Context, a *agent) error {
	for i := 0; ; i++ {
		_, err := a.cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: a.name, TopologyJson: s.topo,
			Agent: true, AgentVersion: "sim", Protocol: model.Protocol, MemoryShare: 1}))
		if err == nil {
			return nil
		}
		if ce := new(connect.Error); errors.As(err, &ce) && ce.Code() == connect.CodeInvalidArgument || i > 20 {
			return fmt.Errorf("host %s: %w", a.name, err)
		}
		backoff(ctx, i)
	}
}

// linked is the agent's link, as the agent holds it (nodeagent's
// linked): heartbeats beside the desired states, opened again with
// backoff after an interruption.
func (s *sim) linked(ctx context.Context, a *agent) {
	for i := 0; ctx.Err() == nil; i++ {
		l, err := a.link.Open(ctx, a.name)
		if err != nil {
			backoff(ctx, i)
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		go s.beat(lctx, a, func(c context.Context, req *pinfoldv1.HeartbeatRequest) error {
			_, err := l.Heartbeat(c, req)
			return err
		})
		go func() {
			<-lctx.Done()
			_ = l.Close()
		}()
		first := true
		for {
			m, err := l.Receive()
			if err != nil {
				break
			}
			now := time.Now().UnixNano()
			if first {
				a.streamAt.Store(now)
				first, i = false, 0
			}
			for _, in := range m.Instances {
				s.seen.LoadOrStore(in.Id, now)
			}
		}
		cancel()
		backoff(ctx, i)
	}
}

func (s *sim) heartbeats(ctx context.Context, a *agent) {
	s.beat(ctx, a, func(c context.Context, req *pinfoldv1.HeartbeatRequest) error {
		_, err := a.cl.Heartbeat(c, connect.NewRequest(req))
		return err
	})
}

func (s *sim) beat(ctx context.Context, a *agent, send func(context.Context, *pinfoldv1.HeartbeatRequest) error) {
	ttl := int32(3 * s.cfg.heartbeat / time.Second)
	var sentAt time.Time
	for i, n := 0, 0; ctx.Err() == nil; n++ {
		req := &pinfoldv1.HeartbeatRequest{Host: a.name, AgentVersion: "sim", Protocol: model.Protocol, TtlSeconds: ttl,
			Metrics: hostMetrics(s.cfg.metrics, n, sentAt)}
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := send(c, req)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.beatErr.Add(1)
			i++
			backoff(ctx, i)
			continue
		}
		i = 0
		if req.Metrics != nil {
			sentAt = time.Now()
		}
		s.beats.Add(1)
		a.beatAt.Store(time.Now().UnixNano())
		select {
		case <-time.After(s.cfg.heartbeat - s.cfg.heartbeat/10 + rand.N(s.cfg.heartbeat/5)):
		case <-ctx.Done():
		}
	}
}

// metricsEvery is how often the agent resends unchanged metrics
// (nodeagent's metricsEvery).
const metricsEvery = 30 * time.Second

// hostMetrics is what an agent's heartbeat n carries under -metrics mode
// (sentAt: when it last sent some): none; the agent's steady state (the
// same figures, resent after metricsEvery); or new ones on every beat (a
// host whose load keeps moving).
func hostMetrics(mode string, n int, sentAt time.Time) *pinfoldv1.HostMetrics {
	m := &pinfoldv1.HostMetrics{Load1: 1, Load5: 1, Load15: 1, MemTotalBytes: 512 << 30, MemAvailableBytes: 256 << 30}
	switch {
	case mode == "agent" && time.Since(sentAt) > metricsEvery:
		return m
	case mode == "moving":
		m.Load1 = float64(n)
		return m
	}
	return nil
}

func (s *sim) watch(ctx context.Context, a *agent) {
	for i := 0; ctx.Err() == nil; i++ {
		stream, err := a.cl.WatchInstances(ctx, connect.NewRequest(&pinfoldv1.WatchInstancesRequest{Host: a.name}))
		if err != nil {
			backoff(ctx, i)
			continue
		}
		first := true
		for stream.Receive() {
			now := time.Now().UnixNano()
			if first {
				a.streamAt.Store(now)
				first, i = false, 0
			}
			for _, in := range stream.Msg().Instances {
				s.seen.LoadOrStore(in.Id, now)
			}
		}
		stream.Close()
		backoff(ctx, i)
	}
}

// waitAll waits until every agent's stream delivered and a heartbeat was
// accepted after since.
func (s *sim) waitAll(since time.Time, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		behind := 0
		for _, a := range s.agents {
			if a.streamAt.Load() < since.UnixNano() || a.beatAt.Load() < since.UnixNano() {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d agents not back after %s", behind, len(s.agents), limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deploy sends n one-instance deploys spread evenly over d and returns,
// per instance ID, when its deploy was sent, and each deploy's answer time
// in milliseconds.
func (s *sim) deploy(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, n int, d time.Duration) (map[string]time.Time, []float64) {
	out := map[string]time.Time{}
	var answers []float64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(d * time.Duration(i) / time.Duration(n) * 9 / 10)))
		wg.Go(func() {
			at := time.Now()
			resp, err := cl.Deploy(ctx, connect.NewRequest(&pinfoldv1.DeployRequest{Image: "i", Service: fmt.Sprintf("svc%d", i%20), Count: 1, Cpu: "0.5", Bind: true, MemoryBytes: 64 << 20}))
			if err != nil {
				fmt.Fprintln(os.Stderr, "simagents: deploy:", err)
				return
			}
			took := float64(time.Since(at).Microseconds()) / 1e3
			mu.Lock()
			if took > 200 {
				s.slow = append(s.slow, fmt.Sprintf("%.1fs:%.0fms", at.Sub(start).Seconds(), took))
			}
			for _, in := range resp.Msg.Instances {
				out[in.Id] = at
			}
			answers = append(answers, took)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, answers
}
