package routing_test

import (
	"math"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/capacity"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestEffectiveCapacity: a group shrinks in this gfe's own next plan when
// its requests are rejected, and in its plan when a peer gossips a lower
// factor; when the demand exceeds what the shrunk groups hold, the plan
// falls back to the configured capacities (rule 6 over them).
func TestEffectiveCapacity(t *testing.T) {
	east := []string{"127.0.0.1:1", "127.0.0.1:2"}
	west := []string{"127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}
	p := gfetest.NewPlanner(gfetest.Rand())
	p.Apply(snapshot.FromConfig("v1", gfetest.TwoRegionConfig(t, "waterfall", east, west, 100)))
	peer := func(demand float64, factor map[string]float64) {
		p.SetPeer(routing.Peer{Node: "gfe-nyc-2", Site: "nyc", Demand: map[string]float64{"web": demand},
			RTT: map[string]float64{"us-east": 5, "eu-west": 80}, Capacity: map[string]map[string]float64{"web": factor}})
	}
	group := func(name string) routing.GroupCapacity {
		for _, g := range p.Table().Services["web"].Capacity() {
			if g.Group == name {
				return g
			}
		}
		t.Fatalf("no group %s", name)
		return routing.GroupCapacity{}
	}
	peer(100, nil)
	p.Step()
	if g := group("east"); g.Planned != 190 || g.Factor != 1 || g.Own != 1 {
		t.Fatalf("clean: east %+v, want planned 190 at factor 1", g)
	}

	// 5 of 25 answers from us-east in 250 ms (100 req/s) are 503s: east
	// shrinks in the next build to Decrease × (1 − 0.2) of its load (100)
	// over 190, or rather by the most one shrink may take (max_shrink
	// 0.25).
	b := p.Builder.Backend(east[0])
	for i := range 25 {
		if i < 5 {
			b.Observe(backend.OutcomeRejected, 0)
		} else {
			b.Observe(backend.OutcomeOK, 0)
		}
	}
	p.Clock.Advance(250 * time.Millisecond)
	p.Step()
	want := max(0.9*0.8*100/190, 0.75)
	if g := group("east"); math.Abs(g.Own-want) > 1e-9 || g.Factor != g.Own || g.Signal != capacity.SignalRejections || math.Abs(g.Planned-190*want) > 1e-9 {
		t.Errorf("after rejections: east %+v, want own = factor = %v by rejections", g, want)
	}
	if f := p.Builder.Factors()["web"]["east"]; math.Abs(f-want) > 1e-9 {
		t.Errorf("Factors() gossips east at %v, want %v", f, want)
	}

	// A peer's lower factor of west wins.
	peer(100, map[string]float64{"west": 0.5})
	p.Clock.Advance(250 * time.Millisecond)
	p.Step()
	if g := group("west"); g.Factor != 0.5 || g.Own != 1 || g.Planned != 300*0.95*0.5 {
		t.Errorf("peer's factor: west %+v, want factor 0.5 (own 1), planned %v", g, 300*0.95*0.5)
	}

	// Global overload: 600 req/s against 475 configured (0.95 × 500).
	peer(600, map[string]float64{"west": 0.5})
	p.Clock.Advance(250 * time.Millisecond)
	p.Step()
	if g := group("west"); g.Factor != 1 || g.Planned != 285 {
		t.Errorf("global overload: west %+v, want planned at the configured 285 (factor 1)", g)
	}
}

// TestSoftLimitOverflow: once a group has a baseline (25 ms), each of its
// instances gets a soft limit of ⌈rate per instance × (baseline +
// queue_delay)⌉ = ⌈100 × 0.065⌉ = 7; when both us-east instances hold 7
// of this gfe's requests, the next pick overflows to eu-west, which the
// plan row does not reach, as spill_capacity. A baseline policy has no
// soft limits, nor has any instance in global overload.
func TestSoftLimitOverflow(t *testing.T) {
	east := []string{"127.0.0.1:1", "127.0.0.1:2"}
	west := []string{"127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}
	for _, policy := range []string{"waterfall", "round_robin"} {
		t.Run(policy, func(t *testing.T) {
			p := gfetest.NewPlanner(gfetest.Rand())
			p.Apply(snapshot.FromConfig("v1", gfetest.TwoRegionConfig(t, policy, east, west, 100)))
			p.Step()
			for _, a := range east {
				for range 10 {
					p.Builder.Backend(a).Observe(backend.OutcomeOK, 25*time.Millisecond)
				}
			}
			for range 3 { // judge the sample, then set limits from its baseline
				p.Clock.Advance(250 * time.Millisecond)
				p.Step()
			}
			want := int64(7)
			if policy != "waterfall" {
				want = 0
			}
			for _, a := range east {
				if got := p.Builder.Backend(a).SoftLimit(); got != want {
					t.Fatalf("soft limit of %s = %d, want %d", a, got, want)
				}
			}
			if policy != "waterfall" {
				return
			}
			svc := p.Table().Services["web"]
			var held []routing.Pick
			for range 14 {
				pk, err := svc.Pick(0, routing.Flow{})
				if err != nil || pk.Region != "us-east" {
					t.Fatalf("pick %d: %v %v, want us-east", len(held), pk.Region, err)
				}
				held = append(held, pk)
			}
			pk, err := svc.Pick(0, routing.Flow{})
			if err != nil || pk.Region != "eu-west" || pk.Reason != routing.ReasonSpillCapacity {
				t.Errorf("15th pick: %v %v %v, want eu-west spill_capacity", pk.Region, pk.Reason, err)
			}
			pk.Done()
			for _, h := range held {
				h.Done()
			}
			// Global overload (600 req/s against 475 planned): no soft
			// limits, so that rule 6's even overload holds.
			p.SetPeer(routing.Peer{Node: "gfe-nyc-2", Site: "nyc", Demand: map[string]float64{"web": 600}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}})
			p.Clock.Advance(250 * time.Millisecond)
			p.Step()
			for _, a := range append(east, west...) {
				if got := p.Builder.Backend(a).SoftLimit(); got != 0 {
					t.Errorf("global overload: soft limit of %s = %d, want none", a, got)
				}
			}
		})
	}
}

// TestPlannedPicksAreSmooth: with a plan row of 70% us-east and 30%
// eu-west, every run of 10 consecutive picks sends 6 to 8 of them to
// us-east (the Weyl sequence spreads each group's share evenly; random
// draws would give 10 of 10 or 4 of 10 in some run), and over 1000 picks
// the shares are the plan's within 0.5%.
func TestPlannedPicksAreSmooth(t *testing.T) {
	east := []string{"127.0.0.1:1", "127.0.0.1:2"}
	west := []string{"127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}
	p := gfetest.NewPlanner(gfetest.Rand())
	p.Apply(snapshot.FromConfig("v1", gfetest.TwoRegionConfig(t, "waterfall", east, west, 100)))
	// us-east plans 190 req/s (0.95 × 200): 190/0.7 of demand sends 70%.
	p.SetPeer(routing.Peer{Node: "gfe-nyc-2", Site: "nyc", Demand: map[string]float64{"web": 190 / 0.7}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}})
	p.Step()
	svc := p.Table().Services["web"]
	var inEast []bool
	for i := range 1000 {
		pk, err := svc.Pick(uint64(i), routing.Flow{})
		if err != nil {
			t.Fatal(err)
		}
		inEast = append(inEast, pk.Region == "us-east")
		pk.Done()
	}
	total := 0
	for i, e := range inEast {
		if e {
			total++
		}
		if i >= 9 {
			n := 0
			for _, e := range inEast[i-9 : i+1] {
				if e {
					n++
				}
			}
			if n < 6 || n > 8 {
				t.Fatalf("picks %d..%d: %d of 10 to us-east, want 6..8", i-9, i, n)
			}
		}
	}
	if math.Abs(float64(total)/1000-0.7) > 0.005 {
		t.Errorf("%d of 1000 picks to us-east, want 700 ± 5", total)
	}
}

// TestSoftLimitsStayOnBelowDeclared: a peer gossips west's factor at 0.1,
// so the shrunk world (us-east 190 + eu-west 28.5 req/s) is short of the
// 300 req/s nyc demands, while the declared capacity (475 planned, 500
// declared) holds it. The plan falls back to the declared capacities, and
// the soft limits stay on (⌈100 × 0.065⌉ = 7 per us-east instance), so a
// burst of 60 held picks puts only 14 on us-east and overflows the rest to
// eu-west instead of queueing them; they
// stay on at 480 req/s (above the 475 planned, below the 500 declared) and
// go off only in global overload, at 600.
func TestSoftLimitsStayOnBelowDeclared(t *testing.T) {
	east := []string{"127.0.0.1:1", "127.0.0.1:2"}
	west := []string{"127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}
	p := gfetest.NewPlanner(gfetest.Rand())
	p.Apply(snapshot.FromConfig("v1", gfetest.TwoRegionConfig(t, "waterfall", east, west, 100)))
	p.Step()
	for _, a := range east {
		for range 10 {
			p.Builder.Backend(a).Observe(backend.OutcomeOK, 25*time.Millisecond)
		}
	}
	for range 3 { // judge the sample, then set limits from its baseline
		p.Clock.Advance(250 * time.Millisecond)
		p.Step()
	}
	for _, tc := range []struct {
		demand float64
		want   int64
	}{{300, 7}, {480, 7}, {600, 0}} {
		p.SetPeer(routing.Peer{Node: "gfe-nyc-2", Site: "nyc", Demand: map[string]float64{"web": tc.demand},
			RTT: map[string]float64{"us-east": 5, "eu-west": 80}, Capacity: map[string]map[string]float64{"web": {"west": 0.1}}})
		p.Clock.Advance(250 * time.Millisecond)
		p.Step()
		svc := p.Table().Services["web"]
		for _, g := range svc.Capacity() {
			if g.Factor != 1 {
				t.Fatalf("demand %v: group %s planned at factor %v, want the declared capacity (factor 1)", tc.demand, g.Group, g.Factor)
			}
		}
		for _, a := range east {
			if got := p.Builder.Backend(a).SoftLimit(); got != tc.want {
				t.Errorf("demand %v: soft limit of %s = %d, want %d", tc.demand, a, got, tc.want)
			}
		}
		if tc.want == 0 {
			continue
		}
		// 60 picks held at once: us-east, 63% of nyc's row, takes no
		// more than its two soft limits' 14, and the rest overflows.
		var held []routing.Pick
		inEast := 0
		for range 60 {
			pk, err := svc.Pick(0, routing.Flow{})
			if err != nil {
				t.Fatalf("demand %v: pick: %v", tc.demand, err)
			}
			if pk.Region == "us-east" {
				inEast++
			}
			held = append(held, pk)
		}
		if inEast != 2*int(tc.want) {
			t.Errorf("demand %v: us-east holds %d of 60 picks, want its soft limits' %d", tc.demand, inEast, 2*tc.want)
		}
		for _, h := range held {
			h.Done()
		}
	}
}
