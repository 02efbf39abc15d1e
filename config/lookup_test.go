package config

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func loadT(t testing.TB, path string) *Config {
	t.Helper()
	c, err := load(path, nil)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return c
}

func TestRoute(t *testing.T) {
	c := loadT(t, "testdata/routing.good.yaml")
	tests := []struct {
		name       string
		host, path string
		want       string // service; "" = no route
	}{
		{name: "exact host, longest prefix", host: "api.example.com", path: "/v1/users", want: "api-v1"},
		{name: "exact host, shorter prefix", host: "api.example.com", path: "/v2", want: "api"},
		{name: "port, case and trailing dot ignored", host: "API.Example.COM.:8443", path: "/v1/x", want: "api-v1"},
		{name: "exact host beats longer wildcard prefix", host: "api.example.com", path: "/static/x", want: "api"},
		{name: "wildcard", host: "www.example.com", path: "/x", want: "wild"},
		{name: "longer wildcard suffix first", host: "a.eu.example.com", path: "/static/x", want: "eu-static"},
		{name: "longer wildcard misses path, shorter matches", host: "a.eu.example.com", path: "/other", want: "wild"},
		{name: "deep subdomain matches wildcard", host: "x.y.z.example.com", path: "/", want: "wild"},
		{name: "wildcard does not match apex", host: "example.com", path: "/", want: "default"},
		{name: "any host, longest prefix", host: "other.org", path: "/static/a", want: "static"},
		{name: "any host, prefix is a plain string prefix", host: "other.org", path: "/staticky", want: "default"},
		{name: "empty host", host: "", path: "/", want: "default"},
		{name: "IP host with port", host: "10.0.0.1:80", path: "/", want: "ip"},
		{name: "IPv6 host", host: "[::1]:80", path: "/", want: "default"},
		{name: "path without leading slash matches nothing", host: "other.org", path: "x", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := c.Route(tt.host, tt.path)
			got := ""
			if ok {
				got = r.Service
			}
			if got != tt.want {
				t.Errorf("Route(%q, %q) = %q, want %q", tt.host, tt.path, got, tt.want)
			}
		})
	}
}

func TestRouteWithoutIndex(t *testing.T) {
	// A Config built by hand (no Load/New) still answers, from a temporary
	// index, with the same rules.
	c := &Config{Routes: []Route{
		{Host: "*", PathPrefix: "/", Service: "a"},
		{Host: "x.org", PathPrefix: "/api", Service: "b"},
	}}
	for _, tt := range []struct{ host, path, want string }{
		{"x.org", "/api/1", "b"},
		{"x.org", "/", "a"},
		{"y.org", "/api", "a"},
	} {
		if r, ok := c.Route(tt.host, tt.path); !ok || r.Service != tt.want {
			t.Errorf("Route(%q, %q) = %v, %v; want %q", tt.host, tt.path, r, ok, tt.want)
		}
	}
}

func TestRouteDoesNotAllocate(t *testing.T) {
	c := loadT(t, "testdata/routing.good.yaml")
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := c.Route("a.eu.example.com:443", "/static/app.js"); !ok {
			t.Fatal("no route")
		}
	})
	if allocs != 0 {
		t.Errorf("Route allocates %v times per call, want 0", allocs)
	}
}

func BenchmarkRoute(b *testing.B) {
	c := loadT(b, "testdata/routing.good.yaml")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := c.Route("a.eu.example.com:443", "/static/app.js"); !ok {
				b.Fatal("no route")
			}
		}
	})
}

func TestBackendCapacity(t *testing.T) {
	tests := []struct {
		name               string
		b                  Backend
		mode               BalancingMode
		healthy, instances int
		want               float64
	}{
		{"rate per instance", Backend{MaxRatePerInstance: 100, CapacityScaler: 1}, ModeRate, 3, 4, 300},
		{"rate per group scales with healthy fraction", Backend{MaxRate: 400, CapacityScaler: 1}, ModeRate, 3, 4, 300},
		{"rate per group, all healthy is exact", Backend{MaxRate: 0.3, CapacityScaler: 1}, ModeRate, 3, 3, 0.3},
		{"scaler", Backend{MaxRatePerInstance: 100, CapacityScaler: 0.5}, ModeRate, 4, 4, 200},
		{"scaler 0 drains", Backend{MaxRatePerInstance: 100, CapacityScaler: 0}, ModeRate, 4, 4, 0},
		{"connections per instance", Backend{MaxConnectionsPerInstance: 50, CapacityScaler: 1}, ModeConnection, 2, 5, 100},
		{"connections per group", Backend{MaxConnections: 500, CapacityScaler: 0.8}, ModeConnection, 1, 5, 80},
		// 4 healthy instances at 80% of 250 req/s each: 800 req/s, the unit
		// of demand (it used to be 3.2 "instance-equivalents", compared
		// with requests/s by the planner).
		{"utilization in requests/s", Backend{MaxUtilization: 0.8, UtilizationRatePerInstance: 250, CapacityScaler: 1}, ModeUtilization, 4, 5, 800},
		{"utilization without its rate is no capacity", Backend{MaxUtilization: 0.8, CapacityScaler: 1}, ModeUtilization, 4, 5, 0},
		{"no healthy instances", Backend{MaxRatePerInstance: 100, CapacityScaler: 1}, ModeRate, 0, 4, 0},
		{"healthy clamped to instances", Backend{MaxRatePerInstance: 100, CapacityScaler: 1}, ModeRate, 9, 4, 400},
		{"negative healthy clamped to 0", Backend{MaxRate: 100, CapacityScaler: 1}, ModeRate, -1, 4, 0},
		{"no instances", Backend{MaxRate: 100, CapacityScaler: 1}, ModeRate, 0, 0, 0},
		{"unknown mode", Backend{MaxRate: 100, CapacityScaler: 1}, "BOGUS", 1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.b.Capacity(tt.mode, tt.healthy, tt.instances)
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Capacity(%s, %d, %d) = %v, want %v", tt.mode, tt.healthy, tt.instances, got, tt.want)
			}
		})
	}
}

