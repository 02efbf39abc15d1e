package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// The load-aware choice inside a group and the shedding of global overload
// (config load_aware and overload; docs/design.md §3), end to end.

const (
	loadAwareNet = 33
	shedNet      = 36
	slowStartNet = 37
)

// withServiceKeys returns an EditConfig that adds lines to the service
// "web" of a topology config (after its balancing_mode).
func withServiceKeys(lines ...string) func(string) string {
	return func(y string) string {
		add := ""
		for _, l := range lines {
			add += "    " + l + "\n"
		}
		return strings.Replace(y, "    balancing_mode: RATE\n", "    balancing_mode: RATE\n"+add, 1)
	}
}

// served returns the requests each of addrs has served, from the backends'
// own stats.
func served(t *testing.T, addrs []string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, a := range addrs {
		st, err := instanceStats(a)
		if err != nil {
			t.Fatal(err)
		}
		out[a] = st.Served
	}
	return out
}

// shareOf returns addr's share of what addrs served between two served
// snapshots, and the total.
func shareOf(before, after map[string]uint64, addr string) (float64, uint64) {
	var n uint64
	for a := range after {
		n += after[a] - before[a]
	}
	if n == 0 {
		return 0, 0
	}
	return float64(after[addr]-before[addr]) / float64(n), n
}

// TestLoadAwareSlowInstanceEndToEnd: with load_aware on, an instance of a
// four-instance group that turns 50 times slower (testbackend
// /admin/slow: 2ms service time becomes 100ms) loses its traffic within a
// second, and gets its share back within a few seconds of recovering
// (probe_after 2s), counted from the backends' own stats. Round robin, the
// choice inside a group without load_aware, keeps sending it a quarter.
func TestLoadAwareSlowInstanceEndToEnd(t *testing.T) {
	c := startCluster(t, loadAwareSpec(loadAwareNet, "load_aware: {enabled: true}"))
	addrs := c.Instances["us-east"]
	slow := addrs[0]
	l := c.StartLoad(map[string]float64{"nyc": 120})
	defer l.Stop()
	warmUp(t, addrs)
	// measure returns the slow instance's share of what the group served
	// over the next d.
	measure := func(d time.Duration) (float64, uint64) {
		before := served(t, addrs)
		<-time.After(d) // a measurement window, not a wait for a condition
		return shareOf(before, served(t, addrs), slow)
	}
	// Shares over 3s windows of 360 requests: a fair quarter's binomial σ
	// is 0.023, and the peak EWMA's pursuit of latency noise spreads the
	// shares of equal instances further; half a quarter (0.125) is the
	// bound of "has its share".
	base, n := measure(3 * time.Second)
	t.Logf("before: slow instance's share %.3f of %d", base, n)
	if base < 0.125 {
		t.Fatalf("before the slowdown the instance served %.3f of %d, want about 1/4", base, n)
	}
	adminPost(t, slow, "/admin/slow?slowdown=50")
	<-time.After(time.Second) // the second it has to lose its share
	during, n := measure(3 * time.Second)
	t.Logf("slow (from 1s after the slowdown): share %.3f of %d", during, n)
	if during > 0.05 {
		t.Errorf("from 1s after turning 50x slower the instance served %.3f of %d, want <= 0.05 (a quarter without load_aware)", during, n)
	}
	adminPost(t, slow, "/admin/slow?slowdown=1")
	<-time.After(3 * time.Second) // probe_after (2s) and the probe it still holds
	after, n := measure(3 * time.Second)
	t.Logf("recovered (from 3s after): share %.3f of %d", after, n)
	if after < 0.125 {
		t.Errorf("from 3s after recovering the instance served %.3f of %d, want about 1/4 (>= 0.125)", after, n)
	}
	res, err := l.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if r := res["nyc"]; r.Failed > 0 {
		t.Errorf("%d of %d requests failed: %v %v", r.Failed, r.Sent, r.Status, r.Errors)
	}
}

