// Package ewma holds exponentially weighted moving averages: a smoothed value
// (for RTT samples) and a smoothed event rate (for demand and load). Both take
// the current time as an argument; nothing here reads a clock.
package ewma

import (
	"math"
	"sync/atomic"
	"time"
)

// Value is an exponentially weighted moving average of samples. The first
// sample sets the value; each later one moves it by Alpha of the difference.
// The zero value is ready to use with Alpha 0, which means DefaultAlpha.
// Not safe for concurrent use.
type Value struct {
	// Alpha in (0,1] is the weight of a new sample. Higher follows changes
	// faster at the cost of more noise. Zero means DefaultAlpha.
	Alpha float64

	v   float64
	set bool
}

// DefaultAlpha is the weight of a new sample when Alpha is zero.
const DefaultAlpha = 0.3

// Update adds sample x and returns the new average.
func (e *Value) Update(x float64) float64 {
	a := e.Alpha
	if a <= 0 || a > 1 {
		a = DefaultAlpha
	}
	if !e.set {
		e.v, e.set = x, true
		return x
	}
	e.v += a * (x - e.v)
	return e.v
}

// Get returns the current average and whether any sample was seen.
func (e *Value) Get() (float64, bool) { return e.v, e.set }

// Rate turns events counted from any goroutine into a smoothed rate per
// second: RateFilter over the events counted between Samples. Add is safe
// for concurrent use and allocation-free; Sample must be called from one
// goroutine at a time. Rate must not be copied after first use.
type Rate struct {
	// Alpha, Tau and FastAttack configure the filter, as RateFilter's
	// fields of the same names.
	Alpha      float64
	Tau        time.Duration
	FastAttack bool

	// Accessed atomically.
	n atomic.Int64

	// Owned by the goroutine that calls Sample.
	last int64
	f    RateFilter
}

// Add counts n events.
func (r *Rate) Add(n int64) { r.n.Add(n) }

// Total returns the number of events counted so far.
func (r *Rate) Total() int64 { return r.n.Load() }

// Sample computes the rate of events since the previous Sample, folds it into
// the average and returns the smoothed rate in events per second, as
// RateFilter.Observe does with the events counted since the previous Sample.
// The first call only starts the window and returns 0. A non-increasing now
// leaves the average unchanged.
func (r *Rate) Sample(now time.Time) float64 {
	n := r.n.Load()
	r.f.Alpha, r.f.Tau, r.f.FastAttack = r.Alpha, r.Tau, r.FastAttack
	advances := r.f.lastAt.IsZero() || now.After(r.f.lastAt)
	v := r.f.Observe(now, float64(n-r.last))
	if advances {
		r.last = n
	}
	return v
}

// RateFilter is Rate's filter, for a caller that counts the events itself
// (a simulation, which has fractional counts): it turns counts of events
// observed over successive intervals into a smoothed rate per second. Not
// safe for concurrent use; the zero value follows every interval (Alpha 0
// means DefaultAlpha, see Alpha).
type RateFilter struct {
	// Alpha is the smoothing weight of each Observe (see Value.Alpha). It
	// is ignored when Tau is set.
	Alpha float64
	// Tau, when positive, is the time constant of the average: an Observe
	// dt after the previous one has weight 1 − exp(−dt/Tau), so the
	// smoothing does not depend on how often Observe is called. A step in
	// the true rate is 63% followed after Tau and 95% after 3·Tau.
	Tau time.Duration
	// FastAttack, with Tau, lets a step up in the rate through at once: an
	// Observe whose count of events exceeds what the average predicts for
	// its interval by more than attackSigmas Poisson standard deviations
	// and by more than attackRatio of the prediction replaces the average
	// with the measured rate. Anything else (noise, and every decrease) is
	// smoothed with Tau. So a step up shows in full in the first Observe
	// after a whole interval of it (fast attack), while a step down decays
	// with Tau (slow decay), and random arrivals at a steady rate move the
	// average only by chance of about one interval in a thousand. Events
	// that make up for the previous interval's shortfall against the
	// average do not count toward the excess: a sender (or a machine)
	// that stalls for an interval and catches up in the next is not a rise
	// (on a saturated machine such catch-ups had the gfe estimate its
	// demand about 10% high). A step too small for one interval attacks
	// once a run of intervals above the level passes the same thresholds
	// summed (rise): a 13% step at 300/s, under 2σ an interval of 500 ms,
	// shows in full after 2 s instead of 63% of it.
	FastAttack bool

	lastAt time.Time
	avg    Value
	level  Level // used instead of avg when Tau is set
	// deficit is how many events the last interval had fewer than the
	// average predicted (FastAttack).
	deficit float64
	// rise sums the intervals of a rise too small to attack in one
	// (FastAttack).
	rise rise
}

