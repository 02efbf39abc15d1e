package backend

import "sync/atomic"

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

	// Pad to a 64-byte cache line so that picks on neighbouring Backends
	// from different cores do not contend.
	_ [32]byte
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

// Full reports whether b is at its concurrency limit. Health is not b's
// concern: unhealthy backends are left out of the slices callers pick from.
func (b *Backend) Full() bool {
	l := b.limit.Load()
	return l > 0 && b.inflight.Load() >= l
}

// TryAcquire takes one concurrency slot of b and reports whether it did;
// it never exceeds the limit, even under concurrent calls. A successful
// TryAcquire must be paired with one Release.
func (b *Backend) TryAcquire() bool {
	l := b.limit.Load()
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
