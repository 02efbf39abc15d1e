// Package mtls authenticates the control plane's gRPC connections with mutual
// TLS (docs/design.md §9): the control plane proves itself to gfes with a
// certificate their CA file vouches for, under the name they expect, and
// serves only clients whose certificate the same kind of CA file vouches for
// and whose identity is on an allow list.
//
// # Model
//
// Each party has three PEM files: a CA bundle (the roots it trusts for the
// other side), its own certificate (with its chain) and its private key.
// Every TLS handshake reads the three files again (a parsed copy is kept
// while their bytes do not change), so certificates and CA bundles rotate
// by replacing the files, without a restart and without touching
// connections already open. A set of files that cannot be used (a
// certificate written before its key, a truncated file) is logged and the
// last good set is used until the files are consistent again.
//
// Rotating a CA: first add the new root to every CA bundle (both roots
// trusted), then replace certificates, then drop the old root.
//
// # Identities
//
// A peer certificate's identities are its DNS SANs, its URI SANs and its
// subject common name. A server allows a client when one of the client's
// identities matches an entry of ServerConfig.AllowedClients: equal (DNS
// names and common names ignoring case, URIs exactly), or, for an entry
// "*.rest", a DNS name or common name with one more label in front of
// "rest" ("*.gfe.example" allows "nyc-1.gfe.example", not
// "a.b.gfe.example"). The entry "*" allows any certificate the CA bundle
// vouches for. Clients check the server's certificate against
// ClientConfig.ServerName, or the host of the address dialled (as HTTPS
// does; an IP address matches an IP SAN).
//
// # Plain text
//
// InsecurePlaintext turns authentication off. It must be asked for by name
// (the daemons' --insecure-plaintext); a configuration with neither TLS
// files nor InsecurePlaintext is invalid, so a daemon refuses to start
// rather than fall back to clear text.
package mtls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"
)

// Files names the PEM files of one side of a connection.
type Files struct {
	// CA is a bundle of one or more root certificates: the roots that
	// vouch for the other side.
	CA string
	// Cert is this side's certificate, followed by any intermediates.
	Cert string
	// Key is the private key of Cert.
	Key string
}

// set reports whether any file is named.
func (f Files) set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// validate reports the missing files, naming them by their flags.
func (f Files) validate() []error {
	var errs []error
	for _, x := range []struct{ name, v string }{{"ca", f.CA}, {"cert", f.Cert}, {"key", f.Key}} {
		if x.v == "" {
			errs = append(errs, fmt.Errorf("tls-%s: required with TLS (--tls-ca, --tls-cert and --tls-key go together)", x.name))
		}
	}
	return errs
}

// errNoTransportSecurity is the start of the error a configuration with no
// TLS and no InsecurePlaintext gives.
const errNoTransportSecurity = "no transport security configured"

// ServerConfig is the control plane's side. Start from the zero value and
// set either the files and AllowedClients, or InsecurePlaintext.
type ServerConfig struct {
	// Files are the server's CA bundle (the roots that vouch for clients),
	// certificate and key (--tls-ca, --tls-cert, --tls-key).
	Files
	// AllowedClients lists the client identities served
	// (--tls-allowed-clients; see the package doc for matching). Required
	// with TLS; "*" allows any certificate the CA bundle vouches for.
	AllowedClients []string
	// InsecurePlaintext serves without TLS (--insecure-plaintext): anyone
	// who can reach the port is served. Invalid together with Files.
	InsecurePlaintext bool
}

// Validate reports every problem at once, naming each flag.
func (c ServerConfig) Validate() error {
	if c.InsecurePlaintext {
		if c.Files.set() || len(c.AllowedClients) > 0 {
			return errors.New("insecure-plaintext: cannot be combined with --tls-ca, --tls-cert, --tls-key or --tls-allowed-clients")
		}
		return nil
	}
	if !c.Files.set() && len(c.AllowedClients) == 0 {
		return errors.New(errNoTransportSecurity + ": set --tls-ca, --tls-cert, --tls-key and --tls-allowed-clients for mutual TLS, " +
			"or --insecure-plaintext to serve in clear text (anyone who can reach the port then reads the configuration, secrets redacted)")
	}
	errs := c.Files.validate()
	if len(c.AllowedClients) == 0 {
		errs = append(errs, errors.New(`tls-allowed-clients: required with TLS: list the client certificates' DNS or URI SANs or CNs ("*.gfe.example"), or "*" for any certificate the CA vouches for`))
	}
	for i, a := range c.AllowedClients {
		if a == "" || strings.Contains(a[1:], "*") || (strings.HasPrefix(a, "*") && a != "*" && !strings.HasPrefix(a, "*.")) {
			errs = append(errs, fmt.Errorf("tls-allowed-clients[%d]: %q is not a name, \"*.suffix\" or \"*\"", i, a))
		}
	}
	return errors.Join(errs...)
}

