package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/autoscale"
	"github.com/spillway-lb/spillway/lb/autoscale/kpa"
)

// This file is `lbsim autoscale-bench`: lb/autoscale's Cloud Run rules
// against Knative's KPA (lb/autoscale/kpa) on step, ramp and spike loads with
// a 20s cold start (the autoscaler's targets: docs/design.md §6,
// BENCHMARKS.md §7).
//
// The queueing model, in fixed steps of AutoscaleModel.Step (100ms):
//
//   - Requests arrive at the load's rate (fractional arrivals carried
//     over), join a FIFO queue, and each takes ServiceTime (0.5s) on one
//     of an instance's MaxConcurrency (10) slots. An instance serves
//     ColdStart (20s) after it is started and counts as running (billed)
//     from its start. A stopped instance takes no new request; requests
//     in flight on it finish.
//   - A request that finds no free slot waits. Its latency is its wait
//     plus ServiceTime; p99 is over all requests served.
//   - Cloud Run rules: once a second the autoscaler gets the second's
//     CPU (0.1 core per request in flight, 1 CPU per instance: CPU and
//     concurrency agree), mean concurrency (requests in flight on
//     instances; the waiting ones are the pending queue's) and arrivals. Every step the pending queue
//     asks Config.Pending about its last request (it waits longest) and
//     its first (it has the least time left), with the running slots,
//     the starting instances and ServiceTime as the request time, and
//     starts instances (Autoscaler.OnDemand) while Pending says so; at
//     max instances the oldest requests that waited MaxPendingWait fail
//     with 429.
//   - KPA: it observes concurrency (in flight plus buffered at the
//     activator) once a second and scales every 2s, and at once when a
//     request waits at zero; the activator fails requests after 300s
//     (revision timeout) or beyond 10000 buffered, with 503.
//   - Scale-downs stop instances not yet ready first, then the newest.

// AutoscaleModel is the simulation's fixed model.
type AutoscaleModel struct {
	Step           time.Duration // simulation step
	ServiceTime    time.Duration // per request
	MaxConcurrency int           // slots per instance
	CPUPerRequest  float64       // cores per request in flight
	ColdStart      time.Duration // start to ready
	MaxInstances   int
	Initial        int // instances at the start, ready
}

// DefaultAutoscaleModel is the model of `lbsim autoscale-bench`.
func DefaultAutoscaleModel() AutoscaleModel {
	return AutoscaleModel{
		Step:           100 * time.Millisecond,
		ServiceTime:    500 * time.Millisecond,
		MaxConcurrency: 10,
		CPUPerRequest:  0.1,
		ColdStart:      20 * time.Second,
		MaxInstances:   100,
		Initial:        2,
	}
}

// LoadPoint is a point of a piecewise-linear load: from At the rate
// moves linearly to the next point's RPS. Two points at the same At make
// a step.
type LoadPoint struct {
	At  float64 // seconds
	RPS float64
}

// AutoscaleLoad is a named load.
type AutoscaleLoad struct {
	Name   string
	Points []LoadPoint // ascending At; the last one's At is the end
	// RiseAt is when the load starts to rise (time to capacity counts
	// from it).
	RiseAt float64
}

