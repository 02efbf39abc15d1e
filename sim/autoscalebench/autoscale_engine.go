package autoscalebench

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/internal/quantile"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// fleet is the simulated local instances: their ready times, in start
// order, and how many were started after the initial ones.
type fleet struct {
	readyAt []time.Time
	starts  int
}

func (f *fleet) start(now time.Time, n int, cold time.Duration) {
	for range n {
		f.readyAt = append(f.readyAt, now.Add(cold))
	}
	f.starts += max(0, n)
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

// second is what a scaler learns at the end of every simulated second.
type second struct {
	CPU      float64 // mean cores in use locally
	InFlight float64 // mean requests in flight locally
	Waiting  float64 // mean requests queued
	Arrivals int64   // requests that arrived (at the site)
	// Requests is the requests per second sent to the local group (every
	// arrival, but with the waterfall only those it took), Spilled
	// the demand per second the plan sent past it (cloudrun+waterfall;
	// 0 when the group has no ready instance, as the gfe reports it).
	Requests, Spilled float64
}

// benchScaler is one autoscaler under test.
type benchScaler interface {
	// second is called at the end of every simulated second.
	second(now time.Time, s second, f *fleet)
	// step is called every step with the queue and the step's arrivals
	// (the newest arrived of the queue); it may start instances and
	// returns how many of the oldest waiting requests fail, and how many
	// of the step's arrivals.
	// arrivals is every request of the step, served at once or not.
	step(now time.Time, queue []batch, arrived, arrivals int64, f *fleet, readySlots int) (oldest, newest int64)
}

// runAutoscaleLoad simulates one autoscaler on one load, starting with
// initial ready instances; with buffer the waterfall routes the overflow to
// the second region. It returns the row (without the columns relative to
// the oracle) and the ready instances of every step.
func runAutoscaleLoad(m Model, l Load, arr []int64, cold time.Duration, initial int, peakConc float64, name string, sc benchScaler, buffer bool) (Row, []int) {
	start := time.Unix(0, 0).UTC()
	f := &fleet{}
	f.start(start.Add(-cold), initial, cold)
	f.starts = 0
	dt := m.Step.Seconds()
	svcSteps := int(math.Round(m.ServiceTime.Seconds() / dt))
	svcMs := m.ServiceTime.Milliseconds()
	done := make([]int64, svcSteps+1) // requests finishing k steps from now, as a ring
	var (
		queue          []batch
		inFlight       float64
		row            = Row{Load: l.Name, ColdStartS: cold.Seconds(), Autoscaler: name, TimeToCapacityS: -1}
		lat            = map[int64]int64{} // latency in ms → requests
		sum            second              // the current second's sums
		stepsPerSecond = int(math.Round(1 / dt))
		readySeries    = make([]int, len(arr))
		rt             waterfallRouter
		lastSecond     int64 // arrivals of the last whole second: the site's demand
	)
	for k, n := range arr {
		now := start.Add(time.Duration(k+1) * m.Step)
		t := float64(k+1) * dt
		inFlight -= float64(done[k%len(done)])
		done[k%len(done)] = 0
		row.Requests += n
		sum.Arrivals += n
		ready := f.ready(now)
		slots := ready * m.MaxConcurrency
		serve := func(take int64, waited time.Duration) {
			lat[int64(math.Round(waited.Seconds()/dt))*m.Step.Milliseconds()+svcMs] += take
			if waited > 0 {
				row.Waited += take
			}
			inFlight += float64(take)
			done[(k+svcSteps)%len(done)] += take
		}
		if buffer {
			local, spilled := rt.split(m, n, float64(lastSecond), ready, len(f.readyAt))
			take := min(local, max(0, int64(float64(slots)-inFlight)))
			serve(take, 0)
			sum.Requests += float64(take)
			if ready > 0 {
				sum.Spilled += spilled
			}
			if b := n - take; b > 0 {
				row.Spilled += b
				lat[svcMs+m.BufferRTT.Milliseconds()] += b
			}
		} else {
			sum.Requests += float64(n)
			if n > 0 {
				queue = append(queue, batch{at: now, n: n})
			}
			for len(queue) > 0 && inFlight < float64(slots) {
				take := min(queue[0].n, int64(float64(slots)-inFlight))
				serve(take, now.Sub(queue[0].at))
				if queue[0].n -= take; queue[0].n == 0 {
					queue = queue[1:]
				}
			}
			arrived := int64(0)
			if len(queue) > 0 && queue[len(queue)-1].at.Equal(now) {
				arrived = queue[len(queue)-1].n
			}
			oldest, newest := sc.step(now, queue, arrived, n, f, slots)
			row.Failed += oldest + newest
			queue = dropOldest(queue, oldest)
			queue = dropNewest(queue, newest)
		}
		var waiting int64
		for _, b := range queue {
			waiting += b.n
		}
		sum.CPU += inFlight * m.CPUPerRequest
		sum.InFlight += inFlight
		sum.Waiting += float64(waiting)
		row.InstanceS += float64(len(f.readyAt)) * dt
		row.Peak = max(row.Peak, len(f.readyAt))
		readyNow := f.ready(now)
		readySeries[k] = readyNow
		if row.TimeToCapacityS < 0 && t >= l.RiseAt && float64(readyNow*m.MaxConcurrency) >= peakConc {
			row.TimeToCapacityS = math.Round((t-l.RiseAt)*10) / 10
		}
		if (k+1)%stepsPerSecond == 0 {
			sps := float64(stepsPerSecond)
			lastSecond = sum.Arrivals
			sc.second(now, second{CPU: sum.CPU / sps, InFlight: sum.InFlight / sps, Waiting: sum.Waiting / sps,
				Arrivals: sum.Arrivals, Requests: sum.Requests, Spilled: sum.Spilled / sps}, f)
			sum = second{}
		}
	}
	ms := slices.Sorted(maps.Keys(lat))
	counts := make([]int64, len(ms))
	for i, v := range ms {
		counts[i] = lat[v]
	}
	row.P50Ms = float64(quantile.OfCounts(ms, counts, 0.50))
	row.P99Ms = float64(quantile.OfCounts(ms, counts, 0.99))
	row.P99AllMs = p99All(ms, counts, row.Failed)
	row.InstanceS = math.Round(row.InstanceS)
	if row.Requests > 0 {
		row.ColdStartsPer1k = round3(float64(f.starts) * 1000 / float64(row.Requests))
	}
	return row, readySeries
}

// p99All returns the 99th percentile of the served latencies ms (with
// their counts) and failed requests counted as slower than any, nil when
// it falls among the failed (Row.P99AllMs).
func p99All(ms, counts []int64, failed int64) *float64 {
	never := int64(math.MaxInt64)
	v := quantile.OfCounts(append(slices.Clone(ms), never), append(slices.Clone(counts), failed), 0.99)
	if v == never {
		return nil
	}
	f := float64(v)
	return &f
}

// dropOldest removes n requests from the front of the queue.
func dropOldest(q []batch, n int64) []batch {
	for n > 0 && len(q) > 0 {
		d := min(n, q[0].n)
		n -= d
		if q[0].n -= d; q[0].n == 0 {
			q = q[1:]
		}
	}
	return q
}

// dropNewest removes n requests from the back of the queue.
func dropNewest(q []batch, n int64) []batch {
	for n > 0 && len(q) > 0 {
		i := len(q) - 1
		d := min(n, q[i].n)
		n -= d
		if q[i].n -= d; q[i].n == 0 {
			q = q[:i]
		}
	}
	return q
}

// waterfallRouter is the gfe's routing for cloudrun+waterfall: a plan of
// lb/waterfall over the local region and the buffer, and the carry of
// fractional shares between steps.
type waterfallRouter struct{ acc float64 }

// split returns how many of the step's n arrivals the plan sends to the
// local group, and the demand per second it sends past it, for a site
// demand of demand requests/s and the local group's ready and running
// instances.
func (r *waterfallRouter) split(m Model, n int64, demand float64, ready, running int) (local int64, spilled float64) {
	perInstance := float64(m.MaxConcurrency) / m.ServiceTime.Seconds()
	w := waterfall.World{
		Regions: []waterfall.Region{
			{Name: "local", Groups: []waterfall.Group{{Name: "local", Instances: running, Healthy: ready,
				Capacity: float64(ready) * perInstance * m.TargetUtilization}}},
			{Name: "buffer", Groups: []waterfall.Group{{Name: "buffer", Instances: 1000, Healthy: 1000, Capacity: 1e6}}},
		},
		Sites: []waterfall.Site{{Name: "site", Demand: max(demand, 1e-6),
			RTT: map[string]float64{"local": 1, "buffer": 1 + float64(m.BufferRTT.Milliseconds())}}},
	}
	p, err := waterfall.Compute(w, waterfall.DefaultConfig())
	share := 0.0
	if err == nil {
		for _, fl := range p.Row("site") {
			if fl.Group == "local" {
				share = fl.Share
			}
		}
	}
	r.acc += float64(n) * share
	local = min(n, int64(r.acc+1e-9))
	r.acc -= float64(local)
	return local, demand * (1 - share)
}
