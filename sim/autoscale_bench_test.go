package sim

import (
	"math"
	"testing"
)

// TestAutoscaleBench: the figures of `lbsim autoscale-bench` (NOTES for
// BENCHMARKS.md quote them): every autoscaler sees the same requests, none
// fails one while under max instances, and the rows keep their numbers
// (instance-seconds within 1%, the rest exactly).
func TestAutoscaleBench(t *testing.T) {
	rs := RunAutoscaleBench(DefaultAutoscaleModel())
	if len(rs) != 12 {
		t.Fatalf("%d results, want 3 loads × 4 autoscalers", len(rs))
	}
	requests := map[string]int64{}
	for _, r := range rs {
		if n, ok := requests[r.Load]; ok && n != r.Requests {
			t.Errorf("%s/%s: %d requests, others %d", r.Load, r.Autoscaler, r.Requests, n)
		}
		requests[r.Load] = r.Requests
		if r.Rejected != 0 {
			t.Errorf("%s/%s: %d rejected, want 0 under max instances", r.Load, r.Autoscaler, r.Rejected)
		}
		if r.PeakInstances > 100 || r.Overshoot != r.PeakInstances-r.Needed {
			t.Errorf("%s/%s: peak %d, needed %d, overshoot %d", r.Load, r.Autoscaler, r.PeakInstances, r.Needed, r.Overshoot)
		}
	}
	for _, want := range []AutoscaleResult{
		{Load: "step", Autoscaler: "cloudrun", InstanceSeconds: 9484, PeakInstances: 22, Needed: 17, Overshoot: 5, TimeToCapacityS: 26.2, P99Ms: 20700},
		{Load: "step", Autoscaler: "kpa", InstanceSeconds: 12684, PeakInstances: 100, Needed: 15, Overshoot: 85, TimeToCapacityS: 22, P99Ms: 17100},
		{Load: "ramp", Autoscaler: "cloudrun", InstanceSeconds: 7139, PeakInstances: 20, Needed: 17, Overshoot: 3, TimeToCapacityS: 177, P99Ms: 20400},
		{Load: "ramp", Autoscaler: "kpa", InstanceSeconds: 7700, PeakInstances: 41, Needed: 15, Overshoot: 26, TimeToCapacityS: 54, P99Ms: 3300},
		{Load: "spike", Autoscaler: "cloudrun", InstanceSeconds: 6997, PeakInstances: 24, Needed: 34, Overshoot: -10, TimeToCapacityS: 23.7, P99Ms: 20700},
		{Load: "spike", Autoscaler: "kpa", InstanceSeconds: 9988, PeakInstances: 100, Needed: 29, Overshoot: 71, TimeToCapacityS: 22, P99Ms: 20100},
	} {
		var got *AutoscaleResult
		for i := range rs {
			if rs[i].Load == want.Load && rs[i].Autoscaler == want.Autoscaler {
				got = &rs[i]
			}
		}
		if got == nil {
			t.Errorf("no row %s/%s", want.Load, want.Autoscaler)
			continue
		}
		if math.Abs(got.InstanceSeconds-want.InstanceSeconds) > 0.01*want.InstanceSeconds ||
			got.PeakInstances != want.PeakInstances || got.Needed != want.Needed || got.Overshoot != want.Overshoot ||
			got.TimeToCapacityS != want.TimeToCapacityS || got.P99Ms != want.P99Ms {
			t.Errorf("%s/%s = %+v, want %+v", want.Load, want.Autoscaler, *got, want)
		}
	}
}

// TestLoadRate: the piecewise-linear loads, steps included.
func TestLoadRate(t *testing.T) {
	ls := AutoscaleLoads()
	for _, tt := range []struct {
		load int
		t    float64
		want float64
	}{
		{0, 59.9, 20}, {0, 60, 200}, {0, 359.9, 200}, {0, 360, 20},
		{1, 150, 110}, {1, 240, 200}, {1, 450, 110},
		{2, 75, 400}, {2, 90, 20},
	} {
		if got := ls[tt.load].rate(tt.t); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s.rate(%v) = %v, want %v", ls[tt.load].Name, tt.t, got, tt.want)
		}
	}
}

// TestPercentileSteps: nearest-rank quantiles of a histogram.
func TestPercentileSteps(t *testing.T) {
	h := map[int64]int64{0: 98, 5: 1, 200: 1}
	for _, tt := range []struct {
		q    float64
		want float64
	}{{0.5, 0}, {0.98, 0}, {0.99, 5}, {1, 200}} {
		if got := percentileSteps(h, tt.q); got != tt.want {
			t.Errorf("percentileSteps(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
}
