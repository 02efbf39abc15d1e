package gfetest

import (
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/testkit"
)

// IssueCert issues a certificate with ca (testkit.CA.Issue) and returns it
// as the config of an https listener's certificate.
func IssueCert(t testing.TB, ca *testkit.CA, dir, base string, serial int64, cn string, names ...string) config.Certificate {
	t.Helper()
	certFile, keyFile := ca.Issue(t, dir, base, serial, cn, names...)
	return config.Certificate{CertFile: certFile, KeyFile: keyFile}
}
