package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/numa"
	"github.com/pinfold/pinfold/planner"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
)

type plannerFlags struct {
	dataDir, listen, etcdEndpoints, etcdClient, etcdPeer string
	tlsCert, tlsKey, tlsCA                               string
	tlsNoClientAuth, insecure                            bool
	shareBase, maxFragmentCores, maxRequestBytes         int
	logLevel                                             string
	etcdLogLevel                                         string // tests: "fatal"
}

func (f *plannerFlags) register(cmd *cobra.Command) {
	home, _ := os.UserHomeDir()
	cmd.Flags().StringVar(&f.dataDir, "data-dir", filepath.Join(home, ".local/share/pinfold"), "directory for the embedded etcd's data")
	cmd.Flags().StringVar(&f.listen, "listen", DefaultPlanner, "address the API listens on (gRPC and JSON over HTTP)")
	cmd.Flags().StringVar(&f.etcdEndpoints, "etcd-endpoints", "", "use this external etcd cluster (comma-separated URLs) instead of the embedded one")
	cmd.Flags().StringVar(&f.etcdClient, "etcd-listen-client", "http://127.0.0.1:12379", "embedded etcd: client URL")
	cmd.Flags().StringVar(&f.etcdPeer, "etcd-listen-peer", "http://127.0.0.1:12380", "embedded etcd: peer URL")
	cmd.Flags().StringVar(&f.tlsCert, "tls-cert", "", "serve the API over TLS with this certificate (PEM)")
	cmd.Flags().StringVar(&f.tlsKey, "tls-key", "", "private key of --tls-cert (PEM)")
	cmd.Flags().StringVar(&f.tlsCA, "tls-ca", "", "require client certificates signed by this CA (PEM); their identity decides what each client may do")
	cmd.Flags().BoolVar(&f.tlsNoClientAuth, "tls-no-client-auth", false, "serve TLS without client certificates: every client may do everything (logged as a warning)")
	cmd.Flags().BoolVar(&f.insecure, "insecure", false, "allow a --listen address off loopback without TLS: anyone who reaches it may do everything")
	cmd.Flags().IntVar(&f.shareBase, "share-base", 100, "pieces per CPU (10..10000); fixed when the store is created")
	cmd.Flags().IntVar(&f.maxFragmentCores, "max-fragment-cores", -1, "CPUs per host that may carry fragments (-1: no cap)")
	cmd.Flags().IntVar(&f.maxRequestBytes, "max-request-bytes", api.DefaultMaxRequestBytes, "largest API request accepted, in bytes (larger ones are refused unread)")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
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
	if f.maxRequestBytes != 0 && (f.maxRequestBytes < 64<<10 || f.maxRequestBytes > 256<<20) {
		return nil, badInput("--max-request-bytes %d: want 65536..268435456 (0: the default)", f.maxRequestBytes)
	}
	cfg := planner.Config{Listen: f.listen, DataDir: f.dataDir, EtcdClientURL: f.etcdClient, EtcdPeerURL: f.etcdPeer,
		EtcdLogLevel: f.etcdLogLevel, ShareBase: f.shareBase, MaxFragmentCores: f.maxFragmentCores, MaxRequestBytes: f.maxRequestBytes, Log: log}
	if f.etcdEndpoints != "" {
		cfg.EtcdEndpoints = strings.Split(f.etcdEndpoints, ",")
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, badInput("--tls-cert/--tls-key: %v", err)
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
		if f.tlsCA != "" {
			pem, err := os.ReadFile(f.tlsCA)
			pool := x509.NewCertPool()
			if err != nil || !pool.AppendCertsFromPEM(pem) {
				return nil, badInput("--tls-ca %q: no readable PEM certificate", f.tlsCA)
			}
			cfg.TLS.ClientCAs, cfg.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
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
			<-ctx.Done()
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
	var noAgent bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "All in one: a planner with embedded etcd and an agent for this host",
		Long: `Start a planner with embedded etcd under --data-dir and a node agent for this
host (topology discovered from /sys, containers through the local Docker
engine). Without a reachable Docker engine the host is registered by hand and
its instances stay pending; the agent retries. Stop with Ctrl-C; the state
stays in --data-dir.`,
		Example: `  pinfold up
  # in another terminal:
  pinfold host list
  pinfold deploy web --count 2 --cpu 0.5 --bind --memory 64MiB
  pinfold ps`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			p, err := f.start(ctx, log)
			if err != nil {
				return err
			}
			defer p.Close()
			tj, _ := json.Marshal(top)
			c := &clientFlags{addr: p.Addr}
			cl, _ := c.client()
			if _, err := cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: host, TopologyJson: tj})); err != nil {
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists {
					return apiError(err)
				}
				log.Info("this host was registered before; keeping its registration", "host", host)
			}
			if !noAgent {
				ag.client.addr = p.Addr
				startAgentInBackground(ctx, &ag, log)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pinfold is up: planner on %s, host %s registered (%d CPUs, %d NUMA nodes), agent %v. Ctrl-C stops it.\n",
				p.Addr, host, len(top.CPUs), len(top.NUMANodes), !noAgent)
			<-ctx.Done()
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&noAgent, "no-agent", false, "run the planner only")
	ag.register(cmd, false)
	return cmd
}
