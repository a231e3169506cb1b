package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/numa"
	"github.com/pinfold/pinfold/planner"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/pki"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

type plannerFlags struct {
	dataDir, listen, etcdEndpoints, etcdClient, etcdPeer string
	tlsCert, tlsKey, tlsCA, tlsCRL                       string
	etcdCA, etcdCert, etcdKey                            string
	tlsNoClientAuth, insecure                            bool
	shareBase, maxFragmentCores, maxRequestBytes         int
	eventsKeep                                           int
	headerTimeout, bodyTimeout, idleTimeout              time.Duration
	identityMaxConns, identityBurst                      int
	identityRate                                         float64
	eventsMaxAge                                         time.Duration
	pprofListen                                          string
	logLevel                                             string
	etcdLogLevel                                         string // tests: "fatal"
}

func (f *plannerFlags) register(cmd *cobra.Command) {
	home, _ := os.UserHomeDir()
	cmd.Flags().StringVar(&f.dataDir, "data-dir", filepath.Join(home, ".local/share/pinfold"), "directory for the embedded etcd's data")
	cmd.Flags().StringVar(&f.listen, "listen", DefaultPlanner, "address the API listens on (gRPC and JSON over HTTP)")
	cmd.Flags().StringVar(&f.etcdEndpoints, "etcd-endpoints", "", "use this external etcd cluster (comma-separated URLs) instead of the embedded one")
	cmd.Flags().StringVar(&f.etcdCA, "etcd-ca", "", "external etcd: CA of its server certificates (PEM); with https:// endpoints")
	cmd.Flags().StringVar(&f.etcdCert, "etcd-cert", "", "external etcd: client certificate (PEM), for an etcd that requires one")
	cmd.Flags().StringVar(&f.etcdKey, "etcd-key", "", "external etcd: key of --etcd-cert (PEM)")
	cmd.Flags().StringVar(&f.etcdClient, "etcd-listen-client", "https://127.0.0.1:12379", "embedded etcd: client URL, loopback only (TLS with client certificates from a CA the planner makes in DATA-DIR/etcd-tls at every start)")
	cmd.Flags().StringVar(&f.etcdPeer, "etcd-listen-peer", "https://127.0.0.1:12380", "embedded etcd: peer URL, loopback only (TLS, as the client URL)")
	cmd.Flags().StringVar(&f.tlsCert, "tls-cert", "", "serve the API over TLS with this certificate (PEM; read again when it or --tls-key changes: pinfold pki renew)")
	cmd.Flags().StringVar(&f.tlsKey, "tls-key", "", "private key of --tls-cert (PEM)")
	cmd.Flags().StringVar(&f.tlsCA, "tls-ca", "", "require client certificates signed by this CA (PEM); their identity decides what each client may do")
	cmd.Flags().StringVar(&f.tlsCRL, "tls-crl", "", "revoked client certificates: the CRL pinfold pki revoke writes (default: revoked.crl beside --tls-ca; missing: none revoked); read again when it changes")
	cmd.Flags().BoolVar(&f.tlsNoClientAuth, "tls-no-client-auth", false, "serve TLS without client certificates: every client may do everything (logged as a warning)")
	cmd.Flags().BoolVar(&f.insecure, "insecure", false, "allow a --listen address off loopback without TLS (anyone who reaches it may do everything), and plaintext --etcd-endpoints off loopback")
	cmd.Flags().IntVar(&f.shareBase, "share-base", 100, "pieces per CPU (10..10000); fixed when the store is created")
	cmd.Flags().IntVar(&f.maxFragmentCores, "max-fragment-cores", -1, "CPUs per host that may carry fragments (-1: no cap)")
	cmd.Flags().IntVar(&f.maxRequestBytes, "max-request-bytes", api.DefaultMaxRequestBytes, "largest API request accepted, in bytes (larger ones are refused unread)")
	cmd.Flags().DurationVar(&f.headerTimeout, "header-timeout", api.DefaultHeaderTimeout, "drop a connection whose request headers take longer than this (0: the default; at least 1s)")
	cmd.Flags().DurationVar(&f.bodyTimeout, "body-timeout", api.DefaultBodyTimeout, "drop a connection (HTTP/2: the stream) whose request body takes longer than this after its headers (0: the default; at least 1s)")
	cmd.Flags().DurationVar(&f.idleTimeout, "idle-timeout", api.DefaultIdleTimeout, "close a keep-alive connection idle this long (0: the default; at least 1s)")
	cmd.Flags().IntVar(&f.identityMaxConns, "identity-max-conns", api.DefaultConnsPerIdentity, "connections one client certificate's identity may hold open (0: no bound; callers without a client certificate are not bounded)")
	cmd.Flags().Float64Var(&f.identityRate, "identity-rate", api.DefaultRatePerIdentity, "calls a second one client certificate's identity may make, after --identity-burst (at least 1; 0 with --identity-burst 0: no bound)")
	cmd.Flags().IntVar(&f.identityBurst, "identity-burst", api.DefaultBurstPerIdentity, "calls one client certificate's identity may make at once, over --identity-rate (0 with --identity-rate 0: no bound)")
	cmd.Flags().IntVar(&f.eventsKeep, "events-keep", service.DefaultEventsKeep, "the event log keeps this many newest events ('pinfold events')")
	cmd.Flags().DurationVar(&f.eventsMaxAge, "events-max-age", service.DefaultEventsMaxAge, "the event log keeps no event older than this")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&f.pprofListen, "pprof-listen", "", "serve Go's profiler (net/http/pprof) on this loopback address, for measuring the planner")
}

