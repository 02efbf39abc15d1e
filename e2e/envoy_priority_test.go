package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// envoyPriorityNet is the 127.N.0.0/16 of TestEnvoyPriorityEndToEnd.
const envoyPriorityNet = 113

// levels returns a gfe's priority levels from its /status as
// "region+region healthy/instances load%", priority 0 first.
func levels(st *status.Status) []string {
	if st == nil || len(st.Services) == 0 {
		return nil
	}
	var out []string
	for _, lv := range st.Services[0].Priorities {
		out = append(out, fmt.Sprintf("%s %d/%d %d%%", strings.Join(lv.Regions, "+"), lv.Healthy, lv.Instances, lv.LoadPercent))
	}
	return out
}

// waitLevels polls every gfe's /status until its priority levels are
// want[site].
func waitLevels(t *testing.T, c *topology.Cluster, want map[string][]string) {
	t.Helper()
	err := topology.WaitFor(context.Background(), convergeTimeout, func() (bool, error) {
		st := statuses(c)
		for site, w := range want {
			if got := levels(st[site]); !slices.Equal(got, w) {
				return false, fmt.Errorf("%s's levels %q, want %q", site, got, w)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// measureLoad drives rates, waits for cond, and returns each site's
// requests of the measure that follows.
func measureLoad(t *testing.T, c *topology.Cluster, rates map[string]float64, measure time.Duration, cond func()) map[string]*loadgen.Result {
	t.Helper()
	l := c.StartLoad(rates)
	cond()
	t0 := time.Now()
	time.Sleep(measure) // the measured window, not a wait for a condition
	return stopWindows(t, l, t0, measure)
}

// TestEnvoyPriorityEndToEnd runs the envoy_priority baseline with real
// binaries (threeSites: three regions of 8 instances, 320 req/s each):
// every gfe sends its traffic to its nearest region (priority 0), keeps
// it there when that region is overloaded but healthy (no capacity
// spill, unlike the waterfall), and when 3 of its 8 instances go
// unhealthy moves the share Envoy's priority load says — 5/8 healthy ×
// 1.4 = 87% stays, 13% goes to the next nearest region — and back when
// they recover.
func TestEnvoyPriorityEndToEnd(t *testing.T) {
	spec := threeSites(envoyPriorityNet)
	spec.Policy = "envoy_priority"
	c := startCluster(t, spec)
	ctx := context.Background()
	measure := 3 * time.Second
	nearest := map[string]string{"nyc": "us-east", "lon": "eu-west", "tokyo": "asia-east"}
	allHealthy := map[string][]string{
		"nyc":   {"us-east 8/8 100%", "eu-west 8/8 0%", "asia-east 8/8 0%"},
		"lon":   {"eu-west 8/8 100%", "us-east 8/8 0%", "asia-east 8/8 0%"},
		"tokyo": {"asia-east 8/8 100%", "eu-west 8/8 0%", "us-east 8/8 0%"},
	}
	stayNearest := func(t *testing.T, res map[string]*loadgen.Result, sites ...string) {
		t.Helper()
		for _, site := range sites {
			if sh := routedShare(res[site], nearest[site]); sh < 0.99 {
				t.Errorf("%s: %.3f of requests in %s, want ≥ 0.99 (routed %v)", site, sh, nearest[site], res[site].Routed)
			}
		}
	}

	t.Run("all healthy: every site's nearest region", func(t *testing.T) {
		res := measureLoad(t, c, map[string]float64{"nyc": 100, "lon": 80, "tokyo": 60}, measure, func() { waitLevels(t, c, allHealthy) })
		stayNearest(t, res, "nyc", "lon", "tokyo")
		for site, r := range res {
			if r.Failed > 0 {
				t.Errorf("%s: %d failed requests under capacity", site, r.Failed)
			}
		}
	})

	t.Run("nearest overloaded but healthy keeps everything", func(t *testing.T) {
		// nyc sends 450 req/s at us-east's 320: the waterfall would
		// spill 130 to eu-west; Envoy's priorities keep it all.
		res := measureLoad(t, c, map[string]float64{"nyc": 450, "lon": 80, "tokyo": 60}, measure, func() { waitLevels(t, c, allHealthy) })
		stayNearest(t, res, "nyc", "lon", "tokyo")
	})

	t.Run("nearest 5/8 healthy: 87% stays, 13% to the next priority", func(t *testing.T) {
		if err := topology.SetHealthy(ctx, false, c.Instances["us-east"][:3]...); err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{
			"nyc": {"us-east 5/8 87%", "eu-west 8/8 13%", "asia-east 8/8 0%"},
			"lon": {"eu-west 8/8 100%", "us-east 5/8 0%", "asia-east 8/8 0%"},
		}
		res := measureLoad(t, c, map[string]float64{"nyc": 200, "lon": 80, "tokyo": 60}, measure, func() { waitLevels(t, c, want) })
		if sh := routedShare(res["nyc"], "us-east"); !within(sh, 0.87, 0.03) {
			t.Errorf("nyc: %.3f of requests in us-east, want 0.87 ±0.03 (routed %v)", sh, res["nyc"].Routed)
		}
		if sh := routedShare(res["nyc"], "eu-west"); !within(sh, 0.13, 0.03) {
			t.Errorf("nyc: %.3f of requests in eu-west, want 0.13 ±0.03 (routed %v)", sh, res["nyc"].Routed)
		}
		if sh := routedShare(res["nyc"], "asia-east"); sh > 0.005 {
			t.Errorf("nyc: %.3f of requests in asia-east, want none (routed %v)", sh, res["nyc"].Routed)
		}
		stayNearest(t, res, "lon", "tokyo")
	})

	t.Run("recovered: back to the nearest region", func(t *testing.T) {
		if err := topology.SetHealthy(ctx, true, c.Instances["us-east"][:3]...); err != nil {
			t.Fatal(err)
		}
		res := measureLoad(t, c, map[string]float64{"nyc": 100, "lon": 80, "tokyo": 60}, measure, func() { waitLevels(t, c, allHealthy) })
		stayNearest(t, res, "nyc", "lon", "tokyo")
	})
}
