package loadaware

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
)

// Endpoint is one instance as a Chooser sees it: its lb/backend.Backend
// (in-flight count and concurrency limits) and what the Chooser has learnt
// about it: the peak EWMA of its latency, its last utilization report and
// when its slow-start window began. Like the Backend, it outlives the
// snapshots that pick from it: the owner keeps one *Endpoint per address
// and hands the same pointer to every snapshot, so that what was learnt
// carries over. An Endpoint must not be copied after first use. Picks read
// it with atomic loads only; Chooser.Observe takes its mutex, once per
// finished request.
type Endpoint struct {
	// Immutable after NewEndpoint.
	b *backend.Backend

	// Written under mu, read atomically (a pick never locks): a pick that
	// races with Observe may pair the new estimate with the old time,
	// which misjudges the fading of one estimate for that one pick.
	mu   sync.Mutex
	est  atomic.Uint64 // float64 bits: the peak EWMA of latency, in seconds
	last atomic.Int64  // Unix nanoseconds of the latest sample; 0: none

	// Accessed atomically.
	util   atomic.Uint64 // float64 bits: the last utilization report
	utilAt atomic.Int64  // Unix nanoseconds of that report; 0: none
	start  atomic.Int64  // Unix nanoseconds the slow-start window began; 0: none
}

// NewEndpoint returns an Endpoint for b whose slow-start window begins at
// start; a zero start means b is established and does not slow-start (the
// owner's first view of a running fleet: when every instance is in the
// same window, slow start changes nothing anyway). It has no latency
// sample, so it is probed first (see Config.ProbeAfter).
func NewEndpoint(b *backend.Backend, start time.Time) *Endpoint {
	e := &Endpoint{b: b}
	if !start.IsZero() {
		e.start.Store(start.UnixNano())
	}
	return e
}

// Backend returns e's backend.
func (e *Endpoint) Backend() *backend.Backend { return e.b }

// Restart begins a new slow-start window at now and forgets e's latency
// estimate and utilization: what the owner calls when an instance comes
// back (healthy again, no longer ejected, restarted), as Envoy and HAProxy
// slow-start a host that returns.
func (e *Endpoint) Restart(now time.Time) {
	e.mu.Lock()
	e.last.Store(0)
	e.est.Store(0)
	e.mu.Unlock()
	e.utilAt.Store(0)
	e.start.Store(now.UnixNano())
}

// ObserveUtilization records an ORCA utilization report u (1 = fully
// used) that arrived at now; negative and NaN values are ignored. The
// report fades with Config.Decay until the next one. It does not allocate.
func (e *Endpoint) ObserveUtilization(now time.Time, u float64) {
	if !(u >= 0) {
		return
	}
	e.util.Store(math.Float64bits(min(u, 1e6)))
	e.utilAt.Store(now.UnixNano())
}

// observe folds one latency sample l (seconds) taken at t (Unix
// nanoseconds) into e's peak EWMA: a sample above the faded estimate
// replaces it; otherwise the estimate keeps exp(−Δ/τ) of itself and takes
// the rest from the sample, Δ being the time since the previous sample. An
// estimate older than probeAfter is forgotten: the sample replaces it.
func (e *Endpoint) observe(t int64, l, tau float64, probeAfter int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	last := e.last.Load()
	dt := t - last
	switch {
	case last == 0 || dt >= probeAfter:
		// Nothing to blend with.
	case dt <= 0:
		// Concurrent samples read the clock before taking mu: an older
		// one blends with weight 0 in time, but still raises a peak.
		l = max(l, math.Float64frombits(e.est.Load()))
	default:
		d := math.Exp(-float64(dt) / 1e9 / tau)
		if old := math.Float64frombits(e.est.Load()) * d; l < old {
			l = old + l*(1-d)
		}
	}
	e.est.Store(math.Float64bits(l))
	if t > last {
		e.last.Store(t)
	}
}
