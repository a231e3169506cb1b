package nodeagent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/agentlink"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// fakeLink is a planner's link: it sends the desired states queued in
// desired, answers heartbeats (recording them) and ends when closed or
// told to.
type fakeLink struct {
	desired chan *pinfoldv1.WatchInstancesResponse
	ended   chan struct{}
	once    sync.Once

	mu    sync.Mutex
	beats []*pinfoldv1.HeartbeatRequest
}

func newFakeLink() *fakeLink {
	return &fakeLink{desired: make(chan *pinfoldv1.WatchInstancesResponse, 4), ended: make(chan struct{})}
}

func (l *fakeLink) Heartbeat(_ context.Context, r *pinfoldv1.HeartbeatRequest) (*pinfoldv1.HeartbeatResponse, error) {
	select {
	case <-l.ended:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("link ended"))
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.beats = append(l.beats, r)
	return &pinfoldv1.HeartbeatResponse{PlannerProtocol: model.Protocol}, nil
}

func (l *fakeLink) Receive() (*pinfoldv1.WatchInstancesResponse, error) {
	select {
	case m := <-l.desired:
		return m, nil
	case <-l.ended:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("link ended"))
	}
}

func (l *fakeLink) Close() error {
	l.once.Do(func() { close(l.ended) })
	return nil
}

func (l *fakeLink) beatCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.beats)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// TestAgentOverLink: the agent heartbeats and takes its desired state over
// its link, not over the calls; after the link fails to open, and after
// it ends, the agent opens it again and goes on.
func TestAgentOverLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng, cg, pl := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}, &fakePlanner{}
		links := make(chan *fakeLink, 4)
		opens := 0
		var mu sync.Mutex
		cfg := Config{Host: "h", StateDir: t.TempDir(), Resync: 50 * time.Millisecond, HealthWait: 50 * time.Millisecond, HeartbeatTTL: 300 * time.Millisecond, ShareEvery: -1,
			Metrics: func(context.Context) (*pinfoldv1.HostMetrics, error) { return &pinfoldv1.HostMetrics{}, nil },
			OpenLink: func(ctx context.Context, host string) (PlannerLink, error) {
				mu.Lock()
				opens++
				first := opens == 1
				mu.Unlock()
				if first || host != "h" {
					return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
				}
				select {
				case l := <-links:
					return l, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}}
		a := New(cfg, pl, eng, cg, topologytest.Laptop().Topology(), nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = a.Run(ctx) }()

		l1 := newFakeLink()
		links <- l1
		db := memInst(1, 128<<20)
		l1.desired <- &pinfoldv1.WatchInstancesResponse{Revision: 3, Cpus: "0-7", Instances: []*pinfoldv1.Instance{pinfoldv1.NewInstance(db, nil, "pending", 100)}}
		waitFor(t, "the instance sent over the link created", func() bool {
			cs, _ := eng.List(ctx)
			return len(cs) == 1 && cs[0].Instance == "db-1"
		})
		waitFor(t, "two heartbeats over the link", func() bool { return l1.beatCount() >= 2 })

		// The link ends: the agent opens another and heartbeats on it.
		_ = l1.Close()
		l2 := newFakeLink()
		links <- l2
		waitFor(t, "a heartbeat over the second link", func() bool { return l2.beatCount() >= 1 })
		l2.desired <- &pinfoldv1.WatchInstancesResponse{Revision: 4, Cpus: "0-7"}
		waitFor(t, "the instance removed as the second link said", func() bool {
			cs, _ := eng.List(ctx)
			return len(cs) == 0
		})
		// While a link is open, no heartbeat goes by call (the calls only
		// bridge the time without one, TestAgentHeartbeatsByCallWhileLinkDown).
		calls := func() int {
			pl.mu.Lock()
			defer pl.mu.Unlock()
			return len(pl.beats)
		}
		before := calls()
		time.Sleep(500 * time.Millisecond) // five heartbeat periods
		if n := calls() - before; n > 1 {
			t.Errorf("%d heartbeats by call beside the open link, want none (at most the one in flight)", n)
		}
		l2.mu.Lock()
		b := l2.beats[0]
		l2.mu.Unlock()
		if b.Host != "h" || b.Protocol != model.Protocol {
			t.Errorf("heartbeat over the link = %v, want host h at the agent's protocol", b)
		}
	})
}

