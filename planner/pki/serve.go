package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ServerConfig names the files a TLS server reads.
type ServerConfig struct {
	CertFile, KeyFile string
	// CAFile is the CA client certificates must chain to ("": no client
	// certificates asked for, and no revocation list read).
	CAFile string
	// CRLFile is the revocation list ("": none). A file missing at start
	// revokes nothing; one that appears later is read then. One removed
	// while the server runs keeps the list read before in force (reported
	// to OnError): a deleted list never lets a revoked certificate back.
	CRLFile string
	// OnError hears of a changed file that could not be used (the last
	// good certificate or list stays in force); nil: ignored.
	OnError func(error)
}

// ServerTLS is a server's TLS configuration that follows its files: the
// certificate and key are read again when either file changes, and the
// revocation list when it changes, each checked at the next handshake (a
// stat of each file per handshake, a read only on a change). A client
// certificate that is revoked, or that carries no valid pinfold identity,
// fails the handshake.
//
// A changed file that cannot be used (a key that does not match its
// certificate, a list that is not a CRL signed by the CA) keeps the last
// good one in force and is reported to OnError once per change.
type ServerTLS struct {
	cfg ServerConfig
	cas []*x509.Certificate

	mu      sync.Mutex
	cert    *tls.Certificate
	certSig [2]fileSig
	crl     map[string]struct{} // revoked serials, SerialHex; replaced, never changed
	crlSig  fileSig

	connMu sync.Mutex
	conns  map[*trackedConn]string // open connections from Listener: their client's serial

	admit atomic.Pointer[Admit]
}

// Admit decides, at the end of a TLS handshake whose client certificate
// verified, whether the connection may go on: ctx is the handshake's (the
// HTTP server's connection context), leaf the client's certificate. An
// error fails the handshake.
type Admit func(ctx context.Context, leaf *x509.Certificate) error

// SetAdmit makes Listener's connections pass a (nil: none) after their
// certificate verified; for bounds per identity that a connection must
// meet before it sends a request.
func (s *ServerTLS) SetAdmit(a Admit) {
	if a == nil {
		s.admit.Store(nil)
		return
	}
	s.admit.Store(&a)
}

// fileSig is what a stat says of a file: a change in any part is a change.
type fileSig struct {
	exists bool
	ino    os.FileInfo
	mod    time.Time
	size   int64
}

func (a fileSig) same(b fileSig) bool {
	if a.exists != b.exists {
		return false
	}
	if !a.exists {
		return true
	}
	return os.SameFile(a.ino, b.ino) && a.mod.Equal(b.mod) && a.size == b.size
}

func stat(path string) (fileSig, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fileSig{}, nil
	}
	if err != nil {
		return fileSig{}, err
	}
	return fileSig{exists: true, ino: st, mod: st.ModTime(), size: st.Size()}, nil
}

// NewServerTLS reads the files once; any that cannot be used is an error.
func NewServerTLS(cfg ServerConfig) (*ServerTLS, error) {
	s := &ServerTLS{cfg: cfg, crl: map[string]struct{}{}, conns: map[*trackedConn]string{}}
	if err := s.loadCert(); err != nil {
		return nil, err
	}
	if cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("pki: CA %q: %w", cfg.CAFile, err)
		}
		for rest := b; ; {
			var p *pem.Block
			if p, rest = pem.Decode(rest); p == nil {
				break
			}
			if c, err := x509.ParseCertificate(p.Bytes); err == nil && p.Type == "CERTIFICATE" {
				s.cas = append(s.cas, c)
			}
		}
		if len(s.cas) == 0 {
			return nil, fmt.Errorf("pki: CA %q: no PEM certificate in it", cfg.CAFile)
		}
		if cfg.CRLFile != "" {
			if err := s.loadCRL(); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Config is the tls.Config to serve with (TLS 1.2 at least, h2 and
// http/1.1; client certificates required when there is a CA).
func (s *ServerTLS) Config() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.Certificate(), nil }}
	if len(s.cas) > 0 {
		pool := x509.NewCertPool()
		for _, ca := range s.cas {
			pool.AddCert(ca)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("pki: no client certificate")
			}
			return s.Check(cs.PeerCertificates[0])
		}
	}
	return c
}

