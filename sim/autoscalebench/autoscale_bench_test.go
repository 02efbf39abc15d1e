package autoscalebench

import (
	"math"
	"testing"
)

// scorecardRows runs the scorecard once per test binary.
var scorecardRows = func() func() []Row {
	var rs []Row
	return func() []Row {
		if rs == nil {
			rs = Run(DefaultModel())
		}
		return rs
	}
}()

// scorecardRow returns the scorecard's row, failing the test if it is missing.
func scorecardRow(t *testing.T, rs []Row, load string, cold float64, scaler string) Row {
	t.Helper()
	for _, r := range rs {
		if r.Load == load && r.ColdStartS == cold && r.Autoscaler == scaler {
			return r
		}
	}
	t.Fatalf("no row %s/%gs/%s", load, cold, scaler)
	return Row{}
}

// TestAutoscaleBench: the scorecard's deterministic rows keep their key
// properties: one row per (load, cold start, autoscaler), the same
// requests for every autoscaler of a load, the oracle at ratio 1 and
// without waiting, and cloudrun+waterfall meeting the targets it is built
// for on every load and cold start: p99 ≤ 2 × (request time + buffer RTT),
// no failed request, overshoot ≤ 1.2 with 25s cold starts.
func TestAutoscaleBench(t *testing.T) {
	rs := scorecardRows()
	if len(rs) != 6*2*len(Autoscalers) {
		t.Fatalf("%d rows, want 6 loads × 2 cold starts × %d autoscalers", len(rs), len(Autoscalers))
	}
	requests := map[string]int64{}
	for _, r := range rs {
		if n, ok := requests[r.Load]; ok && n != r.Requests {
			t.Errorf("%s/%gs/%s: %d requests, others %d", r.Load, r.ColdStartS, r.Autoscaler, r.Requests, n)
		}
		requests[r.Load] = r.Requests
		if r.Peak > 100 || r.BufferRTTMs != 40 || r.RequestMs != 500 {
			t.Errorf("%s/%gs/%s: peak %d, constants %v/%v ms", r.Load, r.ColdStartS, r.Autoscaler, r.Peak, r.BufferRTTMs, r.RequestMs)
		}
		switch r.Autoscaler {
		case "oracle":
			if r.OracleRatio != 1 || r.Overshoot != 1 || r.P99Ms != 500 || r.Waited != 0 || r.Failed != 0 {
				t.Errorf("oracle %s/%gs = %+v, want ratio 1, p99 500, nothing waiting or failed", r.Load, r.ColdStartS, r)
			}
		case "cloudrun+waterfall":
			if limit := 2 * (r.RequestMs + r.BufferRTTMs); r.P99Ms > limit || r.Failed != 0 || r.Waited != 0 {
				t.Errorf("%s/%gs/waterfall: p99 %v ms (limit %v), %d failed, %d waited", r.Load, r.ColdStartS, r.P99Ms, limit, r.Failed, r.Waited)
			}
			if r.ColdStartS == 25 && r.Overshoot > 1.2 {
				t.Errorf("%s/25s/waterfall: overshoot %v, want ≤ 1.2", r.Load, r.Overshoot)
			}
		}
	}
	// The sporadic load from zero: the oracle starts one instance a cold
	// start ahead of each request; alone, the rules and the KPA make the
	// first request of each burst wait a cold start.
	if r := scorecardRow(t, rs, "sporadic", 25, "cloudrun"); r.P99Ms != 25500 {
		t.Errorf("sporadic/25s/cloudrun p99 = %v, want 25500 (a cold start + the request)", r.P99Ms)
	}
}

