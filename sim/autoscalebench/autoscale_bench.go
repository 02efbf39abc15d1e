package autoscalebench

import (
	"math"
	"time"
)

// This file is `lbsim autoscale-bench`, the autoscaler scorecard: lb/autoscale's
// Cloud Run rules, alone and with the waterfall as their buffer, against
// Knative's KPA (lb/autoscale/kpa), the Kubernetes HPA and a clairvoyant
// oracle, on six loads and two cold starts. Everything is a deterministic simulation on simulated time
// (no wall clock, no randomness): the same binary prints the same rows on any
// machine, however loaded.
//
// The queueing model, in fixed steps of Model.Step (100ms):
//
//   - Requests arrive at the load's rate (fractional arrivals carried over;
//     the sporadic load lists its single requests), and each takes
//     ServiceTime (0.5s) on one of an instance's MaxConcurrency (10) slots.
//     An instance serves ColdStart after it is started and is billed from
//     its start. A stopped instance takes no new request.
//   - Alone (every autoscaler but cloudrun+waterfall), a request that finds
//     no free slot waits in one FIFO queue; latency = wait + ServiceTime.
//   - cloudrun+waterfall: the site is at the autoscaled region and a second
//     region, BufferRTT (40ms) away, has room for any load. Every step the
//     gfe's planner (lb/waterfall.Compute, docs/design.md §3) splits the site's
//     demand (its arrivals over the last second) between the two, the local
//     group's capacity being its ready instances' slots ÷ ServiceTime × the
//     service's default target_utilization (0.95), with its starting
//     instances counted as unhealthy (as the gfe sees them), so rule 5's
//     preemptive spill applies too. A request the plan sends to the local
//     group that finds every slot taken goes on to the buffer (the picker's
//     fallback to the row's next group), so none waits. Served in the
//     buffer, latency = ServiceTime + BufferRTT. The autoscaler sees what the
//     control plane's controller sees (controller.Load.Concurrency): the
//     requests in flight locally plus the spilled demand × the local mean
//     latency (Little's law), the spill counting only while the local group
//     has a ready instance (a group at zero has no RTT estimate, so the gfe
//     reports no spill past it). The buffer's instances are not billed: it
//     has room, which is the point of the waterfall.
//   - Cloud Run rules: once a second the autoscaler gets the second's CPU
//     (CPUPerRequest per request in flight, 1 CPU per instance), mean
//     concurrency and arrivals; every step in which requests wait, the
//     instances the last second's arrival rate needs at the target are
//     started (Config.RateStarts), and then the pending queue asks
//     Config.Pending about its last and its first request and starts
//     instances (Autoscaler.OnDemand) while Pending says so; at max
//     instances the oldest requests that waited MaxPendingWait fail (429).
//   - KPA: see kpaScaler.
//   - oracle: see oracle.
//   - hpa (the Kubernetes HPA's defaults) and the rows with Knative's
//     constants (oracle@70%, cloudrun+waterfall@70%, @70%,60s and
//     @knative): see autoscale_variants.go.
//   - Row.P99AllMs counts a failed request as never answered.
//   - Scale-downs stop instances not yet ready first, then the newest.

// Model is the scorecard's fixed model.
type Model struct {
	Step           time.Duration // simulation step
	ServiceTime    time.Duration // per request: the request time of the targets
	MaxConcurrency int           // slots per instance
	CPUPerRequest  float64       // cores per request in flight
	Target         float64       // target utilization of the oracle and the Cloud Run rules
	MaxInstances   int
	BufferRTT      time.Duration   // to the second region of cloudrun+waterfall
	ColdStarts     []time.Duration // one set of rows per cold start
	// TargetUtilization is the service's target_utilization: the share of
	// the local group's slots the waterfall plans to fill.
	TargetUtilization float64
}

// DefaultModel is the model of `lbsim autoscale-bench`.
func DefaultModel() Model {
	return Model{
		Step:              100 * time.Millisecond,
		ServiceTime:       500 * time.Millisecond,
		MaxConcurrency:    10,
		CPUPerRequest:     0.1,
		Target:            0.6,
		MaxInstances:      100,
		BufferRTT:         40 * time.Millisecond,
		ColdStarts:        []time.Duration{time.Second, 25 * time.Second},
		TargetUtilization: 0.95,
	}
}

// LoadPoint is a point of a piecewise-linear load: from At the rate
// moves linearly to the next point's RPS. Two points at the same At make
// a step.
type LoadPoint struct {
	At  float64 // seconds
	RPS float64
}

// Load is a named load: a piecewise-linear rate, or single
// requests at the times Singles lists.
type Load struct {
	Name   string
	Points []LoadPoint // ascending At; the last one's At is the end
	// Singles, when set, are the arrival times (seconds) of single
	// requests; Points then only give the end.
	Singles []float64
	// RiseAt is when the load starts to rise (time to capacity counts
	// from it).
	RiseAt float64
}

func (l Load) end() float64 { return l.Points[len(l.Points)-1].At }

