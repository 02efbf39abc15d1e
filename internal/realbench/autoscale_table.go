package realbench

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/spillway-lb/spillway/internal/quantile"
)

// AutoscaleMeasurement is what one row of `lbbench --autoscale` recorded,
// every time since the start of the load.
type AutoscaleMeasurement struct {
	Autoscaler string
	// Requests are the load's requests (Phase: 0 base, 1 step, 2 after).
	Requests []Request
	// Dropped counts requests the load generator could not send.
	Dropped int64
	// Spans are the instances the process provider ran.
	Spans []InstanceSpan
	// Samples are the near group's readings.
	Samples []GroupSample
	// Waited is the requests the gfe put in its pending queue during the
	// load (-1: not read).
	Waited int64
}

// AutoscaleRow is one row of `lbbench --autoscale`: the scorecard's
// columns (sim.AutoscaleRow's JSON keys) where the real system has them,
// computed from the client's per-request records, the provider's start
// and stop records and the gfe's status, plus the real run's own. The
// scorecard's oracle_ratio, overshoot and post_panic_dip have no
// counterpart (no oracle or KPA runs here).
type AutoscaleRow struct {
	Load       string  `json:"load"`
	ColdStartS float64 `json:"cold_start_s"`
	Autoscaler string  `json:"autoscaler"`
	// InstanceS is the near instances' run time (from the provider's
	// start to its stop, starting and demoted instances included) within
	// the load; Peak the most that ran at once.
	InstanceS float64 `json:"instance_s"`
	Peak      int     `json:"peak"`
	// P50Ms and P99Ms are the latency of the step phase's requests
	// answered 2xx, as the client measured it (nearest rank).
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Failed is the requests not answered 2xx (any phase) plus those not
	// sent; Waited the requests the gfe held in its pending queue (-1 when
	// its metrics could not be read).
	Failed int64 `json:"failed"`
	Waited int64 `json:"waited"`
	// Spilled is the requests the buffer region answered; BufferShare
	// their share of the step phase's answered requests.
	Spilled     int64   `json:"spilled"`
	BufferShare float64 `json:"buffer_share"`
	// TimeToCapacityS is the seconds from the step until the near group's
	// healthy instances (the gfe's /status) first held the step's
	// concurrency in their slots (healthy × slots ≥ step rate × (request
	// time + near RTT)), the scorecard's definition; -1 if never during
	// the step.
	TimeToCapacityS float64 `json:"time_to_capacity_s"`
	// BackNearS is the seconds from the step to the start of the first
	// window from which on every window of the step had at least
	// NearShare of its answered requests served by the near region; -1 if
	// not even the last; null without a buffer region.
	BackNearS *float64 `json:"back_near_s"`
	// ColdStartsPer1k is the instances started during the load per 1,000
	// requests.
	ColdStartsPer1k float64 `json:"cold_starts_per_1k"`
	// BufferRTTMs and RequestMs are the constants the targets use (as the
	// scorecard's); NearRTTMs the near region's RTT.
	BufferRTTMs float64 `json:"buffer_rtt_ms"`
	RequestMs   float64 `json:"request_ms"`
	NearRTTMs   float64 `json:"near_rtt_ms"`
	// Requests is every request of the load, sent or not.
	Requests int64 `json:"requests"`
	// Series is the timeline, one entry per Window.
	Series []AutoscaleWindow `json:"series"`
	// Missed holds every target (DefaultAutoscaleTargets) the row
	// misses; empty when it meets them all.
	Missed []string `json:"targets_missed"`
	// Spans and Samples are the records the row was computed from.
	Spans   []InstanceSpan `json:"instances"`
	Samples []GroupSample  `json:"samples"`
}

// AutoscaleWindow is one window of a row's timeline.
type AutoscaleWindow struct {
	// TS is the window's start since the start of the load, s.
	TS float64 `json:"t_s"`
	// Sent is the requests sent in it (by send time); Near and Buffer
	// those the near and the buffer region answered, Failed those not
	// answered 2xx.
	Sent   int64 `json:"sent"`
	Near   int64 `json:"near"`
	Buffer int64 `json:"buffer"`
	Failed int64 `json:"failed"`
	// P99Ms is the latency of its requests answered 2xx.
	P99Ms float64 `json:"p99_ms"`
	// Running is the near instances the provider ran at the window's end,
	// Healthy and Recommended the last reading in it (the gfe's healthy
	// instances, the control plane's recommendation).
	Running     int `json:"running"`
	Healthy     int `json:"healthy"`
	Recommended int `json:"recommended"`
}

