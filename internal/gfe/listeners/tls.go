package listeners

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// certSet is the certificates of one https listener, loaded from their files.
// It is immutable after loadCertSet returns; a reload builds a new set and
// swaps it into the listener's certStore.
type certSet struct {
	// certs in config order; certs[0] is the default.
	certs []*loadedCert
	// exact maps a lower-case DNS name to the first certificate that names
	// it; wildcard maps the suffix of a "*.suffix" name the same way.
	exact, wildcard map[string]*tls.Certificate
}

// loadedCert is one certificate with what its files looked like when it was
// read, so that a change can be noticed.
type loadedCert struct {
	cfg  config.Certificate
	cert *tls.Certificate
	// names the certificate serves: its DNS SANs, else its CN.
	names []string
	// files' modification times and sizes when read.
	certStamp, keyStamp fileStamp
}

// fileStamp identifies one version of a file.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// loadCert reads one certificate and its key. It stamps the files before
// reading them, so that a write that lands during the read shows up as a
// change on the next check.
func loadCert(c config.Certificate) (*loadedCert, error) {
	cs, err := stampOf(c.CertFile)
	if err != nil {
		return nil, fmt.Errorf("cert_file: %w", err)
	}
	ks, err := stampOf(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("key_file: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", c.CertFile, c.KeyFile, err)
	}
	if cert.Leaf == nil {
		return nil, fmt.Errorf("%s: no leaf certificate", c.CertFile)
	}
	names := cert.Leaf.DNSNames
	if len(names) == 0 && cert.Leaf.Subject.CommonName != "" {
		names = []string{cert.Leaf.Subject.CommonName}
	}
	return &loadedCert{cfg: c, cert: &cert, names: names, certStamp: cs, keyStamp: ks}, nil
}

// changed reports whether either file of lc differs from when it was read
// (or can no longer be read).
func (lc *loadedCert) changed() bool {
	cs, err := stampOf(lc.cfg.CertFile)
	if err != nil || cs != lc.certStamp {
		return true
	}
	ks, err := stampOf(lc.cfg.KeyFile)
	return err != nil || ks != lc.keyStamp
}

// loadCertSet loads the certificates of listener l. Certificates whose files
// are unchanged since prev loaded them are taken from prev (nil for none)
// without reading them again. On error nothing is returned: the caller keeps
// what it had. listenerPath names the listener in errors
// ("listeners[2]").
func loadCertSet(listenerPath string, certs []config.Certificate, prev *certSet) (*certSet, error) {
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s.certificates: none", listenerPath)
	}
	old := map[config.Certificate]*loadedCert{}
	if prev != nil {
		for _, lc := range prev.certs {
			old[lc.cfg] = lc
		}
	}
	var errs []error
	set := &certSet{exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}}
	for i, c := range certs {
		lc := old[c]
		if lc == nil || lc.changed() {
			var err error
			if lc, err = loadCert(c); err != nil {
				errs = append(errs, fmt.Errorf("%s.certificates[%d]: %w", listenerPath, i, err))
				continue
			}
		}
		set.certs = append(set.certs, lc)
		for _, n := range lc.names {
			n = strings.ToLower(n)
			m := set.exact
			if rest, ok := strings.CutPrefix(n, "*."); ok {
				m, n = set.wildcard, rest
			}
			if _, dup := m[n]; !dup {
				m[n] = lc.cert
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return set, nil
}

// changed reports whether any file of s changed since it was read.
func (s *certSet) changed() bool {
	for _, lc := range s.certs {
		if lc.changed() {
			return true
		}
	}
	return false
}

// pick returns the certificate for a client that asked for serverName (SNI,
// possibly empty): the first one naming it exactly, else the first whose
// wildcard covers it ("*.example.com" covers "a.example.com", not
// "example.com" nor "a.b.example.com"), else the default (the first one).
func (s *certSet) pick(serverName string) *tls.Certificate {
	if serverName != "" {
		name := strings.ToLower(strings.TrimSuffix(serverName, "."))
		if c, ok := s.exact[name]; ok {
			return c
		}
		if _, rest, ok := strings.Cut(name, "."); ok {
			if c, ok := s.wildcard[rest]; ok {
				return c
			}
		}
	}
	return s.certs[0].cert
}

// certStore holds the live certificate set of one https listener. Its
// GetCertificate is the tls.Config hook: every handshake reads the set that
// is live at that moment, so swapping in a new set changes the certificate
// of new connections only and never touches established ones (reload
// without dropping connections). Safe for concurrent use; must not be
// copied.
type certStore struct {
	cur atomic.Pointer[certSet]
}

// GetCertificate picks the certificate for hello by its SNI.
func (cs *certStore) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	s := cs.cur.Load()
	if s == nil {
		return nil, errors.New("gfe: no certificate loaded")
	}
	return s.pick(hello.ServerName), nil
}

// tlsConfig returns the server TLS configuration of an https listener
// whose certificates come from cs. net/http adds the ALPN protocols (h2,
// http/1.1).
func (cs *certStore) tlsConfig() *tls.Config {
	return &tls.Config{
		GetCertificate: cs.GetCertificate,
		MinVersion:     tls.VersionTLS12,
	}
}
