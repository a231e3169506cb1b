package pki

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CRLFile is the revocation list in a PKI directory: a PEM X.509 CRL
// signed by the CA (pinfold pki revoke writes it; a planner started with
// that CA reads it at every handshake it has changed).
const CRLFile = "revoked.crl"

// MaxCRLBytes bounds a revocation list file (about 100,000 entries): a
// larger file is refused, so the planner's memory for it stays bounded.
const MaxCRLBytes = 4 << 20

// Cert is one client certificate pki issue wrote in a directory.
type Cert struct {
	Identity
	Serial   string    `json:"serial"` // hexadecimal, lower case
	File     string    `json:"file"`
	NotAfter time.Time `json:"not_after"`
	Revoked  bool      `json:"revoked"`
	// RevokedAt is when pki revoke revoked it (zero: not revoked).
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// SerialHex is how pinfold writes a certificate serial number.
func SerialHex(n *big.Int) string { return n.Text(16) }

// List returns the client certificates in dir, sorted by name, role and
// serial, each marked revoked or not from dir's revocation list.
func List(dir string) ([]Cert, error) {
	ca, err := loadCACert(dir)
	if err != nil {
		return nil, err
	}
	crl, err := ReadCRL(filepath.Join(dir, CRLFile), []*x509.Certificate{ca})
	if err != nil {
		return nil, err
	}
	revoked := map[string]time.Time{}
	if crl != nil {
		for _, e := range crl.RevokedCertificateEntries {
			revoked[SerialHex(e.SerialNumber)] = e.RevocationTime
		}
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.pem"))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	var out []Cert
	for _, path := range names {
		base := filepath.Base(path)
		if base == CACert || base == ServerCert || strings.HasSuffix(base, "-key.pem") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		p, _ := pem.Decode(b)
		if p == nil || p.Type != "CERTIFICATE" {
			continue // not a certificate pinfold wrote
		}
		c, err := x509.ParseCertificate(p.Bytes)
		if err != nil {
			continue
		}
		id, err := IdentityOf(c)
		if err != nil {
			continue
		}
		s := SerialHex(c.SerialNumber)
		at, rev := revoked[s]
		out = append(out, Cert{Identity: id, Serial: s, File: path, NotAfter: c.NotAfter, Revoked: rev, RevokedAt: at})
	}
	slices.SortFunc(out, func(a, b Cert) int {
		return strings.Compare(a.Name+"\x00"+string(a.Role)+"\x00"+a.Serial, b.Name+"\x00"+string(b.Role)+"\x00"+b.Serial)
	})
	return out, nil
}

// Revocation is what one Revoke did to one certificate.
type Revocation struct {
	Cert
	// Already is true when the certificate was revoked before (Revoke is
	// idempotent: it changes nothing for it).
	Already bool `json:"already"`
}

// Revoke adds to dir's revocation list every client certificate in dir
// whose name is name (all its roles) and every certificate whose serial
// (hexadecimal) is in serials, and signs the list again with the CA.
// A name or serial that matches nothing is an error and changes nothing.
// The list is replaced atomically (a new file renamed over the old).
func Revoke(dir, name string, serials []string, now time.Time) ([]Revocation, error) {
	if name == "" && len(serials) == 0 {
		return nil, errors.New("pki: revoke what? give a certificate name or a serial")
	}
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, CRLFile)
	old, err := ReadCRL(path, []*x509.Certificate{caCert})
	if err != nil {
		return nil, err
	}
	certs, err := List(dir)
	if err != nil {
		return nil, err
	}
	var todo []Revocation
	if name != "" {
		for _, c := range certs {
			if c.Name == name {
				todo = append(todo, Revocation{Cert: c, Already: c.Revoked})
			}
		}
		if len(todo) == 0 {
			var have []string
			for _, c := range certs {
				have = append(have, c.String())
			}
			return nil, fmt.Errorf("pki: name %q: no certificate for it in %s (there are: %s)", name, dir, orNone(have))
		}
	}
	for _, s := range serials {
		n, ok := new(big.Int).SetString(strings.TrimPrefix(strings.ToLower(strings.ReplaceAll(s, ":", "")), "0x"), 16)
		if !ok || n.Sign() <= 0 {
			return nil, fmt.Errorf("pki: serial %q: want a positive hexadecimal number (pinfold pki list shows them)", s)
		}
		hex := SerialHex(n)
		if slices.ContainsFunc(todo, func(r Revocation) bool { return r.Serial == hex }) {
			continue
		}
		r := Revocation{Cert: Cert{Serial: hex}}
		if i := slices.IndexFunc(certs, func(c Cert) bool { return c.Serial == hex }); i >= 0 {
			r.Cert = certs[i]
		} else if old != nil {
			// A certificate whose file is gone: revoked by serial alone.
			r.Revoked = slices.ContainsFunc(old.RevokedCertificateEntries, func(e x509.RevocationListEntry) bool { return SerialHex(e.SerialNumber) == hex })
		}
		r.Already = r.Revoked
		todo = append(todo, r)
	}
	tmpl := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: now, NextUpdate: now.AddDate(10, 0, 0)}
	if old != nil {
		tmpl.RevokedCertificateEntries = old.RevokedCertificateEntries
		if old.Number != nil {
			tmpl.Number = new(big.Int).Add(old.Number, big.NewInt(1))
		}
	}
	added := false
	for i, r := range todo {
		if r.Already {
			continue
		}
		n, _ := new(big.Int).SetString(r.Serial, 16)
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: n, RevocationTime: now})
		todo[i].Revoked, todo[i].RevokedAt, added = true, now, true
	}
	if !added {
		return todo, nil
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, caCert, caKey)
	if err != nil {
		return nil, fmt.Errorf("pki: sign the revocation list: %w", err)
	}
	if len(der) > MaxCRLBytes/2 { // PEM is about 4/3 of it
		return nil, fmt.Errorf("pki: the revocation list would hold %d entries, more than a planner reads (%d bytes at most): issue a new CA", len(tmpl.RevokedCertificateEntries), MaxCRLBytes)
	}
	if err := writeReplace(path, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return todo, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// writeReplace writes path atomically: a reader sees the old file or the
// new one, never a part.
func writeReplace(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("pki: write %s: %w", path, werr)
	}
	return nil
}

