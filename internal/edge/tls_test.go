package edge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// testCA issues certificates for the listener tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
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
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a leaf certificate with serial and names (DNS SANs; with cn
// set and no names, a CN-only certificate) to dir/base.crt and .key, by
// writing temporary files and renaming them over the old ones.
func (ca *testCA) issue(t testing.TB, dir, base string, serial int64, cn string, names ...string) config.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := config.Certificate{CertFile: filepath.Join(dir, base+".crt"), KeyFile: filepath.Join(dir, base+".key")}
	writeAtomic(t, c.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeAtomic(t, c.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return c
}

func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestCertSetPick(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certs := []config.Certificate{
		ca.issue(t, dir, "a", 10, "a.test", "a.test", "www.a.test"),
		ca.issue(t, dir, "b", 11, "b.test", "b.test", "*.b.test"),
		ca.issue(t, dir, "c", 12, "c.test"), // CN only
		ca.issue(t, dir, "a2", 13, "a.test", "A.TEST"),
	}
	set, err := loadCertSet("listeners[0]", certs, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, sni string
		want      int64 // serial
	}{
		{"exact", "a.test", 10},
		{"second name", "www.a.test", 10},
		{"case and trailing dot", "B.Test.", 11},
		{"wildcard", "x.b.test", 11},
		{"wildcard is one label", "x.y.b.test", 10},
		{"wildcard excludes the bare suffix", "b.test", 11},
		{"common name without SANs", "c.test", 12},
		{"first name wins a duplicate", "a.test", 10},
		{"unknown gets the default", "z.test", 10},
		{"no SNI gets the default", "", 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := set.pick(tt.sni).Leaf.SerialNumber.Int64(); got != tt.want {
				t.Errorf("pick(%q) = serial %d, want %d", tt.sni, got, tt.want)
			}
		})
	}
}

func TestLoadCertSetErrors(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	good := ca.issue(t, dir, "good", 2, "good.test", "good.test")
	other := ca.issue(t, dir, "other", 3, "other.test", "other.test")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		certs   []config.Certificate
		wantErr string // substring; "" for success
	}{
		{"good", []config.Certificate{good}, ""},
		{"none", nil, "listeners[1].certificates: none"},
		{"missing cert", []config.Certificate{good, {CertFile: filepath.Join(dir, "nope.crt"), KeyFile: good.KeyFile}}, "listeners[1].certificates[1]: cert_file: stat"},
		{"missing key", []config.Certificate{{CertFile: good.CertFile, KeyFile: filepath.Join(dir, "nope.key")}}, "listeners[1].certificates[0]: key_file: stat"},
		{"not PEM", []config.Certificate{{CertFile: garbage, KeyFile: good.KeyFile}}, "listeners[1].certificates[0]: " + garbage},
		{"key of another cert", []config.Certificate{{CertFile: good.CertFile, KeyFile: other.KeyFile}}, "private key does not match public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := loadCertSet("listeners[1]", tt.certs, nil)
			if tt.wantErr == "" {
				if err != nil || set == nil {
					t.Fatalf("loadCertSet = %v, %v; want a set", set, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || set != nil {
				t.Fatalf("loadCertSet = %v, %v; want error containing %q", set, err, tt.wantErr)
			}
		})
	}
}

// TestCertSetReload checks that a set reuses unchanged certificates and
// notices rewritten files.
func TestCertSetReload(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	a := ca.issue(t, dir, "a", 1, "a.test", "a.test")
	b := ca.issue(t, dir, "b", 2, "b.test", "b.test")
	s1, err := loadCertSet("l", []config.Certificate{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s1.changed() {
		t.Fatal("a fresh set reports a change")
	}
	ca.issue(t, dir, "b", 3, "b.test", "b.test")
	if !s1.changed() {
		t.Fatal("rewritten files not noticed")
	}
	s2, err := loadCertSet("l", []config.Certificate{a, b}, s1)
	if err != nil {
		t.Fatal(err)
	}
	if s2.certs[0] != s1.certs[0] {
		t.Error("unchanged certificate a was loaded again")
	}
	if got := s2.pick("b.test").Leaf.SerialNumber.Int64(); got != 3 {
		t.Errorf("after reload b.test has serial %d, want 3", got)
	}
	var cs certStore
	cs.cur.Store(s2)
	got, err := cs.GetCertificate(&tls.ClientHelloInfo{ServerName: "b.test"})
	if err != nil || got.Leaf.SerialNumber.Int64() != 3 {
		t.Errorf("GetCertificate(b.test) = %v, %v; want serial 3", got, err)
	}
}
