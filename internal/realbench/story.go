package realbench

import (
	"encoding/json"
	"io"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/quantile"
)

// WithinLoad is the highest load (a multiple of the declared capacity) of
// the phases that StoryRun's *_within measures cover; the *_over measures
// cover the phases above it.
const WithinLoad = 0.95

// StoryResult is a whole story's run (RunStory): the deployment, the
// phases with their optima, and one row per policy summarising its
// repetitions. Its JSON form is what `lbbench --story uneven --json`
// prints: the keys of Result, with rows and phases of their own.
type StoryResult struct {
	Result
	// Story names the story ("uneven").
	Story string `json:"story"`
	// Reps is the number of repetitions; every row has one run of each.
	Reps int `json:"reps"`
	// TimeoutS is the deadline of every request, s: a request that gets no
	// answer within it counts as TimeoutS in the latency measures.
	TimeoutS   float64        `json:"timeout_s"`
	Antagonist AntagonistInfo `json:"antagonist"`
	// MinCrossRegion is the least share of the story's requests any
	// assignment within capacity sends outside their site's nearest
	// region: the LP optimum's (minCrossRegion).
	MinCrossRegion float64      `json:"min_cross_region"`
	StoryPhases    []StoryPhase `json:"phases"`
	Rows           []StoryRow   `json:"rows"`
}

// AntagonistInfo is the slowdown of the antagonized half of every
// region's instances (topology.UnevenAntagonist).
type AntagonistInfo struct {
	PeriodS  float64 `json:"period_s"`
	Duty     float64 `json:"duty"`
	Slowdown float64 `json:"slowdown"`
}

// StoryPhase is one phase of a story: PhaseInfo, its demand as a multiple
// of the declared capacity, and its minimum cross-region share.
type StoryPhase struct {
	PhaseInfo
	Load           float64 `json:"load"`
	MinCrossRegion float64 `json:"min_cross_region"`
}

// Measures are one run's numbers, or their median, minimum or maximum over
// runs. Latencies are ms over the requests served (2xx) and those that got
// no answer within the deadline, counted as the deadline; shares are
// fractions in [0, 1].
type Measures struct {
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	// P99WithinMs and ErrorRateWithin cover the phases of load up to
	// WithinLoad, P99OverMs the phases above it.
	P99WithinMs     float64 `json:"p99_within_ms"`
	P99OverMs       float64 `json:"p99_over_ms"`
	ErrorRate       float64 `json:"error_rate"`
	ErrorRateWithin float64 `json:"error_rate_within"`
	// DeadlineMissed is the share of requests that got no answer within
	// the deadline.
	DeadlineMissed float64 `json:"deadline_missed"`
	CrossRegion    float64 `json:"cross_region"`
	OverCapacity   float64 `json:"over_capacity"`
	Excess         float64 `json:"excess"`
	// RTTOverLP is Row.RTTOverLP, 0 when nothing was routed.
	RTTOverLP float64 `json:"rtt_over_lp"`
	Requests  float64 `json:"requests"`
}

// fields returns m's numbers in a fixed order, for summarise.
func (m *Measures) fields() []*float64 {
	return []*float64{&m.MeanMs, &m.P50Ms, &m.P99Ms, &m.P999Ms, &m.P99WithinMs, &m.P99OverMs,
		&m.ErrorRate, &m.ErrorRateWithin, &m.DeadlineMissed, &m.CrossRegion, &m.OverCapacity, &m.Excess, &m.RTTOverLP, &m.Requests}
}

// RegionUtil is a region's utilization: the rate of requests routed to it
// (any answer, by send time) per window (Config.Window) over its declared
// capacity, averaged and at its highest over the measured windows.
type RegionUtil struct {
	Region string  `json:"region"`
	Mean   float64 `json:"mean"`
	Max    float64 `json:"max"`
}

// StoryRun is one policy's run in one repetition.
type StoryRun struct {
	// Rep is the repetition (from 1), Order the policy's place in it
	// (from 1).
	Rep   int `json:"rep"`
	Order int `json:"order"`
	Measures
	Utilization []RegionUtil `json:"utilization"`
	// Row is the run's row as Run computes it (latency of 2xx answers
	// only), with its phases and series.
	Row Row `json:"row"`
}

// StoryRow is one policy's line: the median of every measure over its runs
// (inline, so that the row has the keys of Row: policy, scope, p99_ms,
// mean_ms, error_rate, cross_region, and p999_ms), their minimum and
// maximum, and the runs.
type StoryRow struct {
	Policy string `json:"policy"`
	// Scope is "-" for the planned policies, as in Row.
	Scope string `json:"scope"`
	// Options are the service options the row turned on, as in Row.
	benchpolicy.Options
	Measures
	Min         Measures     `json:"min"`
	Max         Measures     `json:"max"`
	Utilization []RegionUtil `json:"utilization"`
	Runs        []StoryRun   `json:"runs"`
}