// ClientConfig is a gfe's side (or any other client of the control plane).
// Start from the zero value and set either the files, or
// InsecurePlaintext.
type ClientConfig struct {
	// Files are the client's CA bundle (the roots that vouch for control
	// planes), certificate and key (--tls-ca, --tls-cert, --tls-key).
	Files
	// ServerName is the name the control plane's certificate must carry
	// (--tls-server-name). Empty means the host of each address dialled.
	ServerName string
	// InsecurePlaintext dials without TLS (--insecure-plaintext): snapshots
	// are then taken from whoever answers. Invalid together with Files.
	InsecurePlaintext bool
}

// Validate reports every problem at once, naming each flag.
func (c ClientConfig) Validate() error {
	if c.InsecurePlaintext {
		if c.Files.set() || c.ServerName != "" {
			return errors.New("insecure-plaintext: cannot be combined with --tls-ca, --tls-cert, --tls-key or --tls-server-name")
		}
		return nil
	}
	if !c.Files.set() {
		return errors.New(errNoTransportSecurity + ": set --tls-ca, --tls-cert and --tls-key for mutual TLS with the control plane, " +
			"or --insecure-plaintext to take snapshots in clear text from whoever answers")
	}
	return errors.Join(c.Files.validate()...)
}

// Identities returns the identities of cert: its DNS SANs, URI SANs and
// subject common name, in that order (blanks left out).
func Identities(cert *x509.Certificate) []string {
	ids := slices.Clone(cert.DNSNames)
	for _, u := range cert.URIs {
		ids = append(ids, u.String())
	}
	if cert.Subject.CommonName != "" {
		ids = append(ids, cert.Subject.CommonName)
	}
	return ids
}

// Allowed reports whether one of ids matches an entry of allowed (see the
// package doc).
func Allowed(allowed, ids []string) bool {
	for _, a := range allowed {
		if a == "*" {
			return true
		}
		for _, id := range ids {
			if matches(a, id) {
				return true
			}
		}
	}
	return false
}

func matches(pattern, id string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		first, rest, ok := strings.Cut(id, ".")
		return ok && first != "" && strings.EqualFold(rest, suffix)
	}
	return pattern == id || (!strings.Contains(pattern, ":") && strings.EqualFold(pattern, id))
}

// material is one consistent set of files, parsed.
type material struct {
	cert *tls.Certificate // nil for a TLSClient without a client certificate
	pool *x509.CertPool
}

// loader reads a Files set at every handshake and keeps the last good
// parse. Safe for concurrent use.
type loader struct {
	// Immutable after newLoader.
	files Files
	log   zerolog.Logger

	mu sync.Mutex
	// Guarded by mu.
	raw  [3][]byte // ca, cert, key of good
	good *material
	bad  [3][]byte // the last set that failed, logged once
}

// newLoader loads files once: an error here (a missing or invalid file)
// stops the daemon at startup.
func newLoader(files Files, log zerolog.Logger) (*loader, error) {
	l := &loader{files: files, log: log}
	if _, err := l.load(); err != nil {
		return nil, err
	}
	return l, nil
}

// load returns the material of the files as they are now, or, when they
// cannot be read or do not form a valid set, the last good material and
// the error (logged once per bad content).
func (l *loader) load() (*material, error) {
	raw, m, err := readMaterial(l.files)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		if l.good == nil || !equal(raw, l.raw) {
			l.raw, l.good = raw, m
		}
		return l.good, nil
	}
	if !equal(raw, l.bad) {
		l.bad = raw
		if l.good != nil {
			l.log.Warn().Err(err).Msg("TLS files unusable; keeping the last good certificate and CA bundle until they are fixed")
		}
	}
	if l.good == nil {
		return nil, err
	}
	return l.good, nil
}

// readMaterial reads and parses the files: the CA bundle, and the
// certificate and key unless both are unnamed (a TLSClient without a
// client certificate).
func readMaterial(f Files) (raw [3][]byte, m *material, err error) {
	for i, p := range []string{f.CA, f.Cert, f.Key} {
		if p == "" && i > 0 && f.Cert == "" && f.Key == "" {
			continue
		}
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return raw, nil, fmt.Errorf("tls: read %s: %w", p, rerr)
		}
		raw[i] = b
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[0]) {
		return raw, nil, fmt.Errorf("tls: %s: no PEM certificate in the CA bundle", f.CA)
	}
	if f.Cert == "" && f.Key == "" {
		return raw, &material{pool: pool}, nil
	}
	cert, err := tls.X509KeyPair(raw[1], raw[2])
	if err != nil {
		return raw, nil, fmt.Errorf("tls: %s with %s: %w", f.Cert, f.Key, err)
	}
	return raw, &material{cert: &cert, pool: pool}, nil
}

// equal reports whether two raw sets hold the same bytes.
func equal(a, b [3][]byte) bool {
	return bytes.Equal(a[0], b[0]) && bytes.Equal(a[1], b[1]) && bytes.Equal(a[2], b[2])
}
