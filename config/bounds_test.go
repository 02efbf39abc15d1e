package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// boundsYAML is a valid config with one service of each balancing mode,
// an http and a tcp listener: the base each bounds case changes.
const boundsYAML = `
regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances: [{address: "127.0.0.1:9001"}]
          - name: g2
            instances: [{address: "127.0.0.1:9002"}]
          - name: g3
            instances: [{address: "127.0.0.1:9003"}]
services:
  - name: web
    backends: [{group: g1, max_rate_per_instance: 10}]
    session_affinity: {type: generated_cookie, cookie_name: s, cookie_secret: 0123456789abcdef0123456789abcdef}
  - name: db
    balancing_mode: CONNECTION
    backends: [{group: g2, max_connections_per_instance: 10}]
  - name: util
    balancing_mode: UTILIZATION
    backends: [{group: g3, max_utilization: 0.8, utilization_rate_per_instance: 100}]
routes:
  - service: web
listeners:
  - {name: web, protocol: http, port: 80}
  - {name: db, protocol: tcp, port: 5432, service: db}
`

// parseBounds parses boundsYAML, applies mutate to the result and
// validates it again.
func parseBounds(t *testing.T, mutate func(*Config)) error {
	t.Helper()
	c, err := Parse([]byte(boundsYAML), "bounds.yaml")
	if err != nil {
		t.Fatalf("base config: %v", err)
	}
	mutate(c)
	return c.Validate()
}

