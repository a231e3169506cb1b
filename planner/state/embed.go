package state

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"

	"github.com/pinfold/pinfold/planner/pki"
	"go.etcd.io/etcd/server/v3/embed"
)

// EmbedConfig describes one embedded etcd member.
type EmbedConfig struct {
	Name      string // member name
	Dir       string // data directory
	ClientURL string // e.g. http://127.0.0.1:2379
	PeerURL   string // e.g. http://127.0.0.1:2380
	// AdvertiseClientURL and AdvertisePeerURL, when set, are what the
	// member tells the cluster instead of the URLs it listens on (a proxy
	// in front of it: statetest's frozen member); InitialCluster names the
	// advertised peer URL.
	AdvertiseClientURL, AdvertisePeerURL string
	// InitialCluster is "name=peerURL,…" for a multi-member cluster; empty
	// means a single-member cluster of this member.
	InitialCluster string
	// LogLevel is etcd's own log level (default "error"; "fatal" is quiet).
	LogLevel string
	// UnsafeNoFsync skips fsync (benchmarks of the planner, never production).
	UnsafeNoFsync bool
	// TLS, when set, serves the client and peer URLs (https://) over TLS
	// and requires a client certificate signed by TLS.CA on both.
	TLS *pki.Files
	// History is how long etcd keeps old revisions before compacting them
	// (default DefaultHistory). Without compaction every write ever made
	// stays in etcd's database until it hits its quota and refuses all
	// writes.
	History time.Duration
	// MaxTxnOps is the most writes one transaction may hold (0: 1<<20;
	// etcd's own default is 128, which an external cluster may keep).
	MaxTxnOps int
	// Log, when set, receives etcd's own logs (component=etcd, at LogLevel
	// and above, without stack traces) instead of etcd's JSON on stderr.
	Log *slog.Logger
}

// DefaultHistory is the embedded etcd's history: a store watch that falls
// further behind reloads (Store.watch).
const DefaultHistory = 5 * time.Minute

// Dial is how the store reaches etcd: its client URLs, and TLS (nil:
// plaintext) with the client certificate etcd requires.
type Dial struct {
	Endpoints []string
	TLS       *tls.Config
	// RequestTimeout bounds one attempt of a commit (0:
	// DefaultRequestTimeout), plus a millisecond per write: an attempt a
	// member never answers is resolved and tried again through another.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is Dial.RequestTimeout's default: a commit applies
// in milliseconds; one a sick member holds is given up after this.
const DefaultRequestTimeout = 3 * time.Second

// MaxMessageBytes bounds one etcd request or response from pinfold's client
// (a 10,000-instance deploy is one ~3 MiB transaction).
const MaxMessageBytes = 64 << 20

// newClient connects to etcd endpoints with pinfold's message limits (tc
// nil: plaintext), gRPC keepalives, and, with more than one endpoint, the
// member probes that move the client off a member that stopped answering
// (failover.go); the returned failover is stopped after the client closes.
func newClient(endpoints []string, tc *tls.Config, log *slog.Logger) (*clientv3.Client, *failover, error) {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, TLS: tc,
		MaxCallSendMsgSize: MaxMessageBytes, MaxCallRecvMsgSize: MaxMessageBytes}
	if log != nil {
		cfg.Logger = newZapLogger(log, zapcore.WarnLevel)
	}
	if unguarded.Load() {
		cli, err := clientv3.New(cfg)
		return cli, nil, err
	}
	// Pings only while calls are in flight: etcd answers pings on an idle
	// connection with GOAWAY (its keepalive enforcement policy).
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = KeepAliveTime, KeepAliveTimeout
	if len(endpoints) < 2 {
		cli, err := clientv3.New(cfg)
		return cli, nil, err
	}
	f := newFailover(log)
	cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(f.dial)}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := f.start(endpoints, tc, cli); err != nil {
		cli.Close()
		return nil, nil, err
	}
	return cli, f, nil
}

// ClientTLS is the client side of f: its certificate, and f.CA as the
// only root (no file: no TLS setting, an error).
func ClientTLS(f pki.Files) (*tls.Config, error) {
	tc, err := (transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("state: etcd client TLS (ca %s, cert %s, key %s): %w", f.CA, f.Cert, f.Key, err)
	}
	return tc, nil
}

// StartEmbedded starts an etcd member in this process and waits until it
// serves. Transactions and requests may be large (a batch deploy is one
// transaction), so the limits are raised above etcd's defaults.
func StartEmbedded(c EmbedConfig) (*Member, error) {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("state: etcd client URL %q: %w", c.ClientURL, err)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("state: etcd peer URL %q: %w", c.PeerURL, err)
	}
	acu, apu := *cu, *pu
	for _, a := range []struct {
		which, raw string
		u          *url.URL
	}{{"advertised client", c.AdvertiseClientURL, &acu}, {"advertised peer", c.AdvertisePeerURL, &apu}} {
		if a.raw == "" {
			continue
		}
		u, err := url.Parse(a.raw)
		if err != nil {
			return nil, fmt.Errorf("state: etcd %s URL %q: %w", a.which, a.raw, err)
		}
		*a.u = *u
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{acu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{apu}
	cfg.InitialCluster = c.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = c.Name + "=" + apu.String()
	}
	cfg.InitialClusterToken = "pinfold"
	cfg.LogLevel = "error"
	if c.LogLevel != "" {
		cfg.LogLevel = c.LogLevel
	}
	if c.Log != nil {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(c.Log, zapLevel(cfg.LogLevel)))
	}
	cfg.UnsafeNoFsync = c.UnsafeNoFsync
	cfg.MaxTxnOps = 1 << 20
	if c.MaxTxnOps > 0 {
		cfg.MaxTxnOps = uint(c.MaxTxnOps)
	}
	cfg.MaxRequestBytes = MaxMessageBytes
	cfg.QuotaBackendBytes = 8 << 30
	history := c.History
	if history <= 0 {
		history = DefaultHistory
	}
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", history.String()
	if t := c.TLS; t != nil {
		info := transport.TLSInfo{CertFile: t.Cert, KeyFile: t.Key, TrustedCAFile: t.CA, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("state: start embedded etcd in %s: %w", c.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Member{e: e, endpoint: c.ClientURL}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("state: embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("state: embedded etcd in %s not ready after 60 s", c.Dir)
	}
}

// Member is a running embedded etcd member.
type Member struct {
	e        *embed.Etcd
	endpoint string
}

// Endpoint is the member's client URL.
func (m *Member) Endpoint() string { return m.endpoint }

// Close stops the member (safe to call more than once).
func (m *Member) Close() { m.e.Close() }

// IsLeader reports whether the member is its cluster's raft leader now.
func (m *Member) IsLeader() bool { return m.e.Server.Leader() == m.e.Server.MemberID() }
