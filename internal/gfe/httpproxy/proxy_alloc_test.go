package httpproxy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// proxyUnderTest returns a gfe proxy whose plan sends every request to one
// real HTTP backend (waterfall, capacity far above the load).
func proxyUnderTest(tb testing.TB) http.Handler {
	tb.Helper()
	back := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("ok\n"))
	}))
	tb.Cleanup(back.Close)
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
              - address: %s
services:
  - name: web
    policy: waterfall
    backends:
      - {group: east, max_rate_per_instance: 1000000}
routes:
  - {host: "*", path_prefix: /, service: web}
`, strings.TrimPrefix(back.URL, "http://"))
	c, err := config.Parse([]byte(y), "bench.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	// The gfe's defaults: the real random source, no access log.
	p := gfetest.NewPlanner(rand.Uint64)
	p.Apply(snapshot.FromConfig("v1", c))
	p.Step()
	proxy, err := New(Config{}, Options{Planner: p, Clock: p.Clock})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(proxy.CloseIdleConnections)
	return proxy
}

// serveOne sends one GET through h and fails unless it comes back 200.
func serveOne(tb testing.TB, h http.Handler) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://gfe.test/x", nil)
	req.RemoteAddr = "192.0.2.1:40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		tb.Fatalf("status %d, body %q", w.Code, w.Body.String())
	}
}

// TestProxyBytesPerRequest guards the copy-buffer pool: without it every
// response allocates a 32 KiB buffer. Measured here, backend and recorder
// included: about 46 KB per request without the pool, 14 KB with it, and
// 22-25 KB with it under the race detector (which allocates more, and under
// which sync.Pool drops a quarter of what is put back); the bound sits
// between.
func TestProxyBytesPerRequest(t *testing.T) {
	h := proxyUnderTest(t)
	for range 50 { // warm the connection and the pool
		serveOne(t, h)
	}
	const n = 500
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		serveOne(t, h)
	}
	runtime.ReadMemStats(&after)
	const limit = 36 << 10
	perReq := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d B allocated per request", perReq)
	if perReq > limit {
		t.Errorf("proxying allocates %d B per request, want <= %d (is ReverseProxy.BufferPool set?)", perReq, limit)
	}
}

// BenchmarkProxy measures one proxied GET through the gfe handler to an
// in-process backend over a kept-alive connection (client side recorded,
// not networked); allocations include the backend's.
func BenchmarkProxy(b *testing.B) {
	h := proxyUnderTest(b)
	b.ReportAllocs()
	for b.Loop() {
		serveOne(b, h)
	}
}

// TestConnectionDemandIsInFlight: the proxy counts a request in flight for
// its whole life, so a CONNECTION-mode service's demand is the number of
// requests in flight, not their rate.
func TestConnectionDemandIsInFlight(t *testing.T) {
	arrived, release := make(chan struct{}, 10), make(chan struct{})
	back := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(back.Close)
	cfg := gfetest.TCPConfig(t, "round_robin", gfetest.Instances(strings.TrimPrefix(back.URL, "http://")), nil, 0)
	e, clk := sessionEdge(t, cfg)
	const n = 5
	codes := make(chan int, n)
	for i := range n {
		go func() {
			req := httptest.NewRequest(http.MethodGet, "http://gfe.test/x", nil)
			req.RemoteAddr = fmt.Sprintf("192.0.2.1:%d", 40000+i)
			w := httptest.NewRecorder()
			e.proxy.ServeHTTP(w, req)
			codes <- w.Code
		}()
	}
	for range n {
		<-arrived
	}
	m := e.p.Table().Services["db"].Meters()
	if got := m.InFlight(); got != n {
		t.Errorf("in flight = %d, want %d", got, n)
	}
	clk.Advance(10 * time.Second) // ten time constants
	if got := e.p.Builder.Demand(clk.Now())["db"]; math.Abs(got-n) > 0.01 {
		t.Errorf("demand = %v, want %d requests in flight", got, n)
	}
	close(release)
	for range n {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("status %d, want 200", code)
		}
	}
	if got := m.InFlight(); got != 0 {
		t.Errorf("in flight after the requests ended = %d, want 0", got)
	}
}