// TestLoadAwareSlowStartEndToEnd: with load_aware and a 12s slow_start,
// an instance that comes back to health ramps up: in the first 2s after
// its first request it serves well under a quarter (its weight grows from
// 0.1 to 1/6), and after its window a quarter again, counted from the
// backends' own stats. Without slow start (slow_start 0s) it takes its
// quarter from its first request.
func TestLoadAwareSlowStartEndToEnd(t *testing.T) {
	c := startCluster(t, loadAwareSpec(slowStartNet, "load_aware: {enabled: true, slow_start: 12s}"))
	addrs := c.Instances["us-east"]
	back := addrs[0]
	l := c.StartLoad(map[string]float64{"nyc": 120})
	defer l.Stop()
	ctx := context.Background()
	warmUp(t, addrs)
	// Out of the pool until the gfe sends it nothing for half a second.
	adminPost(t, back, "/admin/health?healthy=false")
	if err := topology.WaitFor(ctx, 10*time.Second, func() (bool, error) {
		before := served(t, addrs)
		<-time.After(500 * time.Millisecond)
		if d := served(t, addrs)[back] - before[back]; d > 0 {
			return false, fmt.Errorf("still served %d in 500ms", d)
		}
		return true, nil
	}); err != nil {
		t.Fatalf("taking it out: %v", err)
	}
	adminPost(t, back, "/admin/health?healthy=true")
	var first map[string]uint64
	if err := topology.WaitFor(ctx, 10*time.Second, func() (bool, error) {
		first = served(t, addrs)
		before := first[back]
		<-time.After(20 * time.Millisecond)
		first = served(t, addrs)
		return first[back] > before, fmt.Errorf("no request yet")
	}); err != nil {
		t.Fatalf("back to health: %v", err)
	}
	start := time.Now()
	<-time.After(2 * time.Second) // the window's first third, measured
	early, n := shareOf(first, served(t, addrs), back)
	t.Logf("first 2s of its 12s window: share %.3f of %d", early, n)
	// Its weight over the first 2s is max(0.1, t/12s), 0.12 on average: a
	// candidate of the two choices about half as often, and one that
	// usually wins (it answers rarely, so its latency estimate fades), a
	// share near 0.07 (TestLoadAwareSlowStart in lb/routing: 0.18 of an
	// established instance's at weight 0.1); a quarter without slow
	// start. At 240 requests the binomial σ is 0.018 at p = 0.09 and
	// 0.028 at p = 1/4: 0.15 is over 3σ from either.
	if early > 0.15 {
		t.Errorf("in the first 2s of its slow start the instance served %.3f of %d, want well under a quarter (<= 0.15)", early, n)
	}
	<-time.After(time.Until(start.Add(12500 * time.Millisecond)))
	before := served(t, addrs)
	<-time.After(3 * time.Second) // after the window, measured
	late, n := shareOf(before, served(t, addrs), back)
	t.Logf("after its window: share %.3f of %d", late, n)
	if late < 0.125 {
		t.Errorf("after its slow start the instance served %.3f of %d, want about 1/4 (>= 0.125)", late, n)
	}
}

