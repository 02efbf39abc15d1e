package policybench

import (
	"path/filepath"
	"testing"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/sim"
)

// TestBenchPrequal: lbsim bench runs prequal (its probes answered at once
// from the simulated instances, prequal.go) on the steady scenario, where
// there is room for everyone: nothing fails, and its latency is that of
// the other global baseline, least request, within a fifth; the run
// repeats exactly.
func TestBenchPrequal(t *testing.T) {
	s, err := sim.LoadScenario(filepath.Join("..", "..", "configs", "scenarios", "steady.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := benchpolicy.Select("least_request,prequal")
	if err != nil {
		t.Fatal(err)
	}
	res, got := benchRows(t, s, Options{Policies: rows})
	pq, lr := got["prequal/global"], got["least_request/global"]
	t.Logf("prequal: mean %.1f ms, p99 %.1f ms, errors %.3f; least_request: mean %.1f ms, p99 %.1f ms", pq.MeanMs, pq.P99Ms, pq.ErrorRate, lr.MeanMs, lr.P99Ms)
	if pq.ErrorRate != 0 || pq.Served == 0 || pq.MeanMs > 1.2*lr.MeanMs {
		t.Errorf("prequal: errors %.3f, served %.0f, mean %.1f ms; want no error and a mean within 1.2 × least request's %.1f ms", pq.ErrorRate, pq.Served, pq.MeanMs, lr.MeanMs)
	}
	again, _ := benchRows(t, s, Options{Policies: rows})
	if a, b := res.Policies[1].MeanMs, again.Policies[1].MeanMs; a != b {
		t.Errorf("two runs of prequal: mean %v and %v ms, want the same", a, b)
	}
}
