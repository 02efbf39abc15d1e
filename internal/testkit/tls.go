package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throwaway certificate authority for tests: an ECDSA P-256 root
// valid from an hour ago for a day, which issues leaf certificates as PEM
// files. Not safe for concurrent Issue calls on one file name.
type CA struct {
	// Cert is the root certificate; Pool holds it, for clients' RootCAs.
	Cert *x509.Certificate
	Pool *x509.CertPool
	key  *ecdsa.PrivateKey
}

// NewCA returns a new CA; it fails the test on error.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "spillway test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Pool: pool, key: key}
}

// Issue writes a server certificate signed by ca, with serial, subject
// common name cn and a SAN per name (an IP SAN for a name that parses as an
// IP address, else a DNS SAN; no names gives a CN-only certificate), to
// dir/base.crt and its key to dir/base.key. Each file is written to a
// temporary name and renamed over the old one, as a deploy tool would, so a
// watcher never reads half a file. It returns the two paths.
func (ca *CA) Issue(t testing.TB, dir, base string, serial int64, cn string, names ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	WriteFileAtomic(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	WriteFileAtomic(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return certFile, keyFile
}

// WriteFileAtomic writes data to path through a temporary file and a
// rename, with mode 0600; it fails the test on error.
func WriteFileAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// Handshake makes a TLS handshake with addr, sending sni ("" for none) and
// offering ALPN h2 and http/1.1, and returns the served certificate's
// serial and the negotiated protocol. The chain must verify against ca; the
// name is the caller's to check (the serial says which certificate came).
func Handshake(t testing.TB, addr string, ca *CA, sni string) (serial int64, proto string) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{
		ServerName: sni, NextProtos: []string{"h2", "http/1.1"}, InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca.Pool})
			return err
		},
	})
	if err != nil {
		t.Fatalf("TLS handshake with %s, SNI %q: %v", addr, sni, err)
	}
	defer c.Close()
	st := c.ConnectionState()
	return st.PeerCertificates[0].SerialNumber.Int64(), st.NegotiatedProtocol
}
