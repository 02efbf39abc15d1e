package backend

import (
	"sync/atomic"
	"time"
)

// Backend is one instance requests can be sent to, with its in-flight
// counter and its maximum concurrency. Its state outlives whatever picks
// from it: the caller keeps one *Backend per address (for instance in a map
// guarded by the goroutine that builds pickers) and hands the same pointer to
// every picker or pool it builds, so that in-flight counts carry over when a
// new snapshot replaces the old one. A Backend must not be copied after first
// use; all its methods are safe for concurrent use and never block.
type Backend struct {
	// Immutable after New.
	addr string

	// Accessed atomically.
	inflight atomic.Int64
	limit    atomic.Int64 // 0: unlimited
	soft     atomic.Int64 // 0: none
	act      atomic.Int64 // 0: none

	// Pad to a 64-byte cache line so that picks on neighbouring Backends
	// from different cores do not contend.
	_ [16]byte

	// signals are written as requests end, on a cache line of their own.
	signals signalCounters
}

// New returns a Backend for addr (host:port) that takes at most
// maxConcurrency requests at a time; maxConcurrency ≤ 0 means unlimited.
func New(addr string, maxConcurrency int64) *Backend {
	b := &Backend{addr: addr}
	b.SetMaxConcurrency(maxConcurrency)
	return b
}

// Addr returns the backend's address.
func (b *Backend) Addr() string { return b.addr }

// InFlight returns the number of requests that acquired a slot of b and have
// not released it yet.
func (b *Backend) InFlight() int64 { return b.inflight.Load() }

// MaxConcurrency returns b's concurrency limit, 0 when unlimited.
func (b *Backend) MaxConcurrency() int64 { return b.limit.Load() }

// SetMaxConcurrency changes b's concurrency limit (≤ 0: unlimited), as
// Adaptive Concurrency Tuning does. Requests already in flight are not
// affected; lowering the limit below InFlight only stops new acquisitions.
func (b *Backend) SetMaxConcurrency(n int64) { b.limit.Store(max(n, 0)) }

// SetSoftLimit sets a second concurrency limit (≤ 0: none) that the
// caller derives from what it measures rather than from configuration:
// the gfe's closed loop sets it so that requests beyond what an instance
// serves without queueing spill to the next group instead of waiting
// (docs/design.md §3 rule 8). Full and TryAcquire honour the lower of the two
// limits; MaxConcurrency reports the configured one only.
func (b *Backend) SetSoftLimit(n int64) { b.soft.Store(max(n, 0)) }

// SoftLimit returns b's soft limit, 0 when it has none.
func (b *Backend) SoftLimit() int64 { return b.soft.Load() }

// SetACTLimit sets b's adaptive concurrency limit (Adaptive Concurrency
// Tuning, lb/autoscale.ACT; ≤ 0: none): the requests the instance takes
// at once given the CPU it reports. Unlike the soft limit it is a limit
// of the instance, not a preference: TryAcquire and TryAcquireHard both
// honour it, with the configured one. Requests in flight are not
// affected.
func (b *Backend) SetACTLimit(n int64) { b.act.Store(max(n, 0)) }

// ACTLimit returns b's adaptive concurrency limit, 0 when it has none.
func (b *Backend) ACTLimit() int64 { return b.act.Load() }

// lower returns the lower of two limits where ≤ 0 means none.
func lower(a, b int64) int64 {
	if b > 0 && (a <= 0 || b < a) {
		return b
	}
	return a
}

// cap returns the lowest of b's positive limits, 0 when it has none.
func (b *Backend) cap() int64 {
	return lower(lower(b.limit.Load(), b.act.Load()), b.soft.Load())
}

// Full reports whether b is at its concurrency limit (the lowest of its
// configured, ACT and soft limits). Health is not b's concern: unhealthy
// backends are left out of the slices callers pick from.
func (b *Backend) Full() bool {
	l := b.cap()
	return l > 0 && b.inflight.Load() >= l
}