// TestBounds: every numeric field has an upper bound (finding 7 of the first
// security review, SECURITY.md): the bound itself is accepted, one step above
// is rejected with an error naming the file and the field path.
func TestBounds(t *testing.T) {
	web := func(c *Config) *Service { return &c.Services[0] }
	db := func(c *Config) *Service { return &c.Services[1] }
	util := func(c *Config) *Service { return &c.Services[2] }
	httpL := func(c *Config) *Listener { return &c.Listeners[0] }
	tcpL := func(c *Config) *Listener { return &c.Listeners[1] }
	for _, tc := range []struct {
		name    string
		ok, bad func(*Config)
		want    string // the error of bad
	}{
		{"max_rate_per_instance",
			func(c *Config) { web(c).Backends[0].MaxRatePerInstance = 1e9 },
			func(c *Config) { web(c).Backends[0].MaxRatePerInstance = 1e308 },
			"services[0].backends[0].max_rate_per_instance: must be at most 1e+09 requests/s, got 1e+308"},
		{"max_rate",
			func(c *Config) { web(c).Backends[0].MaxRatePerInstance, web(c).Backends[0].MaxRate = 0, 1e9 },
			func(c *Config) { web(c).Backends[0].MaxRatePerInstance, web(c).Backends[0].MaxRate = 0, 1.5e9 },
			"services[0].backends[0].max_rate: must be at most 1e+09 requests/s, got 1.5e+09"},
		{"utilization_rate_per_instance",
			func(c *Config) { util(c).Backends[0].UtilizationRatePerInstance = 1e9 },
			func(c *Config) { util(c).Backends[0].UtilizationRatePerInstance = 2e9 },
			"services[2].backends[0].utilization_rate_per_instance: must be at most 1e+09 requests/s, got 2e+09"},
		{"max_connections_per_instance",
			func(c *Config) { db(c).Backends[0].MaxConnectionsPerInstance = 1e9 },
			func(c *Config) { db(c).Backends[0].MaxConnectionsPerInstance = 1e9 + 1 },
			"services[1].backends[0].max_connections_per_instance: must be at most 1000000000, got 1.000000001e+09"},
		{"max_connections",
			func(c *Config) {
				db(c).Backends[0].MaxConnectionsPerInstance, db(c).Backends[0].MaxConnections = 0, 1e9
			},
			func(c *Config) {
				db(c).Backends[0].MaxConnectionsPerInstance, db(c).Backends[0].MaxConnections = 0, 1<<62
			},
			"services[1].backends[0].max_connections: must be at most 1000000000, got 4.611686018427388e+18"},
		{"instances per group",
			func(c *Config) { c.Regions[0].Zones[0].Groups[0].Instances = instances(10_000) },
			func(c *Config) { c.Regions[0].Zones[0].Groups[0].Instances = instances(10_001) },
			"regions[0].zones[0].groups[0].instances: at most 10000 instances per group, got 10001"},
		{"max_concurrency",
			func(c *Config) { c.Regions[0].Zones[0].Groups[0].Instances[0].MaxConcurrency = 1_000_000 },
			func(c *Config) { c.Regions[0].Zones[0].Groups[0].Instances[0].MaxConcurrency = 1<<63 - 1 },
			"regions[0].zones[0].groups[0].instances[0].max_concurrency: must be in 0..1000000 (0 = unlimited), got 9223372036854775807"},
		{"spill.slope",
			func(c *Config) { web(c).Spill.Slope = 1000 },
			func(c *Config) { web(c).Spill.Slope = 1e308 },
			"services[0].spill.slope: must be in (0, 1000], got 1e+308"},
		{"health_check.interval",
			func(c *Config) { web(c).HealthCheck.Interval = time.Hour },
			func(c *Config) { web(c).HealthCheck.Interval = time.Hour + time.Second },
			"services[0].health_check.interval: must be at most 1h0m0s, got 1h0m1s"},
		{"health_check.healthy_threshold",
			func(c *Config) { web(c).HealthCheck.HealthyThreshold = 100 },
			func(c *Config) { web(c).HealthCheck.HealthyThreshold = 101 },
			"services[0].health_check.healthy_threshold: must be in 1..100, got 101"},
		{"health_check.unhealthy_threshold",
			func(c *Config) { web(c).HealthCheck.UnhealthyThreshold = 100 },
			func(c *Config) { web(c).HealthCheck.UnhealthyThreshold = 1 << 40 },
			"services[0].health_check.unhealthy_threshold: must be in 1..100, got 1099511627776"},
		{"outlier_detection.consecutive_5xx",
			func(c *Config) { web(c).OutlierDetection.Consecutive5xx = 10_000 },
			func(c *Config) { web(c).OutlierDetection.Consecutive5xx = 10_001 },
			"services[0].outlier_detection.consecutive_5xx: must be in 0..10000 (0 disables), got 10001"},
		{"outlier_detection.consecutive_connect_failures",
			func(c *Config) { web(c).OutlierDetection.ConsecutiveConnectFailures = 10_000 },
			func(c *Config) { web(c).OutlierDetection.ConsecutiveConnectFailures = 10_001 },
			"services[0].outlier_detection.consecutive_connect_failures: must be in 0..10000 (0 disables), got 10001"},
		{"outlier_detection.max_ejection_time",
			func(c *Config) { web(c).OutlierDetection.MaxEjectionTime = 24 * time.Hour },
			func(c *Config) { web(c).OutlierDetection.MaxEjectionTime = 1<<63 - 1 },
			"services[0].outlier_detection.max_ejection_time: must be at most 24h0m0s, got 2562047h47m16.854775807s"},
		{"outlier_detection.base_ejection_time",
			func(c *Config) {
				web(c).OutlierDetection.BaseEjectionTime = 24 * time.Hour
				web(c).OutlierDetection.MaxEjectionTime = 24 * time.Hour
			},
			func(c *Config) {
				web(c).OutlierDetection.BaseEjectionTime = 25 * time.Hour
				web(c).OutlierDetection.MaxEjectionTime = 24 * time.Hour
			},
			"services[0].outlier_detection.base_ejection_time: must be at most 24h0m0s, got 25h0m0s"},
		{"feedback.queue_delay",
			func(c *Config) { web(c).Feedback.QueueDelay = time.Minute },
			func(c *Config) { web(c).Feedback.QueueDelay = time.Hour },
			"services[0].feedback.queue_delay: must be at most 1m0s, got 1h0m0s"},
		{"feedback.hold",
			func(c *Config) { web(c).Feedback.Hold = time.Hour },
			func(c *Config) { web(c).Feedback.Hold = 2 * time.Hour },
			"services[0].feedback.hold: must be at most 1h0m0s, got 2h0m0s"},
		{"feedback.recover_delay",
			func(c *Config) { web(c).Feedback.RecoverDelay = time.Hour },
			func(c *Config) { web(c).Feedback.RecoverDelay = 2 * time.Hour },
			"services[0].feedback.recover_delay: must be at most 1h0m0s, got 2h0m0s"},
		{"session_affinity.cookie_ttl",
			func(c *Config) { web(c).SessionAffinity.CookieTTL = 400 * 24 * time.Hour },
			func(c *Config) { web(c).SessionAffinity.CookieTTL = 1<<63 - 1 },
			"services[0].session_affinity.cookie_ttl: must be in [0, 9600h0m0s] (400 days; 0 = session cookie), got 2562047h47m16.854775807s"},
		{"routes.timeout",
			func(c *Config) { c.Routes[0].Timeout = 24 * time.Hour },
			func(c *Config) { c.Routes[0].Timeout = 1<<63 - 1 },
			"routes[0].timeout: must be at most 24h0m0s, got 2562047h47m16.854775807s"},
		{"http max_header_bytes",
			func(c *Config) { httpL(c).MaxHeaderBytes = 1 << 20 },
			func(c *Config) { httpL(c).MaxHeaderBytes = 1<<63 - 1 },
			"listeners[0].max_header_bytes: must be in 1024..1048576, got 9223372036854775807"},
		{"http max_request_body_bytes",
			func(c *Config) { httpL(c).MaxRequestBodyBytes = 1 << 40 },
			func(c *Config) { httpL(c).MaxRequestBodyBytes = 1<<63 - 1 },
			"listeners[0].max_request_body_bytes: must be in 0..1099511627776 (0 = unlimited), got 9223372036854775807"},
		{"http read_header_timeout",
			func(c *Config) { httpL(c).ReadHeaderTimeout = time.Hour },
			func(c *Config) { httpL(c).ReadHeaderTimeout = 2 * time.Hour },
			"listeners[0].read_header_timeout: must be at most 1h0m0s, got 2h0m0s"},
		{"http idle_timeout",
			func(c *Config) { httpL(c).IdleTimeout = 24 * time.Hour },
			func(c *Config) { httpL(c).IdleTimeout = 48 * time.Hour },
			"listeners[0].idle_timeout: must be at most 24h0m0s, got 48h0m0s"},
		{"http max_connections",
			func(c *Config) {},
			func(c *Config) { httpL(c).MaxConnections = 5 },
			"listeners[0].max_connections: only valid with protocol tcp; protocol is http"},
		{"http max_connections_per_client",
			func(c *Config) { httpL(c).MaxConnectionsPerClient = 1_000_000 },
			func(c *Config) { httpL(c).MaxConnectionsPerClient = 0 },
			"listeners[0].max_connections_per_client: must be in 1..1000000, got 0"},
		{"http max_connections_per_client max",
			func(c *Config) { httpL(c).MaxConnectionsPerClient = 1 },
			func(c *Config) { httpL(c).MaxConnectionsPerClient = 1_000_001 },
			"listeners[0].max_connections_per_client: must be in 1..1000000, got 1000001"},
		{"tcp idle_timeout",
			func(c *Config) { tcpL(c).IdleTimeout = 24 * time.Hour },
			func(c *Config) { tcpL(c).IdleTimeout = 0 },
			"listeners[1].idle_timeout: must be > 0, got 0s"},
		{"tcp idle_timeout max",
			func(c *Config) { tcpL(c).IdleTimeout = 24 * time.Hour },
			func(c *Config) { tcpL(c).IdleTimeout = 25 * time.Hour },
			"listeners[1].idle_timeout: must be at most 24h0m0s, got 25h0m0s"},
		{"tcp first_byte_timeout",
			func(c *Config) { tcpL(c).FirstByteTimeout = time.Hour },
			func(c *Config) { tcpL(c).FirstByteTimeout = 2 * time.Hour },
			"listeners[1].first_byte_timeout: must be at most 1h0m0s, got 2h0m0s"},
		{"tcp max_connections",
			func(c *Config) { tcpL(c).MaxConnections = 1_000_000 },
			func(c *Config) { tcpL(c).MaxConnections = 0 },
			"listeners[1].max_connections: must be in 1..1000000, got 0"},
		{"tcp max_connections_per_client",
			func(c *Config) { tcpL(c).MaxConnectionsPerClient = 1_000_000 },
			func(c *Config) { tcpL(c).MaxConnectionsPerClient = 1_000_001 },
			"listeners[1].max_connections_per_client: must be in 1..1000000, got 1000001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := parseBounds(t, tc.ok); err != nil {
				t.Errorf("at the bound: %v", err)
			}
			err := parseBounds(t, tc.bad)
			fes := FieldErrors(err)
			if len(fes) != 1 {
				t.Fatalf("beyond the bound: got %d errors, want 1: %v", len(fes), err)
			}
			if want := "bounds.yaml: " + tc.want; fes[0].Error() != want {
				t.Errorf("beyond the bound:\n got %s\nwant %s", fes[0].Error(), want)
			}
		})
	}
}