func TestGroupCapacity(t *testing.T) {
	c := loadT(t, "../configs/modes.yaml")
	tests := []struct {
		service, group string
		healthy        int
		want           float64
		wantOK         bool
	}{
		{"rate", "us-east-b-svc", 2, 200, true},
		{"rate", "us-east-b-svc", 1, 100, true},
		{"rate", "us-east-c-svc", 1, 37.5, true}, // 150 × 1/2 × 0.5
		{"rate", "eu-west-b-svc", 2, 0, true},    // drained
		{"connections", "eu-west-b-svc", 1, 20, true},
		{"utilization", "us-east-c-svc", 2, 320, true}, // 2 × 0.8 × 200 req/s
		{"rate", "no-such-group", 1, 0, false},
		{"connections", "us-east-c-svc", 1, 0, false}, // group exists, not a backend
		{"no-such-service", "us-east-b-svc", 1, 0, false},
	}
	for _, tt := range tests {
		got, ok := c.GroupCapacity(tt.service, tt.group, tt.healthy)
		if ok != tt.wantOK || math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("GroupCapacity(%s, %s, %d) = %v, %v; want %v, %v", tt.service, tt.group, tt.healthy, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestGroupLookup(t *testing.T) {
	c := loadT(t, "../configs/demo.yaml")
	g, ok := c.Group("eu-west-c-web")
	if !ok {
		t.Fatal(`Group("eu-west-c-web") not found`)
	}
	if g.Region.Name != "eu-west" || g.Zone.Name != "eu-west-c" || g.Group.Name != "eu-west-c-web" || len(g.Group.Instances) != 2 {
		t.Errorf("Group(eu-west-c-web) = region %s zone %s group %+v", g.Region.Name, g.Zone.Name, *g.Group)
	}
	if _, ok := c.Group("nope"); ok {
		t.Error(`Group("nope") found`)
	}
	var got [][3]string
	for _, g := range c.Groups() {
		got = append(got, [3]string{g.Region.Name, g.Zone.Name, g.Group.Name})
	}
	want := [][3]string{
		{"us-east", "us-east-b", "us-east-b-web"}, {"us-east", "us-east-c", "us-east-c-web"},
		{"eu-west", "eu-west-b", "eu-west-b-web"}, {"eu-west", "eu-west-c", "eu-west-c-web"},
		{"asia-east", "asia-east-b", "asia-east-b-web"}, {"asia-east", "asia-east-c", "asia-east-c-web"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Groups() (-want +got):\n%s", diff)
	}
	s, ok := c.Service("web")
	if !ok {
		t.Fatal(`Service("web") not found`)
	}
	if b, ok := s.Backend("asia-east-b-web"); !ok || b.MaxRatePerInstance != 100 {
		t.Errorf(`Backend("asia-east-b-web") = %+v, %v`, b, ok)
	}
	if _, ok := s.Backend("nope"); ok {
		t.Error(`Backend("nope") found`)
	}
	if _, ok := c.Service("nope"); ok {
		t.Error(`Service("nope") found`)
	}
}

// TestConcurrentLookups runs the read-only helpers from many goroutines; the
// race detector checks that they share nothing mutable. Demo: 6 groups × 2
// healthy instances × 100 req/s = 1200 per round.
func TestConcurrentLookups(t *testing.T) {
	c := loadT(t, "../configs/demo.yaml")
	done := make(chan float64)
	for range 8 {
		go func() {
			var sum float64
			for range 200 {
				if r, ok := c.Route("x.example.com", "/"); ok {
					if s, ok := c.Service(r.Service); ok {
						for _, b := range s.Backends {
							capacity, _ := c.GroupCapacity(s.Name, b.Group, 2)
							sum += capacity
						}
					}
				}
				_ = c.Groups()
			}
			done <- sum
		}()
	}
	for range 8 {
		if got := <-done; got != 200*1200 {
			t.Errorf("sum of capacities = %v, want %v", got, 200*1200)
		}
	}
}

// TestConcurrent checks which balancing modes measure demand as a level
// (things open at once) rather than a rate: the gfe picks its demand meter
// by it, so that demand and capacity are in one unit.
func TestConcurrent(t *testing.T) {
	for _, tt := range []struct {
		mode BalancingMode
		want bool
	}{{ModeRate, false}, {ModeConnection, true}, {ModeUtilization, false}} {
		if got := tt.mode.Concurrent(); got != tt.want {
			t.Errorf("%s.Concurrent() = %v, want %v", tt.mode, got, tt.want)
		}
	}
}

func TestParsePolicyAndScope(t *testing.T) {
	if p, err := ParsePolicy("hash5"); p != PolicyHash5 || err != nil {
		t.Errorf("ParsePolicy(hash5) = %q, %v", p, err)
	}
	if _, err := ParsePolicy("random"); err == nil || err.Error() != `unknown policy "random" (want one of waterfall, min_rtt, round_robin, least_request, envoy_priority, hash2, hash3, hash5, prequal)` {
		t.Errorf("ParsePolicy(random) error = %v", err)
	}
	if sc, err := ParseHashScope("nearest_region"); sc != HashScopeNearestRegion || err != nil {
		t.Errorf("ParseHashScope(nearest_region) = %q, %v", sc, err)
	}
	if _, err := ParseHashScope("zone"); err == nil || err.Error() != `unknown scope "zone" (want one of global, nearest_region)` {
		t.Errorf("ParseHashScope(zone) error = %v", err)
	}
}
