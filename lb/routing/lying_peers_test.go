package routing_test

import (
	"fmt"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/routing"
)

// threeRegions is the demo's shape: us-east, eu-west and asia-east, one
// group of two instances each at 1000 req/s per instance (2000 per region,
// 1900 planned at the default target utilization 0.95; 6000 declared).
func threeRegions(t *testing.T) *config.Config {
	var regions []gfetest.Region
	for i, r := range []string{"us-east", "eu-west", "asia-east"} {
		regions = append(regions, gfetest.Region{Name: r, Zones: []gfetest.Zone{{
			Name: r + "-b", Addrs: []string{fmt.Sprintf("127.0.0.1:%d", 9100+10*i), fmt.Sprintf("127.0.0.1:%d", 9101+10*i)},
		}}})
	}
	return gfetest.SessionConfig(t, "waterfall", regions, "", "")
}

// honest are the other sites' gfes: lon and tokyo, each near its region.
var honest = []routing.Peer{
	{Node: "gfe-lon", Site: "lon", Demand: map[string]float64{"web": 500}, RTT: map[string]float64{"us-east": 80, "eu-west": 5, "asia-east": 250}},
	{Node: "gfe-tokyo", Site: "tokyo", Demand: map[string]float64{"web": 500}, RTT: map[string]float64{"us-east": 200, "eu-west": 250, "asia-east": 5}},
}

// nyc is this gfe.
var nyc = routing.Peer{Node: "gfe-nyc", Site: "nyc", Demand: map[string]float64{"web": 300}, RTT: map[string]float64{"us-east": 5, "eu-west": 80, "asia-east": 200}}

// planRig builds tables for nyc as the gfe's planner does every 500ms.
type planRig struct {
	t   *testing.T
	b   *routing.Builder
	cs  *routing.Fleet
	now time.Time
	// last is the table of the last step.
	last *routing.Table
}

func newPlanRig(t *testing.T, bounds routing.Bounds) *planRig {
	return &planRig{
		t:   t,
		b:   routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1, Bounds: bounds}, routing.Options{Now: time.Now, Rand: lcg()}),
		cs:  routing.FromConfig("v1", threeRegions(t)),
		now: time.Unix(1_000_000, 0),
	}
}

// step builds one table over peers and returns nyc's shares by region and
// the highest region utilization of the plan.
func (r *planRig) step(peers []routing.Peer) (shares map[string]float64, maxUtil float64) {
	r.t.Helper()
	r.now = r.now.Add(500 * time.Millisecond)
	tbl, problems := r.b.Build(routing.Input{Fleet: r.cs, Peers: peers, Self: nyc, Now: r.now})
	if len(problems) > 0 {
		r.t.Fatalf("Build problems: %v", problems)
	}
	r.last = tbl
	plan := tbl.Services["web"].Plan()
	if plan == nil {
		r.t.Fatal("no plan")
	}
	shares = map[string]float64{}
	for _, f := range plan.Row("nyc") {
		shares[f.Region] += f.Share
	}
	for _, reg := range []string{"us-east", "eu-west", "asia-east"} {
		if rl, ok := plan.Region(reg); ok {
			maxUtil = math.Max(maxUtil, rl.Utilization())
		}
	}
	return shares, maxUtil
}

// settle builds until peers' demand is in full (the rise limit) and
// returns the last step's numbers.
func (r *planRig) settle(peers []routing.Peer) (map[string]float64, float64) {
	r.t.Helper()
	var shares map[string]float64
	var util float64
	for range 20 {
		shares, util = r.step(peers)
	}
	return shares, util
}

func allUSEast(shares map[string]float64) bool {
	return math.Abs(shares["us-east"]-1) < 1e-9 && shares["eu-west"] == 0 && shares["asia-east"] == 0
}

// TestLyingGFEDoesNotMoveItsSite replays the first security review, finding 1(b): one fake gfe
// of site nyc gossips an absurd RTT (5000 ms to us-east, nyc's nearest
// region, or 0 ms to the far region). nyc's RTT is the median over its
// gfes, this gfe's own measurement breaking the tie of two, so nyc keeps
// all its traffic in us-east. With the mean, the first lie moved nyc to
// eu-west and the second to asia-east.
func TestLyingGFEDoesNotMoveItsSite(t *testing.T) {
	honestNYC := routing.Peer{Node: "gfe-nyc-2", Site: "nyc", Demand: map[string]float64{"web": 100}, RTT: map[string]float64{"us-east": 7, "eu-west": 82, "asia-east": 190}}
	tests := []struct {
		name  string
		peers []routing.Peer // besides honest
		lie   map[string]float64
	}{
		{name: "far from nyc's nearest region", lie: map[string]float64{"us-east": 5000, "eu-west": 80, "asia-east": 200}},
		{name: "near the far region", lie: map[string]float64{"us-east": 5, "eu-west": 80, "asia-east": 0}},
		{name: "one liar among three gfes", peers: []routing.Peer{honestNYC}, lie: map[string]float64{"us-east": 5000, "eu-west": 0, "asia-east": 0}},
	}
	for _, tt := range tests {
		for _, bounds := range []routing.Bounds{{}, routing.DefaultBounds()} {
			t.Run(fmt.Sprintf("%s/bounds %+v", tt.name, bounds), func(t *testing.T) {
				r := newPlanRig(t, bounds)
				peers := append(append([]routing.Peer{}, honest...), tt.peers...)
				if shares, _ := r.settle(peers); !allUSEast(shares) {
					t.Fatalf("before the lie nyc sends %v, want everything to us-east", shares)
				}
				liar := routing.Peer{Node: "gfe-nyc-evil", Site: "nyc", RTT: tt.lie}
				shares, _ := r.step(append(peers, liar))
				if !allUSEast(shares) {
					t.Errorf("with the liar nyc sends %v, want everything to us-east", shares)
				}
				if shares, _ := r.settle(append(peers, liar)); !allUSEast(shares) {
					t.Errorf("with the liar, settled, nyc sends %v, want everything to us-east", shares)
				}
			})
		}
	}
}

