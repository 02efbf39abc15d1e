package capacity

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Signal names what shrank a group's capacity.
type Signal uint8

// The signals, in the order an overloaded Sample is judged by.
const (
	SignalNone          Signal = iota // no overload seen
	SignalRejections                  // backends refused requests for capacity
	SignalConnectErrors               // requests got no answer
	SignalLoadReport                  // backends reported utilization above the limit
	SignalInFlight                    // requests in flight at the concurrency limits
	SignalQueueing                    // latency above the group's baseline
	NumSignals                        // the number of signals
)

var signalNames = [NumSignals]string{"none", "rejections", "connect_errors", "load_report", "in_flight", "queueing"}

// String returns the signal's metric label and /status name.
func (s Signal) String() string {
	if s < NumSignals {
		return signalNames[s]
	}
	return fmt.Sprintf("Signal(%d)", uint8(s))
}

// Config tunes an Estimator. Start from DefaultConfig.
type Config struct {
	// MinRequests is how many requests a Sample must hold before it is
	// judged; fewer accumulate with the next interval's. Default 10.
	MinRequests int64
	// RejectFraction is the fraction of requests refused for capacity (or
	// left unanswered) above which a Sample is overloaded. Default 0.01.
	RejectFraction float64
	// UtilizationLimit is the mean reported utilization above which a
	// Sample is overloaded. Default 1 (a backend reporting more than it
	// can serve); a UTILIZATION-mode service uses its max_utilization.
	UtilizationLimit float64
	// InFlightLimit is the fraction of the group's concurrency limits in
	// flight at which a Sample is overloaded. Default 1.
	InFlightLimit float64
	// QueueDelay is how far the mean latency must rise above the group's
	// baseline to count as queueing. Default 40ms.
	QueueDelay time.Duration
	// BaselineWindow is how long the lowest mean latency of a sample
	// stays the group's baseline. Default 60s.
	BaselineWindow time.Duration
	// QueuePersist is how long latency must stay above the baseline, over
	// consecutive samples, to count as queueing. Default 400ms: a pause of
	// the gfe or its machine delays the answers of one short sample; a
	// queue persists.
	QueuePersist time.Duration
	// Decrease is the fraction of its load a shrinking group keeps, in
	// (0, 1). Default 0.95: the group drains its queue at a twentieth of
	// its load, or faster when the signal asks for more (deep queues,
	// high load reports, many refusals).
	Decrease float64
	// Hold is how long after a shrink the factor does not shrink again.
	// Default 1s.
	Hold time.Duration
	// RecoverDelay is how long the factor stays put after the last signal
	// before it grows. Default 2s.
	RecoverDelay time.Duration
	// RecoverRate is how much the factor grows per second while it
	// recovers. Default 0.1 (from 0.5 to 1 in 5 s).
	RecoverRate float64
	// MinFactor is the lowest factor, in (0, 1]. Default 0.1: a group keeps
	// some traffic, so that its recovery can be seen.
	MinFactor float64
	// ConfirmUtilization is, for a group whose instances send load
	// reports, the mean reported utilization below which its latency
	// (queueing) and requests in flight do not count as overload. A
	// backend's own report is its account of its load; latency and
	// requests in flight are inferences, and a busy network or a busy gfe
	// machine raises them as much as a queue does, while shrinking the
	// group would not help. Below 80% busy a backend queues little (an
	// M/M/1 server's mean wait is 4 service times at 0.8, well under
	// QueueDelay for services of a few ms), and one that queues reports
	// more (the test backend reports 1 plus its queue over its limit).
	// Default 0.8; 0 believes latency and in-flight whatever the reports
	// say. Groups without reports are judged by latency and in-flight
	// alone.
	ConfirmUtilization float64
	// MaxShrink is the largest fraction of its value the factor loses in
	// one shrink, in (0, 1]. Default 0.25. A gfe's idea of a group's load
	// can lag (other gfes' traffic reaches the plan by gossip), so one
	// sample is not trusted to cut deeper; a real collapse takes a few
	// Holds. A group that stopped answering is not bounded.
	MaxShrink float64
}