// storyRun computes the Measures and utilization of m, whose row (t.row)
// is row, for cfg's deadline (Timeout) and phases.
func (t *table) storyRun(m Measurement, row Row, cfg *Config) StoryRun {
	run := StoryRun{Row: row}
	capacity := map[string]float64{}
	var total float64
	for _, reg := range cfg.spec().Regions {
		capacity[reg.Name] = reg.Rate * float64(reg.Instances*len(reg.Zones))
		total += capacity[reg.Name]
	}
	within := make([]bool, len(cfg.Phases))
	for i, ph := range cfg.Phases {
		within[i] = demandOf(ph) <= WithinLoad*total*(1+1e-9)
	}
	deadline := msOf(cfg.Timeout)
	var all, in, over []float64
	var sum float64
	var missed, withinReqs, withinFailed int64
	for i := range m.Requests {
		r := &m.Requests[i]
		if within[r.Phase] {
			withinReqs++
			if !r.ok() {
				withinFailed++
			}
		}
		var v float64
		switch {
		case r.ok():
			v = min(msOf(r.Latency), deadline)
		case r.Status == 0 && r.Latency >= cfg.Timeout-10*time.Millisecond:
			missed++
			v = deadline
		default:
			continue // refused or failed before the deadline: an error, no latency
		}
		sum += v
		all = append(all, v)
		if within[r.Phase] {
			in = append(in, v)
		} else {
			over = append(over, v)
		}
	}
	for _, s := range [][]float64{all, in, over} {
		slices.Sort(s)
	}
	mm := &run.Measures
	mm.MeanMs = ratio(sum, float64(len(all)))
	mm.P50Ms, mm.P99Ms, mm.P999Ms = quantile.Of(all, 0.50), quantile.Of(all, 0.99), quantile.Of(all, 0.999)
	mm.P99WithinMs, mm.P99OverMs = quantile.Of(in, 0.99), quantile.Of(over, 0.99)
	mm.ErrorRate = row.ErrorRate
	// Dropped requests are not in m.Requests; they count as errors of the
	// phase they were due in, which the loader does not say: count them in
	// the whole run's error rate only.
	mm.ErrorRateWithin = ratio(float64(withinFailed), float64(withinReqs))
	mm.DeadlineMissed = ratio(float64(missed), float64(row.Requests))
	mm.CrossRegion, mm.OverCapacity, mm.Excess = row.CrossRegion, row.OverCapacity, row.Excess
	if row.RTTOverLP != nil {
		mm.RTTOverLP = *row.RTTOverLP
	}
	mm.Requests = float64(row.Requests)
	for _, region := range t.regions {
		u := RegionUtil{Region: region}
		for _, w := range row.Series {
			v := ratio(w.LoadRPS[region], capacity[region])
			u.Mean += v
			u.Max = max(u.Max, v)
		}
		u.Mean = ratio(u.Mean, float64(len(row.Series)))
		run.Utilization = append(run.Utilization, u)
	}
	return run
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarise returns p's row over its runs: the median (of an even count,
// the mean of the middle two), minimum and maximum of every measure and of
// every region's utilization.
func summarise(p benchpolicy.Row, runs []StoryRun) StoryRow {
	row := StoryRow{Policy: string(p.Policy), Scope: string(p.Scope), Options: p.Options, Runs: runs}
	if row.Scope == "" {
		row.Scope = "-"
	}
	if len(runs) == 0 {
		return row
	}
	med, lo, hi := row.Measures.fields(), row.Min.fields(), row.Max.fields()
	for k := range med {
		vals := make([]float64, len(runs))
		for i := range runs {
			vals[i] = *runs[i].Measures.fields()[k]
		}
		*med[k], *lo[k], *hi[k] = medianRange(vals)
	}
	for ri, u := range runs[0].Utilization {
		means, maxes := make([]float64, len(runs)), make([]float64, len(runs))
		for i := range runs {
			means[i], maxes[i] = runs[i].Utilization[ri].Mean, runs[i].Utilization[ri].Max
		}
		mean, _, _ := medianRange(means)
		mx, _, _ := medianRange(maxes)
		row.Utilization = append(row.Utilization, RegionUtil{Region: u.Region, Mean: mean, Max: mx})
	}
	return row
}

// medianRange returns the median, minimum and maximum of vals (not
// empty); it sorts vals.
func medianRange(vals []float64) (med, lo, hi float64) {
	slices.Sort(vals)
	n := len(vals)
	med = vals[n/2]
	if n%2 == 0 {
		med = (vals[n/2-1] + vals[n/2]) / 2
	}
	return med, vals[0], vals[n-1]
}

// WriteJSON writes r as one indented JSON object.
func (r *StoryResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
