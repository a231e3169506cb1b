// Package pki is pinfold's small certificate authority: a CA, the
// planner's server certificate, and client certificates that carry an
// identity: a name in the subject's CommonName and a role in its
// OrganizationalUnit ("pinfold:admin", "pinfold:viewer" or
// "pinfold:agent"; an agent's name is its host's). Keys are ECDSA P-256 in
// PKCS #8 PEM files of mode 0600.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Role is what an identity may do (see the planner API's authorization).
type Role string

const (
	RoleAdmin  Role = "admin"  // everything
	RoleViewer Role = "viewer" // read only
	RoleAgent  Role = "agent"  // register, heartbeat, watch and report for its own host
)

// Roles are the roles a client certificate may carry.
var Roles = []Role{RoleAdmin, RoleViewer, RoleAgent}

const ouPrefix = "pinfold:"

// Identity is who a client certificate says its holder is.
type Identity struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
}

func (id Identity) String() string { return string(id.Role) + ":" + id.Name }

// Files are the paths one command wrote or uses.
type Files struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// File names inside a PKI directory.
const (
	CACert     = "ca.pem"
	CAKey      = "ca-key.pem"
	ServerCert = "planner.pem"
	ServerKey  = "planner-key.pem"
)

// ServerFiles are the paths Init writes in dir.
func ServerFiles(dir string) Files {
	return Files{CA: filepath.Join(dir, CACert), Cert: filepath.Join(dir, ServerCert), Key: filepath.Join(dir, ServerKey)}
}

// ClientFiles are the paths Issue writes in dir for role and name.
func ClientFiles(dir string, role Role, name string) Files {
	base := string(role) + "-" + name
	return Files{CA: filepath.Join(dir, CACert), Cert: filepath.Join(dir, base+".pem"), Key: filepath.Join(dir, base+"-key.pem")}
}

// nameRE is a client name: a host name or a person's short name.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// IdentityOf reads the identity a verified client certificate carries.
func IdentityOf(c *x509.Certificate) (Identity, error) {
	var roles []Role
	for _, ou := range c.Subject.OrganizationalUnit {
		if r, ok := strings.CutPrefix(ou, ouPrefix); ok {
			roles = append(roles, Role(r))
		}
	}
	if len(roles) != 1 || !slices.Contains(Roles, roles[0]) {
		return Identity{}, fmt.Errorf("pki: certificate %q: want exactly one OrganizationalUnit pinfold:admin, pinfold:viewer or pinfold:agent, got %q",
			c.Subject.CommonName, c.Subject.OrganizationalUnit)
	}
	if !nameRE.MatchString(c.Subject.CommonName) {
		return Identity{}, fmt.Errorf("pki: certificate CommonName %q: not a pinfold identity name", c.Subject.CommonName)
	}
	return Identity{Name: c.Subject.CommonName, Role: roles[0]}, nil
}

// Init creates a CA and the planner's server certificate in dir (created
// 0700), valid for localhost, 127.0.0.1, ::1 and hosts (names or IPs). It
// refuses a dir that already holds a CA: it never replaces one.
func Init(dir string, hosts []string, now time.Time) (Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("pki: %w", err)
	}
	ca := filepath.Join(dir, CACert)
	if _, err := os.Stat(ca); err == nil {
		return Files{}, fmt.Errorf("pki: %s exists: this directory has a CA already (issue certificates from it, or use another --dir)", ca)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("pki: CA key: %w", err)
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "pinfold CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := sign(tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	if err := writeKeyPair(dir, CACert, CAKey, caDER, caKey); err != nil {
		return Files{}, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	if err := issue(dir, ServerCert, ServerKey, serverTemplate(hosts, now), caCert, caKey); err != nil {
		return Files{}, err
	}
	return ServerFiles(dir), nil
}

// serverTemplate is a planner certificate's, valid for localhost,
// 127.0.0.1, ::1 and hosts.
func serverTemplate(hosts []string, now time.Time) *x509.Certificate {
	srv := &x509.Certificate{Subject: pkix.Name{CommonName: "pinfold planner"}, NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		// Client auth too: an embedded etcd serving with this certificate
		// dials itself with it (its gateway), and requires client certificates.
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srv.IPAddresses = append(srv.IPAddresses, ip)
		} else if h != "" {
			srv.DNSNames = append(srv.DNSNames, h)
		}
	}
	return srv
}

// IssueServer signs a new planner certificate from the CA in dir, valid
// for localhost, 127.0.0.1, ::1 and hosts, written as NAME.pem and
// NAME-key.pem (never over planner.pem: move the pair over planner.pem
// and planner-key.pem, the key last, and a running planner serves it
// from its next handshake on).
func IssueServer(dir, name string, hosts []string, now time.Time) (Files, error) {
	if !nameRE.MatchString(name) || name == "ca" {
		return Files{}, fmt.Errorf("pki: name %q: want 1..63 letters, digits, '.', '_' or '-', not ca", name)
	}
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		return Files{}, err
	}
	if err := issue(dir, name+".pem", name+"-key.pem", serverTemplate(hosts, now), caCert, caKey); err != nil {
		return Files{}, err
	}
	return Files{CA: filepath.Join(dir, CACert), Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}, nil
}

