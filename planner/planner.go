// Package planner runs pinfold's central planner as a library: etcd
// (embedded, or an external cluster), the store over it, the service, the
// API server, and the leader-elected background loops, started by Start
// and stopped by Close. The pinfold binary's `planner` and `up` commands
// are flags and output around it.
package planner

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
)

// Config configures a planner.
type Config struct {
	// Listen is the API's address (host:port; port 0 picks one).
	Listen string
	// EtcdEndpoints are an external etcd cluster's client URLs; empty runs
	// etcd embedded under DataDir, on EtcdClientURL and EtcdPeerURL.
	EtcdEndpoints []string
	DataDir       string
	EtcdClientURL string
	EtcdPeerURL   string
	EtcdLogLevel  string // embedded etcd's own log level ("": error)
	// EtcdTLS is the client TLS for external etcd (nil: plaintext). The
	// embedded etcd always serves TLS with client certificates from a CA
	// the planner makes at every start (DataDir/etcd-tls; the CA key is
	// removed once it signed them).
	EtcdTLS *tls.Config
	// TLS serves the API over TLS when not nil (else h2c, for loopback).
	TLS *tls.Config
	// ServerTLS, when not nil, serves the API over TLS from its files
	// instead of TLS: the certificate and revocation list are read again
	// when they change, and every second the open connections of a
	// certificate revoked since their handshake are closed.
	ServerTLS *pki.ServerTLS
	// ShareBase and MaxFragmentCores are fixed when the store is created.
	ShareBase        int
	MaxFragmentCores int
	// ID names this planner in the leader election ("": hostname/listen).
	ID string
	// MaxRequestBytes bounds one API request (0: api.DefaultMaxRequestBytes).
	MaxRequestBytes int
	// Timeouts bound reading a request's headers and body and an idle
	// connection; Limits each identity's connections and calls (0: the
	// api package's defaults).
	Timeouts api.Timeouts
	Limits   api.Limits
	// AuditEvery is how often the leader audits the store and prunes the
	// event log (default 30s).
	AuditEvery time.Duration
	// EventsKeep and EventsMaxAge are the event log's retention (0: the
	// defaults, service.DefaultEventsKeep and DefaultEventsMaxAge).
	EventsKeep   int
	EventsMaxAge time.Duration
	Log          *slog.Logger
}

// StoreError is a store that cannot be opened as configured (say, its
// share base differs from Config.ShareBase): bad input, not an outage.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// Planner is a running planner.
type Planner struct {
	// Addr is the address the API listens on.
	Addr    string
	Service *service.Service
	srv     *http.Server
	closers []func()
}

// Start starts etcd (unless external), opens the store, serves the API on
// cfg.Listen and campaigns for the background loops. On error everything
// it started is stopped again.
func Start(ctx context.Context, cfg Config) (*Planner, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &Planner{}
	if err := p.start(ctx, cfg); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Planner) start(ctx context.Context, cfg Config) error {
	log := cfg.Log
	dial := state.Dial{Endpoints: cfg.EtcdEndpoints, TLS: cfg.EtcdTLS}
	if len(dial.Endpoints) == 0 {
		d, err := p.startEmbedded(cfg)
		if err != nil {
			return err
		}
		dial = d
	}
	st, err := state.Open(ctx, dial, state.Config{ShareBase: cfg.ShareBase, MaxFragmentCores: cfg.MaxFragmentCores}, model.Protocol, log)
	if err != nil {
		return &StoreError{err}
	}
	p.closers = append(p.closers, st.Close)
	p.Service = service.New(st, log)
	p.Service.SetEventRetention(cfg.EventsKeep, cfg.EventsMaxAge)
	ectx, stopEvents := context.WithCancel(context.Background())
	eventsDone := make(chan struct{})
	go func() { defer close(eventsDone); p.Service.RunEvents(ectx) }()
	p.closers = append(p.closers, func() { stopEvents(); <-eventsDone }) // before the store closes
	// Build the hosts' placement views now, not in the first deploy (with
	// 10,000 hosts that deploy took 0.4 s longer).
	go st.SchedulablePlacement()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("planner: listen on %s: %w", cfg.Listen, err)
	}
	switch {
	case cfg.ServerTLS != nil:
		cfg.TLS = cfg.ServerTLS.Config()
		ln = cfg.ServerTLS.Listener(ln)
		wctx, stopWatch := context.WithCancel(context.Background())
		watchDone := make(chan struct{})
		go func() { defer close(watchDone); cfg.ServerTLS.Watch(wctx, time.Second) }()
		p.closers = append(p.closers, func() { stopWatch(); <-watchDone })
	case cfg.TLS != nil:
		ln = tls.NewListener(ln, cfg.TLS)
	}
	p.Addr = ln.Addr().String()
	p.background(cfg)
	metrics := api.NewMetrics(p.Service)
	st.ObserveCommits(metrics.ObserveCommit)
	p.srv = api.NewHTTPServer(api.Handler(p.Service, api.Options{MaxRequestBytes: cfg.MaxRequestBytes, Metrics: metrics,
		Authorize: cfg.TLS != nil && cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert, Timeouts: cfg.Timeouts, Limits: cfg.Limits}), cfg.Timeouts)
	if cfg.ServerTLS != nil {
		// A connection takes its identity's place at its handshake, so
		// that connections that never send a request count too.
		cfg.ServerTLS.SetAdmit(api.AdmitHandshake)
	}
	if p.srv.ErrorLog == nil {
		// The server's own lines, failed TLS handshakes among them (a
		// revoked certificate, one with no valid role, by name), go to
		// the planner's log, not stderr, at most
		// api.ServerLogLinesPerSecond a second.
		p.srv.ErrorLog = api.ServerErrorLog(log.Handler())
	}
	go func() {
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("API server stopped", "err", err)
		}
	}()
	log.Info("planner listening", "addr", p.Addr, "tls", cfg.TLS != nil, "share_base", cfg.ShareBase)
	return nil
}

