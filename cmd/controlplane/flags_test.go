package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/controlplane"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/quotaredis"
	"github.com/spillway-lb/spillway/internal/xdsexport"
)

// TestGossipKeyFlags: finding 1 of the first security review (SECURITY.md)
// and the gossip half of finding 8 at the command line. A gossip address
// beyond loopback without a key is refused with an error that says what to
// set; --gossip-insecure starts with a warning; a key on the command line
// starts with a warning.
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
			cfg, warnings, ok := configFrom(t, args, tt.wantErr)
			if !ok {
				return
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

// TestXDSFlags: the xDS export's flags reach the Config, and bad
// combinations are refused with the flag named.
func TestXDSFlags(t *testing.T) {
	tls := []string{"--tls-ca", "ca.crt", "--tls-cert", "cp.crt", "--tls-key", "cp.key", "--tls-allowed-clients", "*.gfe.example"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "off by default"},
		{name: "mTLS with an allow list", args: append(slices.Clone(tls), "--xds-listen", "127.0.0.1:7300",
			"--xds-allowed-clients", "*.nyc.xds.example=nyc,spiffe://example/lon=lon+lon2/web+api", "--xds-plan-interval", "250ms", "--xds-damping", "1", "--xds-envoy-listen", ":8443",
			"--xds-max-site-demand", "0.5", "--xds-max-streams", "100", "--xds-max-streams-per-client", "10", "--xds-max-snapshots", "20", "--xds-snapshot-grace", "1m")},
		{name: "mTLS without an allow list", args: append(slices.Clone(tls), "--xds-listen", "127.0.0.1:7300"),
			wantErr: "xds-allowed-clients: required with --xds-listen"},
		{name: "an identity without its site", args: append(slices.Clone(tls), "--xds-listen", "127.0.0.1:7300", "--xds-allowed-clients", "a.xds.example=nyc,*.xds.example"),
			wantErr: `xds-allowed-clients[1]: "*.xds.example" names no site: write IDENTITY=SITE`},
		{name: "a bad site", args: append(slices.Clone(tls), "--xds-listen", "127.0.0.1:7300", "--xds-allowed-clients", "a.xds.example=ny c"),
			wantErr: `xds-allowed-clients[0]: "a.xds.example=ny c": sites: "ny c" is not a name`},
		{name: "an allow list in plain text", args: []string{"--insecure-plaintext", "--xds-listen", "127.0.0.1:7300", "--xds-allowed-clients", "a=nyc"},
			wantErr: "xds-allowed-clients: cannot be combined with --insecure-plaintext"},
		{name: "bad site demand", args: []string{"--insecure-plaintext", "--xds-listen", ":7300", "--xds-max-site-demand", "0"}, wantErr: "xds-max-site-demand: must be a finite fraction > 0"},
		{name: "bad stream limit", args: []string{"--insecure-plaintext", "--xds-listen", ":7300", "--xds-max-streams-per-client", "0"}, wantErr: "xds-max-streams-per-client: must be > 0, got 0"},
		{name: "plaintext", args: []string{"--insecure-plaintext", "--xds-listen", "127.0.0.1:7300"}},
		{name: "bad listen", args: []string{"--insecure-plaintext", "--xds-listen", "7300"}, wantErr: `xds-listen: must be host:port, got "7300"`},
		{name: "bad damping", args: []string{"--insecure-plaintext", "--xds-listen", ":7300", "--xds-damping", "0"}, wantErr: "xds-damping: must be in (0,1]"},
		{name: "bad interval", args: []string{"--insecure-plaintext", "--xds-listen", ":7300", "--xds-plan-interval", "0s"}, wantErr: "xds-plan-interval: must be > 0"},
		{name: "bad envoy listen", args: []string{"--insecure-plaintext", "--xds-listen", ":7300", "--xds-envoy-listen", "envoy"}, wantErr: "xds-envoy-listen: xds.envoy_listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--config", "cp.yaml", "--node", "cp-1"}, tt.args...)
			if !slices.Contains(args, "--insecure-plaintext") && !slices.Contains(args, "--tls-ca") {
				args = append(args, "--insecure-plaintext")
			}
			cfg, _, ok := configFrom(t, args, tt.wantErr)
			if !ok {
				return
			}
			if tt.name == "mTLS with an allow list" {
				x := cfg.XDS
				if x.Listen != "127.0.0.1:7300" || strings.Join(x.AllowedClients, ",") != "*.nyc.xds.example=nyc,spiffe://example/lon=lon+lon2/web+api" ||
					x.PlanInterval != 250*time.Millisecond || x.Damping != 1 || x.EnvoyListen != ":8443" || x.MaxSiteDemand != 0.5 ||
					x.Limits != (xdsexport.Limits{MaxStreams: 100, MaxStreamsPerClient: 10, MaxKeys: 20, KeyGrace: time.Minute}) {
					t.Errorf("XDS = %+v", x)
				}
			}
			if tt.name == "off by default" && (cfg.XDS.Listen != "" || cfg.XDS.MaxSiteDemand != 1 || cfg.XDS.Limits != xdsexport.DefaultLimits()) {
				t.Errorf("XDS = %+v, want off, a site demand bound of 1 and the default limits", cfg.XDS)
			}
		})
	}
}

