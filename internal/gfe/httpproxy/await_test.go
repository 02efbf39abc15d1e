package httpproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gfe/pending"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/routing"
)

// pendingYAML is a config with service web over groups a (at addrA) and b
// (at addrB), each instance taking one request at a time; autoA and autoB
// are each group's autoscaling block ("" for none), scaler both groups'
// capacity_scaler.
func pendingYAML(t testing.TB, addrA, addrB, autoA, autoB string, scaler float64) *config.Config {
	t.Helper()
	return pendingYAMLWith(t, addrA, addrB, autoA, autoB, scaler, "")
}

// pendingYAMLWith is pendingYAML with svcExtra (YAML lines at the
// service's indentation) added to service web.
func pendingYAMLWith(t testing.TB, addrA, addrB, autoA, autoB string, scaler float64, svcExtra string) *config.Config {
	t.Helper()
	block := func(a string) string {
		if a == "" {
			return ""
		}
		return "\n            autoscaling: {" + a + "}"
	}
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: a
            instances:
              - {address: %s, max_concurrency: 1}%s
          - name: b
            instances:
              - {address: %s, max_concurrency: 1}%s
services:
  - name: web
    policy: round_robin
%s    backends:
      - {group: a, max_rate_per_instance: 1000, capacity_scaler: %v}
      - {group: b, max_rate_per_instance: 1000, capacity_scaler: %v}
routes:
  - {host: "*", path_prefix: /, service: web}
`, addrA, block(autoA), addrB, block(autoB), svcExtra, scaler, scaler)
	c, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, y)
	}
	return c
}

func TestPendingRule(t *testing.T) {
	tests := []struct {
		name         string
		autoA, autoB string
		wantWait     time.Duration
		wantCold     time.Duration
		wantOK       bool
	}{
		{name: "no autoscaled group"},
		{name: "defaults: max(10s, 3.5 × 10s)", autoA: "max_instances: 2", wantWait: 35 * time.Second, wantCold: 10 * time.Second, wantOK: true},
		{name: "the largest of two", autoA: "max_instances: 2, cold_start: 1s, min_pending_wait: 300ms, pending_wait_cold_starts: 0",
			autoB:    "max_instances: 2, cold_start: 2s, min_pending_wait: 5s, pending_wait_cold_starts: 1",
			wantWait: 5 * time.Second, wantCold: 2 * time.Second, wantOK: true},
		{name: "one of two", autoB: "max_instances: 1, cold_start: 2s, min_pending_wait: 1s, pending_wait_cold_starts: 3",
			wantWait: 6 * time.Second, wantCold: 2 * time.Second, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := pendingYAML(t, "127.0.0.1:1", "127.0.0.1:2", tt.autoA, tt.autoB, 1)
			sc, _ := c.Service("web")
			w, cold, ok := pendingRule(c, sc)
			if w != tt.wantWait || cold != tt.wantCold || ok != tt.wantOK {
				t.Errorf("pendingRule() = %v, %v, %v; want %v, %v, %v", w, cold, ok, tt.wantWait, tt.wantCold, tt.wantOK)
			}
		})
	}
}

// pendingGFE is sessionEdge with a pending queue that the test runs by
// hand (Step), on the planner's fake clock.
func pendingGFE(t testing.TB, cfg *config.Config) (*testGFE, *pending.Queue) {
	t.Helper()
	p := gfetest.NewPlanner(gfetest.Rand())
	p.Apply(snapshot.FromConfig("v1", cfg))
	p.Step()
	q := pending.New(pending.Config{}, pending.Options{Clock: p.Clock})
	proxy, err := New(Config{}, Options{Planner: p, Clock: p.Clock, Rand: p.Rand, Pending: q})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.CloseIdleConnections)
	return &testGFE{proxy: proxy, p: p}, q
}

// serveAsync serves one GET / from remote in the background and returns
// its recorder once done.
func serveAsync(ctx context.Context, e *testGFE, remote string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://gfe.test/", nil)
		req.RemoteAddr = remote
		w := httptest.NewRecorder()
		e.proxy.ServeHTTP(w, req)
		out <- w
	}()
	return out
}

// waitFor polls cond (a state another goroutine reaches, not a delay)
// until it holds, failing after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition, not a delay the test relies on
	}
}

// TestAwait: what waits and how it ends, on the net/http path.
func TestAwait(t *testing.T) {
	const auto = "max_instances: 2, cold_start: 1500ms, min_pending_wait: 300ms, pending_wait_cold_starts: 0"
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")

	t.Run("busy without an autoscaled group: 429 at once", func(t *testing.T) {
		e, q := pendingGFE(t, pendingYAML(t, a.addr(), b.addr(), "", "", 1))
		svc := e.p.Table().Services["web"]
		holdSlots(t, svc, a.addr(), b.addr())
		w := do(t, e, http.MethodGet, "192.0.2.1:1000", "", nil)
		if w.Code != http.StatusTooManyRequests || q.Waiting() != 0 {
			t.Errorf("got %d with %d waiting; want 429, none waiting", w.Code, q.Waiting())
		}
	})

	t.Run("drained: 503 at once", func(t *testing.T) {
		e, q := pendingGFE(t, pendingYAML(t, a.addr(), b.addr(), auto, "", 0))
		w := do(t, e, http.MethodGet, "192.0.2.1:1000", "", nil)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != DrainedRetryAfter || q.Waiting() != 0 {
			t.Errorf("got %d Retry-After %q with %d waiting; want 503, %s, none waiting", w.Code, w.Header().Get("Retry-After"), q.Waiting(), DrainedRetryAfter)
		}
	})

	t.Run("busy: waits, FIFO, served when a slot frees", func(t *testing.T) {
		// a holds its requests until release: the first waiter keeps a's
		// slot while the test looks at the queue.
		release := make(chan struct{})
		slowA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			w.Header().Set("X-Spillway-Backend", "a")
		}))
		defer slowA.Close()
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		aAddr := strings.TrimPrefix(slowA.URL, "http://")
		e, q := pendingGFE(t, pendingYAML(t, aAddr, b.addr(), auto, "", 1))
		svc := e.p.Table().Services["web"]
		ma, mb := member(t, svc, aAddr), member(t, svc, b.addr())
		ma.B.TryAcquire()
		mb.B.TryAcquire()
		first := serveAsync(context.Background(), e, "192.0.2.1:1000")
		waitFor(t, "the first to wait", func() bool { return q.Waiting() == 1 })
		second := serveAsync(context.Background(), e, "192.0.2.1:1001")
		waitFor(t, "the second to wait", func() bool { return q.Waiting() == 2 })
		if got := svc.Meters().Pending.Load(); got != 2 {
			t.Errorf("Meters.Pending = %d, want 2", got)
		}
		e.p.Clock.Advance(100 * time.Millisecond)
		ma.B.Release() // one slot: the first waiter's
		q.Step(e.p.Clock.Now())
		if got := q.Waiting(); got != 1 {
			t.Errorf("waiting after one slot = %d, want 1", got)
		}
		close(release)
		w := <-first
		if w.Code != http.StatusOK || w.Header().Get("X-Spillway-Backend") != "a" {
			t.Fatalf("first: %d from %q, want 200 from a", w.Code, w.Header().Get("X-Spillway-Backend"))
		}
		mb.B.Release()
		q.Step(e.p.Clock.Now())
		if w := <-second; w.Code != http.StatusOK {
			t.Fatalf("second: %d, want 200", w.Code)
		}
		if got, f := svc.Meters().InFlight(), svc.Meters().Failures.Load(); got != 0 || f != 0 {
			t.Errorf("in flight %d, failures %d after both; want 0, 0", got, f)
		}
	})

	t.Run("behind waiters even with a free slot", func(t *testing.T) {
		e, q := pendingGFE(t, pendingYAML(t, a.addr(), b.addr(), auto, "", 1))
		svc := e.p.Table().Services["web"]
		svc.Meters().Pending.Add(1) // someone waits
		got := serveAsync(context.Background(), e, "192.0.2.1:1000")
		waitFor(t, "the request to queue", func() bool { return q.Waiting() == 1 })
		svc.Meters().Pending.Add(-1)
		q.Step(e.p.Clock.Now())
		if w := <-got; w.Code != http.StatusOK {
			t.Errorf("got %d, want 200 after the round", w.Code)
		}
	})

	t.Run("no healthy backend: waits for a table with one", func(t *testing.T) {
		cfg := pendingYAML(t, a.addr(), b.addr(), auto, "", 1)
		e, q := pendingGFE(t, cfg)
		e.p.Apply(snapshot.FromConfig("v2", cfg, a.addr(), b.addr()))
		e.p.Step()
		got := serveAsync(context.Background(), e, "192.0.2.1:1000")
		waitFor(t, "the request to wait", func() bool { return q.Waiting() == 1 })
		e.p.Apply(snapshot.FromConfig("v3", cfg, b.addr()))
		e.p.Step()
		q.Step(e.p.Clock.Now()) // the gfe kicks the queue on every new table
		if w := <-got; w.Code != http.StatusOK || w.Header().Get("X-Spillway-Backend") != "a" {
			t.Errorf("got %d from %q, want 200 from a", w.Code, w.Header().Get("X-Spillway-Backend"))
		}
	})

	t.Run("deadline: 429 with Retry-After", func(t *testing.T) {
		e, q := pendingGFE(t, pendingYAML(t, a.addr(), b.addr(), auto, "", 1))
		svc := e.p.Table().Services["web"]
		holdSlots(t, svc, a.addr(), b.addr())
		got := serveAsync(context.Background(), e, "192.0.2.1:1000")
		waitFor(t, "the request to wait", func() bool { return q.Waiting() == 1 })
		e.p.Clock.Advance(299 * time.Millisecond)
		q.Step(e.p.Clock.Now())
		if n := q.Waiting(); n != 1 {
			t.Fatalf("waiting at 299ms = %d, want 1", n)
		}
		e.p.Clock.Advance(time.Millisecond)
		q.Step(e.p.Clock.Now())
		w := <-got
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" || w.Body.String() != msgNoneFreed+"\n" {
			t.Errorf("got %d Retry-After %q %q; want 429, 2, %q", w.Code, w.Header().Get("Retry-After"), w.Body.String(), msgNoneFreed)
		}
		if f := svc.Meters().Failures.Load(); f != 1 {
			t.Errorf("failures = %d, want 1", f)
		}
		if got := testutil.ToFloat64(e.proxy.metrics.pickErrors.WithLabelValues("web", "all_busy")); got != 1 {
			t.Errorf("pick errors{all_busy} = %v, want 1", got)
		}
	})

	t.Run("header affinity: waits, then pinned by the same key", func(t *testing.T) {
		e, q := pendingGFE(t, pendingYAMLWith(t, a.addr(), b.addr(), auto, "", 1,
			"    session_affinity: {type: header, header_name: X-User}\n"))
		svc := e.p.Table().Services["web"]
		probe := httptest.NewRequest(http.MethodGet, "http://gfe.test/", nil)
		probe.Header.Set("X-User", "alice")
		pk, _, err := pickAffinity(svc, probe, routing.Flow{}, e.p.Clock.Now(), e.p.Rand)
		if err != nil {
			t.Fatal(err)
		}
		pinned := pk.Backend.Addr()
		pk.Done()
		ma, mb := member(t, svc, a.addr()), member(t, svc, b.addr())
		ma.B.TryAcquire()
		mb.B.TryAcquire()
		out := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			req := httptest.NewRequest(http.MethodGet, "http://gfe.test/", nil)
			req.Header.Set("X-User", "alice")
			w := httptest.NewRecorder()
			e.proxy.ServeHTTP(w, req)
			out <- w
		}()
		waitFor(t, "the request to wait", func() bool { return q.Waiting() == 1 })
		ma.B.Release()
		mb.B.Release()
		q.Step(e.p.Clock.Now())
		w := <-out
		want := map[string]string{a.addr(): "a", b.addr(): "b"}[pinned]
		if w.Code != http.StatusOK || w.Header().Get("X-Spillway-Backend") != want {
			t.Errorf("got %d from %q, want 200 from %q (the key's backend)", w.Code, w.Header().Get("X-Spillway-Backend"), want)
		}
	})

	t.Run("client leaves: 499, not demand", func(t *testing.T) {
		e, q := pendingGFE(t, pendingYAML(t, a.addr(), b.addr(), auto, "", 1))
		svc := e.p.Table().Services["web"]
		holdSlots(t, svc, a.addr(), b.addr())
		before := svc.Meters().Arrivals()
		ctx, cancel := context.WithCancel(context.Background())
		got := serveAsync(ctx, e, "192.0.2.1:1000")
		waitFor(t, "the request to wait", func() bool { return q.Waiting() == 1 })
		cancel()
		w := <-got
		if w.Code != statusClientClosed {
			t.Errorf("got %d, want %d", w.Code, statusClientClosed)
		}
		m := svc.Meters()
		if m.Arrivals() != before || m.InFlight() != 0 || m.Failures.Load() != 0 || m.Pending.Load() != 0 {
			t.Errorf("arrivals %d (was %d), in flight %d, failures %d, pending %d; want unchanged, 0, 0, 0",
				m.Arrivals(), before, m.InFlight(), m.Failures.Load(), m.Pending.Load())
		}
	})
}

// BenchmarkProxyWithPendingQueue is BenchmarkProxy with a pending queue,
// as the gfe runs it: a request that finds a free backend pays one atomic
// load for it (Meters.Pending) and nothing more.
func BenchmarkProxyWithPendingQueue(b *testing.B) {
	h := proxyUnderTest(b).(*Proxy)
	h.pending = pending.New(pending.Config{}, pending.Options{})
	b.ReportAllocs()
	for b.Loop() {
		serveOne(b, h)
	}
}

// BenchmarkFastPathWithPendingQueue is BenchmarkFastPath with a pending
// queue: still no allocation.
func BenchmarkFastPathWithPendingQueue(b *testing.B) {
	h := newFastBench(b)
	h.p.pending = pending.New(pending.Config{}, pending.Options{})
	b.ReportAllocs()
	for b.Loop() {
		h.one(b)
	}
}
