// Command devpki makes a small certificate authority and the certificates
// of a Spillway deployment for mutual TLS between control planes and gfes,
// for trying Spillway out and for labs. Production deployments should use
// their own CA.
//
// Usage:
//
//	devpki --dir DIR [--days 30] NAME=SAN[,SAN...] ...
//
// It writes DIR/ca.crt and DIR/ca.key (made on the first run, reused
// after), and for every NAME=SANs a certificate DIR/NAME.crt (usable for
// TLS server and client authentication) with those subject alternative
// names (IP addresses, DNS names, or URIs such as spiffe://...) and common
// name NAME, with its key DIR/NAME.key. Files are written with mode 0600
// through a rename, so a running daemon never reads half a file; running
// it again for a NAME rotates that certificate.
//
// Example (one control plane at 127.0.0.1:7000, one gfe):
//
//	devpki --dir pki cp-1=127.0.0.1,cp-1.cp.spillway.internal gfe-nyc-1=gfe-nyc-1.gfe.spillway.internal
//	controlplane ... --tls-ca pki/ca.crt --tls-cert pki/cp-1.crt --tls-key pki/cp-1.key \
//	    --tls-allowed-clients '*.gfe.spillway.internal'
//	gfe ... --tls-ca pki/ca.crt --tls-cert pki/gfe-nyc-1.crt --tls-key pki/gfe-nyc-1.key
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/internal/daemonflags"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "devpki:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fset := flag.NewFlagSet("devpki", flag.ContinueOnError)
	dir := fset.String("dir", "", "directory of the CA and the certificates (required)")
	days := fset.Int("days", 30, "validity of new certificates, days (the CA's: 10 years)")
	printVersion := fset.Bool("version", false, "print the version and exit")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *printVersion {
		fmt.Println(version.Line("devpki"))
		return nil
	}
	if *dir == "" || fset.NArg() == 0 {
		return errors.New("usage: devpki --dir DIR [--days N] NAME=SAN[,SAN...] ...")
	}
	if *days < 1 {
		return fmt.Errorf("--days: must be >= 1, got %d", *days)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	ca, err := loadOrMakeCA(*dir)
	if err != nil {
		return err
	}
	for _, spec := range fset.Args() {
		name, sans, ok := strings.Cut(spec, "=")
		if !ok || name == "" || strings.ContainsAny(name, `/\`) {
			return fmt.Errorf("%q: want NAME=SAN[,SAN...]", spec)
		}
		f, err := ca.IssueFiles(*dir, name, devpki.Leaf{CommonName: name, Names: daemonflags.List(sans), ValidFor: time.Duration(*days) * 24 * time.Hour})
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s %s\n", name, f.Cert, f.Key)
	}
	return nil
}

// loadOrMakeCA reuses dir/ca.crt and dir/ca.key, or makes them.
func loadOrMakeCA(dir string) (*devpki.CA, error) {
	certPEM, cerr := os.ReadFile(filepath.Join(dir, "ca.crt"))
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, "ca.key"))
	if cerr == nil && kerr == nil {
		return devpki.LoadCA(certPEM, keyPEM)
	}
	if !errors.Is(cerr, fs.ErrNotExist) || !errors.Is(kerr, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: need both ca.crt and ca.key, or neither: %w", dir, errors.Join(cerr, kerr))
	}
	ca, err := devpki.NewCA("spillway devpki CA", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := devpki.WriteFileAtomic(filepath.Join(dir, "ca.key"), key); err != nil {
		return nil, err
	}
	if _, err := ca.WriteCA(dir); err != nil {
		return nil, err
	}
	fmt.Printf("new CA: %s\n", filepath.Join(dir, "ca.crt"))
	return ca, nil
}
