// Package devpki is a throwaway certificate authority for the demo, the
// local topology and tests: it makes an ECDSA P-256 root and issues leaf
// certificates for mutual TLS (each usable as a server and as a client
// certificate) as PEM, and writes them to files the way a deploy tool would
// (a temporary name renamed over the old file, mode 0600).
//
// It is not a production CA: keys live in memory, nothing is revoked, and
// validity is fixed at creation. Production deployments bring their own
// CA (see docs/running.md, "Control-plane TLS").
package devpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a root certificate authority held in memory. Issue is safe for
// concurrent use.
type CA struct {
	// Cert is the root certificate; PEM is it PEM-encoded (the content of a
	// --tls-ca file).
	Cert *x509.Certificate
	PEM  []byte

	key    *ecdsa.PrivateKey
	serial atomic.Int64
}

// NewCA returns a new root named cn, valid from an hour ago (clock skew)
// for validFor.
func NewCA(cn string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA certificate: %w", err)
	}
	ca := &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
	ca.serial.Store(1)
	return ca, nil
}

// KeyPEM returns the CA's private key, PEM-encoded, for LoadCA.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// LoadCA returns the CA of a certificate and key written earlier (CA.PEM
// and CA.KeyPEM), to issue more certificates from it. Serial numbers
// continue from a random 62-bit start, so that they do not repeat those
// issued before.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("devpki: CA certificate or key: no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA key: %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("devpki: the certificate is not a CA or does not match the key")
	}
	start, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, fmt.Errorf("devpki: serial: %w", err)
	}
	ca := &CA{Cert: cert, PEM: certPEM, key: key}
	ca.serial.Store(start.Int64())
	return ca, nil
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// CommonName is the subject CN. Optional.
	CommonName string
	// Names are the subject alternative names: an IP SAN for each that
	// parses as an IP address, a URI SAN for each with a scheme
	// ("spiffe://..."), else a DNS SAN.
	Names []string
	// ValidFor is the lifetime from now (it starts an hour ago). Default
	// 24h.
	ValidFor time.Duration
}

// Issued is a certificate issued by a CA, with its key.
type Issued struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue issues a leaf certificate for l with the next serial number (2, 3,
// ...), usable for both TLS server and client authentication.
func (ca *CA) Issue(l Leaf) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devpki: key: %w", err)
	}
	if l.ValidFor == 0 {
		l.ValidFor = 24 * time.Hour
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: l.CommonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(l.ValidFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range l.Names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if u, err := url.Parse(n); err == nil && u.Scheme != "" {
			tmpl.URIs = append(tmpl.URIs, u)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("devpki: issue %q: %w", l.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devpki: issue %q: %w", l.CommonName, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("devpki: issue %q: %w", l.CommonName, err)
	}
	return &Issued{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}, nil
}

// Files are the paths of one party's PEM files.
type Files struct {
	CA, Cert, Key string
}

// WriteCA writes ca's certificate to dir/ca.crt and returns the path.
func (ca *CA) WriteCA(dir string) (string, error) {
	p := filepath.Join(dir, "ca.crt")
	return p, WriteFileAtomic(p, ca.PEM)
}

// IssueFiles issues l and writes it to dir/base.crt and dir/base.key (the
// key first, so that a reader that sees the new certificate finds its
// key), with ca's certificate in dir/ca.crt, and returns the three paths.
func (ca *CA) IssueFiles(dir, base string, l Leaf) (Files, error) {
	is, err := ca.Issue(l)
	if err != nil {
		return Files{}, err
	}
	return ca.write(dir, base, is)
}

func (ca *CA) write(dir, base string, is *Issued) (Files, error) {
	f := Files{Cert: filepath.Join(dir, base+".crt"), Key: filepath.Join(dir, base+".key")}
	var err error
	if f.CA, err = ca.WriteCA(dir); err != nil {
		return Files{}, err
	}
	if err := WriteFileAtomic(f.Key, is.KeyPEM); err != nil {
		return Files{}, err
	}
	if err := WriteFileAtomic(f.Cert, is.CertPEM); err != nil {
		return Files{}, err
	}
	return f, nil
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename, with mode 0600.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("devpki: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("devpki: %w", err), os.Remove(tmp))
	}
	return nil
}