// loopbackURL reports whether an http URL's host is a loopback address.
// startEmbedded starts the embedded etcd on loopback, locked down: its
// client and peer URLs serve TLS and require a client certificate from a
// CA made at this start in DataDir/etcd-tls (keys 0600, the directory
// 0700; the CA's key is removed once it signed etcd's and the planner's
// certificates), which only this process's client holds. A local process that is
// not the planner's user cannot talk to it, and nothing off the host can.
func (p *Planner) startEmbedded(cfg Config) (state.Dial, error) {
	log := cfg.Log
	urls := map[string]*string{"client": &cfg.EtcdClientURL, "peer": &cfg.EtcdPeerURL}
	for _, which := range []string{"client", "peer"} {
		u, err := url.Parse(*urls[which])
		if err != nil || !loopbackURL(*urls[which]) || u.Port() == "" {
			return state.Dial{}, &StoreError{fmt.Errorf("planner: embedded etcd %s URL %q: the embedded etcd listens on loopback only (http(s)://127.0.0.1:PORT or [::1])", which, *urls[which])}
		}
		u.Scheme = "https"
		*urls[which] = u.String()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return state.Dial{}, &StoreError{fmt.Errorf("planner: data dir %q: %w", cfg.DataDir, err)}
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return state.Dial{}, &StoreError{err}
	}
	p.closers = append(p.closers, unlock) // Start closes it on error
	pkiDir := filepath.Join(cfg.DataDir, "etcd-tls")
	if err := os.RemoveAll(pkiDir); err != nil {
		return state.Dial{}, &StoreError{fmt.Errorf("planner: %s: %w", pkiDir, err)}
	}
	now := time.Now()
	srv, err := pki.Init(pkiDir, nil, now)
	if err != nil {
		return state.Dial{}, &StoreError{fmt.Errorf("planner: embedded etcd certificates: %w", err)}
	}
	cl, err := pki.Issue(pkiDir, pki.RoleAdmin, "planner", now)
	if err != nil {
		return state.Dial{}, &StoreError{fmt.Errorf("planner: embedded etcd client certificate: %w", err)}
	}
	// The CA key signed both certificates and is needed no more (the next
	// start makes a new CA): not kept, so no reader of DATA-DIR can sign a
	// certificate the embedded etcd would take.
	if err := os.Remove(filepath.Join(pkiDir, pki.CAKey)); err != nil {
		return state.Dial{}, &StoreError{fmt.Errorf("planner: remove the embedded etcd's CA key: %w", err)}
	}
	tc, err := state.ClientTLS(cl)
	if err != nil {
		return state.Dial{}, &StoreError{err}
	}
	dir := filepath.Join(cfg.DataDir, "etcd")
	e, err := state.StartEmbedded(state.EmbedConfig{Name: "pinfold", Dir: dir, ClientURL: cfg.EtcdClientURL, PeerURL: cfg.EtcdPeerURL,
		LogLevel: cfg.EtcdLogLevel, TLS: &srv, Log: log})
	if err != nil {
		return state.Dial{}, err
	}
	p.closers = append(p.closers, e.Close)
	log.Info("embedded etcd ready (TLS, client certificates only)", "dir", dir, "client_url", e.Endpoint(), "certificates", pkiDir)
	return state.Dial{Endpoints: []string{e.Endpoint()}, TLS: tc}, nil
}

// lockDataDir takes an exclusive lock on DataDir/lock, held until the
// returned function runs (the planner's Close). Another planner on the same
// data dir would replace the running one's etcd certificates and then wait
// for etcd's database lock forever, saying nothing: it is refused at once.
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("planner: data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("planner: data dir %q is in use by another planner (%s is locked): stop it, or give another --data-dir", dir, path)
		}
		return nil, fmt.Errorf("planner: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// background runs the leader-elected loops until Close.
func (p *Planner) background(cfg Config) {
	id := cfg.ID
	if id == "" {
		host, _ := os.Hostname()
		id = host + "/" + p.Addr
	}
	every := cfg.AuditEvery
	if every <= 0 {
		every = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Service.RunBackground(ctx, id, 10*time.Second, every, nil)
	}()
	p.closers = append(p.closers, func() { cancel(); <-done })
}

// Close stops the API server (letting requests finish for up to 5 s), the
// background loops, the store and the embedded etcd, in that order.
func (p *Planner) Close() {
	if p.srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.srv.Shutdown(sctx)
		cancel()
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}
