package outlier

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr []string // every message, in order; nil means valid
	}{
		{name: "default", mutate: func(*Config) {}},
		{name: "thresholds of one", mutate: func(c *Config) { c.Consecutive5xx, c.ConsecutiveConnectFailures = 1, 1 }},
		{name: "max equals base", mutate: func(c *Config) { c.MaxEjectionTime = c.BaseEjectionTime }},
		{name: "percent zero", mutate: func(c *Config) { c.MaxEjectionPercent = 0 }},
		{name: "percent hundred", mutate: func(c *Config) { c.MaxEjectionPercent = 100 }},
		{
			name:    "consecutive 5xx zero",
			mutate:  func(c *Config) { c.Consecutive5xx = 0 },
			wantErr: []string{"outlier.consecutive_5xx: must be >= 1, got 0"},
		},
		{
			name:    "connect failures negative",
			mutate:  func(c *Config) { c.ConsecutiveConnectFailures = -2 },
			wantErr: []string{"outlier.consecutive_connect_failures: must be >= 1, got -2"},
		},
		{
			name:    "base zero",
			mutate:  func(c *Config) { c.BaseEjectionTime = 0 },
			wantErr: []string{"outlier.base_ejection_time: must be > 0, got 0s"},
		},
		{
			name:    "max below base",
			mutate:  func(c *Config) { c.MaxEjectionTime = 10 * time.Second },
			wantErr: []string{"outlier.max_ejection_time: must be >= base_ejection_time (30s), got 10s"},
		},
		{
			name:    "max negative",
			mutate:  func(c *Config) { c.MaxEjectionTime = -time.Second },
			wantErr: []string{"outlier.max_ejection_time: must be > 0, got -1s"},
		},
		{
			name:    "percent over hundred",
			mutate:  func(c *Config) { c.MaxEjectionPercent = 101 },
			wantErr: []string{"outlier.max_ejection_percent: must be in [0, 100], got 101"},
		},
		{
			name:    "percent negative",
			mutate:  func(c *Config) { c.MaxEjectionPercent = -1 },
			wantErr: []string{"outlier.max_ejection_percent: must be in [0, 100], got -1"},
		},
		{
			name:   "zero value reports every field",
			mutate: func(c *Config) { *c = Config{MaxEjectionPercent: 50} },
			wantErr: []string{
				"outlier.consecutive_5xx: must be >= 1, got 0",
				"outlier.consecutive_connect_failures: must be >= 1, got 0",
				"outlier.base_ejection_time: must be > 0, got 0s",
				"outlier.max_ejection_time: must be > 0, got 0s",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if diff := cmp.Diff(tt.wantErr, got); diff != "" {
				t.Errorf("Validate() errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewAndSetConfigRejectInvalid(t *testing.T) {
	bad := DefaultConfig()
	bad.Consecutive5xx = 0
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "outlier.consecutive_5xx") {
		t.Fatalf("New(bad) error = %v, want one naming outlier.consecutive_5xx", err)
	}
	d := mustNew(t, DefaultConfig())
	if err := d.SetConfig(bad); err == nil {
		t.Fatal("SetConfig(bad) = nil, want an error")
	}
	if diff := cmp.Diff(DefaultConfig(), d.Config()); diff != "" {
		t.Errorf("Config() after rejected SetConfig (-want +got):\n%s", diff)
	}
}

func TestEjectionTime(t *testing.T) {
	tests := []struct {
		name      string
		base, max time.Duration
		k         int
		want      time.Duration
	}{
		{name: "first", base: 30 * time.Second, max: 300 * time.Second, k: 1, want: 30 * time.Second},
		{name: "third", base: 30 * time.Second, max: 300 * time.Second, k: 3, want: 90 * time.Second},
		{name: "exactly max", base: 30 * time.Second, max: 300 * time.Second, k: 10, want: 300 * time.Second},
		{name: "past max", base: 30 * time.Second, max: 300 * time.Second, k: 11, want: 300 * time.Second},
		{name: "huge k", base: 30 * time.Second, max: 300 * time.Second, k: 1 << 40, want: 300 * time.Second},
		{name: "max not a multiple", base: 10 * time.Second, max: 35 * time.Second, k: 4, want: 35 * time.Second},
		{name: "below uneven max", base: 10 * time.Second, max: 35 * time.Second, k: 3, want: 30 * time.Second},
		{name: "base equals max", base: time.Second, max: time.Second, k: 5, want: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{BaseEjectionTime: tt.base, MaxEjectionTime: tt.max}
			if got := c.ejectionTime(tt.k); got != tt.want {
				t.Errorf("ejectionTime(%d) with base %s max %s = %s, want %s", tt.k, tt.base, tt.max, got, tt.want)
			}
		})
	}
}

func TestMaxMultiplier(t *testing.T) {
	tests := []struct {
		base, max time.Duration
		want      int
	}{
		{base: 30 * time.Second, max: 300 * time.Second, want: 10},
		{base: 10 * time.Second, max: 35 * time.Second, want: 4},
		{base: time.Second, max: time.Second, want: 1},
	}
	for _, tt := range tests {
		c := Config{BaseEjectionTime: tt.base, MaxEjectionTime: tt.max}
		if got := c.maxMultiplier(); got != tt.want {
			t.Errorf("maxMultiplier() with base %s max %s = %d, want %d", tt.base, tt.max, got, tt.want)
		}
	}
}

func TestAllowedEjections(t *testing.T) {
	tests := []struct {
		total, percent, want int
	}{
		{total: 0, percent: 50, want: 0},
		{total: 1, percent: 50, want: 0},
		{total: 1, percent: 100, want: 0},
		{total: 2, percent: 50, want: 1},
		{total: 3, percent: 50, want: 1},
		{total: 4, percent: 50, want: 2},
		{total: 5, percent: 50, want: 2},
		{total: 10, percent: 50, want: 5},
		{total: 2, percent: 100, want: 1},
		{total: 10, percent: 100, want: 9},
		{total: 10, percent: 0, want: 0},
		{total: 10, percent: 10, want: 1},
		{total: 9, percent: 10, want: 0},
	}
	for _, tt := range tests {
		c := Config{MaxEjectionPercent: tt.percent}
		if got := c.allowedEjections(tt.total); got != tt.want {
			t.Errorf("allowedEjections(%d) at %d%% = %d, want %d", tt.total, tt.percent, got, tt.want)
		}
	}
}