// autoscaleRow computes m's row under c.
func (c *AutoscaleConfig) autoscaleRow(m AutoscaleMeasurement) (AutoscaleRow, error) {
	phases := c.phases()
	var end time.Duration
	for _, ph := range phases {
		end += ph.Duration
	}
	stepFrom, stepTo := c.Base, c.Base+c.Step
	row := AutoscaleRow{
		Load: "step", ColdStartS: c.ColdStart.Seconds(), Autoscaler: m.Autoscaler, Waited: m.Waited,
		BufferRTTMs: millis(c.BufferRTT), RequestMs: millis(c.RequestTime), NearRTTMs: millis(c.NearRTT),
		Requests: int64(len(m.Requests)) + m.Dropped, Failed: m.Dropped, Spans: m.Spans, Samples: m.Samples,
	}
	nw := max(1, int((end+c.Window-1)/c.Window))
	row.Series = make([]AutoscaleWindow, nw)
	lat := make([][]float64, nw)
	var stepLat []float64
	var stepOK, stepBuffer int64
	for i := range m.Requests {
		r := &m.Requests[i]
		if r.Site != autoscaleSite || r.Phase < 0 || r.Phase >= len(phases) {
			return AutoscaleRow{}, fmt.Errorf("request %d: site %q, phase %d: not of this story", i, r.Site, r.Phase)
		}
		if r.Region != "" && r.Region != autoscaleNear && r.Region != autoscaleBuffer {
			return AutoscaleRow{}, fmt.Errorf("request %d: unknown region %q", i, r.Region)
		}
		w := min(max(0, int(r.T/c.Window)), nw-1)
		win := &row.Series[w]
		win.Sent++
		if r.Region == autoscaleBuffer && r.ok() {
			row.Spilled++
		}
		if !r.ok() {
			win.Failed++
			row.Failed++
			continue
		}
		switch r.Region {
		case autoscaleNear:
			win.Near++
		case autoscaleBuffer:
			win.Buffer++
		}
		l := millis(r.Latency)
		lat[w] = append(lat[w], l)
		if r.Phase == 1 {
			stepLat = append(stepLat, l)
			stepOK++
			if r.Region == autoscaleBuffer {
				stepBuffer++
			}
		}
	}
	for w := range row.Series {
		win := &row.Series[w]
		win.TS = (time.Duration(w) * c.Window).Seconds()
		slices.Sort(lat[w])
		win.P99Ms = quantile.Of(lat[w], 0.99)
		to := min(end, time.Duration(w+1)*c.Window).Seconds()
		win.Running = running(m.Spans, to)
		for _, s := range m.Samples {
			if s.T >= win.TS && s.T < to {
				win.Healthy, win.Recommended = s.Healthy, s.Recommended
			}
		}
	}
	slices.Sort(stepLat)
	row.P50Ms, row.P99Ms = quantile.Of(stepLat, 0.50), quantile.Of(stepLat, 0.99)
	row.BufferShare = ratio(float64(stepBuffer), float64(stepOK))
	var started int
	row.InstanceS, row.Peak, started = instanceTime(m.Spans, end.Seconds())
	row.ColdStartsPer1k = ratio(1000*float64(started), float64(row.Requests))

	// Time to capacity: the scorecard's, on the gfe's healthy instances.
	need := c.StepRate * (c.RequestTime + c.NearRTT).Seconds()
	row.TimeToCapacityS = -1
	for _, s := range m.Samples {
		if s.T >= stepFrom.Seconds() && s.T < stepTo.Seconds() && float64(s.Healthy*c.Slots) >= need {
			row.TimeToCapacityS = s.T - stepFrom.Seconds()
			break
		}
	}
	if m.Autoscaler == AutoscalerWaterfall {
		v := c.backNear(row.Series, stepFrom, stepTo)
		row.BackNearS = &v
	}
	return row, nil
}