// TryAcquire takes one concurrency slot of b and reports whether it did;
// it never exceeds the limit, even under concurrent calls. A successful
// TryAcquire must be paired with one Release.
func (b *Backend) TryAcquire() bool {
	l := b.cap()
	if l <= 0 {
		b.inflight.Add(1)
		return true
	}
	for {
		n := b.inflight.Load()
		if n >= l {
			return false
		}
		if b.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// TryAcquireHard is TryAcquire under the configured and ACT limits only,
// ignoring the soft limit: for a request that every backend's soft limit
// turned away, which must still go somewhere.
func (b *Backend) TryAcquireHard() bool {
	l := lower(b.limit.Load(), b.act.Load())
	if l <= 0 {
		b.inflight.Add(1)
		return true
	}
	for {
		n := b.inflight.Load()
		if n >= l {
			return false
		}
		if b.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release returns a slot taken by TryAcquire or Policy.Acquire.
func (b *Backend) Release() { b.inflight.Add(-1) }

// Outcome is how a request to a backend ended, as its signals count it.
type Outcome uint8

// The outcomes of a request.
const (
	// OutcomeOK: the backend answered (any status but a capacity
	// rejection).
	OutcomeOK Outcome = iota
	// OutcomeRejected: the backend refused the request for capacity (429,
	// 503, gRPC UNAVAILABLE or RESOURCE_EXHAUSTED).
	OutcomeRejected
	// OutcomeFailed: no answer came (connect error, reset, timeout).
	OutcomeFailed
)

// Signals are what requests to a backend ended in over some time: the
// local signals of docs/design.md §3 rule 8, which lb/capacity turns into a
// group's effective capacity.
type Signals struct {
	// Answered counts answers, rejections included; Rejected the
	// rejections; Failed the requests without an answer.
	Answered, Rejected, Failed int64
	// Latency sums the time to the answer of the OutcomeOK requests.
	Latency time.Duration
	// Reports counts load reports; Utilization sums their utilizations.
	Reports     int64
	Utilization float64
	// Rates counts load reports that carried the backend's request rate,
	// and Rate sums those rates (requests/s).
	Rates int64
	Rate  float64
	// CPUReports counts load reports that carried the backend's CPU
	// utilization, and CPU sums those utilizations.
	CPUReports int64
	CPU        float64
}

// utilizationUnit is the fixed-point unit load reports (utilizations and
// rates) are summed in.
const utilizationUnit = 1e6

// signalCounters are a Backend's Signals since the last TakeSignals,
// padded to a cache line.
type signalCounters struct {
	answered, rejected, failed, latency, reports, utilization atomic.Int64
	rates, rate, cpuReports, cpu                              atomic.Int64
}

// Observe counts one request that ended in o after latency (the time to
// the answer; ignored unless o is OutcomeOK). It does not allocate and is
// safe for concurrent use.
func (b *Backend) Observe(o Outcome, latency time.Duration) {
	c := &b.signals
	switch o {
	case OutcomeOK:
		c.answered.Add(1)
		c.latency.Add(int64(latency))
	case OutcomeRejected:
		c.answered.Add(1)
		c.rejected.Add(1)
	case OutcomeFailed:
		c.failed.Add(1)
	}
}

// ObserveLoad counts one load report of utilization u (ORCA: 1 is fully
// used; negative or NaN values are ignored). It does not allocate and is
// safe for concurrent use.
func (b *Backend) ObserveLoad(u float64) {
	if !(u >= 0) {
		return
	}
	b.signals.reports.Add(1)
	b.signals.utilization.Add(int64(min(u, 1e6) * utilizationUnit))
}

// ObserveRate counts the request rate (requests/s) a load report said the
// backend receives from every client (ORCA rps_fractional; negative or
// NaN values are ignored). It does not allocate and is safe for
// concurrent use.
func (b *Backend) ObserveRate(rps float64) {
	if !(rps >= 0) {
		return
	}
	b.signals.rates.Add(1)
	b.signals.rate.Add(int64(min(rps, 1e9) * utilizationUnit))
}

// ObserveCPU counts one load report's CPU utilization u (ORCA
// cpu_utilization, 1 = every CPU of the instance busy; negative or NaN
// values are ignored): what Adaptive Concurrency Tuning reads. It does not
// allocate and is safe for concurrent use.
func (b *Backend) ObserveCPU(u float64) {
	if !(u >= 0) {
		return
	}
	b.signals.cpuReports.Add(1)
	b.signals.cpu.Add(int64(min(u, 1e6) * utilizationUnit))
}

// TakeSignals returns the signals counted since the previous call and
// starts counting anew. Requests that end during the call are counted in
// one call or the next, never lost; a sum may pair one call's latency with
// the next call's count when a request ends in between.
func (b *Backend) TakeSignals() Signals {
	c := &b.signals
	return Signals{
		Answered:    c.answered.Swap(0),
		Rejected:    c.rejected.Swap(0),
		Failed:      c.failed.Swap(0),
		Latency:     time.Duration(c.latency.Swap(0)),
		Reports:     c.reports.Swap(0),
		Utilization: float64(c.utilization.Swap(0)) / utilizationUnit,
		Rates:       c.rates.Swap(0),
		Rate:        float64(c.rate.Swap(0)) / utilizationUnit,
		CPUReports:  c.cpuReports.Swap(0),
		CPU:         float64(c.cpu.Swap(0)) / utilizationUnit,
	}
}