// DefaultConfig returns the defaults of every Config field.
func DefaultConfig() Config {
	return Config{
		MinRequests:      10,
		RejectFraction:   0.01,
		UtilizationLimit: 1,
		InFlightLimit:    1,
		QueueDelay:       40 * time.Millisecond,
		BaselineWindow:   time.Minute,
		QueuePersist:     400 * time.Millisecond,
		Decrease:         0.95,
		Hold:             time.Second,
		RecoverDelay:     2 * time.Second,
		RecoverRate:      0.1,
		MinFactor:        0.1,
		MaxShrink:        0.25,

		ConfirmUtilization: 0.8,
	}
}

// Validate reports every field out of range.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, field string, v any) {
		if !ok {
			errs = append(errs, fmt.Errorf("capacity: %s out of range: %v", field, v))
		}
	}
	check(c.MinRequests >= 1, "min_requests", c.MinRequests)
	check(c.RejectFraction > 0 && c.RejectFraction < 1, "reject_fraction", c.RejectFraction)
	check(c.UtilizationLimit > 0, "utilization_limit", c.UtilizationLimit)
	check(c.InFlightLimit > 0 && c.InFlightLimit <= 1, "in_flight_limit", c.InFlightLimit)
	check(c.QueueDelay > 0, "queue_delay", c.QueueDelay)
	check(c.BaselineWindow > 0, "baseline_window", c.BaselineWindow)
	check(c.QueuePersist >= 0, "queue_persist", c.QueuePersist)
	check(c.Decrease > 0 && c.Decrease < 1, "decrease", c.Decrease)
	check(c.Hold >= 0, "hold", c.Hold)
	check(c.RecoverDelay >= 0, "recover_delay", c.RecoverDelay)
	check(c.RecoverRate > 0, "recover_rate", c.RecoverRate)
	check(c.MinFactor > 0 && c.MinFactor <= 1, "min_factor", c.MinFactor)
	check(c.MaxShrink > 0 && c.MaxShrink <= 1, "max_shrink", c.MaxShrink)
	check(c.ConfirmUtilization >= 0, "confirm_utilization", c.ConfirmUtilization)
	return errors.Join(errs...)
}

// Sample is what one gfe's requests to one group ended in since the
// previous Sample, and what the group carried meanwhile.
type Sample struct {
	// Answered counts requests a backend answered, rejections included.
	Answered int64
	// Rejected counts the answers that refused the request for capacity.
	Rejected int64
	// Failed counts requests that got no answer (connect errors, resets,
	// timeouts).
	Failed int64
	// Latency is the sum of the time to the answer of the answered
	// requests that were not rejected.
	Latency time.Duration
	// Reports counts load reports, and Utilization is the sum of the
	// utilizations they reported.
	Reports     int64
	Utilization float64
	// InFlight and Limit are the requests this gfe had in flight to the
	// group's instances with a concurrency limit, and the sum of those
	// limits, when the sample was taken (Limit 0: no limits).
	InFlight, Limit int64
	// Outstanding is every request this gfe had in flight to the group
	// when the sample was taken: with no answers, a growing number tells a
	// group that stopped answering. Instances is the number of healthy
	// instances in the group.
	Outstanding int64
	Instances   int
	// Load is the larger of the group's load in the last plan and this
	// gfe's own rate to it, in the plan's demand unit; Capacity is the
	// capacity the plan gives the group at factor 1 (the declared capacity
	// of its healthy instances times the service's target utilization).
	Load, Capacity float64
}

// Add folds o into s: counts add up, the gauges (InFlight, Limit, Load and
// Capacity) are o's.
func (s *Sample) Add(o Sample) {
	s.Answered += o.Answered
	s.Rejected += o.Rejected
	s.Failed += o.Failed
	s.Latency += o.Latency
	s.Reports += o.Reports
	s.Utilization += o.Utilization
	s.InFlight, s.Limit, s.Outstanding, s.Instances, s.Load, s.Capacity = o.InFlight, o.Limit, o.Outstanding, o.Instances, o.Load, o.Capacity
}

// requests returns how many requests the sample holds.
func (s *Sample) requests() int64 { return s.Answered + s.Failed }