// initial returns the instances ready at 0 for every autoscaler: those the
// rate at 0 needs at the model's target (none for single requests).
func (l Load) initial(m Model) int {
	if l.Singles != nil {
		return 0
	}
	return int(math.Ceil(l.rate(0)*m.ServiceTime.Seconds()/(float64(m.MaxConcurrency)*m.Target) - 1e-9))
}

// rate returns the load at t.
func (l Load) rate(t float64) float64 {
	p := l.Points
	for i := len(p) - 1; i >= 0; i-- {
		if t >= p[i].At {
			if i+1 < len(p) && p[i+1].At > p[i].At {
				f := (t - p[i].At) / (p[i+1].At - p[i].At)
				return p[i].RPS + f*(p[i+1].RPS-p[i].RPS)
			}
			return p[i].RPS
		}
	}
	return p[0].RPS
}

// arrivals returns the requests arriving in each step (fractional arrivals
// carried over): the same sequence for every autoscaler.
func (l Load) arrivals(m Model) []int64 {
	dt := m.Step.Seconds()
	n := int(math.Round(l.end() / dt))
	out := make([]int64, n)
	if l.Singles != nil {
		for _, t := range l.Singles {
			if k := int(math.Round(t/dt)) - 1; k >= 0 && k < n {
				out[k]++
			}
		}
		return out
	}
	var acc float64
	for k := range out {
		acc += l.rate(float64(k+1)*dt) * dt
		out[k] = int64(acc + 1e-9)
		acc -= float64(out[k])
	}
	return out
}

// Loads are the scorecard's loads, 20 requests/s at rest unless
// said otherwise: step to 200 (10×) at 60s, back at 360s; ramp 20 → 200
// over 60–240s, back down over 360–540s; spike to 400 for 30s at 60s;
// flash, the lbbench story (a crowd of 15× at once at 60s, holding two
// minutes, fading over two more); diurnal, a day compressed into 24
// minutes (one per hour: 20 at 04:00, 200 at 16:00, cosine in between);
// sporadic, single requests from zero at irregular times over 25 minutes.
func Loads() []Load {
	var day []LoadPoint
	for h := 0; h <= 24; h++ {
		day = append(day, LoadPoint{At: float64(h * 60), RPS: math.Round(20 + 90*(1-math.Cos(2*math.Pi*float64(h-4)/24)))})
	}
	return []Load{
		{Name: "step", RiseAt: 60, Points: []LoadPoint{{0, 20}, {60, 20}, {60, 200}, {360, 200}, {360, 20}, {600, 20}}},
		{Name: "ramp", RiseAt: 60, Points: []LoadPoint{{0, 20}, {60, 20}, {240, 200}, {360, 200}, {540, 20}, {600, 20}}},
		{Name: "spike", RiseAt: 60, Points: []LoadPoint{{0, 20}, {60, 20}, {60, 400}, {90, 400}, {90, 20}, {600, 20}}},
		{Name: "flash", RiseAt: 60, Points: []LoadPoint{{0, 20}, {60, 20}, {60, 300}, {180, 300}, {300, 20}, {600, 20}}},
		{Name: "diurnal", RiseAt: 240, Points: day},
		{Name: "sporadic", RiseAt: 5, Points: []LoadPoint{{0, 0}, {1500, 0}},
			Singles: []float64{5, 70, 75, 200, 420, 425, 430, 800, 1300}},
	}
}

// Row is one (load, cold start, autoscaler) of the scorecard.
type Row struct {
	Load       string  `json:"load"`
	ColdStartS float64 `json:"cold_start_s"`
	Autoscaler string  `json:"autoscaler"`
	// InstanceS is the integral of the local instances running (starting
	// ones included) over the run; OracleRatio its ratio to the oracle's.
	InstanceS   float64 `json:"instance_s"`
	OracleRatio float64 `json:"oracle_ratio"`
	// Peak is the most instances running at once; Overshoot Peak ÷ the
	// oracle's peak.
	Peak      int     `json:"peak"`
	Overshoot float64 `json:"overshoot"`
	// P50Ms and P99Ms are latency percentiles of the requests served, in
	// milliseconds: wait + ServiceTime, + BufferRTT for those the buffer
	// served.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// P99AllMs is the 99th percentile over every request that arrived, a
	// failed one counting as never answered (slower than any served):
	// the latency a client sees when a 429/503 is no answer. It equals
	// P99Ms for a row that fails nothing, is higher when some fail, and
	// is null when the percentile falls among the failed (about 1% or
	// more of the requests failed). An extra key: P99Ms, over the served
	// requests, is the column.
	P99AllMs *float64 `json:"p99_all_ms"`
	// Failed is the requests failed (429 for the rules, 503 for the KPA);
	// Waited those that found no free slot and queued.
	Failed int64 `json:"failed"`
	Waited int64 `json:"waited"`
	// Spilled is the requests the buffer region served (cloudrun+waterfall).
	Spilled int64 `json:"spilled"`
	// TimeToCapacityS is the seconds from the rise until the ready local
	// slots first hold the load's peak concurrency; -1 if never.
	TimeToCapacityS float64 `json:"time_to_capacity_s"`
	// PostPanicDip is the minimum over the 60s after the kpa row of the
	// same load and cold start leaves panic (its own exit for a KPA row) of
	// ready instances ÷ the oracle's ready instances; null when that KPA
	// never panicked.
	PostPanicDip *float64 `json:"post_panic_dip"`
	// ColdStartsPer1k is the instances started per 1,000 requests.
	ColdStartsPer1k float64 `json:"cold_starts_per_1k"`
	// BufferRTTMs and RequestMs are the model's constants the targets use.
	BufferRTTMs float64 `json:"buffer_rtt_ms"`
	RequestMs   float64 `json:"request_ms"`
	// Requests is every request that arrived (the same for every row of a
	// load).
	Requests int64 `json:"requests"`
}

