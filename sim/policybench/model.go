package policybench

import (
	"math"
	"sort"
)

// The backend model of `lbsim bench`: each instance is a single queue with
// Poisson arrivals and a fixed service rate, advanced one step at a time.
// See Run for the whole model; the pieces are here.

// rhoMax caps the utilization used for the random (M/M/1) part of the
// queueing delay. Above it the queue is treated as saturated: the fluid
// backlog, which carries over between steps, takes over, and the random part
// stays at its value for rhoMax (a mean of 1/(μ·(1−rhoMax)) = 50 service
// times).
const rhoMax = 0.98

// queueStep is the outcome of one instance over one step.
type queueStep struct {
	// Backlog is the fluid backlog at the end of the step, in requests, in
	// [0, bound].
	Backlog float64
	// Dropped is the number of requests that arrived to a full queue and
	// failed.
	Dropped float64
	// WaitS is the mean deterministic wait of an accepted request: the
	// step's time-averaged backlog divided by the service rate, seconds.
	WaitS float64
	// SojournS is the mean of the exponential part of an accepted request's
	// time at the instance (random queueing plus service), seconds.
	SojournS float64
}

// stepQueue advances an instance by dt seconds. backlog is the fluid backlog
// carried from the previous step (requests), lambda the arrival rate and mu
// the service rate (requests/s), and bound the queue limit (requests).
//
// The model has two parts:
//
//   - Fluid backlog: x = backlog + (λ − μ)·dt. Requests beyond bound fail
//     (Dropped = max(0, x − bound)); the new backlog is x clamped to
//     [0, bound]. WaitS is the time average of the backlog over the step
//     (it moves linearly and stops at 0 or bound) divided by μ.
//   - Random queueing: an M/M/1 queue at ρ̂ = min(λ/μ, ρmax), whose time in
//     system is exponential with mean SojournS = 1/(μ·(1−ρ̂)) (service
//     included). ρmax = min(0.98, bound/(bound+1)), so that the mean number
//     in system, ρ̂/(1−ρ̂), never exceeds the bound. The random part causes
//     no failures.
//
// So an accepted request's time at the instance is WaitS plus an
// exponential of mean SojournS. With mu = 0 every arrival and the backlog
// fail. stepQueue is pure.
func stepQueue(backlog, lambda, mu, bound, dt float64) queueStep {
	if mu <= 0 {
		return queueStep{Dropped: backlog + lambda*dt}
	}
	r := lambda - mu
	x := backlog + r*dt
	out := queueStep{Backlog: min(max(x, 0), bound), Dropped: max(0, x-bound)}

	// Time average of the backlog path q(t) = clamp(backlog + r·t, 0, bound).
	var avg float64
	switch {
	case r == 0 || dt <= 0:
		avg = backlog
	case r > 0 && x > bound:
		tFull := (bound - backlog) / r
		avg = ((backlog+bound)/2*tFull + bound*(dt-tFull)) / dt
	case r < 0 && x < 0:
		tEmpty := backlog / -r
		avg = backlog / 2 * tEmpty / dt
	default:
		avg = (backlog + x) / 2
	}
	out.WaitS = avg / mu

	rho := min(lambda/mu, rhoMax, 1/(1+1/bound)) // bound/(bound+1), also for an infinite bound
	out.SojournS = 1 / (mu * (1 - rho))
	return out
}

// expPoints discretises the exponential distribution of mean 1 for the
// latency histogram: expPoints[j] carries probability expMass[j] and sits at
// the quantile of the middle of its probability interval. The intervals are
// finer in the tail and centred on 0.5 and 0.99, so that a single
// exponential's median and 99th percentile come out exact.
var expBounds = [...]float64{0, 0.1, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.9, 0.95, 0.975, 0.985, 0.995, 0.999, 1}

// expQuantiles returns the points and masses of the discretisation.
func expQuantiles() (points, masses [len(expBounds) - 1]float64) {
	for j := range points {
		lo, hi := expBounds[j], expBounds[j+1]
		mid := (lo + hi) / 2
		points[j] = -math.Log1p(-mid)
		masses[j] = hi - lo
	}
	return points, masses
}

// histBinMs is the width of a latency histogram bin, and histMaxMs the
// largest latency it resolves; slower requests land in the last bin.
const (
	histBinMs = 0.1
	histMaxMs = 60_000
)

// latencyHist is a weighted histogram of request latencies in histBinMs
// bins. It is owned by one policy's run.
type latencyHist struct {
	bins   []float64
	total  float64
	points [len(expBounds) - 1]float64
	masses [len(expBounds) - 1]float64
}

func newLatencyHist() *latencyHist {
	h := &latencyHist{bins: make([]float64, int(histMaxMs/histBinMs)+1)}
	h.points, h.masses = expQuantiles()
	return h
}

// addExp adds weight requests whose latency is shiftMs plus an exponential
// of mean meanMs.
func (h *latencyHist) addExp(weight, shiftMs, meanMs float64) {
	if weight <= 0 {
		return
	}
	last := len(h.bins) - 1
	for j, p := range h.points {
		b := int((shiftMs + meanMs*p) / histBinMs)
		if b > last || b < 0 {
			b = last
		}
		h.bins[b] += weight * h.masses[j]
	}
	h.total += weight
}

// quantiles returns, for each p of ps (in [0,1], in any order), the latency
// in ms below which a fraction p of the weight lies: the middle of the first
// bin where the cumulative weight reaches p times the histogram's weight.
// It returns zeros for an empty histogram.
func (h *latencyHist) quantiles(ps []float64) []float64 {
	out := make([]float64, len(ps))
	if h.total <= 0 {
		return out
	}
	// Walk the bins once, answering the probabilities in ascending order.
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ps[order[a]] < ps[order[b]] })
	// The masses add up to total only up to rounding: aim at the bins' own
	// sum, less a relative hair, so that p = 1 finds the last bin.
	var sum float64
	for _, w := range h.bins {
		sum += w
	}
	i := 0
	var cum float64
	for b, w := range h.bins {
		if w == 0 {
			continue
		}
		cum += w
		for i < len(order) && cum >= ps[order[i]]*sum*(1-1e-12) {
			out[order[i]] = (float64(b) + 0.5) * histBinMs
			i++
		}
		if i == len(order) {
			break
		}
	}
	for ; i < len(order); i++ {
		out[order[i]] = float64(len(h.bins)) * histBinMs
	}
	return out
}
