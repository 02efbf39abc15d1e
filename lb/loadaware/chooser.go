package loadaware

import (
	"math"
	"math/bits"
	"time"
)

// probingCost is the cost of an unknown Endpoint with a request in flight
// (its probe), plus its in-flight count: above any known Endpoint's cost
// (a latency in seconds times a request count), so that an instance being
// probed gets no second request while a known one has room, and probing
// ones still compare by in-flight count among themselves.
const probingCost = 1e12

// minLatency floors a known latency estimate (seconds), so that a zero
// sample does not make an Endpoint free whatever its in-flight count.
const minLatency = 1e-6

// Chooser picks an Endpoint of a group by the power of two choices over a
// load-aware cost (see Cost). A Chooser is immutable after New and safe for
// concurrent use; Acquire and Cost never block and do not allocate.
type Chooser struct {
	// Immutable after New.
	cfg        Config
	tau        float64 // cfg.Decay in seconds
	probeAfter int64   // nanoseconds
	slowStart  int64   // nanoseconds
	invAggr    float64 // 1/cfg.Aggression
}

// New returns a Chooser for cfg, or an error wrapping ErrInvalidConfig that
// names every bad field.
func New(cfg Config) (*Chooser, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Chooser{
		cfg:        cfg,
		tau:        cfg.Decay.Seconds(),
		probeAfter: int64(cfg.ProbeAfter),
		slowStart:  int64(cfg.SlowStart),
		invAggr:    1 / cfg.Aggression,
	}, nil
}

// Config returns the Chooser's configuration.
func (c *Chooser) Config() Config { return c.cfg }

// Observe records that a request to e answered after latency, the answer
// arriving at now: what the caller does when a request ends with an answer
// (not when it failed to connect: a failure has no latency, and outlier
// detection deals with it). It does not allocate.
func (c *Chooser) Observe(e *Endpoint, now time.Time, latency time.Duration) {
	e.observe(now.UnixNano(), max(latency.Seconds(), 0), c.tau, c.probeAfter)
}

// Cost returns what sending one more request to e costs at now; Acquire
// prefers the lower. With n the requests in flight on e (its Backend's
// InFlight):
//
//   - e is unknown when it has no latency sample younger than
//     Config.ProbeAfter. An unknown e costs 0 when n = 0 (probe it) and
//     1e12 + n otherwise (its probe is in flight: no second one).
//   - Otherwise the cost is L·(n+1)·U. L is the peak EWMA of e's
//     latency in seconds, faded by exp(−Δ/τ) over the Δ since its last
//     sample (so an instance not chosen becomes cheaper with time), at
//     least 1µs. U = 1 + β·ρ/(1−ρ), where ρ is e's last utilization
//     report faded the same way and capped at Config.MaxUtilization, β
//     Config.UtilizationWeight.
//
// Slow start is not in the cost but in the draws (see Acquire and Weight).
//
// Cost reads e with atomic loads and does not allocate.
func (c *Chooser) Cost(e *Endpoint, now time.Time) float64 {
	return c.cost(e, now.UnixNano())
}

func (c *Chooser) cost(e *Endpoint, t int64) float64 {
	n := float64(max(e.b.InFlight(), 0))
	last := e.last.Load()
	if last == 0 || t-last >= c.probeAfter {
		if n == 0 {
			return 0
		}
		return probingCost + n
	}
	l := math.Float64frombits(e.est.Load())
	if dt := t - last; dt > 0 {
		l *= math.Exp(-float64(dt) / 1e9 / c.tau)
	}
	cost := max(l, minLatency) * (n + 1)
	if beta := c.cfg.UtilizationWeight; beta > 0 {
		if at := e.utilAt.Load(); at != 0 {
			rho := math.Float64frombits(e.util.Load())
			if dt := t - at; dt > 0 {
				rho *= math.Exp(-float64(dt) / 1e9 / c.tau)
			}
			rho = min(rho, c.cfg.MaxUtilization)
			cost *= 1 + beta*rho/(1-rho)
		}
	}
	return cost
}

// weight returns e's slow-start weight at t: in (0, 1], 1 outside its
// window.
func (c *Chooser) weight(e *Endpoint, t int64) float64 {
	start := e.start.Load()
	if c.slowStart == 0 || start == 0 {
		return 1
	}
	dt := t - start
	if dt >= c.slowStart {
		return 1
	}
	f := float64(max(dt, 0)) / float64(c.slowStart)
	if c.invAggr != 1 {
		f = math.Pow(f, c.invAggr)
	}
	return max(c.cfg.MinWeight, f)
}

