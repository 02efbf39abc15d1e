package httpproxy

import (
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/outlier"
)

// fourBackends returns four backends in one zone, the first answering 500.
func fourBackends(t *testing.T) ([]*testBackend, []gfetest.Region) {
	t.Helper()
	var bs []*testBackend
	var addrs []string
	for _, n := range []string{"bad", "b2", "b3", "b4"} {
		b := newTestBackend(t, n)
		bs = append(bs, b)
		addrs = append(addrs, b.addr())
	}
	bs[0].status.Store(500)
	return bs, []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: addrs}}}}
}

// TestOutlierEjection: a backend answering 5xx is ejected after
// consecutive_5xx of them — at once, before the planner builds a new table —
// left out of the next table, and back after base_ejection_time, for
// twice as long when it fails again.
func TestOutlierEjection(t *testing.T) {
	for _, policy := range []string{"round_robin", "waterfall"} {
		t.Run(policy, func(t *testing.T) {
			bs, regions := fourBackends(t)
			bad := bs[0]
			cfg := gfetest.SessionConfig(t, policy, regions, "outlier_detection: {consecutive_5xx: 3, base_ejection_time: 2s, max_ejection_time: 10s, max_ejection_percent: 50}", "")
			e, clk := sessionEdge(t, cfg)
			send := func(n int) (errors int) {
				for range n {
					if do(t, e, "GET", "192.0.2.1:1", "", nil).Code >= 500 {
						errors++
					}
				}
				return errors
			}

			if got := send(100); got != 3 || bad.hits.Load() != 3 {
				t.Fatalf("100 requests: %d answered 5xx, the bad backend got %d; want 3 and 3 (consecutive_5xx)", got, bad.hits.Load())
			}
			select {
			case <-e.p.Woken:
			default:
				t.Error("the ejection did not wake the planner")
			}
			e.p.Step()
			svc := e.p.Table().Services["web"]
			if len(svc.Pool()) != 3 || len(svc.Scope()) != 4 {
				t.Errorf("after the ejection: pool %d, scope %d; want 3 (ejected left out) and 4", len(svc.Pool()), len(svc.Scope()))
			}
			if got := e.p.Builder.Ejected(clk.Now())["web"]; got != 1 {
				t.Errorf("ejected hosts = %d, want 1", got)
			}
			// What /status lists as ejected (gfe.Daemon.Status copies it).
			var ej []outlier.HostState
			for _, h := range svc.Outliers().Snapshot(clk.Now()) {
				if h.Ejected {
					ej = append(ej, h)
				}
			}
			if len(ej) != 1 || ej[0].Name != bad.addr() || !ej[0].EjectedUntil.Equal(clk.Now().Add(2*time.Second)) {
				t.Errorf("ejected = %+v, want %s until now+2s", ej, bad.addr())
			}

			// Back after 2s, ejected again after 3 more 5xx, for 4s.
			clk.Advance(2 * time.Second)
			e.p.Step()
			if got := send(100); got != 3 || bad.hits.Load() != 6 {
				t.Fatalf("after base_ejection_time: %d answered 5xx, the bad backend got %d in all; want 3 and 6", got, bad.hits.Load())
			}
			clk.Advance(2 * time.Second)
			e.p.Step()
			if got := send(40); got != 0 {
				t.Errorf("2s into the second ejection (4s): %d 5xx, want 0", got)
			}
			clk.Advance(2 * time.Second)
			e.p.Step()
			if got := send(40); got == 0 {
				t.Error("after the second ejection the backend got no traffic")
			}
			if got := e.proxy.metrics.ejections.WithLabelValues("web"); testCounter(got) != 3 {
				t.Errorf("ejections counted = %v, want 3", testCounter(got))
			}
		})
	}
}

// TestOutlierLimits: max_ejection_percent bounds the ejected share of a
// group, a disabled trigger never ejects, and an instance that turns
// unhealthy leaves the detector.
func TestOutlierLimits(t *testing.T) {
	t.Run("max_ejection_percent", func(t *testing.T) {
		bs, regions := fourBackends(t)
		for _, b := range bs[:3] {
			b.status.Store(503)
		}
		e, clk := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "outlier_detection: {consecutive_5xx: 2, max_ejection_percent: 50}", ""))
		for range 200 {
			do(t, e, "GET", "192.0.2.1:1", "", nil)
		}
		if got := e.p.Builder.Ejected(clk.Now())["web"]; got != 2 {
			t.Errorf("3 of 4 failing at 50%%: %d ejected, want 2", got)
		}
		if st := e.p.Table().Services["web"].Outliers().Stats(); st.Refused == 0 {
			t.Errorf("stats %+v: want refused ejections", st)
		}
	})
	t.Run("trigger disabled", func(t *testing.T) {
		bs, regions := fourBackends(t)
		e, clk := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "outlier_detection: {consecutive_5xx: 0}", ""))
		for range 100 {
			do(t, e, "GET", "192.0.2.1:1", "", nil)
		}
		if got := e.p.Builder.Ejected(clk.Now())["web"]; got != 0 || bs[0].hits.Load() != 25 {
			t.Errorf("consecutive_5xx 0: %d ejected, bad backend got %d; want 0 and 25", got, bs[0].hits.Load())
		}
	})
	t.Run("unhealthy instance leaves", func(t *testing.T) {
		bs, regions := fourBackends(t)
		cfg := gfetest.SessionConfig(t, "round_robin", regions, "", "")
		e, clk := sessionEdge(t, cfg)
		if got := len(e.p.Table().Services["web"].Outliers().Snapshot(clk.Now())); got != 4 {
			t.Fatalf("registered hosts = %d, want 4", got)
		}
		e.p.Apply(snapshot.FromConfig("v2", cfg, bs[1].addr()))
		e.p.Step()
		for _, h := range e.p.Table().Services["web"].Outliers().Snapshot(clk.Now()) {
			if h.Name == bs[1].addr() {
				t.Errorf("unhealthy instance %s still registered", h.Name)
			}
		}
	})
}