// rise is FastAttack's summed rise: a step up too small to pass the
// thresholds in one interval (13% at a few hundred events per interval is
// under 3σ) passes them summed over a few consecutive intervals that all
// came in above the level the run started from, judged against that
// level. Without it such a step was only smoothed, 63% followed after
// Tau and 95% after 3·Tau; with it the level jumps to the run's mean rate
// once the run's excess is beyond the same thresholds (attackSigmas
// Poisson deviations of the run's predicted count, and attackRatio of
// it). A run lasts at most maxRiseIntervals intervals and ends at the
// first interval at or below its starting level, so that steady noise
// (where each interval is above with probability ½) rarely builds one.
type rise struct {
	base      float64 // the level, per second, when the run started
	count, dt float64 // the run's events and seconds
	n         int     // the run's intervals
}

// maxRiseIntervals bounds a summed rise: at the gfe's 500 ms plan
// interval, 4 s.
const maxRiseIntervals = 8

// minRiseIntervals is the shortest summed rise: two intervals summed pass
// the thresholds by chance about as often as one, and one is the
// one-interval attack already.
const minRiseIntervals = 3

// observe adds an interval of dt seconds with count events (less any
// catch-up) against level, the average before it, and returns the run's
// mean rate and true when the run passes the thresholds (the run then
// ends).
func (r *rise) observe(level, count, dt float64) (float64, bool) {
	if r.n == 0 {
		if !(count > level*dt) {
			return 0, false
		}
		r.base = level
	} else if !(count > r.base*dt) || r.n >= maxRiseIntervals {
		*r = rise{}
		return r.observe(level, count, dt)
	}
	r.count += count
	r.dt += dt
	r.n++
	want := r.base * r.dt
	if r.n >= minRiseIntervals && r.count > want+attackSigmas*math.Sqrt(want) && r.count > want*(1+attackRatio) {
		v := r.count / r.dt
		*r = rise{}
		return v, true
	}
	return 0, false
}

// Observe folds count, the events seen since the previous Observe, into
// the average and returns the smoothed rate in events per second. The first
// call only starts the window (count is ignored) and returns 0. A
// non-increasing now leaves the average unchanged and ignores count.
func (f *RateFilter) Observe(now time.Time, count float64) float64 {
	if f.lastAt.IsZero() {
		f.lastAt = now
		return 0
	}
	dt := now.Sub(f.lastAt).Seconds()
	if dt <= 0 {
		if f.Tau > 0 {
			return f.level.v
		}
		v, _ := f.avg.Get()
		return v
	}
	inst := count / dt
	f.lastAt = now
	if f.Tau > 0 {
		f.level.Tau = f.Tau
		if f.FastAttack && f.level.ok {
			want := f.level.v * dt // the count the average predicts
			// Events that only make up for the previous interval's
			// shortfall (a sender or a machine that stalled and caught
			// up) are not a rise.
			excess := count - f.deficit
			f.deficit = max(0, want-count)
			if excess > want+attackSigmas*math.Sqrt(want) && excess > want*(1+attackRatio) {
				f.deficit = 0
				f.rise = rise{}
				f.level.v, f.level.last = excess/dt, now
				return f.level.v
			}
			if v, ok := f.rise.observe(f.level.v, excess, dt); ok {
				f.deficit = 0
				f.level.v, f.level.last = v, now
				return v
			}
		}
		return f.level.Sample(now, inst)
	}
	f.avg.Alpha = f.Alpha
	return f.avg.Update(inst)
}

// The thresholds of Rate.FastAttack: a count must exceed its prediction
// by more than attackSigmas standard deviations of a Poisson count (about
// one steady sample in a thousand does) and by more than attackRatio of
// the prediction (so that a high rate's small relative noise does not
// count).
const (
	attackSigmas = 3
	attackRatio  = 0.1
)

// Level is an exponentially weighted moving average of a sampled level (a
// gauge, such as open connections) with time constant Tau: a sample taken
// dt after the previous one has weight 1 − exp(−dt/Tau), so the smoothing
// does not depend on how often it is sampled. The first sample sets it. The
// zero value follows every sample (Tau 0). Not safe for concurrent use.
type Level struct {
	// Tau is the time constant: a step in the level is 63% followed after
	// Tau and 95% after 3·Tau. Zero or negative follows every sample.
	Tau time.Duration
	// FastAttack lets a rise in the level through at once, as
	// RateFilter.FastAttack does a rise in a rate: a sample above the
	// average by more than attackSigmas square roots of the average and by
	// more than attackRatio of it replaces the average. The thresholds
	// suit a level that is a count of things in flight, such as requests
	// or connections open: at a steady arrival rate that count is Poisson
	// distributed (an M/G/∞ system), so its noise is the square root of
	// its mean. Falls and noise are smoothed with Tau.
	FastAttack bool

	v    float64
	last time.Time
	ok   bool
}

// Sample folds x, the level at now, into the average and returns it. A
// non-increasing now leaves the average unchanged.
func (l *Level) Sample(now time.Time, x float64) float64 {
	switch {
	case !l.ok || l.Tau <= 0:
		l.v, l.last, l.ok = x, now, true
	case l.FastAttack && now.After(l.last) && x > l.v+attackSigmas*math.Sqrt(max(0, l.v)) && x > l.v*(1+attackRatio):
		l.v, l.last = x, now
	case now.After(l.last):
		l.v += -math.Expm1(-now.Sub(l.last).Seconds()/l.Tau.Seconds()) * (x - l.v)
		l.last = now
	}
	return l.v
}