// Weight returns e's slow-start weight at now: max(MinWeight,
// (t/SlowStart)^(1/Aggression)) t into its window, 1 outside it (or when
// slow start is off). Acquire keeps a drawn Endpoint with this probability
// and draws again otherwise.
func (c *Chooser) Weight(e *Endpoint, now time.Time) float64 {
	return c.weight(e, now.UnixNano())
}

// Acquire chooses an Endpoint of es, takes one concurrency slot of its
// Backend (Backend.TryAcquire) and returns its index and true; -1 and false
// when every Backend of es is full, or es is empty. It draws two distinct
// Endpoints from rnd, the high 32 bits choosing the first and the low 32
// bits the second (as lb/backend's Policy.Acquire draws them), and takes
// the one of lower Cost at now (ties: the first draw), else the other if
// the cheaper is full, else the first Endpoint after the first draw that
// is not full.
//
// Slow start thins the draws: a drawn Endpoint of slow-start Weight w < 1
// is kept with probability w, else replaced by a fresh draw (at most
// maxRedraws times, the last draw being kept), the bits coming from a
// SplitMix64 stream seeded with rnd. An instance in its window is thus a
// candidate about w times as often as an established one, so that its
// share ramps up with w whatever the load, while the comparison between
// the two candidates stays one of load alone; when every Endpoint is in
// the same window, the draws stay uniform. rnd is a uniformly random uint64; the same rnd, now and
// state give the same choice. The caller must Release the Backend when the
// request ends, and should Observe the answer. Acquire is safe for
// concurrent use, never blocks and does not allocate.
func (c *Chooser) Acquire(es []*Endpoint, now time.Time, rnd uint64) (int, bool) {
	return c.acquire(es, now.UnixNano(), rnd, false)
}

// AcquireHard is Acquire under the Backends' configured and ACT limits
// only, ignoring their soft limits (Backend.TryAcquireHard): for a request
// that every soft limit turned away, as lb/waterfall's Picker retries.
func (c *Chooser) AcquireHard(es []*Endpoint, now time.Time, rnd uint64) (int, bool) {
	return c.acquire(es, now.UnixNano(), rnd, true)
}

func (c *Chooser) acquire(es []*Endpoint, t int64, rnd uint64, hard bool) (int, bool) {
	try := func(i int) bool {
		if hard {
			return es[i].b.TryAcquireHard()
		}
		return es[i].b.TryAcquire()
	}
	n := len(es)
	switch n {
	case 0:
		return -1, false
	case 1:
		if try(0) {
			return 0, true
		}
		return -1, false
	}
	s := rnd // the SplitMix64 state of the redraws
	i := reduce(rnd&^math.MaxUint32, n)
	for k := 0; k < maxRedraws && c.reject(es[i], t, &s); k++ {
		i = reduce(splitmix(&s), n)
	}
	j := reduce(rnd<<32, n-1)
	for k := 0; k < maxRedraws && c.reject(es[other(j, i)], t, &s); k++ {
		j = reduce(splitmix(&s), n-1)
	}
	j = other(j, i)
	win, lose := i, j
	if c.cost(es[j], t) < c.cost(es[i], t) {
		win, lose = j, i
	}
	if try(win) {
		return win, true
	}
	if try(lose) {
		return lose, true
	}
	for k := range n {
		if x := (i + k) % n; x != win && x != lose && try(x) {
			return x, true
		}
	}
	return -1, false
}

// maxRedraws bounds the redraws of one candidate, so that a pick does a
// bounded amount of work even when every Endpoint is in its window.
const maxRedraws = 4

// reject reports whether the drawn e, in its slow-start window, is
// turned down: with probability 1 − Weight(e), from one value of the
// stream s. Established Endpoints are never turned down and use no bits.
func (c *Chooser) reject(e *Endpoint, t int64, s *uint64) bool {
	w := c.weight(e, t)
	if w >= 1 {
		return false
	}
	return float64(splitmix(s)>>11)*0x1p-53 >= w
}

// other maps j in [0, n−1) to the n−1 indexes of [0, n) other than i.
func other(j, i int) int {
	if j >= i {
		return j + 1
	}
	return j
}

// splitmix advances the SplitMix64 state s and returns its next value.
func splitmix(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	x := *s
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// reduce maps a uniform 64-bit value to [0, n) (Lemire's multiply-shift).
func reduce(x uint64, n int) int {
	hi, _ := bits.Mul64(x, uint64(n))
	return int(hi)
}
