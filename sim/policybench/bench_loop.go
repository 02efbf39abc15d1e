package policybench

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/sim"
)

// The closed loop in simulation (docs/design.md §3 rule 8, lb/capacity), run by
// the gfe's own code. After every step's traffic has been placed and
// queued, each site's gfe is told what its own requests to each instance
// ended in, through the counters the proxy feeds in the gfe
// (backend.Backend.Observe and ObserveLoad on the builder's persistent
// Backend of the instance). Its next Build takes them
// (routing.Builder: TakeSignals, a capacity.Sample per group, the group's
// capacity.Estimator) and plans every group at declared capacity ×
// target_utilization × the lowest factor it knows of. Each gfe's own
// factors (Builder.Factors) reach the others as routing.Peer.Capacity
// one gossip delay later, like its demand.
//
// What one site's requests to one instance in one step (a batch) end in,
// in the sim's backend model (see stepQueue):
//
//   - sent to an instance that is down in truth (the gfe's view lags):
//     OutcomeFailed, no answer;
//   - refused because the instance's queue was full (the share of its
//     arrivals it dropped in the step): OutcomeRejected, the test
//     backend's 429 with X-Spillway-Reject: queue-full;
//   - the rest: OutcomeOK, with the sim's mean latency of the batch (RTT
//     from the site to the instance's region, plus the wait behind the
//     backlog and the mean M/M/1 sojourn), the latency the gfe measures
//     to the answer's headers;
//   - with Model.LoadReports, one load report per batch that got
//     answers: the instance's mean utilization in the step
//     (reportedUtilization) and the rate it received from every site
//     (ORCA rps_fractional, as the test backend reports it).
//
// Only planned policies (waterfall, min_rtt) read the signals: the
// builder estimates capacity for them alone, so the baselines' gfes are
// told nothing.

// maxObservePerBatch bounds the Observe calls of one batch, so that a step
// stays fast however large the demand: a batch of more requests is counted
// as this many, its outcomes in proportion. The estimator judges fractions
// (refused, failed) and a mean latency, which the scaling keeps; only the
// gfe's own rate to a group, which Sample.Load uses when it exceeds the
// plan's load on the group, reads the count.
const maxObservePerBatch = 1000

// loop is one planned policy's closed-loop state in a run, owned by its
// runner.
type loop struct {
	// carry holds, per site and by slot, the fractions of requests not yet
	// counted (batchCarry).
	carry []map[int]*batchCarry
	// lag is the gossip delay in steps, rounded up: at step k a gfe hears
	// the factors the others had after step k − lag (at least one step
	// back, so that the gfes of one step do not hear each other in the
	// order they build). It is at most the timeline's steps: a longer
	// delay brings nothing during the run.
	lag int
	// factors is a ring of lag+1 steps: every site's Builder.Factors after
	// the step's builds, at index step % (lag+1).
	factors [][]map[string]map[string]float64
}

// newLoop returns the loop state of a run of tl with sites sites.
func newLoop(tl *sim.Timeline, sites int) *loop {
	lag := tl.Steps()
	if d := math.Ceil(tl.GossipDelayS/tl.StepS - 1e-9); d < float64(lag) {
		lag = max(1, int(d))
	}
	l := &loop{carry: make([]map[int]*batchCarry, sites), lag: lag, factors: make([][]map[string]map[string]float64, lag+1)}
	for si := range l.carry {
		l.carry[si] = map[int]*batchCarry{}
	}
	for i := range l.factors {
		l.factors[i] = make([]map[string]map[string]float64, sites)
	}
	return l
}

// heard returns the factors site si's gfe gossiped as its peers hear them
// at step k: those it had after step k − lag, or none (every group at 1)
// before the run.
func (l *loop) heard(k, si int) map[string]map[string]float64 {
	if k < l.lag {
		return nil
	}
	return l.factors[(k-l.lag)%len(l.factors)][si]
}

// record keeps every builder's own factors after step k.
func (l *loop) record(k int, builders []*routing.Builder) {
	row := l.factors[k%len(l.factors)]
	for si, b := range builders {
		row[si] = b.Factors()
	}
}

// batchCarry holds, by outcome, the requests of one site to one instance
// that were not counted yet: the sim's request counts are fluid and the
// counters whole, so each outcome's fraction carries over to the site's
// next batch to the instance, and the counts over a run are exact to one
// request per outcome.
type batchCarry struct{ ok, rejected, failed float64 }

// take adds a batch of ok, rejected and failed requests and returns the
// whole requests of each outcome to count now.
func (c *batchCarry) take(ok, rejected, failed float64) (nOK, nRejected, nFailed int) {
	whole := func(carry *float64, v float64) int {
		*carry += v
		n := math.Floor(*carry + 1e-9)
		*carry = max(0, *carry-n)
		return int(n)
	}
	return whole(&c.ok, ok), whole(&c.rejected, rejected), whole(&c.failed, failed)
}

// signal tells every site's gfe what its requests of step k ended in (see
// above), from st, the step's queue outcome.
func (r *runner) signal(k int, st *stepState) {
	l := r.gfes.loop
	if l == nil {
		return
	}
	t, dt := r.topo, r.tr.StepS
	groups := r.tr.Groups[k]
	for si, d := range r.tr.Demand[k] {
		if d == 0 {
			continue
		}
		b := r.gfes.builders[si]
		for _, sp := range r.splits[si] {
			reqs := d * sp.share * dt
			be := b.Backend(t.slotAddr[sp.slot])
			if !(reqs > 0) || be == nil {
				continue
			}
			g := t.slotGroup[sp.slot]
			var ok, rejected, failed float64
			if t.slotIndex[sp.slot] >= groups[g].Healthy {
				failed = reqs
			} else {
				ok = reqs * st.accept[sp.slot]
				rejected = reqs - ok
			}
			if reqs > maxObservePerBatch {
				scale := maxObservePerBatch / reqs
				ok, rejected, failed = ok*scale, rejected*scale, failed*scale
			}
			nOK, nRejected, nFailed := l.carryOf(si, sp.slot).take(ok, rejected, failed)
			latency := time.Duration((t.rtt[si][t.regionOf[g]] + st.wait[sp.slot] + st.sojourn[sp.slot]) * float64(time.Millisecond))
			for range nOK {
				be.Observe(backend.OutcomeOK, latency)
			}
			for range nRejected {
				be.Observe(backend.OutcomeRejected, 0)
			}
			for range nFailed {
				be.Observe(backend.OutcomeFailed, 0)
			}
			if r.tl.Model.LoadReports && nOK+nRejected > 0 {
				be.ObserveLoad(st.util[sp.slot])
				be.ObserveRate(r.lambda[sp.slot])
			}
		}
	}
}

// carryOf returns the carry of site si's batches to slot.
func (l *loop) carryOf(si, slot int) *batchCarry {
	c := l.carry[si][slot]
	if c == nil {
		c = &batchCarry{}
		l.carry[si][slot] = c
	}
	return c
}
