package realbench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// smallAutoscale is a story for the table tests: 2 s of base, a 4 s step
// to 30 req/s, windows of 1 s; requests of 100 ms on 2 slots, so the step
// needs 30 × 0.1 = 3 slots: two healthy instances hold it.
func smallAutoscale() AutoscaleConfig {
	c := DefaultAutoscaleConfig()
	c.ColdStart, c.RequestTime, c.Slots, c.NearRTT, c.BufferRTT = time.Second, 100*ms, 2, 0, 40*ms
	c.BaseRate, c.StepRate = 5, 30
	c.Base, c.Step, c.After = 2*time.Second, 4*time.Second, 0
	return c
}

// stepReqs returns n requests sent in window w (of 1 s), phase ph, answered
// by region with status and latency.
func stepReqs(n, w, ph int, region string, status int, latency time.Duration) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = Request{Site: "nyc", Phase: ph, T: time.Duration(w)*time.Second + time.Duration(i)*time.Second/time.Duration(n+1),
			Region: region, Status: status, Latency: latency}
	}
	return out
}

// smallMeasurement is a waterfall row of smallAutoscale: the step spills
// 60% of its first second and 10% of its second to eu-west, then stays in
// us-east; one request fails in the last second and two were not sent.
func smallMeasurement() AutoscaleMeasurement {
	var rs []Request
	rs = append(rs, stepReqs(2, 0, 0, "us-east", 200, 100*ms)...)
	rs = append(rs, stepReqs(4, 2, 1, "us-east", 200, 100*ms)...)
	rs = append(rs, stepReqs(6, 2, 1, "eu-west", 200, 140*ms)...)
	rs = append(rs, stepReqs(9, 3, 1, "us-east", 200, 100*ms)...)
	rs = append(rs, stepReqs(1, 3, 1, "eu-west", 200, 140*ms)...)
	rs = append(rs, stepReqs(10, 4, 1, "us-east", 200, 100*ms)...)
	rs = append(rs, stepReqs(9, 5, 1, "us-east", 200, 100*ms)...)
	rs = append(rs, stepReqs(1, 5, 1, "us-east", 503, 3*ms)...)
	return AutoscaleMeasurement{
		Autoscaler: AutoscalerWaterfall, Requests: rs, Dropped: 2, Waited: 0,
		Spans: []InstanceSpan{
			{Name: "g-1", Start: -5, Stop: -1},  // before the load, still running: 6 s
			{Name: "g-2", Start: 2.5, Stop: -1}, // 3.5 s
			{Name: "g-3", Start: 2.5, Stop: 5},  // 2.5 s
			{Name: "g-4", Start: 7, Stop: 8},    // after the load: nothing
		},
		Samples: []GroupSample{
			{T: 1, Healthy: 1, Recommended: 1},
			{T: 3, Healthy: 1, Recommended: 3},
			{T: 3.7, Healthy: 2, Recommended: 3}, // 4 slots >= 3: capacity, 1.7 s into the step
			{T: 4.5, Healthy: 3, Recommended: 3},
		},
	}
}

