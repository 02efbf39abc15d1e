package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/topology"
)

func configVersions(t *testing.T, c *topology.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range c.GFEs {
		if g.Proc == nil {
			continue
		}
		select {
		case <-g.Proc.Done():
			continue
		default:
		}
		st, err := topology.Status(context.Background(), g)
		if err != nil {
			t.Fatalf("status of %s: %v", g.Name, err)
		}
		out[g.Name] = st.ConfigVersion
	}
	return out
}

// TestStaticStabilityAndMembership covers, on one deployment: an invalid
// config reload is rejected and the last good config keeps serving; with
// every control plane killed the gfes keep serving with zero failed
// requests; a restarted control plane brings a config change to every gfe;
// a killed gfe leaves the others' membership and plans.
func TestStaticStabilityAndMembership(t *testing.T) {
	c := startCluster(t, threeSites(21))
	ctx := context.Background()
	rates := map[string]float64{"nyc": 100, "lon": 100, "tokyo": 100}
	cpMetrics := "http://127.21.0.1:7100/metrics"
	good, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	v0 := configVersions(t, c)

	t.Run("invalid reload is rejected and the last good config serves", func(t *testing.T) {
		bad := strings.Replace(string(good), "policy: waterfall", "policy: waterfal", 1)
		if err := os.WriteFile(c.ConfigPath, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		err := topology.WaitFor(ctx, 15*time.Second, func() (bool, error) {
			return strings.Contains(c.CPs[0].Output(), "services[0].policy"), nil
		})
		if err != nil {
			t.Fatalf("control plane never logged the rejected field path: %v", err)
		}
		if f := metricValue(t, cpMetrics, "spillway_controlplane_config_last_reload_successful"); f != 0 {
			t.Errorf("config_last_reload_successful = %v after a bad reload, want 0", f)
		}
		res := load(t, c, rates, 2*time.Second)
		for site, r := range res {
			if r.Failed != 0 || r.OK == 0 {
				t.Errorf("%s after bad reload: ok %d failed %d (statuses %v), want all ok", site, r.OK, r.Failed, r.Status)
			}
		}
		if got := configVersions(t, c); !mapsEqual(got, v0) {
			t.Errorf("config versions changed after an invalid reload: %v -> %v", v0, got)
		}
	})

	t.Run("every control plane killed: zero failed requests", func(t *testing.T) {
		c.CPs[0].Kill()
		res := load(t, c, rates, 5*time.Second)
		for site, r := range res {
			if r.Failed != 0 || r.OK < 400 {
				t.Errorf("%s with no control plane: ok %d failed %d dropped %d, want ≥ 400 ok and 0 failed", site, r.OK, r.Failed, r.Dropped)
			}
		}
	})

	t.Run("restarted control plane delivers a config change to every gfe", func(t *testing.T) {
		changed := strings.ReplaceAll(string(good), "max_rate_per_instance: 40", "max_rate_per_instance: 60")
		if err := os.WriteFile(c.ConfigPath, []byte(changed), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.StartControlPlane(0); err != nil {
			t.Fatal(err)
		}
		err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
			for _, g := range c.GFEs {
				st, err := topology.Status(ctx, g)
				if err != nil {
					return false, err
				}
				// The declared capacity (the plan fills it to the
				// service's target utilization).
				if len(st.Services) == 0 || len(st.Services[0].Groups) == 0 || st.Services[0].Groups[0].DeclaredRPS != 240 {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("new capacity (4 × 60 = 240 req/s per group) did not reach every gfe: %v", err)
		}
		t.Logf("config change reached all gfes %v after the control plane restarted", time.Since(start).Round(time.Millisecond))
		if got := configVersions(t, c); mapsEqual(got, v0) {
			t.Errorf("config versions unchanged after the new config: %v", got)
		}
	})

	t.Run("killed gfe leaves membership and plans", func(t *testing.T) {
		load(t, c, map[string]float64{"tokyo": 150}, 3*time.Second)
		nyc := c.GFE("nyc")
		st, err := topology.Status(ctx, nyc)
		if err != nil {
			t.Fatal(err)
		}
		if d := siteDemand(st, "tokyo"); d <= 0 {
			t.Fatalf("nyc does not see tokyo's demand before the kill (sites %v)", st.Services[0].Sites)
		}
		tokyo := c.GFE("tokyo")
		tokyo.Proc.Kill()
		killed := time.Now()
		err = topology.WaitFor(ctx, 15*time.Second, func() (bool, error) {
			st, err := topology.Status(ctx, nyc)
			if err != nil {
				return false, err
			}
			return !slices.Contains(st.Members, tokyo.Name) && siteDemand(st, "tokyo") == 0, nil
		})
		if err != nil {
			t.Fatalf("nyc still counts the killed tokyo gfe: %v", err)
		}
		t.Logf("killed gfe dropped from membership and plans after %v", time.Since(killed).Round(time.Millisecond))
	})
}

func siteDemand(st *status.Status, site string) float64 {
	for _, s := range st.Services[0].Sites {
		if s.Name == site {
			return s.DemandRPS
		}
	}
	return 0
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