// loopback reports whether a listen address is on loopback only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// start checks the flags and starts a planner.
func (f *plannerFlags) start(ctx context.Context, log *slog.Logger) (*planner.Planner, error) {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, badInput("--tls-cert and --tls-key go together")
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return nil, badInput("--listen %q: %v", f.listen, err)
	}
	if f.tlsCert != "" && f.tlsCA == "" && !f.tlsNoClientAuth {
		return nil, badInput("--tls-cert without --tls-ca authenticates no client: give --tls-ca (pinfold pki init makes one), or --tls-no-client-auth to serve TLS to anyone")
	}
	if f.tlsCert == "" && !loopback(f.listen) && !f.insecure {
		return nil, badInput("--listen %q is off loopback and has no TLS: anyone who reaches it could do everything; give --tls-cert/--tls-key/--tls-ca (see pinfold pki), or --insecure", f.listen)
	}
	if f.pprofListen != "" {
		if !loopback(f.pprofListen) {
			return nil, badInput("--pprof-listen %q: want a loopback address (the profiler shows the planner's memory)", f.pprofListen)
		}
		ln, err := net.Listen("tcp", f.pprofListen)
		if err != nil {
			return nil, badInput("--pprof-listen %q: %v", f.pprofListen, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		go func() { _ = http.Serve(ln, mux) }()
	}
	if f.maxRequestBytes != 0 && (f.maxRequestBytes < 64<<10 || f.maxRequestBytes > 256<<20) {
		return nil, badInput("--max-request-bytes %d: want 65536..268435456 (0: the default)", f.maxRequestBytes)
	}
	if f.eventsKeep < 0 || f.eventsKeep > 10_000_000 {
		return nil, badInput("--events-keep %d: want 0 (the default, %d) ..10000000", f.eventsKeep, service.DefaultEventsKeep)
	}
	if f.eventsMaxAge < 0 {
		return nil, badInput("--events-max-age %s: want 0 (the default, %s) or more", f.eventsMaxAge, service.DefaultEventsMaxAge)
	}
	lim, to, err := f.bounds()
	if err != nil {
		return nil, err
	}
	cfg := planner.Config{Timeouts: to, Limits: lim, Listen: f.listen, DataDir: f.dataDir, EtcdClientURL: f.etcdClient, EtcdPeerURL: f.etcdPeer,
		EtcdLogLevel: f.etcdLogLevel, ShareBase: f.shareBase, MaxFragmentCores: f.maxFragmentCores, MaxRequestBytes: f.maxRequestBytes, Log: log,
		EventsKeep: f.eventsKeep, EventsMaxAge: f.eventsMaxAge}
	if f.etcdEndpoints != "" {
		cfg.EtcdEndpoints = strings.Split(f.etcdEndpoints, ",")
		tc, err := f.etcdTLS()
		if err != nil {
			return nil, err
		}
		cfg.EtcdTLS = tc
	} else if f.etcdCA != "" || f.etcdCert != "" || f.etcdKey != "" {
		return nil, badInput("--etcd-ca/--etcd-cert/--etcd-key are for an external etcd (--etcd-endpoints); the embedded one makes its own")
	}
	if f.tlsCRL != "" && f.tlsCA == "" {
		return nil, badInput("--tls-crl %q without --tls-ca: a revocation list is for client certificates", f.tlsCRL)
	}
	if f.tlsCert != "" {
		if _, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey); err != nil {
			return nil, badInput("--tls-cert/--tls-key: %v", err)
		}
		sc := pki.ServerConfig{CertFile: f.tlsCert, KeyFile: f.tlsKey, OnError: func(err error) { log.Error("TLS files changed but not used", "err", err) }}
		if f.tlsCA != "" {
			if _, err := loadCA("--tls-ca", f.tlsCA); err != nil {
				return nil, err
			}
			sc.CAFile, sc.CRLFile = f.tlsCA, f.tlsCRL
			if sc.CRLFile == "" {
				sc.CRLFile = filepath.Join(filepath.Dir(f.tlsCA), pki.CRLFile)
			}
		}
		st, err := pki.NewServerTLS(sc)
		if err != nil {
			return nil, badInput("--tls-cert/--tls-key/--tls-ca/--tls-crl: %v", err)
		}
		cfg.TLS, cfg.ServerTLS = st.Config(), st
	}
	switch {
	case cfg.TLS == nil:
		log.Warn("no TLS: every client that reaches the planner may do everything", "listen", f.listen)
	case cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert:
		log.Warn("TLS without client certificates (--tls-no-client-auth): every client may do everything", "listen", f.listen)
	}
	p, err := planner.Start(ctx, cfg)
	var se *planner.StoreError
	if errors.As(err, &se) {
		return nil, &exitError{code: exitBadInput, err: err}
	}
	return p, err
}