// Estimator is the effective capacity of one group as one gfe sees it. The
// zero value is not ready: use New. Not safe for concurrent use (the gfe's
// planner owns it).
type Estimator struct {
	cfg    Config
	factor float64
	// signal is the last overload seen, at lastSignal; lastShrink is the
	// time of the last shrink and last that of the last Update.
	signal                       Signal
	lastSignal, lastShrink, last time.Time
	// pending accumulates samples until one holds MinRequests.
	pending Sample
	// outstanding is Sample.Outstanding of the last judged sample;
	// silentSince the start of the run of samples with requests out, load
	// planned and no answer (zero: the last one had an answer).
	outstanding int64
	silentSince time.Time
	// lastOut and curOut are Sample.Outstanding of the previous and the
	// current Update, silentOut the value when the silence began: a
	// silent group must have sent requests (more out than then), so that
	// idle open streams are not silence.
	lastOut, curOut, silentOut int64
	// outAt is since when the requests out are known to have been out
	// with no request of the group ending (zero: one ended in the last
	// interval, or none is out): the age its oldest request out has at
	// least.
	outAt time.Time
	// judged is what the last judged sample showed, judgedAt when;
	// queuedFrom is the start of the run of samples whose latency is
	// above the baseline (zero: the last one was not).
	judged               Judgement
	judgedAt, queuedFrom time.Time
	// baseline holds the lowest mean latency per bucket of
	// BaselineWindow/baselineBuckets.
	baseline [baselineBuckets]bucket
}

// baselineBuckets is how many buckets BaselineWindow is kept in: the
// baseline forgets a minimum between BaselineWindow and
// BaselineWindow·(1 + 1/baselineBuckets) after it was seen.
const baselineBuckets = 12

// bucket is the lowest mean latency seen in one time slot.
type bucket struct {
	slot int64 // start of the slot in units of the bucket width; 0: empty
	min  time.Duration
}

// New returns an Estimator at factor 1. cfg must be valid (Validate).
func New(cfg Config) *Estimator {
	return &Estimator{cfg: cfg, factor: 1}
}

// SetConfig changes the estimator's configuration, keeping its state.
func (e *Estimator) SetConfig(cfg Config) { e.cfg = cfg }

// Factor returns the current factor, in [MinFactor, 1].
func (e *Estimator) Factor() float64 { return e.factor }

// Signal returns the last signal that shrank the factor or held it down
// (SignalNone once the factor is back at 1), and when it was seen.
func (e *Estimator) Signal() (Signal, time.Time) { return e.signal, e.lastSignal }

// Baseline returns the group's unqueued answer time at now: the lowest
// mean latency of a judged sample in the last BaselineWindow, and false
// when there is none.
func (e *Estimator) Baseline(now time.Time) (time.Duration, bool) { return e.baselineAt(now) }

// Update folds s, the sample of the interval ending at now, into the
// estimate and returns the new factor and the signal of s (SignalNone when s
// was not overloaded or not judged yet).
func (e *Estimator) Update(now time.Time, s Sample) (float64, Signal) {
	dt := 0.0
	if !e.last.IsZero() && now.After(e.last) {
		dt = now.Sub(e.last).Seconds()
	}
	switch {
	case s.requests() > 0 || s.Outstanding == 0:
		e.outAt = time.Time{}
	case !e.outAt.IsZero():
	case e.lastOut > 0 && !e.last.IsZero():
		e.outAt = e.last // out at the last Update, and none ended since
	default:
		e.outAt = now // sent since the last Update
	}
	e.last = now
	// Silence: requests out, load planned, and not one answer or failure.
	if s.requests() == 0 && s.Outstanding > 0 && s.Load > 0 {
		if e.silentSince.IsZero() {
			e.silentSince = now.Add(-time.Duration(dt * float64(time.Second)))
			e.silentOut = e.lastOut
		}
	} else {
		e.silentSince = time.Time{}
	}
	e.lastOut, e.curOut = s.Outstanding, s.Outstanding
	e.pending.Add(s)
	p := e.pending
	sig, keep := SignalNone, 1.0
	if p.requests() >= e.cfg.MinRequests || (p.Limit > 0 && p.InFlight >= p.Limit) || e.grew(&p) && !e.young(now, &p) || e.silent(now) {
		e.pending = Sample{}
		sig, keep = e.judge(now, &p)
	}
	if sig != SignalNone {
		e.signal, e.lastSignal = sig, now
		if now.Sub(e.lastShrink) >= e.cfg.Hold || e.lastShrink.IsZero() {
			load := p.Load
			if load <= 0 || p.Capacity <= 0 {
				load = e.factor * p.Capacity
			}
			if p.Capacity > 0 {
				f := load * keep / p.Capacity
				if keep > 0 {
					f = max(f, e.factor*(1-e.cfg.MaxShrink))
				}
				if f < e.factor {
					e.factor = max(f, e.cfg.MinFactor)
					e.lastShrink = now
				}
			}
		}
		return e.factor, sig
	}
	if e.factor < 1 {
		// Grow for the part of the interval after RecoverDelay.
		grow := min(dt, now.Sub(e.lastSignal.Add(e.cfg.RecoverDelay)).Seconds())
		if grow > 0 {
			e.factor = min(1, e.factor+e.cfg.RecoverRate*grow)
		}
	}
	if e.factor == 1 {
		e.signal = SignalNone
	}
	return e.factor, SignalNone
}

