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
				var w *httptest.ResponseRecorder
				if fast {
					w = doFast(t, e.proxy, req)
				} else {
					w = httptest.NewRecorder()
					e.proxy.ServeHTTP(w, req)
				}
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