// Issue signs a client certificate for name with role, from the CA in dir,
// written as <role>-<name>.pem and <role>-<name>-key.pem.
func Issue(dir string, role Role, name string, now time.Time) (Files, error) {
	if !slices.Contains(Roles, role) {
		return Files{}, fmt.Errorf("pki: role %q: want admin, viewer or agent", role)
	}
	if !nameRE.MatchString(name) {
		return Files{}, fmt.Errorf("pki: name %q: want 1..63 letters, digits, '.', '_' or '-'", name)
	}
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		return Files{}, err
	}
	f := ClientFiles(dir, role, name)
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name, OrganizationalUnit: []string{ouPrefix + string(role)}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := issue(dir, filepath.Base(f.Cert), filepath.Base(f.Key), tmpl, caCert, caKey); err != nil {
		return Files{}, err
	}
	return f, nil
}

func issue(dir, certName, keyName string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	for _, name := range []string{certName, keyName} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("pki: %s already exists in %s: %q was issued before; issue another name, or revoke it (pinfold pki revoke) and remove its two files to issue it again: %w",
				name, dir, tmpl.Subject.CommonName, fs.ErrExist)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: key for %s: %w", certName, err)
	}
	der, err := sign(tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writeKeyPair(dir, certName, keyName, der, key)
}

func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, priv *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("pki: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	return der, nil
}

func writeKeyPair(dir, certName, keyName string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := writeNew(filepath.Join(dir, keyName), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, certName), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return f.Close()
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, nil, fmt.Errorf("pki: no CA in %s (run pinfold pki init --dir %s): %w", dir, dir, err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, nil, fmt.Errorf("pki: the CA's key, needed to sign: %w", err)
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, nil, errors.New("pki: the CA files are not PEM")
	}
	cert, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", CACert, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", CAKey, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("pki: %s is not an ECDSA key", CAKey)
	}
	return cert, key, nil
}

// Renewal is what Renew did.
type Renewal struct {
	Files
	Serial string `json:"serial"` // the new certificate's
	// Old and OldKey are where the replaced certificate and key went.
	Old    string `json:"old"`
	OldKey string `json:"old_key"`
}

// Renew replaces the planner certificate in dir with a new one from the
// CA, valid for the names and IPs of the old one and hosts. The old pair
// is kept as planner.pem.SERIAL.old and planner-key.pem.SERIAL.old; the
// new key is moved into place before the new certificate, so a running
// planner (which serves a pair only once key and certificate match)
// never serves a half.
func Renew(dir string, hosts []string, now time.Time) (Renewal, error) {
	srv := ServerFiles(dir)
	b, err := os.ReadFile(srv.Cert)
	if err != nil {
		return Renewal{}, fmt.Errorf("pki: no planner certificate to renew: %w", err)
	}
	p, _ := pem.Decode(b)
	if p == nil {
		return Renewal{}, fmt.Errorf("pki: %s is not PEM", srv.Cert)
	}
	old, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		return Renewal{}, fmt.Errorf("pki: %s: %w", srv.Cert, err)
	}
	keep := slices.Clone(old.DNSNames)
	for _, ip := range old.IPAddresses {
		keep = append(keep, ip.String())
	}
	var all []string
	for _, h := range append(keep, hosts...) {
		if h != "localhost" && !slices.Contains(all, h) && !slices.ContainsFunc([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, func(ip net.IP) bool { return ip.Equal(net.ParseIP(h)) }) {
			all = append(all, h)
		}
	}
	tmp := fmt.Sprintf("planner-next-%d", now.UnixNano())
	next, err := IssueServer(dir, tmp, all, now)
	if err != nil {
		return Renewal{}, err
	}
	r := Renewal{Files: srv, Old: fmt.Sprintf("%s.%s.old", srv.Cert, SerialHex(old.SerialNumber)), OldKey: fmt.Sprintf("%s.%s.old", srv.Key, SerialHex(old.SerialNumber))}
	nb, _ := os.ReadFile(next.Cert)
	if np, _ := pem.Decode(nb); np != nil {
		if c, err := x509.ParseCertificate(np.Bytes); err == nil {
			r.Serial = SerialHex(c.SerialNumber)
		}
	}
	// Copies of the old pair first (the originals stay until replaced).
	for _, cp := range [][2]string{{srv.Cert, r.Old}, {srv.Key, r.OldKey}} {
		b, err := os.ReadFile(cp[0])
		if err == nil {
			err = writeNew(cp[1], b, 0o600)
		}
		if err != nil {
			os.Remove(next.Cert)
			os.Remove(next.Key)
			return Renewal{}, fmt.Errorf("pki: keep the old planner certificate: %w", err)
		}
	}
	if err := os.Rename(next.Key, srv.Key); err != nil {
		return Renewal{}, fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(next.Cert, srv.Cert); err != nil {
		return Renewal{}, fmt.Errorf("pki: %w (the new key is in place: move %s over %s)", err, next.Cert, srv.Cert)
	}
	return r, nil
}
