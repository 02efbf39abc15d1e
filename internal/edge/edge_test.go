package edge

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// fakeGossip is an in-memory Gossip: Publish stores this node's state next
// to states the test sets for other nodes.
type fakeGossip struct {
	mu     sync.Mutex
	node   string
	states map[string]gossip.NodeState
}

func (f *fakeGossip) Publish(s gossip.NodeState) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.Node = f.node
	f.states[f.node] = s
	return 1, nil
}

func (f *fakeGossip) Snapshot() *gossip.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := make(map[string]gossip.NodeState, len(f.states))
	var members []string
	for k, v := range f.states {
		st[k] = v
		members = append(members, k)
	}
	return &gossip.Snapshot{Members: members, States: st}
}

func (f *fakeGossip) set(s gossip.NodeState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[s.Node] = s
}

// backendServer is a real HTTP server standing in for one instance; it
// names its region in the response like the test backend does.
func backendServer(t *testing.T, region string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Spillway-Region", region)
	}))
	t.Cleanup(s.Close)
	return s
}

func twoRegionConfig(t *testing.T, policy string, east, west []string, ratePerInstance float64) *config.Config {
	t.Helper()
	inst := func(addrs []string) string {
		var b strings.Builder
		for _, a := range addrs {
			fmt.Fprintf(&b, "              - address: %s\n", a)
		}
		return b.String()
	}
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
%s  - name: eu-west
    zones:
      - name: eu-west-b
        groups:
          - name: west
            instances:
%sservices:
  - name: web
    policy: %s
    backends:
      - {group: east, max_rate_per_instance: %g}
      - {group: west, max_rate_per_instance: %g}
routes:
  - {host: "*", path_prefix: /, service: web}
`, inst(east), inst(west), policy, ratePerInstance, ratePerInstance)
	c, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, y)
	}
	return c
}

func newTestEdge(t *testing.T, g *fakeGossip, clk clock.Clock) *Edge {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	cfg.Damping = 1
	var seed uint64
	e, err := New(cfg, Options{Gossip: g, Clock: clk, Rand: func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func addrsOf(ss ...*httptest.Server) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.TrimPrefix(s.URL, "http://")
	}
	return out
}

func TestBuildWorld(t *testing.T) {
	cfg := twoRegionConfig(t, "waterfall", []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"127.0.0.1:3", "127.0.0.1:4"}, 100)
	svc, _ := cfg.Service("web")
	states := map[string]gossip.NodeState{
		"gfe-nyc-2": {Node: "gfe-nyc-2", Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 50}, RTT: map[string]float64{"us-east": 7, "eu-west": 82}},
		"gfe-lon":   {Node: "gfe-lon", Kind: gossip.KindGFE, Site: "lon", Demand: map[string]float64{"web": 30}, RTT: map[string]float64{"us-east": 80, "eu-west": 5, "mars": 1}},
		"gfe-new":   {Node: "gfe-new", Kind: gossip.KindGFE, Site: "tokyo", Demand: map[string]float64{"web": 10}},
		"cp":        {Node: "cp", Kind: gossip.KindControlPlane},
		// A stale copy of this node's own state must be ignored.
		"gfe-nyc": {Node: "gfe-nyc", Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 999}},
	}
	me := self{node: "gfe-nyc", site: "nyc", rtt: map[string]float64{"us-east": 5, "eu-west": 80}, demand: map[string]float64{"web": 100}}
	got := buildWorld(cfg, svc, map[string]bool{"127.0.0.1:3": true}, states, me)
	want := waterfall.World{
		Regions: []waterfall.Region{
			{Name: "us-east", Groups: []waterfall.Group{{Name: "east", Zone: "us-east-b", Instances: 2, Healthy: 2, Capacity: 200}}},
			{Name: "eu-west", Groups: []waterfall.Group{{Name: "west", Zone: "eu-west-b", Instances: 2, Healthy: 1, Capacity: 100}}},
		},
		Sites: []waterfall.Site{
			{Name: "lon", Demand: 30, RTT: map[string]float64{"us-east": 80, "eu-west": 5}},
			{Name: "nyc", Demand: 150, RTT: map[string]float64{"us-east": 6, "eu-west": 81}},
			// tokyo has measured no RTT yet: left out.
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("buildWorld mismatch (-want +got):\n%s", d)
	}
}

func TestNearestRegion(t *testing.T) {
	rtt := map[string]float64{"a": 5, "b": 5, "c": 1}
	tests := []struct {
		name string
		ok   func(string) bool
		want string
	}{
		{"lowest", func(string) bool { return true }, "c"},
		{"tie by name", func(r string) bool { return r != "c" }, "a"},
		{"none", func(string) bool { return false }, ""},
	}
	for _, tt := range tests {
		if got := nearestRegion(rtt, tt.ok); got != tt.want {
			t.Errorf("%s: nearestRegion = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestProxyWaterfall runs the planner and the proxy in process against real
// HTTP backends: under capacity everything goes to the nearest region; with
// demand over the nearest region's capacity the excess spills to the next.
func TestProxyWaterfall(t *testing.T) {
	e1, e2 := backendServer(t, "us-east"), backendServer(t, "us-east")
	w1, w2 := backendServer(t, "eu-west"), backendServer(t, "eu-west")
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	e := newTestEdge(t, g, clk)
	e.rtt.set("us-east", 5)
	e.rtt.set("eu-west", 80)
	cfg := twoRegionConfig(t, "waterfall", addrsOf(e1, e2), addrsOf(w1, w2), 100)
	if err := e.ApplySnapshot(ControlState{Version: "v1", Config: cfg}); err != nil {
		t.Fatal(err)
	}
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
	e.planner.step(clk.Now())
	if got := send(200); got["us-east"] != 200 {
		t.Fatalf("under capacity: regions = %v, want all 200 in us-east", got)
	}

	// Over capacity: 300 rps at nyc against 200 in us-east ⇒ 1/3 to eu-west.
	g.set(gossip.NodeState{Node: "gfe-nyc-2", Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 300}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}})
	clk.Advance(time.Second) // the 200 requests above also count toward this node's demand
	e.planner.step(clk.Now())
	st := e.Status()
	if len(st.Services) != 1 {
		t.Fatalf("Status().Services = %v", st.Services)
	}
	var eastShare float64
	for _, s := range st.Services[0].Plan {
		if s.Region == "us-east" {
			eastShare += s.Share
		}
	}
	demand := st.Services[0].DemandRPS
	if want := 200 / demand; math.Abs(eastShare-want) > 1e-9 {
		t.Fatalf("plan share of us-east = %v, want 200/%v = %v", eastShare, demand, want)
	}
	got := send(3000)
	if frac := float64(got["us-east"]) / 3000; math.Abs(frac-eastShare) > 0.03 {
		t.Errorf("us-east got %.3f of requests, plan says %.3f (%v)", frac, eastShare, got)
	}
	if st.Services[0].Decisions["nearest"] == 0 {
		t.Errorf("no nearest decisions counted: %v", st.Services[0].Decisions)
	}
}

// TestPickDoesNotAllocate checks the request-path pick of every policy.
func TestPickDoesNotAllocate(t *testing.T) {
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	for _, policy := range []string{"waterfall", "min_rtt", "round_robin", "least_request", "hash2", "hash3", "hash5"} {
		t.Run(policy, func(t *testing.T) {
			e := newTestEdge(t, g, clk)
			e.rtt.set("us-east", 5)
			e.rtt.set("eu-west", 80)
			cfg := twoRegionConfig(t, policy, []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"127.0.0.1:3"}, 100)
			e.ApplySnapshot(ControlState{Version: "v1", Config: cfg})
			e.planner.step(clk.Now())
			svc := e.table.Load().services["web"]
			k := flowKey{src: netip.MustParseAddrPort("127.0.3.4:5555"), dst: netip.MustParseAddrPort("127.0.1.1:8080")}
			n := testing.AllocsPerRun(1000, func() {
				p, err := svc.pick(12345, k)
				if err != nil {
					t.Fatal(err)
				}
				p.done()
			})
			if n != 0 {
				t.Errorf("pick allocates %v times, want 0", n)
			}
		})
	}
}