// Judgement is what one judged sample showed: the figures each signal
// reads, for logs and /status.
type Judgement struct {
	// At is when the sample was judged.
	At time.Time
	// Signal and Keep are the strongest signal and the fraction of its
	// load it would keep the group at (1 for none).
	Signal Signal
	Keep   float64
	// Requests in the sample; Rejected and Failed as fractions of them.
	Requests         int64
	Rejected, Failed float64
	// Utilization is the mean load report (0: none).
	Utilization float64
	// Mean is the mean latency of the answered requests and Baseline the
	// group's unqueued latency before the sample (0: none yet).
	Mean, Baseline time.Duration
}

// Last returns what the last judged sample showed.
func (e *Estimator) Last() Judgement { return e.judged }

// judge returns the signal of p, a sample with enough requests, and the
// fraction of its load the group should keep; it records p's mean latency
// in the baseline.
func (e *Estimator) judge(now time.Time, p *Sample) (Signal, float64) {
	n := float64(p.requests())
	keep := e.cfg.Decrease
	var mean time.Duration
	if ok := p.Answered - p.Rejected; ok > 0 {
		mean = p.Latency / time.Duration(ok)
	}
	base, hasBase := e.baselineAt(now)
	if mean > 0 {
		e.observe(now, mean)
	}
	stalled := e.stalled(now, p)
	// Every signal that applies proposes how much of its load the group
	// keeps; the strongest wins, and names the shrink (ties go to the
	// first in Signal order).
	sig, best := SignalNone, 1.0
	defer func() {
		j := Judgement{At: now, Signal: sig, Keep: best, Requests: p.requests(), Mean: mean}
		if n > 0 {
			j.Rejected, j.Failed = float64(p.Rejected)/n, float64(p.Failed)/n
		}
		if p.Reports > 0 {
			j.Utilization = p.Utilization / float64(p.Reports)
		}
		if hasBase {
			j.Baseline = base
		}
		e.judged = j
	}()
	propose := func(s Signal, k float64) {
		if k < best || sig == SignalNone {
			sig, best = s, k
		}
	}
	if n > 0 && float64(p.Rejected)/n > e.cfg.RejectFraction {
		propose(SignalRejections, keep*(1-float64(p.Rejected)/n))
	}
	if n > 0 && float64(p.Failed)/n > e.cfg.RejectFraction {
		propose(SignalConnectErrors, keep*(1-float64(p.Failed)/n))
	}
	if p.Reports > 0 && p.Utilization/float64(p.Reports) > e.cfg.UtilizationLimit {
		u := p.Utilization / float64(p.Reports)
		propose(SignalLoadReport, min(keep, e.cfg.UtilizationLimit/u))
	}
	// The instances' reports, when they send them, say whether a rise of
	// latency or requests in flight is theirs (ConfirmUtilization).
	unconfirmed := p.Reports > 0 && p.Utilization/float64(p.Reports) < e.cfg.ConfirmUtilization
	if !unconfirmed && p.Limit > 0 && float64(p.InFlight) >= e.cfg.InFlightLimit*float64(p.Limit) {
		propose(SignalInFlight, keep)
	}
	if stalled {
		propose(SignalInFlight, 0)
	}
	queued := !unconfirmed && hasBase && mean > 0 && mean-base > max(e.cfg.QueueDelay, base/4)
	switch {
	case !queued:
		e.queuedFrom = time.Time{}
	case e.queuedFrom.IsZero():
		e.queuedFrom = e.judgedAt // the start of this sample
	}
	if queued && now.Sub(e.queuedFrom) >= e.cfg.QueuePersist {
		// Requests wait about mean−base: sending the group that fraction
		// of a second less per second drains the queue in about a second
		// (Little's law), and Decrease at least.
		wait := (mean - base).Seconds()
		propose(SignalQueueing, min(keep, max(1-wait, 0.5)))
	}
	e.judgedAt = now
	return sig, best
}

