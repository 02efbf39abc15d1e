package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		env     []string
		check   func(t *testing.T, c *Config)
		wantErr []string // substrings, each after "<file>: "
	}{
		{
			name: "drain a group",
			file: "../configs/demo.yaml",
			env:  []string{"SPILLWAY_SERVICES_0_BACKENDS_1_CAPACITY_SCALER=0"},
			check: func(t *testing.T, c *Config) {
				if got := c.Services[0].Backends[1].CapacityScaler; got != 0 {
					t.Errorf("capacity_scaler = %v, want 0", got)
				}
				if got := c.Services[0].Backends[0].CapacityScaler; got != 1 {
					t.Errorf("other backend's capacity_scaler = %v, want 1", got)
				}
			},
		},
		{
			name: "cookie secret from the environment",
			file: "../configs/affinity.yaml",
			env:  []string{"SPILLWAY_SERVICES_3_SESSION_AFFINITY_COOKIE_SECRET=from-the-secret-store-0123456789abcdef"},
			check: func(t *testing.T, c *Config) {
				if got := c.Services[3].SessionAffinity.CookieSecret; got != "from-the-secret-store-0123456789abcdef" {
					t.Errorf("cookie_secret = %q, want the environment's", got)
				}
			},
		},
		{
			name:    "short cookie secret from the environment",
			file:    "../configs/affinity.yaml",
			env:     []string{"SPILLWAY_SERVICES_3_SESSION_AFFINITY_COOKIE_SECRET=short"},
			wantErr: []string{"services[3].session_affinity.cookie_secret: must be at least 32 bytes, got 5"},
		},
		{
			name: "policy, duration, route host, instance address",
			file: "../configs/demo.yaml",
			env: []string{
				"SPILLWAY_SERVICES_0_POLICY=hash3",
				"SPILLWAY_SERVICES_0_HEALTH_CHECK_INTERVAL=10s",
				"SPILLWAY_ROUTES_0_HOST=demo.example.com",
				"SPILLWAY_REGIONS_2_ZONES_1_GROUPS_0_INSTANCES_1_ADDRESS=127.0.0.2:9999",
				"SPILLWAY_REGIONS_0_ZONES_0_GROUPS_0_INSTANCES_0_MAX_CONCURRENCY= 7",
			},
			check: func(t *testing.T, c *Config) {
				s := c.Services[0]
				if s.Policy != PolicyHash3 || s.HashScope != HashScopeGlobal {
					t.Errorf("policy, hash_scope = %s, %s; want hash3, global", s.Policy, s.HashScope)
				}
				if s.HealthCheck.Interval != 10*time.Second {
					t.Errorf("interval = %v, want 10s", s.HealthCheck.Interval)
				}
				if c.Routes[0].Host != "demo.example.com" {
					t.Errorf("route host = %q", c.Routes[0].Host)
				}
				if got := c.Regions[2].Zones[1].Groups[0].Instances[1].Address; got != "127.0.0.2:9999" {
					t.Errorf("address = %q", got)
				}
				if got := c.Regions[0].Zones[0].Groups[0].Instances[0].MaxConcurrency; got != 7 {
					t.Errorf("max_concurrency = %d, want 7", got)
				}
			},
		},
		{
			name: "section absent from the file",
			file: "testdata/minimal.good.yaml",
			env:  []string{"SPILLWAY_SERVICES_0_SPILL_SLOPE=3", "SPILLWAY_SERVICES_0_SESSION_AFFINITY_TYPE=client_ip"},
			check: func(t *testing.T, c *Config) {
				s := c.Services[0]
				if s.Spill != (Spill{Threshold: 0.5, Slope: 3}) {
					t.Errorf("spill = %+v, want threshold default and slope 3", s.Spill)
				}
				if s.SessionAffinity.Type != AffinityClientIP {
					t.Errorf("affinity = %s", s.SessionAffinity.Type)
				}
			},
		},
		{
			name: "other SPILLWAY_ variables are left alone",
			file: "testdata/minimal.good.yaml",
			env:  []string{"SPILLWAY_LOG_LEVEL=debug", "SPILLWAY_SITE=us-east", "PATH=/bin", "SPILLWAY_SERVICESX=1"},
			check: func(t *testing.T, c *Config) {
				if c.Services[0].Policy != PolicyWaterfall {
					t.Errorf("policy = %s", c.Services[0].Policy)
				}
			},
		},
		{
			name: "listener fields, and defaults that follow an overridden protocol",
			file: "testdata/listeners.good.yaml",
			env: []string{
				"SPILLWAY_LISTENERS_0_PROTOCOL=tcp",
				"SPILLWAY_LISTENERS_0_SERVICE=db",
				"SPILLWAY_LISTENERS_1_MAX_REQUEST_BODY_BYTES=8589934592",
				"SPILLWAY_LISTENERS_1_CERTIFICATES_1_KEY_FILE=/k",
				"SPILLWAY_ROUTES_0_RETRIES=3",
				"SPILLWAY_SERVICES_0_OUTLIER_DETECTION_MAX_EJECTION_TIME=1m",
			},
			check: func(t *testing.T, c *Config) {
				want := Listener{Name: "plain", Protocol: ListenerTCP, Port: 8080, Service: "db",
					IdleTimeout: 10 * time.Minute, FirstByteTimeout: 30 * time.Second, MaxConnections: 10000, MaxConnectionsPerClient: 256}
				if diff := cmp.Diff(want, c.Listeners[0]); diff != "" {
					t.Errorf("listener 0 (-want +got):\n%s", diff)
				}
				if got := c.Listeners[1].MaxRequestBodyBytes; got != 8<<30 {
					t.Errorf("max_request_body_bytes = %d, want 8 GiB", got)
				}
				if got := c.Listeners[1].Certificates[1].KeyFile; got != "/k" {
					t.Errorf("key_file = %q", got)
				}
				if got := c.Routes[0].Retries; got != 3 {
					t.Errorf("retries = %d, want 3", got)
				}
				if got := c.Services[0].OutlierDetection.MaxEjectionTime; got != time.Minute {
					t.Errorf("max_ejection_time = %v, want 1m", got)
				}
			},
		},
		{
			name:    "unparsable value",
			file:    "testdata/minimal.good.yaml",
			env:     []string{"SPILLWAY_SERVICES_0_BACKENDS_0_CAPACITY_SCALER=half"},
			wantErr: []string{`services[0].backends[0].capacity_scaler: env SPILLWAY_SERVICES_0_BACKENDS_0_CAPACITY_SCALER: expected a number, got "half"`},
		},
		{
			name:    "value is validated",
			file:    "testdata/minimal.good.yaml",
			env:     []string{"SPILLWAY_SERVICES_0_BACKENDS_0_CAPACITY_SCALER=2", "SPILLWAY_SERVICES_0_HEALTH_CHECK_TIMEOUT=1"},
			wantErr: []string{`services[0].backends[0].capacity_scaler: must be in [0, 1] (0 drains), got 2`, `services[0].health_check.timeout: expected a duration such as "5s", got string "1"`},
		},
		{
			name: "names that match no field",
			file: "testdata/minimal.good.yaml",
			env:  []string{"SPILLWAY_SERVICES_5_POLICY=round_robin", "SPILLWAY_SERVICES_0_POLCY=round_robin", "SPILLWAY_ROUTES=x", "SPILLWAY_LISTENERS_0_PORT=80"},
			wantErr: []string{
				`env SPILLWAY_LISTENERS_0_PORT: matches no config field (list entries must exist in the file)`,
				`env SPILLWAY_ROUTES: matches no config field`,
				`env SPILLWAY_SERVICES_0_POLCY: matches no config field`,
				`env SPILLWAY_SERVICES_5_POLICY: matches no config field (list entries must exist in the file)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(tt.file, tt.env)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Load(%s) with %v succeeded, want errors", tt.file, tt.env)
				}
				fes := FieldErrors(err)
				if len(fes) != len(tt.wantErr) {
					t.Errorf("got %d errors, want %d:\n%v", len(fes), len(tt.wantErr), err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), filepath.Clean(tt.file)+": "+w) && !strings.Contains(err.Error(), tt.file+": "+w) {
						t.Errorf("missing error %q in:\n%v", w, err)
					}
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("error does not match ErrInvalid")
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(%s) with %v: %v", tt.file, tt.env, err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadReadsProcessEnvironment(t *testing.T) {
	t.Setenv("SPILLWAY_SERVICES_0_POLICY", "least_request")
	c, err := Load("testdata/minimal.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Services[0].Policy != PolicyLeastRequest {
		t.Errorf("policy = %s, want least_request from the environment", c.Services[0].Policy)
	}
	// Parse depends on its input alone.
	c, err = Parse([]byte(mustRead(t, "testdata/minimal.good.yaml")), "m.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Services[0].Policy != PolicyWaterfall {
		t.Errorf("Parse applied the environment: policy = %s", c.Services[0].Policy)
	}
}
