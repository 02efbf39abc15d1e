package realbench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/internal/topology"
)

// bins are the binaries built once for the package's tests.
var bins map[string]string

func TestMain(m *testing.M) { testkit.RunWithBinaries(m, &bins, topology.Binaries...) }

// TestRunQuick runs the real thing in quick mode for waterfall and
// hash5/nearest_region and checks that every request is accounted for and
// that the numbers say what the deployment makes certain: hash5 with scope
// nearest_region never leaves a site's region, so it sends nyc's whole
// flash crowd (450 req/s) to us-east (320 req/s) — a third of its load
// above capacity, queue-full errors, every us-east window over capacity —
// while the waterfall spills to eu-west once its demand estimate catches
// up, within seconds.
func TestRunQuick(t *testing.T) {
	cfg := QuickConfig()
	cfg.Net = 60 // e2e tests, which run in parallel with this package, use 20–59
	cfg.Policies = []benchpolicy.Row{{Policy: "waterfall"}, {Policy: "hash5", Scope: "nearest_region"}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var progress strings.Builder
	res, err := Run(ctx, cfg, Options{Dir: t.TempDir(), Bins: bins, Progress: &progress})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var table strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if len(res.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(res.Rows))
	}

	// Every request accounted for.
	scheduled := cfg.Scheduled()
	for _, row := range res.Rows {
		if err := row.check(); err != nil {
			t.Errorf("check: %v", err)
		}
		if float64(row.Requests) < 0.9*scheduled || float64(row.Requests) > 1.02*scheduled {
			t.Errorf("%s: %d requests, want %.0f (demand × duration) within -10%%/+2%%", row.Policy, row.Requests, scheduled)
		}
		if row.Dropped != 0 {
			t.Errorf("%s: %d requests dropped by the loader", row.Policy, row.Dropped)
		}
		if want := 3 * cfg.SourcesPerSite; row.Sources != want {
			t.Errorf("%s: requests came from %d client addresses, want %d", row.Policy, row.Sources, want)
		}
		if float64(row.SourcePorts) < 0.9*float64(row.Connected) {
			t.Errorf("%s: %d distinct address:port pairs for %d connected requests, want nearly one each", row.Policy, row.SourcePorts, row.Connected)
		}
		for name, v := range map[string]float64{"OverCapacity": row.OverCapacity, "Excess": row.Excess, "ErrorRate": row.ErrorRate, "CrossRegion": row.CrossRegion} {
			if v < 0 || v > 1 {
				t.Errorf("%s: %s = %v, want a share in [0, 1]", row.Policy, name, v)
			}
		}
		if row.RTTOverLP == nil {
			t.Errorf("%s: no RTT/LP", row.Policy)
		}
		if row.P50Ms <= 0 || row.P50Ms > row.P99Ms {
			t.Errorf("%s: p50 %v, p99 %v, want 0 < p50 <= p99", row.Policy, row.P50Ms, row.P99Ms)
		}
		// Shares of the routed requests sum to 1.
		for i, ph := range row.Phases {
			var routed, sum float64
			for _, s := range ph.Sites {
				for _, n := range s.Routed {
					routed += float64(n)
				}
			}
			for _, rps := range ph.LoadRPS {
				sum += rps
			}
			dur := cfg.Phases[i].Duration
			if d := sum*dur.Seconds() - routed; d > 1e-6 || d < -1e-6 {
				t.Errorf("%s, %s: region loads add up to %.3f requests, %v routed", row.Policy, ph.Name, sum*dur.Seconds(), routed)
			}
		}
	}

	wf, h5 := res.Rows[0], res.Rows[1]
	if wf.Policy != "waterfall" || h5.Policy != "hash5" || h5.Scope != "nearest_region" {
		t.Fatalf("rows %s/%s and %s/%s, want waterfall and hash5/nearest_region", wf.Policy, wf.Scope, h5.Policy, h5.Scope)
	}
	steady, flash := 0, 1
	if c := wf.Phases[steady].CrossRegion; c > 0.02 {
		t.Errorf("waterfall, steady: %.3f cross-region with every region under half full, want ≤ 0.02", c)
	}
	if c := wf.Phases[flash].CrossRegion; c < 0.05 {
		t.Errorf("waterfall, flash crowd: %.3f cross-region, want > 0.05 (nyc's spill to eu-west; 0.19 once it has caught up)", c)
	}
	if h5.CrossRegion != 0 {
		t.Errorf("hash5/nearest_region: %.4f cross-region, want 0 (its pool is the nearest region)", h5.CrossRegion)
	}
	if l := h5.Phases[flash].LoadRPS["us-east"]; l < 0.9*450 {
		t.Errorf("hash5/nearest_region, flash crowd: %.0f req/s to us-east, want nyc's 450 (-10%%)", l)
	}
	if h5.OverCapacity < 0.2 {
		t.Errorf("hash5/nearest_region: OVER_CAP %.3f, want ≥ 0.2 (us-east over capacity through the flash crowd)", h5.OverCapacity)
	}
	if wf.Excess >= h5.Excess {
		t.Errorf("EXCESS: waterfall %.3f, hash5/nearest_region %.3f; want the waterfall's lower", wf.Excess, h5.Excess)
	}
	if wf.ErrorRate >= h5.ErrorRate {
		t.Errorf("ERRORS: waterfall %.3f, hash5/nearest_region %.3f; want the waterfall's lower", wf.ErrorRate, h5.ErrorRate)
	}
}