// bounds are the connection timeouts and per-identity limits the flags
// give (a flag's 0 is no bound, api's -1; a test that leaves them unset
// gets no bound).
func (f *plannerFlags) bounds() (api.Limits, api.Timeouts, error) {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--header-timeout", f.headerTimeout}, {"--body-timeout", f.bodyTimeout}, {"--idle-timeout", f.idleTimeout}} {
		if d.v < 0 || d.v > 0 && d.v < time.Second || d.v > 24*time.Hour {
			return api.Limits{}, api.Timeouts{}, badInput("%s %s: want 0 (the default) or 1s..24h", d.flag, d.v)
		}
	}
	if f.identityMaxConns < 0 || f.identityMaxConns > 1_000_000 {
		return api.Limits{}, api.Timeouts{}, badInput("--identity-max-conns %d: want 0 (no bound) ..1000000", f.identityMaxConns)
	}
	if f.identityRate < 0 || f.identityRate > 0 && f.identityRate < 1 || f.identityRate > 1e6 || f.identityRate != f.identityRate {
		return api.Limits{}, api.Timeouts{}, badInput("--identity-rate %g: want 0 (no bound) or 1..1000000 calls a second", f.identityRate)
	}
	if f.identityBurst < 0 || f.identityBurst > 10_000_000 {
		return api.Limits{}, api.Timeouts{}, badInput("--identity-burst %d: want 0 (no bound) ..10000000", f.identityBurst)
	}
	if (f.identityRate == 0) != (f.identityBurst == 0) {
		return api.Limits{}, api.Timeouts{}, badInput("--identity-rate %g with --identity-burst %d: give both, or 0 for both (no bound)", f.identityRate, f.identityBurst)
	}
	none := func(v float64) float64 {
		if v == 0 {
			return -1
		}
		return v
	}
	lim := api.Limits{ConnsPerIdentity: int(none(float64(f.identityMaxConns))), RatePerIdentity: none(f.identityRate), BurstPerIdentity: int(none(float64(f.identityBurst)))}
	return lim, api.Timeouts{Header: f.headerTimeout, Body: f.bodyTimeout, Idle: f.idleTimeout}, nil
}

// upPKI is `up --tls`'s PKI in dir: made on first use (a CA and the
// planner's certificate, also for listen's host; an admin certificate
// "admin" and an agent certificate for host), reused after.
func upPKI(dir, host, listen string) (srv, admin, agent pki.Files, err error) {
	now := time.Now()
	srv = pki.ServerFiles(dir)
	if !fileExists(srv.CA) {
		var extra []string
		if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
			extra = append(extra, h)
		}
		if srv, err = pki.Init(dir, append(extra, host), now); err != nil {
			return srv, admin, agent, &exitError{code: exitBadInput, err: err}
		}
	}
	get := func(role pki.Role, name string) (pki.Files, error) {
		if f := pki.ClientFiles(dir, role, name); fileExists(f.Cert) {
			return f, nil
		}
		f, err := pki.Issue(dir, role, name, now)
		if err != nil {
			return f, &exitError{code: exitBadInput, err: err}
		}
		return f, nil
	}
	if admin, err = get(pki.RoleAdmin, "admin"); err != nil {
		return
	}
	agent, err = get(pki.RoleAgent, host)
	return
}