// TestAbsurdDemandIsBounded replays the first security review, finding 1(c): a fake site gossips
// demand 1e9 req/s for a service whose declared capacity is 6000 req/s.
// Without bounds every region went to about 175,000x its capacity in the
// first plan. With DefaultBounds the fake counts 0 in the first plan after
// it appears (nyc's row and every region's load are unchanged), rises by at
// most the declared capacity per second, and never counts more than twice
// the declared capacity, so no region is ever planned above
// (2·6000 + 1300 honest)/1900 ≈ 7x its capacity, whatever RTTs the fake
// claims; each clamp is reported for the metric and the log.
func TestAbsurdDemandIsBounded(t *testing.T) {
	const declared, planned, honestDemand = 6000.0, 1900.0, 1300.0
	bound := (2*declared + honestDemand) / planned
	tests := []struct {
		name string
		rtt  map[string]float64
		// nycStays: nyc keeps all its traffic in us-east throughout.
		nycStays bool
	}{
		{name: "near every region", rtt: map[string]float64{"us-east": 1, "eu-west": 1, "asia-east": 1}, nycStays: true},
		{name: "near the far region only", rtt: map[string]float64{"asia-east": 0}, nycStays: true},
		{name: "where nyc is", rtt: map[string]float64{"us-east": 5, "eu-west": 80, "asia-east": 200}},
		{name: "on nyc's region only", rtt: map[string]float64{"us-east": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newPlanRig(t, routing.DefaultBounds())
			before, beforeUtil := r.settle(honest)
			r.b.TakeClamps()
			evil := routing.Peer{Node: "gfe-evil", Site: "evil", Demand: map[string]float64{"web": 1e9}, RTT: tt.rtt}
			peers := append(append([]routing.Peer{}, honest...), evil)

			shares, util := r.step(peers)
			if !allUSEast(shares) || !allUSEast(before) || math.Abs(util-beforeUtil) > 1e-9 {
				t.Errorf("first plan with the fake: nyc %v, max utilization %.3g; want nyc unchanged (%v) and %.3g", shares, util, before, beforeUtil)
			}
			for i := range 20 {
				shares, util = r.step(peers)
				if util > bound {
					t.Fatalf("plan %d with the fake: a region at %.3gx its capacity, want at most %.3g", i+2, util, bound)
				}
				if tt.nycStays && !allUSEast(shares) {
					t.Fatalf("plan %d with the fake: nyc sends %v, want everything to us-east", i+2, shares)
				}
			}
			var capped, risen bool
			for _, c := range r.b.TakeClamps() {
				if c.Node != "gfe-evil" || c.Key != "web" || c.Reported != 1e9 {
					t.Errorf("unexpected clamp %+v", c)
				}
				capped = capped || (c.Field == routing.ClampDemand && c.Used == 2*declared)
				risen = risen || c.Field == routing.ClampDemandRise
			}
			if !capped || !risen {
				t.Errorf("clamps reported: cap %v, rise %v; want both", capped, risen)
			}
		})
	}
}

// siteDemand returns the demand of site in the last step's world for web.
func (r *planRig) siteDemand(site string) float64 {
	for _, s := range r.last.Services["web"].World().Sites {
		if s.Name == site {
			return s.Demand
		}
	}
	return 0
}

