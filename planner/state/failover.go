package state

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// How the client notices a sick etcd member: one that accepts connections
// but never answers (a stopped process, a hung disk holding its loop) looks
// alive to TCP and to gRPC, whose unary calls on the stuck connection wait
// as long as their context lets them, and whose keepalive pings are at
// least 10 s apart (gRPC's minimum). So every ProbeEvery each endpoint is
// asked for its status on a connection of its own; a member that does not
// answer within ProbeTimeout while another one does is sick: the client's
// connections to it are closed (its calls fail and are retried or resolved
// elsewhere, its watch and lease streams move to another member) and no new
// one is made until it answers again.
const (
	ProbeEvery   = 500 * time.Millisecond
	ProbeTimeout = 1500 * time.Millisecond
	// KeepAliveTime and KeepAliveTimeout are gRPC's own check of a
	// connection with calls in flight: a backstop for a client of one
	// endpoint, which has nowhere else to go.
	KeepAliveTime    = 10 * time.Second
	KeepAliveTimeout = 3 * time.Second
)

// failover tracks the client's connections per member address and refuses
// new ones to a member its probes found sick.
type failover struct {
	log *slog.Logger

	mu    sync.Mutex
	sick  map[string]bool                      // by dial address
	conns map[string]map[*trackedConn]struct{} // by dial address

	probes map[string]*clientv3.Client // by dial address
	cancel context.CancelFunc
	done   chan struct{}
}

// unguarded, set by tests before Open, makes a client as pinfold made it
// before the member probes, keepalives and per-attempt timeouts: the
// control run of the frozen-member test.
var unguarded atomic.Bool

func newFailover(log *slog.Logger) *failover {
	return &failover{log: log, sick: map[string]bool{}, conns: map[string]map[*trackedConn]struct{}{}, probes: map[string]*clientv3.Client{}}
}

// dialAddress is the address gRPC dials for an endpoint URL (etcd's
// client resolver: the URL's host:port, or the endpoint as it is).
func dialAddress(ep string) string {
	if i := strings.Index(ep, "://"); i >= 0 && strings.HasPrefix(ep, "http") {
		return strings.TrimSuffix(ep[i+3:], "/")
	}
	return ep
}

// dial is the client's dialer: a tracked connection, or an error for a
// member found sick.
func (f *failover) dial(ctx context.Context, addr string) (net.Conn, error) {
	f.mu.Lock()
	sick := f.sick[addr]
	f.mu.Unlock()
	if sick {
		return nil, fmt.Errorf("state: etcd member %s does not answer its status probes", addr)
	}
	network, target := "tcp", addr
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, target = "unix", strings.TrimPrefix(rest, "//")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, target)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, f: f, addr: addr}
	f.mu.Lock()
	if f.conns[addr] == nil {
		f.conns[addr] = map[*trackedConn]struct{}{}
	}
	f.conns[addr][tc] = struct{}{}
	f.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	f    *failover
	addr string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns[c.addr], c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}

// start opens a probe connection to each endpoint and probes them until
// stop; main is the client whose connections it closes.
func (f *failover) start(endpoints []string, tc *tls.Config, main *clientv3.Client) error {
	for _, ep := range endpoints {
		cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: ProbeTimeout, TLS: tc, Logger: main.GetLogger()}
		cli, err := clientv3.New(cfg)
		if err != nil {
			f.stop()
			return fmt.Errorf("state: etcd status probe of %s: %w", ep, err)
		}
		f.probes[dialAddress(ep)] = cli
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go f.run(ctx, main)
	return nil
}

func (f *failover) stop() {
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
	for _, c := range f.probes {
		c.Close()
	}
}

func (f *failover) run(ctx context.Context, main *clientv3.Client) {
	defer close(f.done)
	tick := time.NewTicker(ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f.round(ctx, main)
	}
}

// round probes every member at once and acts on the answers.
func (f *failover) round(ctx context.Context, main *clientv3.Client) {
	type answer struct {
		addr string
		err  error
	}
	ch := make(chan answer, len(f.probes))
	for addr, cli := range f.probes {
		go func() {
			pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			defer cancel()
			_, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(pctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
			ch <- answer{addr, err}
		}()
	}
	ok := map[string]bool{}
	var anyOK bool
	for range f.probes {
		a := <-ch
		ok[a.addr] = a.err == nil
		anyOK = anyOK || a.err == nil
	}
	if ctx.Err() != nil {
		return
	}
	var healed bool
	var closing []*trackedConn
	f.mu.Lock()
	for addr, up := range ok {
		switch {
		case up && f.sick[addr]:
			delete(f.sick, addr)
			healed = true
			f.log.Info("etcd member answers again", "member", addr)
		case !up && anyOK && !f.sick[addr]:
			// Only when another member answers: with none, there is
			// nowhere better to go.
			f.sick[addr] = true
			for c := range f.conns[addr] {
				closing = append(closing, c)
			}
			f.log.Warn("etcd member does not answer; its connections are closed until it does", "member", addr, "probe_timeout", ProbeTimeout)
		case !anyOK && f.sick[addr]:
			delete(f.sick, addr)
			healed = true
		}
	}
	f.mu.Unlock()
	for _, c := range closing {
		c.Close()
	}
	if healed {
		main.ActiveConnection().ResetConnectBackoff() // reconnect now, not after gRPC's backoff
	}
}
