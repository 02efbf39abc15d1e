package e2e

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

const regionCap = 320.0

// planShare returns the share of site's plan row that goes to region, from
// the site's gfe's /status taken during the measurement.
func planShare(t *testing.T, status map[string]*status.Status, site, region string) float64 {
	t.Helper()
	st := status[site]
	if st == nil || len(st.Services) == 0 {
		t.Fatalf("no /status from %s during the measurement", site)
	}
	var sh float64
	for _, s := range st.Services[0].Plan {
		if s.Region == region {
			sh += s.Share
		}
	}
	return sh
}

// routedShare is the share of a site's requests routed to region (any
// status).
func routedShare(r *loadgen.Result, region string) float64 {
	var total int64
	for _, n := range r.Routed {
		total += n
	}
	if total == 0 {
		return 0
	}
	return float64(r.Routed[region]) / float64(total)
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// TestWaterfallEndToEnd runs the waterfall through the situations of
// docs/design.md §3 on one deployment: under capacity, one region overloaded,
// a region more than half unhealthy, global overload, and recovery.
func TestWaterfallEndToEnd(t *testing.T) {
	c := startCluster(t, threeSites(20))
	measure := 4 * time.Second
	ctx := context.Background()
	steady := map[string]float64{"nyc": 200, "lon": 150, "tokyo": 100}
	nearest := map[string]string{"nyc": "us-east", "lon": "eu-west", "tokyo": "asia-east"}

	t.Run("under capacity stays nearest", func(t *testing.T) {
		res, _ := phase(t, c, steady, measure, nil)
		for site, r := range res {
			if sh := routedShare(r, nearest[site]); sh < 0.99 {
				t.Errorf("%s: %.3f of requests in %s, want ≥ 0.99 (routed %v)", site, sh, nearest[site], r.Routed)
			}
			if r.Failed > 0 {
				t.Errorf("%s: %d failed requests under capacity", site, r.Failed)
			}
		}
	})

	t.Run("one region overloaded spills to next nearest", func(t *testing.T) {
		res, status := phase(t, c, map[string]float64{"nyc": 450, "lon": 150, "tokyo": 100}, measure, nil)
		// nyc: us-east holds 320 of 450; the rest goes to eu-west (next
		// nearest, and it has room: 150 + 130 ≤ 320), none to asia-east.
		wantEast := regionCap / 450
		plan := planShare(t, status, "nyc", "us-east")
		if !within(plan, wantEast, 0.1*wantEast) {
			t.Errorf("nyc plan share of us-east = %.3f, want %.3f ±10%%", plan, wantEast)
		}
		got := routedShare(res["nyc"], "us-east")
		if !within(got, plan, 0.1*plan) {
			t.Errorf("nyc measured share of us-east = %.3f, plan %.3f: off by more than 10%%", got, plan)
		}
		spill := routedShare(res["nyc"], "eu-west")
		if !within(spill, 1-plan, 0.1*(1-plan)+0.01) {
			t.Errorf("nyc measured share of eu-west = %.3f, plan %.3f ±10%%", spill, 1-plan)
		}
		if a := routedShare(res["nyc"], "asia-east"); a > 0.01 {
			t.Errorf("nyc sent %.3f to asia-east, want none (eu-west had room)", a)
		}
		for _, site := range []string{"lon", "tokyo"} {
			if sh := routedShare(res[site], nearest[site]); sh < 0.99 {
				t.Errorf("%s: %.3f in %s, want ≥ 0.99", site, sh, nearest[site])
			}
		}
	})

	t.Run("more than half unhealthy spills preemptively", func(t *testing.T) {
		// 5 of eu-west's 8 instances fail: h = 3/8, keep 2h = 0.75 of lon's
		// 100 req/s although the 120 req/s left would hold all of it.
		if err := topology.SetHealthy(ctx, false, c.Instances["eu-west"][:5]...); err != nil {
			t.Fatal(err)
		}
		res, status := phase(t, c, map[string]float64{"nyc": 200, "lon": 100, "tokyo": 100}, measure, healthyIn("eu-west", 3))
		plan := planShare(t, status, "lon", "eu-west")
		if !within(plan, 0.75, 0.075) {
			t.Errorf("lon plan share of eu-west = %.3f, want 0.75 ±10%%", plan)
		}
		got := routedShare(res["lon"], "eu-west")
		if !within(got, 0.75, 0.075) {
			t.Errorf("lon measured share of eu-west = %.3f, want 0.75 ±10%% (routed %v)", got, res["lon"].Routed)
		}
		if sp := routedShare(res["lon"], "us-east"); !within(sp, 0.25, 0.05) {
			t.Errorf("lon measured spill to us-east = %.3f, want 0.25 ±0.05", sp)
		}
		if err := topology.SetHealthy(ctx, true, c.Instances["eu-west"][:5]...); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("global overload runs every region at the same utilization", func(t *testing.T) {
		// 1152 req/s against 960: λ = 1.2.
		res, status := phase(t, c, map[string]float64{"nyc": 500, "lon": 400, "tokyo": 252}, measure, healthyIn("eu-west", 8))
		routed := map[string]float64{}
		for _, r := range res {
			for region, n := range r.Routed {
				routed[region] += float64(n) / measure.Seconds()
			}
		}
		var utils []float64
		for _, region := range []string{"us-east", "eu-west", "asia-east"} {
			utils = append(utils, routed[region]/regionCap)
		}
		lo, hi := math.Inf(1), 0.0
		for _, u := range utils {
			lo, hi = math.Min(lo, u), math.Max(hi, u)
		}
		t.Logf("region utilizations (routed/capacity): %.3f", utils)
		mean := (utils[0] + utils[1] + utils[2]) / 3
		if hi-lo > 0.1*mean {
			t.Errorf("utilizations %.3f differ by %.3f, want within ±10%% of each other", utils, hi-lo)
		}
		for _, r := range status["nyc"].Services[0].Regions {
			if !within(r.Utilization, 1.2, 0.12) {
				t.Errorf("planned utilization of %s = %.3f, want 1.2 ±10%%", r.Name, r.Utilization)
			}
		}
	})

	t.Run("capacity restored returns traffic to nearest", func(t *testing.T) {
		// The overload left every backend's queue full: measure once the
		// closed loop has seen them drain (every gfe plans every group at
		// its full capacity again).
		res, _ := phase(t, c, steady, measure, fullCapacity)
		for site, r := range res {
			if sh := routedShare(r, nearest[site]); sh < 0.98 {
				t.Errorf("%s: %.3f of new requests in %s after recovery, want ≥ 0.98", site, sh, nearest[site])
			}
		}
	})
}