// TestSybilDemandIsBoundedPerSite replays the sybil half of the
// gossip-insider finding: ten fake gfes at lon each gossip demand 1e9 for
// web (declared capacity 6000). Each alone is capped at 2·6000, so lon
// counted 10·12000 + 500 = 20x the capacity and every region was planned at
// about 63x. The peers of one site together now count at most 2·6000: lon's
// demand in every plan is at most 12000, no region goes above (12000 + 500
// + 300)/1900 ≈ 6.7x (what one liar alone can do), the first plan is
// unchanged (new peers count 0), and each build reports lon's clamp.
func TestSybilDemandIsBoundedPerSite(t *testing.T) {
	const declared, planned = 6000.0, 1900.0
	siteBound := 2 * declared
	utilBound := (siteBound + 500 + 300) / planned
	for _, n := range []int{1, 2, 10} {
		t.Run(fmt.Sprintf("%d sybils", n), func(t *testing.T) {
			r := newPlanRig(t, routing.DefaultBounds())
			_, beforeUtil := r.settle(honest)
			r.b.TakeClamps()
			peers := append([]routing.Peer{}, honest...)
			for i := range n {
				peers = append(peers, routing.Peer{Node: fmt.Sprintf("gfe-lon-sybil-%d", i), Site: "lon",
					Demand: map[string]float64{"web": 1e9}, RTT: map[string]float64{"us-east": 80, "eu-west": 5, "asia-east": 250}})
			}
			if _, util := r.step(peers); math.Abs(util-beforeUtil) > 1e-9 {
				t.Errorf("first plan with the sybils: max utilization %.3g, want unchanged %.3g", util, beforeUtil)
			}
			maxLon, maxUtil := 0.0, 0.0
			for range 20 {
				_, util := r.step(peers)
				maxLon, maxUtil = math.Max(maxLon, r.siteDemand("lon")), math.Max(maxUtil, util)
			}
			if maxLon > siteBound+1e-6 || maxUtil > utilBound+1e-9 {
				t.Errorf("with %d sybils lon's demand reached %.0f and a region %.3gx its capacity; want at most %.0f and %.3g", n, maxLon, maxUtil, siteBound, utilBound)
			}
			if maxLon < siteBound-1e-6 {
				t.Errorf("lon's demand settled at %.0f, want the bound %.0f (the liars still count as much as is plausible)", maxLon, siteBound)
			}
			sites := 0
			for _, c := range r.b.TakeClamps() {
				if c.Field == routing.ClampSiteDemand {
					sites++
					if c.Node != "site:lon" || c.Key != "web" || c.Used > siteBound+1e-6 {
						t.Errorf("unexpected site clamp %+v", c)
					}
				}
			}
			if sites == 0 {
				t.Error("no site clamp reported, want lon's (its honest gfe and the sybils together are above the bound)")
			}
		})
	}
}

// TestAbsurdRTTIsBounded: a peer's RTT above MaxRTT counts as MaxRTT and is
// reported; this gfe's own RTT is never clamped.
func TestAbsurdRTTIsBounded(t *testing.T) {
	r := newPlanRig(t, routing.DefaultBounds())
	odd := routing.Peer{Node: "gfe-odd", Site: "odd", RTT: map[string]float64{"us-east": 1e12, "eu-west": 20}}
	r.step(append(append([]routing.Peer{}, honest...), odd))
	tbl, _ := r.b.Build(routing.Input{Fleet: r.cs, Peers: append(append([]routing.Peer{}, honest...), odd), Self: nyc, Now: r.now.Add(time.Second)})
	var got map[string]float64
	w := tbl.Services["web"].World()
	for _, s := range w.Sites {
		if s.Name == "odd" {
			got = w.SiteRTT(s)
		}
	}
	if want := map[string]float64{"us-east": 10_000, "eu-west": 20}; !maps.Equal(got, want) {
		t.Errorf("site odd's RTT = %v, want %v", got, want)
	}
	clamps := r.b.TakeClamps()
	if len(clamps) != 2 || clamps[0] != (routing.Clamp{Node: "gfe-odd", Field: routing.ClampRTT, Key: "us-east", Reported: 1e12, Used: 10_000}) {
		t.Errorf("clamps = %+v, want the us-east RTT, once per build", clamps)
	}
}

// TestTinyCapacityFactorIsBounded: a peer gossiping an effective-capacity
// factor of 1e-9 for a group (every gfe plans with the lowest factor any
// gfe gossips) shrinks it no further than feedback.min_factor, the lowest
// an honest gfe's estimator reaches.
func TestTinyCapacityFactorIsBounded(t *testing.T) {
	r := newPlanRig(t, routing.DefaultBounds())
	sc, _ := r.cs.Config.Service("web")
	minFactor := sc.Feedback.MinFactor
	if !(minFactor > 0 && minFactor < 1) {
		t.Fatalf("feedback.min_factor = %v, want a default in (0, 1)", minFactor)
	}
	odd := routing.Peer{Node: "gfe-odd", Site: "odd", RTT: map[string]float64{"eu-west": 5},
		Capacity: map[string]map[string]float64{"web": {"us-east-b-g": 1e-9}}}
	r.step(append(append([]routing.Peer{}, honest...), odd))
	r.now = r.now.Add(time.Second)
	tbl, _ := r.b.Build(routing.Input{Fleet: r.cs, Peers: append(append([]routing.Peer{}, honest...), odd), Self: nyc, Now: r.now})
	for _, reg := range tbl.Services["web"].World().Regions {
		for _, g := range reg.Groups {
			want := 2000 * 0.95
			if g.Name == "us-east-b-g" {
				want *= minFactor
			}
			if math.Abs(g.Capacity-want) > 1e-6 {
				t.Errorf("group %s planned at %v, want %v", g.Name, g.Capacity, want)
			}
		}
	}
}
