package main

import (
	"strings"
	"testing"
)

// TestRefusesControlPlaneWithoutTLS: a gfe told to take snapshots from a
// control plane refuses to start without TLS flags unless plain text is
// asked for by name, and with an unusable certificate file.
func TestRefusesControlPlaneWithoutTLS(t *testing.T) {
	base := []string{"--site", "nyc", "--controlplanes", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no TLS flags", nil, "no transport security configured: set --tls-ca, --tls-cert and --tls-key"},
		{"half the TLS flags", []string{"--tls-ca", "ca.crt"}, "tls-cert: required with TLS"},
		{"unreadable files", []string{"--tls-ca", "nope/ca.crt", "--tls-cert", "nope/c.crt", "--tls-key", "nope/c.key"}, "nope/ca.crt"},
		{"plain text and TLS", []string{"--insecure-plaintext", "--tls-ca", "ca.crt"}, "insecure-plaintext: cannot be combined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(append(append([]string{}, base...), tt.args...))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("run() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
