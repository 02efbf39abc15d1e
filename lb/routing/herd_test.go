package routing_test

import (
	"math"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestHerdGuard: three sites share us-east (2 × 100 req/s, planned at 190),
// site a the farthest of them. Its demand doubles while gossip still
// carries the others' old demand. When us-east's instances report load
// that neither the plan nor a's own requests explain (the others are
// rising too), a plans as if b and c rose as it did and leaves us-east's
// room to the nearer sites; when the reports show nothing unexplained (a
// rises alone), a fills the room the gossiped world leaves it.
func TestHerdGuard(t *testing.T) {
	east := []string{"127.0.0.1:1", "127.0.0.1:2"}
	west := []string{"127.0.0.1:3", "127.0.0.1:4"}
	cases := []struct {
		name string
		// reported is what each us-east instance says it receives per
		// second after the first step.
		reported float64
		// others is b's and c's gossiped demand.
		others float64
		herd   bool
		// east is a's planned us-east demand after its rise.
		east float64
	}{
		// b and c at 100 in a's world (their gossiped 50 times a's rise
		// of 2) take 171 of us-east's 190 × HerdTarget: a gets none.
		{name: "herd", reported: 135, others: 50, herd: true, east: 0},
		// b and c at their gossiped 50: a gets the 90 left of 190.
		{name: "alone", reported: 75, others: 50, herd: false, east: 90},
		// Unexplained load, but nobody else sends to us-east: it can only
		// be a's own, and a fills us-east.
		{name: "no other sender", reported: 135, others: 0, herd: false, east: 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			b := routing.NewBuilder(routing.Config{Node: "gfe-a", Site: "a", Damping: 1, HerdWindow: 2 * time.Second},
				routing.Options{Now: clk.Now, Rand: gfetest.Rand()})
			cs := routing.FromConfig("v1", gfetest.TwoRegionConfig(t, "waterfall", east, west, 100))
			peers := []routing.Peer{
				{Node: "gfe-b", Site: "b", Demand: map[string]float64{"web": tc.others}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}},
				{Node: "gfe-c", Site: "c", Demand: map[string]float64{"web": tc.others}, RTT: map[string]float64{"us-east": 6, "eu-west": 80}},
			}
			build := func(demand float64) *routing.Service {
				t.Helper()
				tbl, problems := b.Build(routing.Input{Fleet: cs, Peers: peers, Now: clk.Now(),
					Self: routing.Peer{Node: "gfe-a", Site: "a", Demand: map[string]float64{"web": demand}, RTT: map[string]float64{"us-east": 7, "eu-west": 80}}})
				if len(problems) > 0 {
					t.Fatal(problems)
				}
				return tbl.Services["web"]
			}
			eastOf := func(svc *routing.Service) float64 {
				var d float64
				for _, f := range svc.Plan().Row("a") {
					if f.Region == "us-east" {
						d += f.Demand
					}
				}
				return d
			}
			if svc := build(50); eastOf(svc) != 50 || svc.Herd() {
				t.Fatalf("steady: a sends %v to us-east (herd %v), want all its 50", eastOf(svc), svc.Herd())
			}
			// In the next second a sent 50 requests (25 to each instance),
			// and each instance reports what it received from every site.
			for _, addr := range east {
				be := b.Backend(addr)
				for range 25 {
					be.Observe(backend.OutcomeOK, 10*time.Millisecond)
				}
				be.ObserveRate(tc.reported)
			}
			clk.Advance(time.Second)
			svc := build(100)
			if got := eastOf(svc); svc.Herd() != tc.herd || math.Abs(got-tc.east) > 1e-9 {
				t.Errorf("after a's rise: a sends %v to us-east (herd %v), want %v (herd %v)", got, svc.Herd(), tc.east, tc.herd)
			}
		})
	}
}
