package quotabench

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/spillway-lb/spillway/internal/topology"
)

// The signals that stall and resume a process.
const (
	stopSignal = syscall.SIGSTOP
	contSignal = syscall.SIGCONT
)

// sums are metrics summed over the gfes (and, for injected, the control
// planes that answer).
type sums struct {
	failOpen, failedCalls, okCalls, exhaustedCalls float64
	admits, admitsUnder1ms                         float64
	slowestBucket                                  string  // the highest bucket any admission fell in
	injected, storeFailed                          float64 // at the control planes
}

// admitBuckets are spillway_gfe_quota_admit_seconds' bucket bounds.
var admitBuckets = []string{"1e-06", "5e-06", "1e-05", "5e-05", "0.0001", "0.0005", "0.001", "0.01", "+Inf"}

// scrape reads every gfe's and control plane's /metrics.
func scrape(c *topology.Cluster) (sums, error) {
	var s sums
	buckets := make([]float64, len(admitBuckets))
	for _, g := range c.GFEs {
		m, err := get(g.Admin + "/metrics")
		if err != nil {
			return s, err
		}
		s.failOpen += m[`spillway_gfe_quota_decisions_total{result="fail_open"}`]
		s.failedCalls += m[`spillway_gfe_quota_calls_total{result="failed"}`]
		s.okCalls += m[`spillway_gfe_quota_calls_total{result="ok"}`]
		s.exhaustedCalls += m[`spillway_gfe_quota_calls_total{result="exhausted"}`]
		s.admits += m[`spillway_gfe_quota_admit_seconds_count`]
		s.admitsUnder1ms += m[`spillway_gfe_quota_admit_seconds_bucket{le="0.001"}`]
		for i, b := range admitBuckets {
			buckets[i] += m[`spillway_gfe_quota_admit_seconds_bucket{le="`+b+`"}`]
		}
	}
	s.slowestBucket = "-"
	for i := range admitBuckets {
		if buckets[i] == s.admits && s.admits > 0 {
			s.slowestBucket = "≤ " + admitBuckets[i] + " s"
			break
		}
	}
	for k := range c.CPs {
		m, err := get("http://" + c.Spec.ControlPlaneIP(k) + ":7100/metrics")
		if err != nil {
			continue // a control plane down has injected nothing since
		}
		s.injected += m[`spillway_controlplane_quota_allocations_total{result="injected_error"}`]
		s.storeFailed += m[`spillway_controlplane_quota_allocations_total{result="store_unavailable"}`]
	}
	return s, nil
}

// get fetches a Prometheus text page as series → value.
func get(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads a Prometheus text page as series (name and labels,
// as written) → value; comments and lines without a number are skipped.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}
