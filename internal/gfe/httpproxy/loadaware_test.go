package httpproxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
)

// TestLoadAwareLearnsUtilization: with load_aware on, the load report of a
// backend's answer reaches the chooser, through net/http and the fast path
// alike. Two backends answer at once (the fake clock makes every latency
// 0, so latency cannot tell them apart); "busy" reports utilization 0.9,
// which makes it cost ten times "idle", so after its first answers it gets
// no more requests. Without the report's utilization in the choice the
// two would split the requests.
func TestLoadAwareLearnsUtilization(t *testing.T) {
	for _, fast := range []bool{false, true} {
		name := "net_http"
		if fast {
			name = "fast"
		}
		t.Run(name, func(t *testing.T) {
			var hits [2]atomic.Int64
			backend := func(i int, report string) string {
				s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits[i].Add(1)
					if report != "" {
						w.Header().Set("Endpoint-Load-Metrics", report)
					}
				}))
				t.Cleanup(s.Close)
				return strings.TrimPrefix(s.URL, "http://")
			}
			busy, idle := backend(0, "TEXT application_utilization=0.9"), backend(1, "")
			regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{busy, idle}}}}}
			e, _ := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "load_aware: {enabled: true, slow_start: 0s}", ""))
			const n = 100
			for range n {
				req := httptest.NewRequest(http.MethodGet, "http://h/x", nil)
				req.RemoteAddr = "192.0.2.7:4000"
				w := serveVia(t, e.proxy, req, fast)
				if w.Code != http.StatusOK {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			// Both are unknown at first (probed), then known: busy gets
			// at most its probes.
			if got := hits[0].Load(); got > 3 {
				t.Errorf("the backend reporting utilization 0.9 got %d of %d requests, want at most its first few", got, n)
			}
			if got := hits[0].Load() + hits[1].Load(); got != n {
				t.Errorf("backends got %d requests, want %d", got, n)
			}
		})
	}
}

// TestFastPathAllocsLoadAware: TestFastPathAllocs with load_aware and
// overload shedding on (below capacity: nothing shed): the load-aware
// pick, its latency report and the shedding draw add no allocation.
func TestFastPathAllocsLoadAware(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	back := newKeepAliveBackend(t)
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{back}}}}}
	e, _ := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "load_aware: {enabled: true}\noverload: {shed: true}", ""))
	if svc := e.p.Table().Services["web"]; svc.Chooser() == nil || svc.Picker() == nil {
		t.Fatal("no load-aware plan picker")
	}
	h := newFastBenchTo(t, e)
	for range 100 {
		h.one(t)
	}
	if n := testing.AllocsPerRun(1000, func() { h.one(t) }); n > 1 {
		t.Errorf("%v allocations per request, want <= 1", n)
	}
}

// newLoadAwareBench is a fastBench through a waterfall service whose one
// group has two backends (newKeepAliveBackend), with the load-aware choice
// inside the group on or off: the same config otherwise, so that the two
// differ by the choice alone. On, the service has the chooser.
func newLoadAwareBench(tb testing.TB, on bool) *fastBench {
	tb.Helper()
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{newKeepAliveBackend(tb), newKeepAliveBackend(tb)}}}}}
	extra := "load_aware: {enabled: false}"
	if on {
		extra = "load_aware: {enabled: true}"
	}
	e, _ := sessionEdge(tb, gfetest.SessionConfig(tb, "waterfall", regions, extra, ""))
	if svc := e.p.Table().Services["web"]; svc.Picker() == nil || (svc.Chooser() != nil) != on {
		tb.Fatalf("load_aware %v: picker %v, chooser %v", on, svc.Picker() != nil, svc.Chooser() != nil)
	}
	return newFastBenchTo(tb, e)
}

// TestFastPathNoAllocsLoadAware: the data plane pays no allocation for the
// load-aware choice: through a waterfall service of two backends, a
// fast-path request allocates nothing with load_aware on, as with it off
// (the choice, its probe and slow-start bookkeeping and the latency
// report included).
func TestFastPathNoAllocsLoadAware(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var allocs [2]float64
	for i, on := range []bool{false, true} {
		h := newLoadAwareBench(t, on)
		for range 100 {
			h.one(t)
		}
		allocs[i] = testing.AllocsPerRun(1000, func() { h.one(t) })
	}
	if allocs != [2]float64{0, 0} {
		t.Errorf("allocations per request: load_aware off %v, on %v; want 0 and 0", allocs[0], allocs[1])
	}
}

// BenchmarkFastPathLoadAware is BenchmarkFastPath through a waterfall
// service of two backends, with load_aware off and on side by side.
func BenchmarkFastPathLoadAware(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			h := newLoadAwareBench(b, on)
			b.ReportAllocs()
			for b.Loop() {
				h.one(b)
			}
		})
	}
}
