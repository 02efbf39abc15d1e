package health

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	// The defaults are part of the operator-facing contract.
	if c.Protocol != ProtocolHTTP || c.Path != "/" || c.ExpectedStatus != (StatusRange{200, 299}) ||
		c.Interval != 5*time.Second || c.Timeout != time.Second ||
		c.HealthyThreshold != 2 || c.UnhealthyThreshold != 3 || c.Jitter != 0.1 ||
		c.InitialStatus != StatusUnknown {
		t.Errorf("DefaultConfig() = %+v, want the documented defaults", c)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		// wantErrs are substrings that must each appear; empty means valid.
		wantErrs []string
	}{
		{name: "default", modify: func(*Config) {}},
		{name: "tcp ignores http fields", modify: func(c *Config) {
			c.Protocol = ProtocolTCP
			c.Path = ""
			c.ExpectedStatus = StatusRange{}
		}},
		{name: "grpc with service", modify: func(c *Config) {
			c.Protocol = ProtocolGRPC
			c.GRPCService = "pkg.Svc"
			c.Path = "nonsense"
		}},
		{name: "http path with query", modify: func(c *Config) { c.Path = "/healthz?full=1" }},
		{name: "threshold 1 and zero jitter", modify: func(c *Config) {
			c.HealthyThreshold, c.UnhealthyThreshold, c.Jitter = 1, 1, 0
		}},
		{name: "timeout equal to interval", modify: func(c *Config) { c.Timeout = c.Interval }},
		{name: "initial healthy", modify: func(c *Config) { c.InitialStatus = StatusHealthy }},
		{
			name:     "unknown protocol",
			modify:   func(c *Config) { c.Protocol = "udp" },
			wantErrs: []string{`protocol: must be one of http, tcp, grpc, got "udp"`},
		},
		{
			name:     "relative path",
			modify:   func(c *Config) { c.Path = "healthz" },
			wantErrs: []string{`path: must start with "/", got "healthz"`},
		},
		{
			name:     "bad host",
			modify:   func(c *Config) { c.Host = "a b" },
			wantErrs: []string{`host: must be a host or host:port, got "a b"`},
		},
		{
			name:     "status range inverted",
			modify:   func(c *Config) { c.ExpectedStatus = StatusRange{Min: 300, Max: 200} },
			wantErrs: []string{"expected_status: must satisfy 100 <= min <= max <= 599, got min 300 max 200"},
		},
		{
			name:     "status range out of bounds",
			modify:   func(c *Config) { c.ExpectedStatus = StatusRange{Min: 200, Max: 600} },
			wantErrs: []string{"expected_status:"},
		},
		{
			name:     "timeout above interval",
			modify:   func(c *Config) { c.Interval, c.Timeout = time.Second, 2*time.Second },
			wantErrs: []string{"timeout: must be <= interval (1s), got 2s"},
		},
		{
			name:     "jitter NaN",
			modify:   func(c *Config) { c.Jitter = math.NaN() },
			wantErrs: []string{"jitter: must be in [0, 1), got NaN"},
		},
		{
			name:     "jitter one",
			modify:   func(c *Config) { c.Jitter = 1 },
			wantErrs: []string{"jitter: must be in [0, 1), got 1"},
		},
		{
			name:     "bad initial status",
			modify:   func(c *Config) { c.InitialStatus = "up" },
			wantErrs: []string{`initial_status: must be one of unknown, healthy, unhealthy, got "up"`},
		},
		{
			name: "every problem at once",
			modify: func(c *Config) {
				*c = Config{Protocol: ProtocolTCP, Jitter: -0.5}
			},
			wantErrs: []string{
				"interval: must be > 0, got 0s",
				"timeout: must be > 0, got 0s",
				"healthy_threshold: must be >= 1, got 0",
				"unhealthy_threshold: must be >= 1, got 0",
				"jitter: must be in [0, 1), got -0.5",
				`initial_status: must be one of unknown, healthy, unhealthy, got ""`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.wantErrs)
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
			if got, want := len(strings.Split(err.Error(), "\n")), len(tt.wantErrs); got != want {
				t.Errorf("Validate() reported %d problems, want %d: %q", got, want, err)
			}
		})
	}
}

func TestStatusRangeContains(t *testing.T) {
	r := StatusRange{Min: 200, Max: 299}
	for code, want := range map[int]bool{199: false, 200: true, 250: true, 299: true, 300: false, 500: false} {
		if got := r.Contains(code); got != want {
			t.Errorf("%v.Contains(%d) = %v, want %v", r, code, got, want)
		}
	}
}
