package httpproxy

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestShedGlobalOverload: a service with overload.shed whose global demand
// is 1.2 times its capacity (another gfe of the site gossips it) has 1/6
// of its requests refused by the gfe itself, through net/http and the fast
// path alike: 503 with the configured Retry-After, counted in
// spillway_gfe_shed_total{reason="overload"}, never reaching a backend
// and counted neither as a pick error nor as a failure; the rest are
// proxied. Without overload.shed every request reaches a backend.
func TestShedGlobalOverload(t *testing.T) {
	for _, tt := range []struct {
		name  string
		extra string
		want  float64 // the refused share
	}{
		{"shed", "overload: {shed: true, retry_after: 3s}", 1.0 / 6},
		{"off", "", 0},
	} {
		for _, fast := range []bool{false, true} {
			name := tt.name + "/net_http"
			if fast {
				name = tt.name + "/fast"
			}
			t.Run(name, func(t *testing.T) {
				a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
				regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{a.addr(), b.addr()}}}}}
				e, _ := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, tt.extra, ""))
				const capacity = 2 * 1000 * 0.95 // max_rate_per_instance 1000, target_utilization 0.95
				e.p.SetPeer(routing.Peer{Node: "gfe-nyc-2", Site: "nyc", RTT: map[string]float64{"us-east": 5}, Demand: map[string]float64{"web": 1.2 * capacity}})
				e.p.Step()
				if lambda := e.p.Table().Services["web"].Plan().Lambda; math.Abs(lambda-1.2) > 0.01 {
					t.Fatalf("plan λ = %v, want 1.2", lambda)
				}
				const n = 1200
				refused := 0
				for range n {
					req := httptest.NewRequest(http.MethodGet, "http://h/x", nil)
					req.RemoteAddr = "192.0.2.7:4000"
					w := serveVia(t, e.proxy, req, fast)
					switch w.Code {
					case http.StatusOK:
					case http.StatusServiceUnavailable:
						refused++
						if got := w.Header().Get("Retry-After"); got != "3" {
							t.Fatalf("refusal's Retry-After %q, want 3", got)
						}
					default:
						t.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
				share := float64(refused) / n
				// Binomial: 4 standard deviations of the share at n = 1200
				// and p = 1/6 are 0.043.
				if math.Abs(share-tt.want) > 0.043 {
					t.Errorf("refused %d of %d (%.3f), want %.3f ± 0.043", refused, n, share, tt.want)
				}
				if hits := a.hits.Load() + b.hits.Load(); hits != int64(n-refused) {
					t.Errorf("backends got %d requests, want the %d admitted", hits, n-refused)
				}
				if got := testutil.ToFloat64(e.proxy.metrics.shed.WithLabelValues("web", ShedOverload)); got != float64(refused) {
					t.Errorf("spillway_gfe_shed_total{reason=overload} = %v, want %d", got, refused)
				}
				m := e.p.Table().Services["web"].Meters()
				if f := m.Failures.Load(); f != 0 {
					t.Errorf("service failures %d, want 0: a shed request is not a failure", f)
				}
				if got := m.InFlight(); got != 0 {
					t.Errorf("requests in flight after the run %d, want 0", got)
				}
				if got := m.Arrivals(); got != n {
					t.Errorf("arrivals %d, want %d: shed requests stay demand", got, n)
				}
			})
		}
	}
}