// TestAgentWithoutLinkUsesCalls: a planner without links
// (agentlink.ErrUnsupported) gets the heartbeats by call.
func TestAgentWithoutLinkUsesCalls(t *testing.T) {
	eng, cg, pl := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}, &fakePlanner{}
	cfg := Config{Host: "h", StateDir: t.TempDir(), HeartbeatTTL: 300 * time.Millisecond, ShareEvery: -1,
		Metrics:  func(context.Context) (*pinfoldv1.HostMetrics, error) { return &pinfoldv1.HostMetrics{}, nil },
		OpenLink: func(context.Context, string) (PlannerLink, error) { return nil, agentlink.ErrUnsupported }}
	a := New(cfg, pl, eng, cg, topologytest.Laptop().Topology(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	waitFor(t, "two heartbeats by call", func() bool {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return len(pl.beats) >= 2
	})
}

// TestAgentLinkOpenBounded: a link request the planner never answers is
// given up after the heartbeat's TTL and tried again (the agent waited
// for it for good, sending no heartbeat).
func TestAgentLinkOpenBounded(t *testing.T) {
	eng, cg, pl := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}, &fakePlanner{}
	var mu sync.Mutex
	opens := 0
	cfg := Config{Host: "h", StateDir: t.TempDir(), HeartbeatTTL: 300 * time.Millisecond, ShareEvery: -1,
		Metrics: func(context.Context) (*pinfoldv1.HostMetrics, error) { return &pinfoldv1.HostMetrics{}, nil },
		OpenLink: func(ctx context.Context, host string) (PlannerLink, error) {
			mu.Lock()
			opens++
			mu.Unlock()
			<-ctx.Done() // a planner that never answers
			return nil, connect.NewError(connect.CodeUnavailable, ctx.Err())
		}}
	a := New(cfg, pl, eng, cg, topologytest.Laptop().Topology(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	waitFor(t, "the unanswered link request given up and made again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return opens >= 2
	})
}

// TestAgentHeartbeatsByCallWhileLinkDown: while its link cannot be opened
// (here its host's slots are held: resource_exhausted) the agent
// heartbeats with calls, so the host's lease holds; once the link opens,
// the calls stop and the link carries the heartbeats.
func TestAgentHeartbeatsByCallWhileLinkDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng, cg, pl := newFakeEngine(), &fakeCgroup{mem: map[string]int64{}}, &fakePlanner{}
		var open atomic.Bool
		l := newFakeLink()
		cfg := Config{Host: "h", StateDir: t.TempDir(), HeartbeatTTL: 300 * time.Millisecond, ShareEvery: -1,
			Metrics: func(context.Context) (*pinfoldv1.HostMetrics, error) { return &pinfoldv1.HostMetrics{}, nil },
			OpenLink: func(context.Context, string) (PlannerLink, error) {
				if !open.Load() {
					return nil, connect.NewError(connect.CodeResourceExhausted, errors.New(`host "h" has 4 watch streams open already`))
				}
				return l, nil
			}}
		a := New(cfg, pl, eng, cg, topologytest.Laptop().Topology(), nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = a.Run(ctx) }()
		calls := func() int {
			pl.mu.Lock()
			defer pl.mu.Unlock()
			return len(pl.beats)
		}
		waitFor(t, "three heartbeats by call while the link is refused", func() bool { return calls() >= 3 })
		open.Store(true)
		waitFor(t, "two heartbeats over the link once it opens", func() bool { return l.beatCount() >= 2 })
		before := calls()
		time.Sleep(500 * time.Millisecond) // five heartbeat periods
		if after := calls(); after > before+1 {
			t.Errorf("%d heartbeats by call after the link opened, want them stopped (at most the one in flight)", after-before)
		}
	})
}
