package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/topology"
)

// Policy prequal (lb/prequal, internal/gfe/prequalprobe) end to end.

const prequalNet = 114

// TestPrequalSlowInstanceEndToEnd: with policy prequal over four
// instances in two regions, the gfe probes them all (GET
// /.well-known/spillway-probe on the test backend), and once the busiest
// turns 50 times slower (/admin/slow: 2 ms becomes 100 ms) its share of
// the requests drops from at least a quarter to at most 6%, counted from
// the backends' own stats. Meanwhile the probes the gfe sends stay under the
// service's cap (probe_rate 100/s against the 180/s that three probes per
// request at 60 requests/s would be), the excess counted as dropped, and
// every probe sent is answered: none fails, none is invalid.
//
// Four instances, not two: with two, Prequal's pool (one probe removed per
// query, answers arriving a round trip after the query that asked for
// them) often holds only the slow instance's probe, which the hot-cold
// rule then picks; lb/prequal's rule is the paper's, made for many more
// replicas than the pool's 16.
func TestPrequalSlowInstanceEndToEnd(t *testing.T) {
	const probeRate, burst = 100, 16
	c := startCluster(t, topology.Spec{
		Net:    prequalNet,
		Policy: "prequal",
		Queue:  64,
		Sites:  []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": 4 * time.Millisecond, "eu-west": 8 * time.Millisecond}}},
		Regions: []topology.Region{
			{Name: "us-east", Zones: []string{"b"}, Instances: 2, Rate: 100},
			{Name: "eu-west", Zones: []string{"b"}, Instances: 2, Rate: 100},
		},
		EditConfig:  withServiceKeys("prequal: {probe_rate: 100}"),
		ServiceTime: 2 * time.Millisecond,
	})
	addrs := append(slices.Clone(c.Instances["us-east"]), c.Instances["eu-west"]...)
	metrics := c.GFEs[0].Admin + "/metrics"
	l := c.StartLoad(map[string]float64{"nyc": 60})
	defer l.Stop()
	// Warm up: prequal concentrates on the lowest latency estimates, so
	// wait for the load's first 100 requests, not for every instance.
	if err := topology.WaitFor(context.Background(), 20*time.Second, func() (bool, error) {
		var n uint64
		for _, v := range served(t, addrs) {
			n += v
		}
		return n >= 100, fmt.Errorf("%d requests served", n)
	}); err != nil {
		t.Fatalf("warming up: %v", err)
	}
	// The probes sent over the whole measurement, against the cap.
	start := time.Now()
	sent0 := metricValue(t, metrics, "spillway_gfe_probes_sent_total", "service=web")

	// Over a 3 s window of 180 requests, equal instances split unevenly:
	// the lowest latency estimate wins (ties go to the fewer in flight,
	// then the older probe). The instance that served most is slowed.
	before := served(t, addrs)
	<-time.After(3 * time.Second) // a measurement window, not a wait for a condition
	after := served(t, addrs)
	slow, base, n := "", 0.0, uint64(0)
	for _, a := range addrs {
		if sh, tot := shareOf(before, after, a); sh > base {
			slow, base, n = a, sh, tot
		}
	}
	t.Logf("before: the busiest instance %s served %.3f of %d", slow, base, n) // at least a quarter, being the busiest
	measure := func(d time.Duration) (float64, uint64) {
		before := served(t, addrs)
		<-time.After(d) // a measurement window, not a wait for a condition
		return shareOf(before, served(t, addrs), slow)
	}
	adminPost(t, slow, "/admin/slow?slowdown=50")
	<-time.After(time.Second) // the second its probes have to show it
	during, n := measure(3 * time.Second)
	t.Logf("slow (from 1s after the slowdown): share %.3f of %d", during, n)
	// Least request, prequal's fallback with no probe, leaves it about a
	// tenth (0.103 in a run with the probe sender unwired).
	if during > 0.06 || during > base/4 {
		t.Errorf("from 1s after turning 50x slower the instance served %.3f of %d (%.3f before), want <= 0.06 and under a quarter of before", during, n, base)
	}

	sent := metricValue(t, metrics, "spillway_gfe_probes_sent_total", "service=web") - sent0
	elapsed := time.Since(start).Seconds()
	m := scrape(t, metrics)
	limited := m.value("spillway_gfe_probes_dropped_total", "service=web", "reason=rate")
	answered := m.value("spillway_gfe_probes_answered_total", "service=web")
	failed := m.value("spillway_gfe_probe_errors_total", "service=web")
	t.Logf("probes: %.0f sent in %.1fs (%.1f/s, cap %d/s), %.0f dropped for rate, %.0f answered, %.0f errors",
		sent, elapsed, sent/elapsed, probeRate, limited, answered, failed)
	if max := probeRate*elapsed + burst; sent > max || sent < 0.5*probeRate*elapsed {
		t.Errorf("%.0f probes sent in %.1fs, want at most the cap's %.0f (probe_rate × time + burst) and at least half the cap (the cap binds)", sent, elapsed, max)
	}
	if limited < 40*elapsed {
		t.Errorf("%.0f probes dropped for rate in %.1fs, want the excess of 3 per request over the cap (about 80/s, > 40/s)", limited, elapsed)
	}
	if failed != 0 || answered < 0.9*m.value("spillway_gfe_probes_sent_total", "service=web") {
		t.Errorf("%.0f probe errors and %.0f answered of %.0f sent, want none failed and (all but those in flight) answered", failed, answered, m.value("spillway_gfe_probes_sent_total", "service=web"))
	}
	res, err := l.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if r := res["nyc"]; r.Failed > 0 {
		t.Errorf("%d of %d requests failed: %v %v", r.Failed, r.Sent, r.Status, r.Errors)
	}
}
