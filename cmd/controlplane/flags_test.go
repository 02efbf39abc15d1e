package main

import (
	"strings"
	"testing"
)

// TestGossipKeyFlags: finding #10.1 and the gossip half of #10.8 at the
// command line. A gossip address beyond loopback without a key is refused
// with an error that says what to set; --gossip-insecure starts with a
// warning; a key on the command line starts with a warning.
func TestGossipKeyFlags(t *testing.T) {
	const key = "MDEyMzQ1Njc4OWFiY2RlZg=="
	t.Setenv("SPILLWAY_GOSSIP_KEY", "")
	base := []string{"--config", "cp.yaml", "--node", "cp-1", "--insecure-plaintext"} // TLS is not what this test is about
	tests := []struct {
		name     string
		args     []string
		wantErr  string
		wantWarn string
	}{
		{name: "loopback, no key", args: []string{"--gossip-addr", "127.0.0.1:0"}},
		{name: "all interfaces, no key", args: []string{"--gossip-addr", "0.0.0.0:7946"},
			wantErr: `gossip.secret_key: required when gossip.bind_addr ("0.0.0.0") is not a loopback address`},
		{name: "all interfaces, insecure", args: []string{"--gossip-addr", "0.0.0.0:7946", "--gossip-insecure"},
			wantWarn: "neither encrypted nor authenticated"},
		{name: "key on the command line", args: []string{"--gossip-addr", "0.0.0.0:7946", "--gossip-key", key},
			wantWarn: "on the command line"},
		{name: "empty replica name", args: []string{"--replicas", "cp-1,,cp-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{}, base...), tt.args...)
			v, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			cfg, warnings, err := daemonConfig(v, args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("daemonConfig() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("daemonConfig() = %v", err)
			}
			got := strings.Join(warnings, "\n")
			if (tt.wantWarn == "") != (got == "") || !strings.Contains(got, tt.wantWarn) {
				t.Errorf("warnings %q, want one containing %q", got, tt.wantWarn)
			}
			if tt.name == "empty replica name" && strings.Join(cfg.Replicas, ",") != "cp-1,cp-2" {
				t.Errorf("Replicas = %q, want [cp-1 cp-2]", cfg.Replicas)
			}
		})
	}
}