// backNear returns the seconds from the step (from) to the start of the
// first of the step's windows from which on every window of the step has
// at least NearShare of its answered requests from the near region; -1
// when the step's last window has not.
func (c *AutoscaleConfig) backNear(series []AutoscaleWindow, from, to time.Duration) float64 {
	first, last := int(from/c.Window), min(len(series), int((to+c.Window-1)/c.Window))
	back := -1
	for w := last - 1; w >= first; w-- {
		win := series[w]
		if ok := win.Near + win.Buffer; ok > 0 && float64(win.Near) < c.NearShare*float64(ok) {
			break
		}
		back = w
	}
	if back < 0 {
		return -1
	}
	return (time.Duration(back)*c.Window - from).Seconds()
}

// running returns the instances of spans running at t (s).
func running(spans []InstanceSpan, t float64) int {
	n := 0
	for _, s := range spans {
		if s.Start <= t && (s.Stop < 0 || s.Stop > t) {
			n++
		}
	}
	return n
}

// instanceTime returns, over [0, end] s, the instance-seconds of spans, the
// most that ran at once and the number started in it.
func instanceTime(spans []InstanceSpan, end float64) (seconds float64, peak, started int) {
	type edge struct {
		t float64
		d int
	}
	var edges []edge
	for _, s := range spans {
		from, to := max(0, s.Start), end
		if s.Stop >= 0 {
			to = min(end, s.Stop)
		}
		if s.Start >= 0 && s.Start < end {
			started++
		}
		if to <= from {
			continue
		}
		seconds += to - from
		edges = append(edges, edge{from, 1}, edge{to, -1})
	}
	// Stops before starts at the same instant: a replacement is not a peak.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].d < edges[j].d
	})
	n := 0
	for _, e := range edges {
		n += e.d
		peak = max(peak, n)
	}
	return seconds, peak, started
}

// AutoscaleTargets are the real system's targets (the scorecard's issue,
// "Real system"): the step's p99 at the stepping site at most P99Factor ×
// (request time + buffer RTT), no failed request, and the load back in
// the near region within one cold start + BackNearSlack of capacity
// arriving.
type AutoscaleTargets struct {
	P99Factor     float64
	BackNearSlack time.Duration
}

// DefaultAutoscaleTargets are the targets as stated: 2 × (request +
// buffer RTT) and one cold start + 10 s.
func DefaultAutoscaleTargets() AutoscaleTargets {
	return AutoscaleTargets{P99Factor: 2, BackNearSlack: 10 * time.Second}
}

// Check reports every target row misses. The return to the near region is
// judged only for a row with a buffer.
func (t AutoscaleTargets) Check(row *AutoscaleRow) error {
	var errs []error
	if bound := t.P99Factor * (row.RequestMs + row.BufferRTTMs); row.P99Ms > bound {
		errs = append(errs, fmt.Errorf("%s: step p99 %.0f ms > %g × (%.0f + %.0f) = %.0f ms", row.Autoscaler, row.P99Ms, t.P99Factor, row.RequestMs, row.BufferRTTMs, bound))
	}
	if row.Failed != 0 {
		errs = append(errs, fmt.Errorf("%s: %d of %d requests failed, want 0", row.Autoscaler, row.Failed, row.Requests))
	}
	if row.BackNearS != nil {
		bound := row.ColdStartS + t.BackNearSlack.Seconds()
		switch {
		case row.TimeToCapacityS < 0:
			errs = append(errs, fmt.Errorf("%s: the near group's capacity never arrived during the step", row.Autoscaler))
		case *row.BackNearS < 0:
			errs = append(errs, fmt.Errorf("%s: the load never came back to the near region during the step (capacity at %.1f s)", row.Autoscaler, row.TimeToCapacityS))
		case *row.BackNearS-row.TimeToCapacityS > bound:
			errs = append(errs, fmt.Errorf("%s: the load came back to the near region %.1f s after capacity arrived (at %.1f s), want at most %.0f s (a cold start + %v)",
				row.Autoscaler, *row.BackNearS-row.TimeToCapacityS, row.TimeToCapacityS, bound, t.BackNearSlack))
		}
	}
	return errors.Join(errs...)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