// Certificate is the server certificate now in force, read again first
// if its files changed.
func (s *ServerTLS) Certificate() *tls.Certificate {
	if err := s.loadCert(); err != nil && s.cfg.OnError != nil {
		s.cfg.OnError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert
}

// Check refuses a verified client certificate that the revocation list
// (read again first if it changed) revokes, or that carries no valid
// pinfold identity; the error names the certificate.
func (s *ServerTLS) Check(c *x509.Certificate) error {
	id, err := IdentityOf(c)
	if err != nil {
		return err
	}
	if s.cfg.CRLFile == "" {
		return nil
	}
	if err := s.loadCRL(); err != nil && s.cfg.OnError != nil {
		s.cfg.OnError(fmt.Errorf("%w (the list read before stays in force)", err))
	}
	s.mu.Lock()
	_, revoked := s.crl[SerialHex(c.SerialNumber)]
	s.mu.Unlock()
	if revoked {
		return fmt.Errorf("pki: certificate %s (serial %s) is revoked", id, SerialHex(c.SerialNumber))
	}
	return nil
}

// loadCert reads the certificate and key again if either changed since
// the last try; an error leaves the last good pair in force.
func (s *ServerTLS) loadCert() error {
	var sig [2]fileSig
	for i, p := range []string{s.cfg.CertFile, s.cfg.KeyFile} {
		var err error
		if sig[i], err = stat(p); err != nil {
			return fmt.Errorf("pki: server certificate: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert != nil && sig[0].same(s.certSig[0]) && sig[1].same(s.certSig[1]) {
		return nil
	}
	first := s.cert == nil
	s.certSig = sig // tried: not again until a file changes
	kp, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		if first {
			s.certSig = [2]fileSig{}
			return fmt.Errorf("pki: server certificate %q and key %q: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
		}
		return fmt.Errorf("pki: server certificate %q and key %q changed but cannot be used (still serving the one before): %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	s.cert = &kp
	return nil
}

// loadCRL reads the revocation list again if it changed since the last
// try; an error leaves the last good list in force.
func (s *ServerTLS) loadCRL() error {
	sig, err := stat(s.cfg.CRLFile)
	if err != nil {
		return fmt.Errorf("pki: revocation list: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig.same(s.crlSig) {
		return nil
	}
	had := s.crlSig.exists
	gone := had && !sig.exists
	s.crlSig = sig
	if gone {
		// Fail closed (issue 36): a list deleted while the planner runs
		// lifted every revocation. The last list read stays in force
		// until a file is there again.
		return fmt.Errorf("pki: revocation list %s was removed: its %d revoked certificates stay revoked until a list is there again (pinfold pki revoke writes one)",
			s.cfg.CRLFile, len(s.crl))
	}
	crl, err := ReadCRL(s.cfg.CRLFile, s.cas)
	if err != nil {
		return err
	}
	if crl == nil && had {
		// Removed between the stat and the read: fail closed as above.
		s.crlSig = fileSig{}
		return fmt.Errorf("pki: revocation list %s was removed: its %d revoked certificates stay revoked until a list is there again (pinfold pki revoke writes one)",
			s.cfg.CRLFile, len(s.crl))
	}
	m := map[string]struct{}{}
	if crl != nil {
		for _, e := range crl.RevokedCertificateEntries {
			m[SerialHex(e.SerialNumber)] = struct{}{}
		}
	}
	s.crl = m
	return nil
}

// Listener serves TLS on ln with s's configuration and keeps track of
// each open connection's client certificate, so that Sweep can close the
// connections of a certificate revoked after their handshake.
func (s *ServerTLS) Listener(ln net.Listener) net.Listener {
	base := s.Config()
	cfg := base.Clone()
	if base.VerifyConnection != nil {
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			tc, ok := h.Conn.(*trackedConn)
			if !ok {
				return nil, nil
			}
			// A clone per connection, to know whose it is. (Each clone has
			// its own session ticket keys: a client resumes no session
			// across connections, and makes a full handshake instead.)
			c := base.Clone()
			c.VerifyConnection = func(cs tls.ConnectionState) error {
				if err := base.VerifyConnection(cs); err != nil {
					return err
				}
				if a := s.admit.Load(); a != nil {
					if err := (*a)(h.Context(), cs.PeerCertificates[0]); err != nil {
						return err
					}
				}
				s.connMu.Lock()
				if _, open := s.conns[tc]; open {
					s.conns[tc] = SerialHex(cs.PeerCertificates[0].SerialNumber)
				}
				s.connMu.Unlock()
				return nil
			}
			return c, nil
		}
	}
	return tls.NewListener(&trackedListener{Listener: ln, s: s}, cfg)
}

// Sweep reads the revocation list again if it changed and closes every
// open connection (from Listener) whose client certificate it revokes. It
// returns how many it closed.
func (s *ServerTLS) Sweep() int {
	if s.cfg.CRLFile == "" {
		return 0
	}
	if err := s.loadCRL(); err != nil && s.cfg.OnError != nil {
		s.cfg.OnError(fmt.Errorf("%w (the list read before stays in force)", err))
	}
	s.mu.Lock()
	revoked := s.crl
	s.mu.Unlock()
	var victims []*trackedConn
	s.connMu.Lock()
	for c, serial := range s.conns {
		if _, ok := revoked[serial]; ok && serial != "" {
			victims = append(victims, c)
		}
	}
	s.connMu.Unlock()
	for _, c := range victims {
		c.Close()
	}
	return len(victims)
}

// Watch sweeps every interval until ctx ends, so a revoked certificate's
// open connections are closed even when no new client connects.
func (s *ServerTLS) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

type trackedListener struct {
	net.Listener
	s *ServerTLS
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: l.s}
	l.s.connMu.Lock()
	l.s.conns[tc] = ""
	l.s.connMu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	s    *ServerTLS
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.connMu.Lock()
		delete(c.s.conns, c)
		c.s.connMu.Unlock()
	})
	return c.Conn.Close()
}
