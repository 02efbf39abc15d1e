package edge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// Helpers of the session tests (affinity, outlier detection, retries).

// testBackend is a real HTTP server standing in for one instance. It names
// itself in X-Spillway-Backend, answers status (200 when 0) and counts the
// requests it got.
type testBackend struct {
	*httptest.Server
	name   string
	status atomic.Int32
	hits   atomic.Int64
}

func newTestBackend(t testing.TB, name string) *testBackend {
	t.Helper()
	b := &testBackend{name: name}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Spillway-Backend", name)
		w.Header().Set("X-Body", string(body))
		if s := b.status.Load(); s != 0 {
			w.WriteHeader(int(s))
		}
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *testBackend) addr() string { return strings.TrimPrefix(b.URL, "http://") }

// testZone and testRegion describe the instances of a test config: one
// instance group per zone, named after the zone with "-g".
type testZone struct {
	name  string
	addrs []string
}

type testRegion struct {
	name  string
	zones []testZone
}

// sessionConfig renders and parses a config of regions with one service
// "web" over every group (max_rate_per_instance 1000), with serviceExtra
// appended to the service (indented by 4) and routeExtra to the route's
// flow mapping (", timeout: 1s").
func sessionConfig(t testing.TB, policy string, regions []testRegion, serviceExtra, routeExtra string) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("regions:\n")
	for _, r := range regions {
		fmt.Fprintf(&b, "  - name: %s\n    zones:\n", r.name)
		for _, z := range r.zones {
			fmt.Fprintf(&b, "      - name: %s\n        groups:\n          - name: %s-g\n            instances:\n", z.name, z.name)
			for _, a := range z.addrs {
				fmt.Fprintf(&b, "              - address: %s\n", a)
			}
		}
	}
	fmt.Fprintf(&b, "services:\n  - name: web\n    policy: %s\n    backends:\n", policy)
	for _, r := range regions {
		for _, z := range r.zones {
			fmt.Fprintf(&b, "      - {group: %s-g, max_rate_per_instance: 1000}\n", z.name)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(serviceExtra), "\n") {
		if l != "" {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	fmt.Fprintf(&b, "routes:\n  - {host: \"*\", path_prefix: /, service: web%s}\n", routeExtra)
	c, err := config.Parse([]byte(b.String()), "session.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, b.String())
	}
	return c
}

// sessionEdge returns an Edge at site nyc (us-east 5 ms, eu-west 80 ms)
// serving cfg, with a first table built at the fake clock's time.
func sessionEdge(t testing.TB, cfg *config.Config) (*Edge, *clock.Fake) {
	t.Helper()
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	ecfg := DefaultConfig()
	ecfg.Node, ecfg.Site = "gfe-nyc", "nyc"
	ecfg.Damping = 1
	var seed atomic.Uint64 // seeded, and safe for parallel benchmarks
	e, err := New(ecfg, Options{Gossip: g, Clock: clk, Rand: func() uint64 {
		x := seed.Add(0x9e3779b97f4a7c15)
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		return x ^ x>>31
	}})
	if err != nil {
		t.Fatal(err)
	}
	e.rtt.set("us-east", 5)
	e.rtt.set("eu-west", 80)
	if err := e.ApplySnapshot(ControlState{Version: "v1", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	e.planner.step(clk.Now())
	t.Cleanup(e.proxy.transport.CloseIdleConnections)
	return e, clk
}

// do sends one request through the proxy in process, from client address
// remote, and returns the recorded response.
func do(t testing.TB, e *Edge, method, remote string, body string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, "http://gfe.test/x", rd)
	req.RemoteAddr = remote
	for k, vs := range header {
		req.Header[k] = vs
	}
	w := httptest.NewRecorder()
	e.proxy.ServeHTTP(w, req)
	return w
}