func TestAutoscaleRow(t *testing.T) {
	c := smallAutoscale()
	row, err := c.autoscaleRow(smallMeasurement())
	if err != nil {
		t.Fatal(err)
	}
	// The step's 39 answers: 32 at 100 ms, 7 from eu-west at 140 ms.
	back := 2.0 // window 4 on (window 3 is 90% us-east), 2 s after the step
	want := AutoscaleRow{
		Load: "step", ColdStartS: 1, Autoscaler: AutoscalerWaterfall, InstanceS: 12, Peak: 3, P50Ms: 100, P99Ms: 140,
		Failed: 3, Waited: 0, Spilled: 7, BufferShare: 7.0 / 39, TimeToCapacityS: 1.7, BackNearS: &back,
		ColdStartsPer1k: 1000 * 2.0 / 44, BufferRTTMs: 40, RequestMs: 100, NearRTTMs: 0, Requests: 44,
	}
	got := row
	got.Series, got.Spans, got.Samples = nil, nil, nil
	if diff := cmp.Diff(want, got, floatNear); diff != "" {
		t.Errorf("row (-want +got):\n%s", diff)
	}
	wantSeries := []AutoscaleWindow{
		{TS: 0, Sent: 2, Near: 2, P99Ms: 100, Running: 1, Recommended: 0},
		{TS: 1, Running: 1, Healthy: 1, Recommended: 1},
		{TS: 2, Sent: 10, Near: 4, Buffer: 6, P99Ms: 140, Running: 3},
		{TS: 3, Sent: 10, Near: 9, Buffer: 1, P99Ms: 140, Running: 3, Healthy: 2, Recommended: 3},
		{TS: 4, Sent: 10, Near: 10, P99Ms: 100, Running: 2, Healthy: 3, Recommended: 3}, // g-3 stopped at 5
		{TS: 5, Sent: 10, Near: 9, Failed: 1, P99Ms: 100, Running: 2},
	}
	if diff := cmp.Diff(wantSeries, row.Series, floatNear); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

var floatNear = cmp.Comparer(func(a, b float64) bool { return a == b || (a-b < 1e-9 && b-a < 1e-9) })

func TestAutoscaleRowBackNear(t *testing.T) {
	c := smallAutoscale()
	tests := []struct {
		name       string
		autoscaler string
		// lastBuffer is eu-west's answers in the step's last window (of 10).
		lastBuffer int
		want       *float64
	}{
		{"back from the third second", AutoscalerWaterfall, 0, new(2.0)},
		{"the last window spills: never", AutoscalerWaterfall, 1, new(-1.0)},
		{"no buffer: not judged", AutoscalerAlone, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := smallMeasurement()
			m.Autoscaler = tt.autoscaler
			m.Requests = m.Requests[:len(m.Requests)-10]
			m.Requests = append(m.Requests, stepReqs(10-tt.lastBuffer, 5, 1, "us-east", 200, 100*ms)...)
			m.Requests = append(m.Requests, stepReqs(tt.lastBuffer, 5, 1, "eu-west", 200, 140*ms)...)
			row, err := c.autoscaleRow(m)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, row.BackNearS); diff != "" {
				t.Errorf("back near (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAutoscaleRowRejects(t *testing.T) {
	c := smallAutoscale()
	for _, r := range []Request{
		{Site: "lon", Phase: 1, Status: 200},
		{Site: "nyc", Phase: 2, Status: 200},
		{Site: "nyc", Phase: 1, Status: 200, Region: "asia-east"},
	} {
		if _, err := c.autoscaleRow(AutoscaleMeasurement{Requests: []Request{r}}); err == nil {
			t.Errorf("request %+v: no error", r)
		}
	}
}

func TestAutoscaleRowNeverCapacity(t *testing.T) {
	c := smallAutoscale()
	m := smallMeasurement()
	m.Samples = m.Samples[:2] // never more than one healthy instance
	row, err := c.autoscaleRow(m)
	if err != nil {
		t.Fatal(err)
	}
	if row.TimeToCapacityS != -1 {
		t.Errorf("time to capacity %v, want -1 (never)", row.TimeToCapacityS)
	}
}

func TestAutoscaleTargets(t *testing.T) {
	back := func(v float64) *float64 { return &v }
	base := AutoscaleRow{Autoscaler: AutoscalerWaterfall, ColdStartS: 3, RequestMs: 200, BufferRTTMs: 40, P99Ms: 300,
		TimeToCapacityS: 8, BackNearS: back(11), Requests: 100}
	tests := []struct {
		name string
		edit func(*AutoscaleRow)
		want []string // substrings of the error; none: nil
	}{
		{"met", func(*AutoscaleRow) {}, nil},
		{"at the p99 bound", func(r *AutoscaleRow) { r.P99Ms = 480 }, nil},
		{"p99 over", func(r *AutoscaleRow) { r.P99Ms = 481 }, []string{"step p99 481 ms > 2 × (200 + 40) = 480 ms"}},
		{"failed", func(r *AutoscaleRow) { r.Failed = 1 }, []string{"1 of 100 requests failed"}},
		{"back at the bound", func(r *AutoscaleRow) { r.BackNearS = back(21) }, nil},
		{"back late", func(r *AutoscaleRow) { r.BackNearS = back(21.5) }, []string{"13.5 s after capacity arrived"}},
		{"never back", func(r *AutoscaleRow) { r.BackNearS = back(-1) }, []string{"never came back"}},
		{"never capacity", func(r *AutoscaleRow) { r.TimeToCapacityS = -1 }, []string{"capacity never arrived"}},
		{"no buffer: not judged", func(r *AutoscaleRow) { r.Autoscaler, r.BackNearS = AutoscalerAlone, nil }, nil},
		{"all", func(r *AutoscaleRow) { r.P99Ms, r.Failed, r.BackNearS = 2000, 5, back(-1) }, []string{"p99 2000", "5 of 100", "never came back"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.edit(&r)
			err := DefaultAutoscaleTargets().Check(&r)
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Check: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check: nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v, want it to say %q", err, w)
				}
			}
		})
	}
}

// fakeClock returns a clock whose time is set by the test.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

func TestProviderLog(t *testing.T) {
	origin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: origin}
	var tee bytes.Buffer
	l := newProviderLog(&tee)
	l.now = clk.now
	line := func(proc, component, instance, msg string) string {
		return fmt.Sprintf(`%s | {"level":"info","daemon":"controlplane","component":"autoscaler","component":%q,"provider":"process","instance":%q,"time":"2026-01-01T00:00:00Z","message":%q}`+"\n",
			proc, component, instance, msg)
	}
	write := func(at time.Duration, s string) {
		t.Helper()
		clk.t = origin.Add(at)
		if n, err := io.WriteString(l, s); err != nil || n != len(s) {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	started := line("cp-1", "provider", "g-1", "started")
	write(time.Second, started[:20]) // a line in two writes: timed when it is whole
	write(1500*time.Millisecond, started[20:])
	write(2*time.Second, line("cp-1", "provider", "g-2", "started")+line("cp-1", "provider", "g-3", "started"))
	write(2*time.Second, line("gfe-nyc-1", "provider", "g-9", "started")) // not a control plane
	write(2*time.Second, line("cp-1", "autoscaler", "g-8", "started"))    // not the provider
	write(2*time.Second, "cp-1 | not json\n")
	write(3*time.Second, line("cp-1", "provider", "g-1", "stopped"))
	write(4*time.Second, line("cp-1", "provider", "g-2", "killed"))
	write(5*time.Second, line("cp-1", "provider", "g-2", "exited by itself")) // already gone
	write(6*time.Second, line("cp-1", "provider", "g-7", "stopped"))          // never started
	want := []InstanceSpan{
		{Name: "g-1", Start: 1.5, Stop: 3},
		{Name: "g-2", Start: 2, Stop: 4},
		{Name: "g-3", Start: 2, Stop: -1},
	}
	if diff := cmp.Diff(want, l.Spans(origin)); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
	if !strings.Contains(tee.String(), "cp-1 | not json\n") || !strings.HasPrefix(tee.String(), started) {
		t.Errorf("the output was not passed on whole: %q", tee.String())
	}
}

func TestSumSeries(t *testing.T) {
	page := `# HELP spillway_gfe_pending_wait_seconds time in the pending queue
# TYPE spillway_gfe_pending_wait_seconds histogram
spillway_gfe_pending_wait_seconds_bucket{result="served",service="web",le="+Inf"} 7
spillway_gfe_pending_wait_seconds_sum{result="served",service="web"} 12.5
spillway_gfe_pending_wait_seconds_count{result="served",service="web"} 7
spillway_gfe_pending_wait_seconds_count{result="rejected",service="web"} 3
spillway_gfe_pending_wait_seconds_count_other 100
`
	if got, err := sumSeries(page, "spillway_gfe_pending_wait_seconds_count"); err != nil || got != 10 {
		t.Errorf("sumSeries = %v, %v, want 10", got, err)
	}
	if got, err := sumSeries("", "x"); err != nil || got != 0 {
		t.Errorf("sumSeries of nothing = %v, %v, want 0", got, err)
	}
	if _, err := sumSeries("x{a=\"b\"} notanumber\n", "x"); err == nil {
		t.Error("sumSeries of a bad value: no error")
	}
}

func TestAutoscaleConfig(t *testing.T) {
	c := DefaultAutoscaleConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	if got := c.NearRate(); got != 30 {
		t.Errorf("NearRate = %v, want 0.6 × 10 slots / 200 ms = 30", got)
	}
	with, alone := c.AutoscaleSpec(AutoscalerWaterfall), c.AutoscaleSpec(AutoscalerAlone)
	if len(with.Regions) != 2 || with.Regions[1].Name != "eu-west" || with.Regions[1].MaxRPS != 200 || with.Sites[0].RTT["eu-west"] != 40*ms {
		t.Errorf("waterfall spec: %+v", with)
	}
	if len(alone.Regions) != 1 || len(alone.Sites[0].RTT) != 1 {
		t.Errorf("alone spec has a buffer: %+v", alone)
	}
	if a := with.Autoscale; a.StartupDelay != 3*time.Second || a.MaxConcurrency != 10 || !strings.Contains(a.Block, "cold_start: 3s") {
		t.Errorf("autoscale spec: %+v", a)
	}
	bad := c
	bad.Autoscalers = []string{"kpa", AutoscalerAlone, AutoscalerAlone}
	bad.Step, bad.Slots, bad.StepRate, bad.NearShare, bad.Sources = 0, 0, -1, 2, 0
	err := bad.Validate()
	for _, w := range []string{`unknown "kpa"`, "listed twice", "step: must be > 0", "slots", "step_rate", "near_share", "sources"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate: %v, want it to say %q", err, w)
		}
	}
	q := QuickAutoscaleConfig()
	q.Scale(2)
	if q.Base != 10*time.Second || q.Step != 60*time.Second || q.After != 0 {
		t.Errorf("quick × 2: base %v, step %v, after %v", q.Base, q.Step, q.After)
	}
}

func TestAutoscaleTableGolden(t *testing.T) {
	c := smallAutoscale()
	row, err := c.autoscaleRow(smallMeasurement())
	if err != nil {
		t.Fatal(err)
	}
	m := smallMeasurement()
	m.Autoscaler = AutoscalerAlone
	alone, err := c.autoscaleRow(m)
	if err != nil {
		t.Fatal(err)
	}
	alone.Missed = []string{"cloudrun: 3 of 44 requests failed, want 0"}
	res := &AutoscaleResult{Net: 40, Config: c.info(), Rows: []AutoscaleRow{row, alone}, StartupS: 9.8, WallS: 95.2,
		LoadAvg: LoadAvg{Samples: 19, Mean: 9.5, Max: 11.2}}
	var b bytes.Buffer
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "autoscale.golden")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("WriteTable (-want +got):\n%s", diff)
	}
	var j bytes.Buffer
	if err := res.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"load": "step"`, `"cold_start_s": 1`, `"autoscaler": "cloudrun+waterfall"`, `"instance_s": 12`, `"peak": 3`,
		`"p50_ms": 100`, `"p99_ms": 140`, `"failed": 3`, `"waited": 0`, `"spilled": 7`, `"time_to_capacity_s": 1.7`, `"back_near_s": 2`,
		`"back_near_s": null`, `"buffer_rtt_ms": 40`, `"request_ms": 100`, `"cold_starts_per_1k"`} {
		if !strings.Contains(j.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}