// rate returns the load at t.
func (l AutoscaleLoad) rate(t float64) float64 {
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

func (l AutoscaleLoad) peak() float64 {
	m := 0.0
	for _, p := range l.Points {
		m = max(m, p.RPS)
	}
	return m
}

// AutoscaleLoads are the bench's loads: 20 requests/s, then
// a step to 200 at 60s (back to 20 at 360s), a ramp from 20 to 200 over
// 60–240s (back down over 360–540s), or a 30-second spike to 400 at 60s;
// 600s each.
func AutoscaleLoads() []AutoscaleLoad {
	return []AutoscaleLoad{
		{Name: "step", RiseAt: 60, Points: []LoadPoint{{0, 20}, {60, 20}, {60, 200}, {360, 200}, {360, 20}, {600, 20}}},
		{Name: "ramp", RiseAt: 60, Points: []LoadPoint{{0, 20}, {60, 20}, {240, 200}, {360, 200}, {540, 20}, {600, 20}}},
		{Name: "spike", RiseAt: 60, Points: []LoadPoint{{0, 20}, {60, 20}, {60, 400}, {90, 400}, {90, 20}, {600, 20}}},
	}
}

// AutoscaleResult is one autoscaler's figures on one load.
type AutoscaleResult struct {
	Load       string `json:"load"`
	Autoscaler string `json:"autoscaler"`
	// InstanceSeconds is the integral of instances running (starting
	// ones included) over the run.
	InstanceSeconds float64 `json:"instance_seconds"`
	// PeakInstances is the most instances running at once; Needed the
	// instances the peak load needs at this autoscaler's own target
	// (ceil(peak concurrency / (MaxConcurrency · target))); Overshoot
	// their difference.
	PeakInstances int `json:"peak_instances"`
	Needed        int `json:"needed"`
	Overshoot     int `json:"overshoot"`
	// TimeToCapacityS is the seconds from the rise until the ready
	// instances' slots first hold the peak load's concurrency; -1 if never.
	TimeToCapacityS float64 `json:"time_to_capacity_s"`
	// UnderCapacityS is the seconds after the rise during which the ready
	// instances' slots held less than the load's concurrency
	// (rate × ServiceTime) at that moment.
	UnderCapacityS float64 `json:"under_capacity_s"`
	// Requests, Waited and Rejected count requests: all that arrived,
	// those that found no free slot, those failed (429 for the Cloud Run
	// rules, 503 for the KPA's activator).
	Requests int64 `json:"requests"`
	Waited   int64 `json:"waited"`
	Rejected int64 `json:"rejected"`
	// P50Ms and P99Ms are latency percentiles (wait + service) of the
	// requests served, in milliseconds.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// fleet is the simulated instances: their ready times, in start order.
type fleet struct{ readyAt []time.Time }

func (f *fleet) start(now time.Time, n int, cold time.Duration) {
	for range n {
		f.readyAt = append(f.readyAt, now.Add(cold))
	}
}

// stop removes n instances, not-ready ones first, then the newest (both
// at the end: instances are started in order and become ready in order).
func (f *fleet) stop(n int) { f.readyAt = f.readyAt[:max(0, len(f.readyAt)-n)] }

func (f *fleet) ready(now time.Time) int {
	n := 0
	for _, t := range f.readyAt {
		if !t.After(now) {
			n++
		}
	}
	return n
}

// startingIn returns the time until each starting instance is ready.
func (f *fleet) startingIn(now time.Time) []time.Duration {
	var out []time.Duration
	for _, t := range f.readyAt {
		if t.After(now) {
			out = append(out, t.Sub(now))
		}
	}
	return out
}

// batch is requests that arrived together.
type batch struct {
	at time.Time
	n  int64
}

// benchScaler is one autoscaler under test.
type benchScaler interface {
	// second is called at the end of every simulated second with the
	// second's mean CPU cores, requests in flight and requests waiting,
	// and its arrivals.
	second(now time.Time, cpu, inFlight, waiting float64, arrivals int64, f *fleet)
	// step is called every step with the queue; it may start instances
	// and returns how many of the oldest waiting requests fail.
	step(now time.Time, queue []batch, f *fleet, runningSlots int) int64
}

// RunAutoscaleBench runs every autoscaler over every load: the Cloud Run
// rules at their 60% default ("cloudrun"), at KPA's 70% ("cloudrun@70%"),
// at 60% with the waiting requests counted as concurrency as Knative's
// activator counts them ("cloudrun+queue"), and the KPA ("kpa").
func RunAutoscaleBench(m AutoscaleModel) []AutoscaleResult {
	var out []AutoscaleResult
	for _, l := range AutoscaleLoads() {
		out = append(out,
			runAutoscaleLoad(m, l, "cloudrun", 0.6, newCloudRunScaler(m, 0.6, false)),
			runAutoscaleLoad(m, l, "cloudrun@70%", 0.7, newCloudRunScaler(m, 0.7, false)),
			runAutoscaleLoad(m, l, "cloudrun+queue", 0.6, newCloudRunScaler(m, 0.6, true)),
			runAutoscaleLoad(m, l, "kpa", 0.7, newKPAScaler(m)))
	}
	return out
}

// cloudRunScaler drives lb/autoscale.
type cloudRunScaler struct {
	m         AutoscaleModel
	cfg       autoscale.Config
	a         *autoscale.Autoscaler
	withQueue bool // waiting requests count as concurrency
}

func newCloudRunScaler(m AutoscaleModel, target float64, withQueue bool) *cloudRunScaler {
	a := config.DefaultAutoscaling()
	a.MaxInstances, a.InitialInstances = m.MaxInstances, m.Initial
	a.MaxConcurrencyPerInstance, a.ColdStart = m.MaxConcurrency, m.ColdStart
	a.CPUTarget, a.ConcurrencyTarget = target, target
	cfg := a.Rules()
	return &cloudRunScaler{m: m, cfg: cfg, a: autoscale.New(cfg, m.Initial, time.Unix(0, 0).UTC()), withQueue: withQueue}
}

func (s *cloudRunScaler) second(now time.Time, cpu, inFlight, waiting float64, arrivals int64, f *fleet) {
	conc := inFlight
	if s.withQueue {
		conc += waiting
	}
	d := s.a.Tick(now, autoscale.Sample{CPUCores: cpu, Concurrency: conc, Requests: arrivals})
	f.start(now, d.Start, s.m.ColdStart)
	f.stop(d.Stopped)
}

func (s *cloudRunScaler) step(now time.Time, queue []batch, f *fleet, runningSlots int) int64 {
	if len(queue) == 0 {
		return 0
	}
	var rejected int64
	// 429s: at max instances, the oldest requests that waited the most.
	for len(queue) > 0 {
		d := s.cfg.Pending(autoscale.PendingRequest{Waited: now.Sub(queue[0].at), Running: len(f.readyAt)})
		if d.Action != autoscale.Reject {
			break
		}
		rejected += queue[0].n
		queue = queue[1:]
	}
	var waiting int64
	for _, b := range queue {
		waiting += b.n
	}
	if waiting == 0 {
		return rejected
	}
	// A later request waits longer, an older one has less time left: if
	// neither the last nor the first needs an instance started, none does.
	starting := f.startingIn(now)
	for _, r := range []struct {
		at    time.Time
		ahead int64
	}{{queue[len(queue)-1].at, waiting - 1}, {queue[0].at, 0}} {
		for {
			d := s.cfg.Pending(autoscale.PendingRequest{
				Waited: now.Sub(r.at), Ahead: int(r.ahead), Running: len(f.readyAt),
				ReadySlots: runningSlots, StartingReadyIn: starting, RequestTime: s.m.ServiceTime,
			})
			if d.Action != autoscale.StartInstance {
				break
			}
			od := s.a.OnDemand(now, 1)
			if od.Start == 0 && od.Promoted == 0 {
				break
			}
			f.start(now, od.Start, s.m.ColdStart)
			if od.Start > 0 {
				starting = append(starting, s.m.ColdStart)
			}
		}
	}
	return rejected
}

// kpaScaler drives lb/autoscale/kpa with Knative's activator.
type kpaScaler struct {
	m     AutoscaleModel
	a     *kpa.Autoscaler
	ticks int
}

func newKPAScaler(m AutoscaleModel) *kpaScaler {
	cfg := kpa.DefaultConfig(m.MaxConcurrency, m.MaxInstances)
	return &kpaScaler{m: m, a: kpa.New(cfg, m.Initial, time.Unix(0, 0).UTC())}
}

// Activator bounds (knative/serving pkg/activator: breakerQueueDepth and
// the default revision timeout).
const (
	activatorQueueDepth = 10000
	activatorTimeout    = 300 * time.Second
)

func (s *kpaScaler) second(now time.Time, cpu, inFlight, waiting float64, arrivals int64, f *fleet) {
	s.a.Observe(now, inFlight+waiting)
	s.ticks++
	if s.ticks%2 == 0 {
		s.resize(now, s.a.Scale(now, f.ready(now), false).Desired, f)
	}
}

func (s *kpaScaler) resize(now time.Time, desired int, f *fleet) {
	if n := desired - len(f.readyAt); n > 0 {
		f.start(now, n, s.m.ColdStart)
	} else {
		f.stop(-n)
	}
}

func (s *kpaScaler) step(now time.Time, queue []batch, f *fleet, runningSlots int) int64 {
	if len(queue) == 0 {
		return 0
	}
	if len(f.readyAt) == 0 {
		s.resize(now, s.a.Scale(now, 0, true).Desired, f)
	}
	var rejected, total int64
	for _, b := range queue {
		total += b.n
	}
	for len(queue) > 0 && (now.Sub(queue[0].at) >= activatorTimeout || total > activatorQueueDepth) {
		drop := queue[0].n
		if now.Sub(queue[0].at) < activatorTimeout {
			drop = min(drop, total-activatorQueueDepth)
		}
		rejected += drop
		total -= drop
		if drop < queue[0].n {
			break // the caller drops whole batches; rare enough to round up
		}
		queue = queue[1:]
	}
	return rejected
}

// runAutoscaleLoad simulates one autoscaler on one load.
func runAutoscaleLoad(m AutoscaleModel, l AutoscaleLoad, name string, target float64, sc benchScaler) AutoscaleResult {
	start := time.Unix(0, 0).UTC()
	f := &fleet{}
	f.start(start.Add(-m.ColdStart), m.Initial, m.ColdStart)
	end := l.Points[len(l.Points)-1].At
	dt := m.Step.Seconds()
	svcSteps := int(math.Round(m.ServiceTime.Seconds() / dt))
	done := make([]int64, svcSteps+1) // requests finishing k steps from now, as a ring
	var (
		queue                      []batch
		inFlight, acc              float64
		res                        = AutoscaleResult{Load: l.Name, Autoscaler: name, TimeToCapacityS: -1}
		waits                      = map[int64]int64{} // wait in steps → requests
		cpuSum, flightSum, waitSum float64
		secArrivals                int64
		stepsPerSecond             = int(math.Round(1 / dt))
		peakConc                   = l.peak() * m.ServiceTime.Seconds()
	)
	res.Needed = int(math.Ceil(peakConc/(float64(m.MaxConcurrency)*target) - 1e-9))
	for k := 0; float64(k)*dt < end; k++ {
		now := start.Add(time.Duration(k+1) * m.Step)
		t := float64(k+1) * dt
		// Requests finishing now leave their slots.
		inFlight -= float64(done[k%len(done)])
		done[k%len(done)] = 0
		// Arrivals.
		acc += l.rate(t) * dt
		if n := int64(acc); n > 0 {
			acc -= float64(n)
			queue = append(queue, batch{at: now, n: n})
			res.Requests += n
			secArrivals += n
		}
		ready := f.ready(now)
		slots := ready * m.MaxConcurrency
		// Serve the queue in order.
		for len(queue) > 0 && inFlight < float64(slots) {
			take := min(queue[0].n, int64(float64(slots)-inFlight))
			w := now.Sub(queue[0].at)
			waitSteps := int64(math.Round(w.Seconds() / dt))
			waits[waitSteps] += take
			if waitSteps > 0 {
				res.Waited += take
			}
			inFlight += float64(take)
			done[(k+svcSteps)%len(done)] += take
			if queue[0].n -= take; queue[0].n == 0 {
				queue = queue[1:]
			}
		}
		// Requests still queued at their arrival step waited too (counted
		// when served); let the scaler act on the queue.
		if r := sc.step(now, queue, f, slots); r > 0 {
			res.Rejected += r
			for r > 0 && len(queue) > 0 {
				d := min(r, queue[0].n)
				r -= d
				if queue[0].n -= d; queue[0].n == 0 {
					queue = queue[1:]
				}
			}
		}
		var waiting int64
		for _, b := range queue {
			waiting += b.n
		}
		cpuSum += inFlight * m.CPUPerRequest
		flightSum += inFlight
		waitSum += float64(waiting)
		res.InstanceSeconds += float64(len(f.readyAt)) * dt
		res.PeakInstances = max(res.PeakInstances, len(f.readyAt))
		if t >= l.RiseAt && float64(f.ready(now)*m.MaxConcurrency) < l.rate(t)*m.ServiceTime.Seconds() {
			res.UnderCapacityS += dt
		}
		if res.TimeToCapacityS < 0 && t >= l.RiseAt && float64(f.ready(now)*m.MaxConcurrency) >= peakConc {
			res.TimeToCapacityS = math.Round((t-l.RiseAt)*10) / 10
		}
		if (k+1)%stepsPerSecond == 0 {
			n := float64(stepsPerSecond)
			sc.second(now, cpuSum/n, flightSum/n, waitSum/n, secArrivals, f)
			cpuSum, flightSum, waitSum, secArrivals = 0, 0, 0, 0
		}
	}
	res.Overshoot = res.PeakInstances - res.Needed
	res.P50Ms = math.Round(percentileSteps(waits, 0.50)*dt*1000) + float64(m.ServiceTime.Milliseconds())
	res.P99Ms = math.Round(percentileSteps(waits, 0.99)*dt*1000) + float64(m.ServiceTime.Milliseconds())
	res.InstanceSeconds = math.Round(res.InstanceSeconds)
	res.UnderCapacityS = math.Round(res.UnderCapacityS*10) / 10
	return res
}

// percentileSteps returns the q-quantile of a histogram of steps.
func percentileSteps(h map[int64]int64, q float64) float64 {
	keys := make([]int64, 0, len(h))
	var total int64
	for k, n := range h {
		keys = append(keys, k)
		total += n
	}
	if total == 0 {
		return 0
	}
	slices.Sort(keys)
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for _, k := range keys {
		if seen += h[k]; seen >= rank {
			return float64(k)
		}
	}
	return float64(keys[len(keys)-1])
}

// WriteAutoscaleBench prints results as a table.
func WriteAutoscaleBench(w io.Writer, rs []AutoscaleResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tautoscaler\tinstance-s\tpeak\tneeded\tovershoot\tto capacity (s)\tunder capacity (s)\trequests\twaited\trejected\tp50 (ms)\tp99 (ms)\t")
	for _, r := range rs {
		ttc := "never"
		if r.TimeToCapacityS >= 0 {
			ttc = fmt.Sprintf("%.1f", r.TimeToCapacityS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%d\t%d\t%+d\t%s\t%.1f\t%d\t%d\t%d\t%.0f\t%.0f\t\n",
			r.Load, r.Autoscaler, r.InstanceSeconds, r.PeakInstances, r.Needed, r.Overshoot, ttc, r.UnderCapacityS,
			r.Requests, r.Waited, r.Rejected, r.P50Ms, r.P99Ms)
	}
	return tw.Flush()
}
