package routing_test

import (
	"maps"
	"math"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

func TestBuildWorld(t *testing.T) {
	cfg := gfetest.TwoRegionConfig(t, "waterfall", []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"127.0.0.1:3", "127.0.0.1:4"}, 100)
	svc, _ := cfg.Service("web")
	peers := []routing.Peer{
		{Node: "gfe-nyc-2", Site: "nyc", Demand: map[string]float64{"web": 50}, RTT: map[string]float64{"us-east": 7, "eu-west": 82}},
		{Node: "gfe-lon", Site: "lon", Demand: map[string]float64{"web": 30}, RTT: map[string]float64{"us-east": 80, "eu-west": 5, "mars": 1}},
		{Node: "gfe-new", Site: "tokyo", Demand: map[string]float64{"web": 10}},
		{Node: "gfe-par", Site: "par", Demand: map[string]float64{"web": 20}, RTT: map[string]float64{"eu-west": 9}},
		// A peer without a site (a control plane's state, say) is ignored.
		{Node: "cp", Demand: map[string]float64{"web": 77}, RTT: map[string]float64{"us-east": 1}},
		// A stale copy of this node's own state must be ignored.
		{Node: "gfe-nyc", Site: "nyc", Demand: map[string]float64{"web": 999}},
	}
	me := routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: map[string]float64{"us-east": 5, "eu-west": 80}, Demand: map[string]float64{"web": 100}}
	// us-east's effective capacity is down to 60%; every capacity is
	// planned at the default target utilization, 0.95.
	got := routing.BuildWorld(routing.FromConfig("v1", cfg, "127.0.0.1:3"), svc, peers, me, map[string]float64{"east": 0.6})
	want := waterfall.World{
		Regions: []waterfall.Region{
			{Name: "us-east", Groups: []waterfall.Group{{Name: "east", Zone: "us-east-b", Instances: 2, Healthy: 2, Capacity: 200 * 0.95 * 0.6}}},
			{Name: "eu-west", Groups: []waterfall.Group{{Name: "west", Zone: "eu-west-b", Instances: 2, Healthy: 1, Capacity: 100 * 0.95}}},
		},
		Sites: []waterfall.Site{
			// RTTs by region, in the order of Regions; mars is no
			// region of the service and is dropped.
			{Name: "lon", Demand: 30, RTTByRegion: []float64{80, 5}},
			// The median of nyc's two gfes, this one's own measurement
			// breaking the tie: its own.
			{Name: "nyc", Demand: 150, RTTByRegion: []float64{5, 80}},
			// par has measured only eu-west: us-east is unreachable.
			{Name: "par", Demand: 20, RTTByRegion: []float64{math.Inf(1), 9}},
			// tokyo has measured no RTT yet: left out.
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("BuildWorld mismatch (-want +got):\n%s", d)
	}
	// By name, as /status shows them: an unmeasured region has no entry.
	for i, want := range []map[string]float64{{"us-east": 80, "eu-west": 5}, {"us-east": 5, "eu-west": 80}, {"eu-west": 9}} {
		if rtt := got.SiteRTT(got.Sites[i]); !maps.Equal(rtt, want) {
			t.Errorf("SiteRTT(%s) = %v, want %v", got.Sites[i].Name, rtt, want)
		}
	}
	// The slices plan exactly like the same World with RTT maps.
	byName := got
	byName.Sites = slices.Clone(got.Sites)
	for i, s := range byName.Sites {
		byName.Sites[i] = waterfall.Site{Name: s.Name, Demand: s.Demand, RTT: got.SiteRTT(s)}
	}
	for _, compute := range []func(waterfall.World, waterfall.Config) (*waterfall.Plan, error){waterfall.Compute, waterfall.ComputeMinRTT} {
		fast, err1 := compute(got, waterfall.DefaultConfig())
		slow, err2 := compute(byName, waterfall.DefaultConfig())
		if err1 != nil || err2 != nil {
			t.Fatalf("planning: %v, %v", err1, err2)
		}
		if d := cmp.Diff(slow, fast); d != "" {
			t.Errorf("plan of BuildWorld's slices differs from the maps' (-maps +slices):\n%s", d)
		}
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
		if got := routing.NearestRegion(rtt, tt.ok); got != tt.want {
			t.Errorf("%s: NearestRegion = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestPickDoesNotAllocate checks the request-path pick of every policy.
func TestPickDoesNotAllocate(t *testing.T) {
	for _, policy := range []string{"waterfall", "min_rtt", "round_robin", "least_request", "hash2", "hash3", "hash5"} {
		t.Run(policy, func(t *testing.T) {
			p := gfetest.NewPlanner(lcg()) // nyc: us-east 5 ms, eu-west 80 ms
			cfg := gfetest.TwoRegionConfig(t, policy, []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"127.0.0.1:3"}, 100)
			p.Apply(snapshot.FromConfig("v1", cfg))
			p.Step()
			svc := p.Table().Services["web"]
			k := routing.Flow{Src: netip.MustParseAddrPort("127.0.3.4:5555"), Dst: netip.MustParseAddrPort("127.0.1.1:8080")}
			n := testing.AllocsPerRun(1000, func() {
				p, err := svc.Pick(12345, k)
				if err != nil {
					t.Fatal(err)
				}
				p.Done()
			})
			if n != 0 {
				t.Errorf("pick allocates %v times, want 0", n)
			}
		})
	}
}

// lcg returns the seeded linear congruential sequence the gfe tests pick
// with (not safe for concurrent use).
func lcg() func() uint64 {
	var seed uint64
	return func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed }
}

// TestReasonNames checks the decision reasons' labels: the planner's four
// (waterfall.Reason, same values) then the gfe's own three.
func TestReasonNames(t *testing.T) {
	var got []string
	for r := range routing.NumReasons {
		got = append(got, r.String())
	}
	want := []string{"nearest", "spill_capacity", "spill_health", "overload", "affinity", "policy", "no_plan"}
	if !slices.Equal(got, want) {
		t.Errorf("reason names %v, want %v", got, want)
	}
	for r := range waterfall.Reason(waterfall.NumReasons) {
		if g := routing.ReasonOf(r); g.String() != r.String() {
			t.Errorf("ReasonOf(%v) = %v", r, g)
		}
	}
}
