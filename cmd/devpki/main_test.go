package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// TestRun issues certificates, then issues again with the same CA, and
// checks that every certificate verifies against ca.crt for both uses.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	if err := run([]string{"--dir", dir, "cp-1=127.0.0.1,cp-1.cp.spillway.internal", "gfe-1=gfe-1.gfe.spillway.internal"}); err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err := run([]string{"--dir", dir, "gfe-1=gfe-1.gfe.spillway.internal"}); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if string(ca1) != string(ca2) {
		t.Error("a second run made a new CA, want the first reused")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca2)
	for name, host := range map[string]string{"cp-1": "127.0.0.1", "gfe-1": "gfe-1.gfe.spillway.internal"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("%s for %v: %v", name, u, err)
			}
		}
	}
	for _, bad := range [][]string{{"--dir", dir}, {"cp"}, {"--dir", dir, "noequals"}, {"--dir", dir, "--days", "0", "a=b"}} {
		if err := run(bad); err == nil {
			t.Errorf("run(%q) succeeded, want an error", bad)
		}
	}
}