// configFrom parses args and turns them into the daemon's Config. With
// wantErr set it checks that daemonConfig fails with an error containing
// it and returns ok false; otherwise it fails the test on any error.
func configFrom(t *testing.T, args []string, wantErr string) (cfg controlplane.Config, warnings []string, ok bool) {
	t.Helper()
	v, _, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err = daemonConfig(v, args)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("daemonConfig() error = %v, want %q", err, wantErr)
		}
		return cfg, nil, false
	}
	if err != nil {
		t.Fatalf("daemonConfig() = %v", err)
	}
	return cfg, warnings, true
}

// TestQuotaRedisFlags: the Redis flags reach the Config, and bad
// combinations are refused with the flag named.
func TestQuotaRedisFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    quotaredis.Config
		wantErr string
	}{
		{name: "none"},
		{name: "mutual TLS and a password file",
			args: []string{"--quota-redis", "redis.example:6380", "--quota-redis-password-file", "/run/redis-pw",
				"--quota-redis-tls-ca", "redis-ca.pem", "--quota-redis-tls-cert", "cp.pem", "--quota-redis-tls-key", "cp.key",
				"--quota-redis-tls-server-name", "redis.internal", "--quota-redis-timeout", "50ms"},
			want: quotaredis.Config{Addr: "redis.example:6380", PasswordFile: "/run/redis-pw",
				TLS: mtls.Files{CA: "redis-ca.pem", Cert: "cp.pem", Key: "cp.key"}, TLSServerName: "redis.internal", Timeout: 50 * time.Millisecond}},
		{name: "CA only", args: []string{"--quota-redis", "r:6380", "--quota-redis-tls-ca", "ca.pem"},
			want: quotaredis.Config{Addr: "r:6380", TLS: mtls.Files{CA: "ca.pem"}, Timeout: 20 * time.Millisecond}},
		{name: "TLS without redis", args: []string{"--quota-redis-tls-ca", "ca.pem"},
			wantErr: "quota-redis-tls-ca: TLS flags set without --quota-redis"},
		{name: "key without cert", args: []string{"--quota-redis", "r:6380", "--quota-redis-tls-ca", "ca.pem", "--quota-redis-tls-key", "k.pem"},
			wantErr: "quota-redis-tls-cert, quota-redis-tls-key: set both or neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--config", "cp.yaml", "--node", "cp-1", "--insecure-plaintext"}, tt.args...)
			cfg, _, ok := configFrom(t, args, tt.wantErr)
			if !ok {
				return
			}
			got := cfg.QuotaRedis
			if tt.name == "none" {
				tt.want = quotaredis.Config{Timeout: 20 * time.Millisecond}
			}
			if got != tt.want {
				t.Errorf("QuotaRedis = %+v, want %+v", got, tt.want)
			}
		})
	}
}