// ReadCRL reads a revocation list file and checks that one of cas signed
// it. A missing file is no list (nil, nil): nothing is revoked. A file
// that is not a PEM X.509 CRL signed by one of cas, or is larger than
// MaxCRLBytes, is an error naming the file.
func ReadCRL(path string, cas []*x509.Certificate) (*x509.RevocationList, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pki: revocation list: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxCRLBytes+1))
	if err != nil {
		return nil, fmt.Errorf("pki: revocation list %s: %w", path, err)
	}
	if len(b) > MaxCRLBytes {
		return nil, fmt.Errorf("pki: revocation list %s: larger than %d bytes", path, MaxCRLBytes)
	}
	p, _ := pem.Decode(b)
	if p == nil || p.Type != "X509 CRL" {
		return nil, fmt.Errorf("pki: revocation list %s: not a PEM \"X509 CRL\" block", path)
	}
	crl, err := x509.ParseRevocationList(p.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: revocation list %s: %w", path, err)
	}
	var sigErr error = errors.New("no CA given")
	for _, ca := range cas {
		if sigErr = crl.CheckSignatureFrom(ca); sigErr == nil {
			return crl, nil
		}
	}
	return nil, fmt.Errorf("pki: revocation list %s: not signed by the CA: %w", path, sigErr)
}

// loadCACert reads dir's CA certificate (not its key).
func loadCACert(dir string) (*x509.Certificate, error) {
	cb, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, fmt.Errorf("pki: no CA in %s (run pinfold pki init --dir %s): %w", dir, dir, err)
	}
	cp, _ := pem.Decode(cb)
	if cp == nil {
		return nil, fmt.Errorf("pki: %s is not PEM", filepath.Join(dir, CACert))
	}
	c, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", CACert, err)
	}
	return c, nil
}