// Autoscalers are the scorecard's rows per load and cold start, in order.
// The first five are the issue's; the rest are the evidence rows
// (autoscale_variants.go): the Kubernetes HPA, and the same Cloud Run rules
// and waterfall buffer with Knative's constants, against an oracle at
// Knative's target, and the rules alone with those constants.
var Autoscalers = []string{"oracle", "kpa", "kpa+activator", "cloudrun", "cloudrun+waterfall",
	"hpa", Oracle70, Waterfall70, Waterfall70Windows, WaterfallKnative, CloudrunKnative}

// Run returns every row: per load, per cold start, the
// autoscalers in the order of Autoscalers.
func Run(m Model) []Row {
	var out []Row
	for _, l := range Loads() {
		for _, cold := range m.ColdStarts {
			out = append(out, runAutoscaleCase(m, l, cold)...)
		}
	}
	return out
}

// caseRun is one simulated autoscaler of a case: its scaler, whether the
// waterfall buffers it, and the oracle its relative columns are against
// (index into the case's oracles).
type caseRun struct {
	name string
	sc   benchScaler
	buf  bool
	ref  int
}

// runAutoscaleCase runs every autoscaler on one load and cold start.
func runAutoscaleCase(m Model, l Load, cold time.Duration) []Row {
	arr := l.arrivals(m)
	m70 := m
	m70.Target = KnativeTarget
	oracles := []oracle{newOracle(m, l, arr, cold), newOracle(m70, l, arr, cold)}
	oracles[1].row.Autoscaler = Oracle70
	initial := l.initial(m)
	runs := []caseRun{
		{"kpa", newKPAScaler(m, cold, initial, false), false, 0},
		{"kpa+activator", newKPAScaler(m, cold, initial, true), false, 0},
		{"cloudrun", newCloudRunScaler(m, cold, initial), false, 0},
		{"cloudrun+waterfall", newCloudRunScaler(m, cold, initial), true, 0},
	}
	runs = append(runs, variantRuns(m, cold, initial)...)
	// rows, readies, exits and refs hold, per row in Autoscalers order,
	// the row, its ready instances per step, its first exit from panic
	// (-1: none or not a KPA) and its oracle.
	var (
		rows    []Row
		readies [][]int
		exits   []float64
		refs    []int
	)
	add := func(r Row, ready []int, exit float64, ref int) {
		rows, readies, exits, refs = append(rows, r), append(readies, ready), append(exits, exit), append(refs, ref)
	}
	add(oracles[0].row, oracles[0].need, -1, 0)
	for _, r := range runs {
		if r.name == Oracle70 {
			add(oracles[1].row, oracles[1].need, -1, 1)
			continue
		}
		row, ready := runAutoscaleLoad(m, l, arr, cold, initial, oracles[0].peakConc, r.name, r.sc, r.buf)
		exit := -1.0
		if k, ok := r.sc.(*kpaScaler); ok {
			exit = k.panicExit
		}
		add(row, ready, exit, r.ref)
	}
	kpaExit := exits[1]
	dt := m.Step.Seconds()
	for i := range rows {
		r, o := &rows[i], oracles[refs[i]]
		r.OracleRatio = round3(r.InstanceS / o.row.InstanceS)
		r.Overshoot = round3(float64(r.Peak) / float64(o.row.Peak))
		r.BufferRTTMs, r.RequestMs = float64(m.BufferRTT.Milliseconds()), float64(m.ServiceTime.Milliseconds())
		exit := kpaExit
		if exits[i] >= 0 {
			exit = exits[i]
		}
		if exit < 0 {
			continue
		}
		dip := math.Inf(1)
		for k := int(math.Round(exit / dt)); k < len(o.need) && float64(k)*dt < exit+60; k++ {
			if o.need[k] > 0 {
				dip = min(dip, float64(readies[i][k])/float64(o.need[k]))
			}
		}
		if !math.IsInf(dip, 1) {
			v := round3(dip)
			r.PostPanicDip = &v
		}
	}
	return rows
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