// TestShedGlobalOverloadEndToEnd: one region of four instances declared
// at 40 req/s (planned capacity 4 × 40 × 0.95 = 152 req/s) that really
// serve 42 (168 req/s: a declared capacity with some margin, as operators
// declare it), and overload.shed on. At 0.9 of capacity nothing is
// refused. At 1.2 of it (182.4 req/s) the gfe refuses 1 − 1/1.2 = 1/6 of
// the requests at once, with 503 and Retry-After and no backend, counted
// in spillway_gfe_shed_total; the refusals take a fraction of an admitted
// request's time, and the admitted ones keep the p99 of the uncongested
// phase (at most twice it, or 150ms on a loaded machine). Without
// shedding, 182 req/s against the 168 the backends serve build queues
// that grow by 14 requests a second (to seconds of waiting) through the
// measured window, and nothing is refused at once.
func TestShedGlobalOverloadEndToEnd(t *testing.T) {
	const capacity = 4 * 40 * 0.95
	spec := topology.Spec{
		Net:        shedNet,
		Queue:      64,
		Sites:      []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": 20 * time.Millisecond}}},
		Regions:    []topology.Region{{Name: "us-east", Zones: []string{"b", "c"}, Instances: 2, Rate: 40, MaxRPS: 42}},
		EditConfig: withServiceKeys("overload: {shed: true, retry_after: 2s}"),
		// A demand estimate that follows the step within about 1.5s
		// (3 × 500ms; the default 2s takes about 6s: the step is below
		// ewma.Rate's fast-attack threshold): what the gfe admits above
		// capacity before it sees the overload queues at the backends.
		GFEArgs: []string{"--demand-smoothing=500ms"},
	}
	c := startCluster(t, spec)
	gf := c.GFE("nyc")
	metrics := gf.Admin + "/metrics"
	// The overload's window starts 4s after the step: the demand estimate
	// follows it within about 1.5s, and what the gfe admitted above
	// capacity meanwhile drains from the backends' queues in about a
	// second.
	const (
		step   = 5 * time.Second // 0.9x before, 1.2x after
		from   = 9 * time.Second
		to     = 15 * time.Second
		probes = 15 * time.Second // then the Retry-After probes
		total  = 18 * time.Second
	)
	cfg := loadgen.Config{
		URL: gf.URL + "/", Rate: 0.9 * capacity, Duration: total, Records: true,
		Sources:  loadgen.Sources(c.Spec.ClientIP(0), 16),
		Schedule: []loadgen.RateStep{{At: step, Rate: 1.2 * capacity}},
	}
	type probe struct {
		status              int
		retryAfter, backend string
	}
	probed := make(chan []probe, 1)
	go func() {
		<-time.After(probes) // inside the overload, after the measured window
		var out []probe
		for range 40 {
			resp, err := http.Get(gf.URL + "/probe")
			if err == nil {
				resp.Body.Close()
				out = append(out, probe{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Spillway-Backend")})
			}
			<-time.After(50 * time.Millisecond)
		}
		probed <- out
	}()
	shed0 := metricValue(t, metrics, "spillway_gfe_shed_total", `service=web`, `reason=overload`)
	res, err := c.RunLoadAt(context.Background(), "nyc", cfg)
	if err != nil {
		t.Fatal(err)
	}
	shed1 := metricValue(t, metrics, "spillway_gfe_shed_total", `service=web`, `reason=overload`)

	// split returns the admitted latencies (2xx) and the gfe's refusals'
	// (503 from no backend) of the requests due in [a, b), and the count.
	split := func(a, b time.Duration) (admitted, refused []time.Duration, n int) {
		for _, r := range res.Window(a, b).Records {
			if r.Dropped {
				continue
			}
			n++
			switch {
			case r.Status/100 == 2:
				admitted = append(admitted, r.Latency)
			case r.Status == http.StatusServiceUnavailable && r.Backend == "":
				refused = append(refused, r.Latency)
			}
		}
		slices.Sort(admitted)
		slices.Sort(refused)
		return admitted, refused, n
	}
	q := func(ls []time.Duration, p float64) time.Duration {
		if len(ls) == 0 {
			return 0
		}
		return ls[min(len(ls)-1, int(p*float64(len(ls))))]
	}
	defer func() {
		if !t.Failed() {
			return
		}
		for sec := time.Duration(0); sec < total; sec += time.Second {
			a, r, n := split(sec, sec+time.Second)
			t.Logf("second %v: %d requests, %d admitted (p50 %v, p99 %v), %d refused", sec, n, len(a), q(a, 0.5), q(a, 0.99), len(r))
		}
	}()
	baseOK, baseRefused, baseN := split(time.Second, step)
	okL, refusedL, n := split(from, to)
	share := float64(len(refusedL)) / float64(n)
	t.Logf("0.9x: %d requests, %d refused, admitted p50 %v p99 %v", baseN, len(baseRefused), q(baseOK, 0.5), q(baseOK, 0.99))
	t.Logf("1.2x: %d requests, %d refused (%.3f), admitted %d p50 %v p99 %v, refusals p50 %v p99 %v; shed metric +%v",
		n, len(refusedL), share, len(okL), q(okL, 0.5), q(okL, 0.99), q(refusedL, 0.5), q(refusedL, 0.99), shed1-shed0)
	if len(baseRefused) > 0 {
		t.Errorf("0.9x of capacity: %d of %d refused, want none", len(baseRefused), baseN)
	}
	// The refused share: 1/6 of the arrivals, binomial over n (4σ =
	// 0.044 at n = 1094), and the error of the gfe's demand estimate
	// (500ms of about 180 req/s: ±5% of λ moves 1 − 1/λ by ±0.035, and
	// the noise lowers the mean of that concave function): ±0.06.
	if want := 1.0 / 6; share < want-0.06 || share > want+0.06 {
		t.Errorf("1.2x of capacity: the gfe refused %.3f of %d, want 1/6 ± 0.06", share, n)
	}
	if p50 := q(okL, 0.5); len(refusedL) > 0 && q(refusedL, 0.9) > p50/4 {
		t.Errorf("refusals' p90 %v, want at once: under a quarter of the admitted p50 %v", q(refusedL, 0.9), p50)
	}
	if limit := max(2*q(baseOK, 0.99), 150*time.Millisecond); q(okL, 0.99) > limit {
		t.Errorf("admitted p99 in overload %v, want <= %v (twice the 0.9x p99 %v): queueing", q(okL, 0.99), limit, q(baseOK, 0.99))
	}
	if got := shed1 - shed0; got < float64(len(refusedL)) {
		t.Errorf("spillway_gfe_shed_total{reason=overload} rose by %v, want at least the %d refusals measured", got, len(refusedL))
	}
	ps := <-probed
	refusals := 0
	for _, p := range ps {
		if p.status == http.StatusServiceUnavailable {
			refusals++
			if p.retryAfter != "2" || p.backend != "" {
				t.Errorf("a refusal with Retry-After %q and backend %q, want 2 and none", p.retryAfter, p.backend)
			}
		}
	}
	if refusals == 0 {
		t.Errorf("none of %d probes in overload refused (P = (5/6)^40 < 0.1%% by chance)", len(ps))
	}
}

// loadAwareSpec is the load-aware tests' deployment: site nyc 4 ms from
// us-east, whose one group has four instances of 100 req/s serving in
// 2 ms, with the service keys keys.
func loadAwareSpec(net int, keys string) topology.Spec {
	return topology.Spec{
		Net:         net,
		Queue:       64,
		Sites:       []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": 4 * time.Millisecond}}},
		Regions:     []topology.Region{{Name: "us-east", Zones: []string{"b"}, Instances: 4, Rate: 100}},
		EditConfig:  withServiceKeys(keys),
		ServiceTime: 2 * time.Millisecond,
	}
}

// warmUp waits until every instance of addrs has served 20 requests.
func warmUp(t *testing.T, addrs []string) {
	t.Helper()
	if err := topology.WaitFor(context.Background(), 20*time.Second, func() (bool, error) {
		for a, n := range served(t, addrs) {
			if n < 20 {
				return false, fmt.Errorf("%s has served %d requests", a, n)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("warming up: %v", err)
	}
}