func instances(n int) []Instance {
	out := make([]Instance, n)
	for i := range out {
		out[i] = Instance{Address: fmt.Sprintf("10.%d.%d.%d:80", i>>16, i>>8&0xff, i&0xff)}
	}
	return out
}

// TestBoundsAttackValues: the values of the first security review, finding 7
// (SECURITY.md), as an attacker (or a typo) writes them in a file, are
// rejected by Parse with the file and the field path.
func TestBoundsAttackValues(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{"max_rate_per_instance: 10", "max_rate_per_instance: 1e308",
			"bounds.yaml: services[0].backends[0].max_rate_per_instance: must be at most 1e+09 requests/s, got 1e+308"},
		{"{name: web, protocol: http, port: 80}", "{name: web, protocol: http, port: 80, max_header_bytes: 9223372036854775807}",
			"bounds.yaml: listeners[0].max_header_bytes: must be in 1024..1048576, got 9223372036854775807"},
	} {
		y := strings.Replace(boundsYAML, tc.old, tc.new, 1)
		_, err := Parse([]byte(y), "bounds.yaml")
		fes := FieldErrors(err)
		if len(fes) != 1 || fes[0].Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.new, err, tc.want)
		}
	}
}

// TestBoundsKeepTotalsFinite: the largest capacity a group may declare,
// summed over a million such groups, is finite: the planner's totals
// cannot overflow for any config that passes validation.
func TestBoundsKeepTotalsFinite(t *testing.T) {
	b := Backend{MaxRatePerInstance: MaxRate, CapacityScaler: 1}
	per := b.Capacity(ModeRate, MaxInstances, MaxInstances)
	var total float64
	for range 1_000_000 {
		total += per
	}
	if total > 1e20 || total != total {
		t.Fatalf("total capacity of a million largest groups = %v, want finite and below 1e20", total)
	}
}