// etcdTLS is the client TLS for external etcd: nil for http:// endpoints
// without TLS flags; https:// endpoints need it (the system roots, or
// --etcd-ca), and a plaintext endpoint off loopback is refused.
func (f *plannerFlags) etcdTLS() (*tls.Config, error) {
	if (f.etcdCert == "") != (f.etcdKey == "") {
		return nil, badInput("--etcd-cert and --etcd-key go together")
	}
	https := 0
	eps := strings.Split(f.etcdEndpoints, ",")
	for _, e := range eps {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, badInput("--etcd-endpoints %q: want http(s)://host:port[,…]", e)
		}
		if u.Scheme == "https" {
			https++
		} else if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) && !f.insecure {
			return nil, badInput("--etcd-endpoints %q: plaintext etcd off loopback lets anyone on the path read and change the plan; use https:// with --etcd-ca (and --etcd-cert/--etcd-key), or --insecure", e)
		}
	}
	if https > 0 && https != len(eps) {
		return nil, badInput("--etcd-endpoints %q: mixes http:// and https://", f.etcdEndpoints)
	}
	if https == 0 {
		if f.etcdCA != "" || f.etcdCert != "" {
			return nil, badInput("--etcd-ca/--etcd-cert need https:// endpoints, got %q", f.etcdEndpoints)
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.etcdCA != "" {
		pool, err := loadCA("--etcd-ca", f.etcdCA)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if f.etcdCert != "" {
		cert, err := tls.LoadX509KeyPair(f.etcdCert, f.etcdKey)
		if err != nil {
			return nil, badInput("--etcd-cert/--etcd-key: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func newLogger(level string, w *os.File) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, badInput("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// daemon is what a long-running command starts with: a logger at level
// and a context that ends on Ctrl-C or SIGTERM.
func daemon(cmd *cobra.Command, level string) (context.Context, context.CancelFunc, *slog.Logger, error) {
	log, err := newLogger(level, os.Stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	return ctx, stop, log, nil
}

func newPlannerCmd() *cobra.Command {
	var f plannerFlags
	cmd := &cobra.Command{
		Use:   "planner",
		Short: "Run the central planner (API + embedded etcd by default)",
		Long: `Run the planner: the API (gRPC and JSON over HTTP on --listen) over state in
etcd. By default etcd runs embedded under --data-dir, so one command gives a
working planner. With --etcd-endpoints the planner uses an external etcd
cluster instead; several planners may share one cluster (every change is one
transaction guarded by revisions, so nothing is ever allocated twice).`,
		Example: `  pinfold planner
  pinfold planner --data-dir /var/lib/pinfold --listen 127.0.0.1:7878
  pinfold pki init --dir pki --host planner.example.com && pinfold pki issue admin alice --dir pki
  pinfold planner --listen :7878 --tls-cert pki/planner.pem --tls-key pki/planner-key.pem --tls-ca pki/ca.pem
  pinfold planner --etcd-endpoints http://10.0.0.1:2379,http://10.0.0.2:2379 --listen :7878 \
      --tls-cert pki/planner.pem --tls-key pki/planner-key.pem --tls-ca pki/ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, log, err := daemon(cmd, f.logLevel)
			if err != nil {
				return err
			}
			defer stop()
			p, err := f.start(ctx, log)
			if err != nil {
				return err
			}
			defer p.Close()
			// Alive while the cache keeps up with etcd (a failed watch stops it).
			stopping := notifySystemd(ctx, log, func() bool { return p.Service.Healthy() })
			<-ctx.Done()
			stopping()
			log.Info("planner stopping")
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func newUpCmd() *cobra.Command {
	var f plannerFlags
	var ag agentFlags
	var noAgent, withTLS bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "All in one: a planner with embedded etcd and an agent for this host",
		Long: `Start a planner with embedded etcd under --data-dir and a node agent for this
host (topology discovered from /sys, containers through the local Docker
engine). Without a reachable Docker engine the host is registered by hand and
its instances stay pending; the agent retries. Stop with Ctrl-C; the state
stays in --data-dir.

On loopback the API is plain (anyone on this machine may do everything).
--tls serves it with mutual TLS from a PKI in DATA-DIR/pki, made on first
use: a CA, the planner's certificate, an admin certificate for you and an
agent certificate for this host; it prints the variables that point the CLI
at them.`,
		Example: `  pinfold up
  pinfold up --tls --listen 10.0.0.5:7878   # then: export the printed PINFOLD_* variables
  # in another terminal:
  pinfold host list
  pinfold deploy web --count 2 --cpu 0.5 --bind --memory 64MiB
  pinfold ps`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The agent's flags before anything starts: a bad one would
			// otherwise only fail the background agent, retried every 10 s.
			if err := ag.validate(); err != nil {
				return err
			}
			ctx, stop, log, err := daemon(cmd, f.logLevel)
			if err != nil {
				return err
			}
			defer stop()
			if ag.host == "" {
				ag.host, _ = os.Hostname()
			}
			host := ag.host
			// The same discovery as the agent's, so --sysfs-root and
			// --proc-root count for the registration too.
			top, err := numa.Discover(os.DirFS(ag.sysfsRoot), os.DirFS(ag.procRoot))
			if err != nil {
				return &exitError{code: exitBadInput, err: err}
			}
			var admin, agent pki.Files
			if withTLS {
				if f.tlsCert != "" || f.tlsKey != "" || f.tlsCA != "" {
					return badInput("--tls makes its own certificates in DATA-DIR/pki: leave out --tls-cert, --tls-key and --tls-ca")
				}
				var srv pki.Files
				if srv, admin, agent, err = upPKI(filepath.Join(f.dataDir, "pki"), host, f.listen); err != nil {
					return err
				}
				f.tlsCert, f.tlsKey, f.tlsCA = srv.Cert, srv.Key, srv.CA
			}
			p, err := f.start(ctx, log)
			if err != nil {
				return err
			}
			defer p.Close()
			tj, _ := json.Marshal(top)
			c := &clientFlags{addr: p.Addr}
			if withTLS {
				c = &clientFlags{addr: "https://" + p.Addr, tlsCA: admin.CA, tlsCert: admin.Cert, tlsKey: admin.Key}
				ag.client = clientFlags{tlsCA: agent.CA, tlsCert: agent.Cert, tlsKey: agent.Key}
			}
			cl, _ := c.client(connect.WithInterceptors(&callLog{}))
			// The agent's prerequisites first: when they fail, the host is
			// registered with the reason, which host show, deploy and the
			// live view show until an agent registers it.
			agentState, why, startAgent := "not started (--no-agent)", "pinfold up --no-agent: no agent runs on this host", false
			if !noAgent {
				if cg, _, err := ag.prerequisites(ctx, log); err != nil {
					agentState = "not started: " + err.Error()
					why = strings.TrimPrefix(err.Error(), "agent prerequisite: ")
				} else {
					cg.Close()
					agentState, why, startAgent = "running (it enforces this host's instances)", "", true
				}
			}
			if _, err := cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: host, TopologyJson: tj, NoAgent: cutText(why, service.MaxNoAgentLen-4)})); err != nil {
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists {
					return apiError(err)
				}
				log.Info("this host was registered before; keeping its registration", "host", host)
			}
			if startAgent {
				ag.client.addr = c.addr
				startAgentInBackground(ctx, &ag, log)
			}
			if withTLS {
				fmt.Fprintf(cmd.OutOrStdout(), "mutual TLS: use the admin certificate with\n  export PINFOLD_PLANNER=%s PINFOLD_TLS_CA=%s PINFOLD_TLS_CERT=%s PINFOLD_TLS_KEY=%s\n"+
					"more certificates: pinfold pki issue agent|viewer|admin NAME --dir %s\n", c.addr, admin.CA, admin.Cert, admin.Key, filepath.Dir(admin.CA))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pinfold is up: planner on %s, host %s registered (%s, %s). Ctrl-C stops it.\nagent: %s\n",
				p.Addr, host, counted(len(top.CPUs), "CPU"), counted(len(top.NUMANodes), "NUMA node"), agentState)
			scheme := "http"
			if withTLS {
				scheme = "https" // with a client certificate (the admin's above)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "live view: %s://%s/ui/   metrics: %s://%s/metrics\n", scheme, p.Addr, scheme, p.Addr)
			stopping := notifySystemd(ctx, log, p.Service.Healthy)
			<-ctx.Done()
			stopping()
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&noAgent, "no-agent", false, "run the planner only")
	cmd.Flags().BoolVar(&withTLS, "tls", false, "serve the API with mutual TLS from a PKI in DATA-DIR/pki (made on first use) and print how to use it")
	ag.register(cmd, false)
	return cmd
}
