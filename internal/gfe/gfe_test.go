package gfe

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/version"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestProxyWaterfall runs the planner and the proxy in process against real
// HTTP backends: under capacity everything goes to the nearest region; with
// demand over the nearest region's capacity the excess spills to the next.
func TestProxyWaterfall(t *testing.T) {
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	e, clk, _ := twoRegionEdge(t, g)
	front := httptest.NewServer(e.proxy)
	defer front.Close()

	send := func(n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			resp, err := http.Get(front.URL + "/x")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			got[resp.Header.Get("X-Spillway-Region")]++
		}
		return got
	}

	// Under capacity: demand 100 rps (another nyc gfe reports it) < 200.
	g.set(gossip.NodeState{Node: "gfe-nyc-2", Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 100}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}})
	e.step(clk.Now())
	if got := send(200); got["us-east"] != 200 {
		t.Fatalf("under capacity: regions = %v, want all 200 in us-east", got)
	}

	// Over capacity: 300 rps at nyc against 200 in us-east ⇒ over 1/3 to
	// eu-west.
	g.set(gossip.NodeState{Node: "gfe-nyc-2", Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 300}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}})
	clk.Advance(time.Second) // the 200 requests above also count toward this node's demand
	e.step(clk.Now())
	st := e.Status()
	if len(st.Services) != 1 {
		t.Fatalf("Status().Services = %v", st.Services)
	}
	if want := version.Get(); st.Version != want || want.GoVersion == "" {
		t.Errorf("Status().Version = %+v, want %+v", st.Version, want)
	}
	var eastShare float64
	for _, s := range st.Services[0].Plan {
		if s.Region == "us-east" {
			eastShare += s.Share
		}
	}
	// us-east is planned at the default target utilization, 0.95.
	demand := st.Services[0].DemandRPS
	if want := 190 / demand; math.Abs(eastShare-want) > 1e-9 {
		t.Fatalf("plan share of us-east = %v, want 190/%v = %v", eastShare, demand, want)
	}
	got := send(3000)
	if frac := float64(got["us-east"]) / 3000; math.Abs(frac-eastShare) > 0.03 {
		t.Errorf("us-east got %.3f of requests, plan says %.3f (%v)", frac, eastShare, got)
	}
	if st.Services[0].Decisions["nearest"] == 0 {
		t.Errorf("no nearest decisions counted: %v", st.Services[0].Decisions)
	}
}

// TestTCPDemandIsOpenConnections: the planner publishes and plans a tcp
// listener's service with its open connections as demand, whose rise
// shows at once (ewma.Level.FastAttack; falls are smoothed with time
// constant DemandSmoothing).
func TestTCPDemandIsOpenConnections(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1, w1 := gfetest.NewEchoBackend(t, "e1"), gfetest.NewEchoBackend(t, "w1")
	cfg := gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr()), gfetest.Instances(w1.Addr()), 0)
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	ecfg := DefaultConfig()
	ecfg.Node, ecfg.Site = "gfe-nyc", "nyc"
	ecfg.Damping = 1
	e, err := New(ecfg, Options{Gossip: g, Clock: clk, Rand: gfetest.Rand()})
	if err != nil {
		t.Fatal(err)
	}
	e.rtt.Set("us-east", 5)
	e.rtt.Set("eu-west", 80)
	if err := e.ApplySnapshot(snapshot.FromConfig("v1", cfg)); err != nil {
		t.Fatal(err)
	}
	e.step(clk.Now())
	l, _ := cfg.Listener("db")
	h := gfetest.ServeTCP(t, clk, ecfg.DrainTimeout, l, e.tcp.Serve)
	h.Open(t, 30)
	for _, tt := range []struct {
		name string
		want float64
	}{
		{"after 1s", 30},
		{"after 2s", 30},
	} {
		clk.Advance(time.Second)
		e.step(clk.Now())
		st := g.Snapshot().States["gfe-nyc"]
		if got := st.Demand["db"]; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: published demand = %v, want %v", tt.name, got, tt.want)
		}
		if got := e.Status().Services[0].DemandRPS; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: planned demand = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDecisionsMetric: routing decisions are exported as a counter, read
// from the live table's meters.
func TestDecisionsMetric(t *testing.T) {
	east, west := backendServer(t, "us-east"), backendServer(t, "eu-west")
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	e := newTestEdge(t, g, clk)
	e.rtt.Set("us-east", 5)
	e.rtt.Set("eu-west", 80)
	if err := e.ApplySnapshot(snapshot.FromConfig("v1", gfetest.TwoRegionConfig(t, "waterfall", addrsOf(east), addrsOf(west), 100))); err != nil {
		t.Fatal(err)
	}
	e.step(clk.Now())
	t.Cleanup(e.proxy.CloseIdleConnections)
	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "http://gfe.test/x", nil)
		w := httptest.NewRecorder()
		e.proxy.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "spillway_gfe_decisions_total" {
			continue
		}
		if mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("spillway_gfe_decisions_total is a %v, want a counter", mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["service"]+"/"+labels["reason"]] = m.GetCounter().GetValue()
		}
	}
	if got["web/nearest"] != 3 || got["web/spill_capacity"] != 0 || len(got) != int(routing.NumReasons) {
		t.Errorf("decisions = %v, want web/nearest 3 and every other reason 0", got)
	}
}
