package listeners

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/testkit"
)

func TestCertSetPick(t *testing.T) {
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	certs := []config.Certificate{
		gfetest.IssueCert(t, ca, dir, "a", 10, "a.test", "a.test", "www.a.test"),
		gfetest.IssueCert(t, ca, dir, "b", 11, "b.test", "b.test", "*.b.test"),
		gfetest.IssueCert(t, ca, dir, "c", 12, "c.test"), // CN only
		gfetest.IssueCert(t, ca, dir, "a2", 13, "a.test", "A.TEST"),
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
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	good := gfetest.IssueCert(t, ca, dir, "good", 2, "good.test", "good.test")
	other := gfetest.IssueCert(t, ca, dir, "other", 3, "other.test", "other.test")
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
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	a := gfetest.IssueCert(t, ca, dir, "a", 1, "a.test", "a.test")
	b := gfetest.IssueCert(t, ca, dir, "b", 2, "b.test", "b.test")
	s1, err := loadCertSet("l", []config.Certificate{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s1.changed() {
		t.Fatal("a fresh set reports a change")
	}
	gfetest.IssueCert(t, ca, dir, "b", 3, "b.test", "b.test")
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