// TestAutoscaleBenchTargets: the comparisons, where they hold, and
// the rows BENCHMARKS.md §7 quotes (instance-seconds within 1%, the rest
// exactly).
func TestAutoscaleBenchTargets(t *testing.T) {
	rs := scorecardRows()
	for _, load := range []string{"step", "ramp", "spike", "flash", "diurnal", "sporadic"} {
		for _, cold := range []float64{1, 25} {
			alone, buf := scorecardRow(t, rs, load, cold, "cloudrun"), scorecardRow(t, rs, load, cold, "cloudrun+waterfall")
			act := scorecardRow(t, rs, load, cold, "kpa+activator")
			// The buffer never costs more than the rules alone.
			if buf.InstanceS > alone.InstanceS {
				t.Errorf("%s/%gs: waterfall %v instance-s > alone %v", load, cold, buf.InstanceS, alone.InstanceS)
			}
			// With 25s cold starts, the waterfall uses fewer
			// instance-seconds than the KPA with its activator on every
			// load with a rise; the rules alone do on step and ramp.
			if cold == 25 && load != "diurnal" && load != "sporadic" && buf.InstanceS >= act.InstanceS {
				t.Errorf("%s/25s: instance-s waterfall %v, want < kpa+activator %v", load, buf.InstanceS, act.InstanceS)
			}
			if cold == 25 && (load == "step" || load == "ramp") && alone.InstanceS >= act.InstanceS {
				t.Errorf("%s/25s: instance-s alone %v, want < kpa+activator %v", load, alone.InstanceS, act.InstanceS)
			}
		}
	}
	// The rules alone: p99 no worse than the KPA's (with its activator,
	// which fails nothing) × 1.1 on step and ramp.
	for _, c := range []struct {
		load string
		cold float64
	}{{"step", 1}, {"step", 25}, {"ramp", 1}, {"ramp", 25}} {
		alone, act := scorecardRow(t, rs, c.load, c.cold, "cloudrun"), scorecardRow(t, rs, c.load, c.cold, "kpa+activator")
		if alone.P99Ms > 1.1*act.P99Ms || alone.Failed != 0 {
			t.Errorf("%s/%gs: cloudrun p99 %v ms (%d failed), want ≤ 1.1 × kpa+activator's %v", c.load, c.cold, alone.P99Ms, alone.Failed, act.P99Ms)
		}
	}
	for _, want := range []Row{
		{Load: "step", ColdStartS: 25, Autoscaler: "oracle", InstanceS: 6075, Peak: 17, P99Ms: 500},
		{Load: "step", ColdStartS: 25, Autoscaler: "kpa", InstanceS: 6984, Peak: 34, P99Ms: 5500, Failed: 4120},
		{Load: "step", ColdStartS: 25, Autoscaler: "kpa+activator", InstanceS: 13194, Peak: 100, P99Ms: 21100},
		{Load: "step", ColdStartS: 25, Autoscaler: "cloudrun", InstanceS: 9915, Peak: 22, P99Ms: 19400},
		{Load: "step", ColdStartS: 25, Autoscaler: "cloudrun+waterfall", InstanceS: 7720, Peak: 16, P99Ms: 540},
		{Load: "ramp", ColdStartS: 25, Autoscaler: "kpa+activator", InstanceS: 9398, Peak: 61, P99Ms: 5200},
		{Load: "ramp", ColdStartS: 25, Autoscaler: "cloudrun", InstanceS: 6777, Peak: 16, P99Ms: 4400},
		{Load: "ramp", ColdStartS: 25, Autoscaler: "cloudrun+waterfall", InstanceS: 6588, Peak: 16, P99Ms: 540},
		{Load: "step", ColdStartS: 1, Autoscaler: "kpa+activator", InstanceS: 7788, Peak: 54, P99Ms: 1900},
		{Load: "step", ColdStartS: 1, Autoscaler: "cloudrun+waterfall", InstanceS: 8025, Peak: 17, P99Ms: 540},
		{Load: "diurnal", ColdStartS: 25, Autoscaler: "kpa", InstanceS: 12026, Peak: 15, P99Ms: 500},
		{Load: "diurnal", ColdStartS: 25, Autoscaler: "cloudrun+waterfall", InstanceS: 14936, Peak: 16, P99Ms: 500},
		{Load: "sporadic", ColdStartS: 25, Autoscaler: "cloudrun+waterfall", InstanceS: 0, Peak: 0, P99Ms: 540},
	} {
		got := scorecardRow(t, rs, want.Load, want.ColdStartS, want.Autoscaler)
		if math.Abs(got.InstanceS-want.InstanceS) > 0.01*want.InstanceS || got.Peak != want.Peak || got.P99Ms != want.P99Ms || got.Failed != want.Failed {
			t.Errorf("%s/%gs/%s: instance-s %v, peak %d, p99 %v, failed %d; want %v, %d, %v, %d", want.Load, want.ColdStartS, want.Autoscaler,
				got.InstanceS, got.Peak, got.P99Ms, got.Failed, want.InstanceS, want.Peak, want.P99Ms, want.Failed)
		}
	}
}

// TestOracle: the oracle's instance-seconds are the integral of the
// need's running max over a cold start, by hand for a step.
func TestOracle(t *testing.T) {
	m := DefaultModel()
	l := Load{Name: "s", RiseAt: 10, Points: []LoadPoint{{0, 20}, {10, 20}, {10, 200}, {20, 200}, {20, 20}, {30, 20}}}
	cold := m.ColdStarts[0]
	o := newOracle(m, l, l.arrivals(m), cold)
	// 20/s ⇒ 10 in flight ⇒ 2 at 60%; 200/s ⇒ 100 ⇒ 17, from 10.5s (the
	// in-flight count climbs over the first 0.5s) until 20.4s, started a
	// second ahead and stopped at once.
	if o.need[0] != 2 || o.need[150] != 17 || o.peakConc != 100 {
		t.Fatalf("need %d, %d, peak concurrency %v, want 2, 17, 100", o.need[0], o.need[150], o.peakConc)
	}
	if o.row.Peak != 17 || math.Abs(o.row.InstanceS-225) > 6 {
		t.Errorf("oracle = %+v, want peak 17 and about 2×30 + 15×11 = 225 instance-seconds", o.row)
	}
}

// TestLoadRate: the piecewise-linear loads, steps included.
func TestLoadRate(t *testing.T) {
	ls := Loads()
	for _, tt := range []struct {
		load int
		t    float64
		want float64
	}{
		{0, 59.9, 20}, {0, 60, 200}, {0, 359.9, 200}, {0, 360, 20},
		{1, 150, 110}, {1, 240, 200}, {1, 450, 110},
		{2, 75, 400}, {2, 90, 20},
		{3, 120, 300}, {3, 240, 160},
		{4, 240, 20}, {4, 960, 200},
	} {
		if got := ls[tt.load].rate(tt.t); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s.rate(%v) = %v, want %v", ls[tt.load].Name, tt.t, got, tt.want)
		}
	}
}
