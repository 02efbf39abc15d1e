// Package e2e holds the end-to-end tests: real control plane, gfe and test
// backend processes on loopback, talking real gRPC, memberlist and HTTP.
// Each test owns a 127.N.0.0/16 of its own (topology.Spec.Net).
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/testbackend"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/internal/topology"
)

// bins are the binaries built once for every test in the package.
var bins map[string]string

func TestMain(m *testing.M) { testkit.RunWithBinaries(m, &bins, topology.Binaries...) }

// startCluster starts spec and stops it when the test ends; on failure it
// prints the processes' logs.
func startCluster(t *testing.T, spec topology.Spec) *topology.Cluster {
	t.Helper()
	if os.Getenv("SPILLWAY_E2E_FAST_PATH") == "0" {
		// Every http and https listener on net/http alone, without the
		// HTTP/1.1 fast path (docs/design.md §4, docs/listeners.md; on by
		// default): the protocol tests must pass with it on and off.
		spec.NoFastPath = true
	}
	if m := os.Getenv("SPILLWAY_E2E_POLLER"); m != "" {
		// The fast path's poller pinned on or off (auto by default, off
		// at the tests' low load): SPILLWAY_E2E_POLLER=on runs every test
		// with its sockets waiting in it.
		spec.GFEArgs = append(spec.GFEArgs, "--poller="+m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := topology.Start(ctx, spec, topology.Options{Dir: t.TempDir(), Bins: bins})
	if err != nil {
		t.Fatalf("topology.Start: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			dumpLogs(t, c)
		}
	})
	return c
}

func dumpLogs(t *testing.T, c *topology.Cluster) {
	t.Helper()
	for i, p := range c.CPs {
		if p != nil {
			t.Logf("--- control plane %d log (tail):\n%s", i+1, tail(p.Output(), 3000))
		}
	}
	for _, g := range c.GFEs {
		t.Logf("--- %s log (tail):\n%s", g.Name, tail(g.Proc.Output(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// load drives rate req/s at every gfe named in rates (by site) for d, from
// client addresses in each site's /24, and returns each site's result.
func load(t *testing.T, c *topology.Cluster, rates map[string]float64, d time.Duration) map[string]*loadgen.Result {
	t.Helper()
	res, err := c.Drive(context.Background(), rates, 0, d)
	if err != nil {
		t.Error(err)
	}
	return res
}

// convergeTimeout bounds how long a phase waits for the deployment to
// converge on its load. A quiet machine converges in 3–5 s (demand
// smoothing, damping, gossip); a busy one takes longer, and the wait ends
// as soon as it has.
const convergeTimeout = 60 * time.Second

// phase drives rates until every gfe's /status shows the deployment
// converged on them (converged, and the checks of cond), then records a
// window of measure: the requests due in it, site by site, and every gfe's
// /status half way through it. The load runs without a break from the
// wait into the window. cond may be nil.
func phase(t *testing.T, c *topology.Cluster, rates map[string]float64, measure time.Duration, cond func(map[string]*status.Status) error) (map[string]*loadgen.Result, map[string]*status.Status) {
	t.Helper()
	l := c.StartLoad(rates)
	t0, err := waitConverged(c, rates, cond)
	if err != nil {
		res, _ := l.Stop()
		for site, r := range res {
			t.Logf("%s: generator lag up to %v, %d sent", site, r.MaxLag, r.Sent)
		}
		t.Fatalf("not converged on %v after %v: %v", rates, convergeTimeout, err)
	}
	time.Sleep(measure / 2) // half way through the measured window, not a wait for a condition
	status := statuses(c)
	time.Sleep(measure - measure/2)
	return stopWindows(t, l, t0, measure), status
}

// stopWindows stops l and returns each site's requests due in the window
// of measure that began at t0, logging what each window holds.
func stopWindows(t *testing.T, l *topology.Load, t0 time.Time, measure time.Duration) map[string]*loadgen.Result {
	t.Helper()
	all, err := l.Stop()
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]*loadgen.Result{}
	for site, r := range all {
		from := t0.Sub(r.Start)
		res[site] = r.Window(from, from+measure)
		t.Logf("%s: %d requests measured, %d ok, routed %v, errors %v, generator lag up to %v",
			site, res[site].Sent, res[site].OK, res[site].Routed, res[site].Errors, res[site].MaxLag)
	}
	return res
}

// statuses returns every gfe's /status by site (the sites whose gfe
// answered).
func statuses(c *topology.Cluster) map[string]*status.Status {
	out := map[string]*status.Status{}
	for _, g := range c.GFEs {
		if st, err := topology.Status(context.Background(), g); err == nil {
			out[g.Site] = st
		}
	}
	return out
}

// waitConverged polls every gfe's /status until, twice in a row half a
// second apart, every gfe sees every site's demand within 5% of its rate in
// rates (or, for a site not driven, under 2 req/s), its own plan row moved
// by less than 0.01 since the previous poll, and cond (if not nil) holds.
// It returns when that was first seen, or the last reason it was not.
func waitConverged(c *topology.Cluster, rates map[string]float64, cond func(map[string]*status.Status) error) (time.Time, error) {
	deadline := time.Now().Add(convergeTimeout)
	var prev map[string]*status.Status
	good := 0
	for {
		now := time.Now()
		cur := statuses(c)
		err := converged(c, rates, prev, cur)
		if err == nil && cond != nil {
			err = cond(cur)
		}
		if err == nil {
			good++
			if good == 2 {
				return now, nil
			}
		} else {
			good = 0
		}
		if now.After(deadline) {
			return time.Time{}, err
		}
		prev = cur
		time.Sleep(500 * time.Millisecond)
	}
}

// converged is waitConverged's test of one poll against the previous one.
func converged(c *topology.Cluster, rates map[string]float64, prev, cur map[string]*status.Status) error {
	for _, g := range c.GFEs {
		st := cur[g.Site]
		if st == nil || len(st.Services) == 0 {
			return fmt.Errorf("no /status with a service from %s", g.Site)
		}
		svc := st.Services[0]
		seen := map[string]float64{}
		for _, s := range svc.Sites {
			seen[s.Name] = s.DemandRPS
		}
		for _, s := range c.Spec.Sites {
			want, got := rates[s.Name], seen[s.Name]
			if (want > 0 && !within(got, want, 0.05*want)) || (want == 0 && got >= 2) {
				return fmt.Errorf("%s sees %s's demand at %.1f req/s, want %.0f", g.Site, s.Name, got, want)
			}
		}
		if prev == nil || prev[g.Site] == nil || len(prev[g.Site].Services) == 0 {
			return fmt.Errorf("%s: no previous plan to compare", g.Site)
		}
		if d := planMoved(prev[g.Site].Services[0].Plan, svc.Plan); d >= 0.01 {
			return fmt.Errorf("%s's plan row still moving (%.3f in 0.5 s)", g.Site, d)
		}
	}
	return nil
}

// planMoved is the largest change of a group's share between two plan rows.
func planMoved(a, b []status.ShareStatus) float64 {
	share := func(row []status.ShareStatus) map[string]float64 {
		m := map[string]float64{}
		for _, s := range row {
			m[s.Group] += s.Share
		}
		return m
	}
	sa, sb := share(a), share(b)
	d := 0.0
	for g, v := range sa {
		d = math.Max(d, math.Abs(v-sb[g]))
	}
	for g, v := range sb {
		d = math.Max(d, math.Abs(v-sa[g]))
	}
	return d
}

// healthyIn returns a phase condition: every gfe plans with n healthy
// instances in region.
func healthyIn(region string, n int) func(map[string]*status.Status) error {
	return func(st map[string]*status.Status) error {
		for site, s := range st {
			h := 0
			for _, g := range s.Services[0].Groups {
				if g.Region == region {
					h += g.Healthy
				}
			}
			if h != n {
				return fmt.Errorf("%s plans with %d healthy instances in %s, want %d", site, h, region, n)
			}
		}
		return nil
	}
}

// fullCapacity is a phase condition: every gfe plans every group with
// capacity factor 1 (no local signal holds one down).
func fullCapacity(st map[string]*status.Status) error {
	for site, s := range st {
		for _, g := range s.Services[0].Groups {
			if g.Factor != 1 || g.OwnFactor != 1 {
				return fmt.Errorf("%s plans %s at factor %v (own %v, %s)", site, g.Name, g.Factor, g.OwnFactor, g.Signal)
			}
		}
	}
	return nil
}

// threeSites is the e2e topology: regions us-east, eu-west, asia-east of two
// zones with four 40 req/s instances each (320 req/s per region), and sites
// nyc, lon, tokyo each near one region.
func threeSites(net int) topology.Spec {
	ms := time.Millisecond
	s := topology.Spec{
		Net:   net,
		Queue: 64,
		Sites: []topology.Site{
			{Name: "nyc", RTT: map[string]time.Duration{"us-east": 4 * ms, "eu-west": 20 * ms, "asia-east": 40 * ms}},
			{Name: "lon", RTT: map[string]time.Duration{"us-east": 20 * ms, "eu-west": 4 * ms, "asia-east": 35 * ms}},
			{Name: "tokyo", RTT: map[string]time.Duration{"us-east": 40 * ms, "eu-west": 35 * ms, "asia-east": 4 * ms}},
		},
	}
	for _, r := range []string{"us-east", "eu-west", "asia-east"} {
		s.Regions = append(s.Regions, topology.Region{Name: r, Zones: []string{"b", "c"}, Instances: 4, Rate: 40})
	}
	return s
}

// instanceStats returns the stats of the testbackend instance at addr
// (/admin/stats).
func instanceStats(addr string) (testbackend.Stats, error) {
	var s testbackend.Stats
	resp, err := http.Get("http://" + addr + "/admin/stats")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, fmt.Errorf("stats of %s: %w in %q", addr, err, body)
	}
	return s, nil
}

// regionInFlight returns the requests in flight at c's instances of
// region, summed over their stats.
func regionInFlight(c *topology.Cluster, region string) (int, error) {
	n := 0
	for _, a := range c.Instances[region] {
		st, err := instanceStats(a)
		if err != nil {
			return 0, err
		}
		n += st.InFlight
	}
	return n, nil
}