// stalled reports whether p's group stopped answering: this gfe's
// requests to it in flight grew by stallGrowth or more since the last
// judged sample and not one of them got an answer or failed, and they
// cannot be answers still on their way (young); or it has been silent
// (requests out, load planned, no answer) for stallSilence. (Streams that
// stay open do not grow; new ones are answered when they open. A group
// that answers some of its requests is left to the other signals, health
// checks and outlier detection.) While the growth is young it keeps
// counting from the last judged sample, so that it is a stall as soon as
// the requests are old enough.
func (e *Estimator) stalled(now time.Time, p *Sample) bool {
	grew := e.grew(p)
	if grew && e.young(now, p) {
		return e.silent(now)
	}
	e.outstanding = p.Outstanding
	return grew || e.silent(now)
}

// grew reports whether p's outstanding requests grew by stallGrowth since
// the last judged sample with no request ending: the evidence of a group
// that stopped answering, unless they are young.
func (e *Estimator) grew(p *Sample) bool {
	return p.Outstanding-e.outstanding >= e.stallGrowth(p) && p.requests() == 0
}

// stallLate is how many of the group's answer times (its baseline) a
// request must be out without any request ending before the growth counts
// as a stall.
const stallLate = 2

// young reports whether p's requests out, none answered yet, may all be
// answers still on their way rather than a group that stopped answering:
// a slow group's first requests after idle are out for its answer time
// before the first comes back, and a sample shorter than that sees them
// out with no answer. With the group's answer time known (its baseline,
// from samples of the last BaselineWindow), they are young until the
// oldest has been out stallLate times it (the estimator knows how long at
// least: since the first Update that saw them out with none ending). With
// none known, they are young if they fit in the group's concurrency
// limits (Limit: each has a slot, so the group can be serving them all at
// once), and then only the silence (stallSilence) or reaching the limits
// tells a stall; a group without limits that never answered has nothing
// to tell by, and its growth counts at once.
func (e *Estimator) young(now time.Time, p *Sample) bool {
	if base, ok := e.baselineAt(now); ok {
		return !e.outAt.IsZero() && now.Sub(e.outAt) <= stallLate*base
	}
	return p.Limit > 0 && p.Outstanding < p.Limit
}

// stallSilence is how long a group with requests out and load planned may
// give no answer at all before it counts as stopped answering, however few
// requests this gfe has out to it (soft limits hold them to a few).
const stallSilence = time.Second

// silent reports whether the group has had requests out, load planned and
// no answer for stallSilence at now, and more requests out than when the
// silence began (requests went out and none came back).
func (e *Estimator) silent(now time.Time) bool {
	return !e.silentSince.IsZero() && now.Sub(e.silentSince) >= stallSilence && e.curOut > e.silentOut
}

// stallGrowth is how much a sample's outstanding requests must grow,
// without an answer, to tell a group that stopped answering: MinRequests,
// or two per instance if that is less (a gfe's soft limits may hold its
// requests to a stuck group to a few per instance).
func (e *Estimator) stallGrowth(p *Sample) int64 {
	return min(e.cfg.MinRequests, 2*int64(max(p.Instances, 1)))
}

// observe records a sample's mean latency at now in the baseline.
func (e *Estimator) observe(now time.Time, mean time.Duration) {
	width := e.bucketWidth()
	slot := now.UnixNano()/int64(width) + 1
	b := &e.baseline[slot%baselineBuckets]
	if b.slot != slot {
		*b = bucket{slot: slot, min: mean}
		return
	}
	b.min = min(b.min, mean)
}

// baselineAt returns the lowest mean latency seen in the buckets of the
// last BaselineWindow, and false when there is none.
func (e *Estimator) baselineAt(now time.Time) (time.Duration, bool) {
	width := e.bucketWidth()
	cur := now.UnixNano()/int64(width) + 1
	best, ok := time.Duration(math.MaxInt64), false
	for _, b := range e.baseline {
		if b.slot != 0 && cur-b.slot < baselineBuckets {
			best, ok = min(best, b.min), true
		}
	}
	return best, ok
}

func (e *Estimator) bucketWidth() time.Duration {
	return max(e.cfg.BaselineWindow/baselineBuckets, time.Millisecond)
}
