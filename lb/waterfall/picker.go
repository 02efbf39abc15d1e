package waterfall

import (
	"math"
	"strconv"
	"sync/atomic"
)

// Backend is one instance a Picker can send requests to, with its in-flight
// counter and its maximum concurrency. Its state outlives Pickers: the
// caller keeps one *Backend per address (for instance in a map guarded by
// the goroutine that builds Pickers) and hands the same pointer to every
// Picker it builds, so that in-flight counts carry over when a new snapshot
// replaces the old one. A Backend must not be copied after first use; all
// its methods are safe for concurrent use.
type Backend struct {
	// Immutable after NewBackend.
	addr string

	// Accessed atomically.
	inflight atomic.Int64
	limit    atomic.Int64 // 0: unlimited

	// Pad to a 64-byte cache line so that picks on neighbouring Backends
	// from different cores do not contend.
	_ [32]byte
}

// NewBackend returns a Backend for addr (host:port) that takes at most
// maxConcurrency requests at a time; maxConcurrency ≤ 0 means unlimited.
func NewBackend(addr string, maxConcurrency int64) *Backend {
	b := &Backend{addr: addr}
	b.SetMaxConcurrency(maxConcurrency)
	return b
}

// Addr returns the backend's address.
func (b *Backend) Addr() string { return b.addr }

// InFlight returns the number of requests picked for b and not yet released.
func (b *Backend) InFlight() int64 { return b.inflight.Load() }

// MaxConcurrency returns b's concurrency limit, 0 when unlimited.
func (b *Backend) MaxConcurrency() int64 { return b.limit.Load() }

// SetMaxConcurrency changes b's concurrency limit (≤ 0: unlimited), as
// Adaptive Concurrency Tuning does. Requests already in flight are not
// affected; lowering the limit below InFlight only stops new picks.
func (b *Backend) SetMaxConcurrency(n int64) { b.limit.Store(max(n, 0)) }

// Full reports whether b is at its concurrency limit. Health is not b's
// concern: unhealthy backends are left out of the Picker instead.
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

// Release returns a slot taken by TryAcquire or Pick.
func (b *Backend) Release() { b.inflight.Add(-1) }

// Policy is how a Picker spreads requests over the backends of a group
// (rule 3).
type Policy uint8

const (
	// RoundRobin takes the group's backends in turn, skipping full ones.
	RoundRobin Policy = iota
	// LeastRequest draws two distinct backends at random and takes the one
	// with fewer requests in flight (power of two choices), or the other if
	// that one is full, or else the first backend after them that is not.
	LeastRequest
)

// String returns "round_robin" or "least_request".
func (p Policy) String() string {
	switch p {
	case RoundRobin:
		return "round_robin"
	case LeastRequest:
		return "least_request"
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// Choice is what Pick chose: a backend with one concurrency slot taken, and
// the plan cell it came from. The caller must call Done (once) when the
// request finishes.
type Choice struct {
	Backend *Backend
	Region  string
	Group   string
	// Reason is the Reason of the plan flow the group came from.
	Reason Reason
}

// Done releases the backend slot the Choice holds.
func (c Choice) Done() { c.Backend.Release() }

// Picker turns one site's plan row into backend choices. It is an immutable
// snapshot: NewPicker copies what it needs, and nothing in a Picker changes
// afterwards except its round-robin cursors and its Backends' counters, which
// are accessed atomically. Callers hold the current Picker in an
// atomic.Pointer[Picker], Load it once per request, and Store a new one when
// the plan, the health or the backend set changes. All methods are safe for
// concurrent use and never block.
type Picker struct {
	// Immutable after NewPicker.
	policy Policy
	// bound[i] is the exclusive upper end of the random values that choose
	// groups[i] (cumulative plan shares scaled to 2^64); the last is
	// MaxUint64, which also takes the value MaxUint64 itself.
	bound  []uint64
	groups []pickGroup
}

type pickGroup struct {
	// Immutable after NewPicker.
	region, group string
	reason        Reason
	backends      []*Backend

	// Accessed atomically, on a cache line of its own: the round-robin
	// cursor is written on every pick, the fields above only read.
	_      [64]byte
	cursor atomic.Uint32
	_      [60]byte
}

// NewPicker builds a Picker for row, a site's plan row (Plan.Row), whose
// group g may use backends[g]: the healthy backends of g only. Groups keep
// the row's order, which is the fallback order when a group is full, and
// are chosen with probability proportional to their Share. Groups without
// backends are left out and their share is spread over the others in
// proportion; if no group has a backend, or the row is empty, Pick returns
// ErrNoCapacity. NewPicker copies row and the backend slices (not the
// Backends).
func NewPicker(row []Flow, backends map[string][]*Backend, policy Policy) *Picker {
	p := &Picker{policy: policy}
	n := 0
	for _, f := range row {
		if len(backends[f.Group]) > 0 {
			n++
		}
	}
	p.groups = make([]pickGroup, n)
	p.bound = make([]uint64, n)
	weights := make([]float64, 0, n)
	var total float64
	for _, f := range row {
		bs := backends[f.Group]
		if len(bs) == 0 {
			continue
		}
		g := &p.groups[len(weights)]
		g.region, g.group, g.reason = f.Region, f.Group, f.Reason
		g.backends = append([]*Backend(nil), bs...)
		w := max(f.Share, 0)
		weights = append(weights, w)
		total += w
	}
	if total <= 0 || math.IsInf(total, 1) || total != total { // no usable shares: spread evenly
		for i := range weights {
			weights[i] = 1
		}
		total = float64(len(weights))
	}
	var cum float64
	for i, w := range weights {
		cum += w
		p.bound[i] = scale64(cum / total)
	}
	if n > 0 {
		p.bound[n-1] = math.MaxUint64
	}
	return p
}

// scale64 maps f in [0, 1] to [0, 2^64), saturating.
func scale64(f float64) uint64 {
	const two64 = 1 << 64
	if v := f * two64; v < two64 {
		return uint64(v)
	}
	return math.MaxUint64
}

// Pick chooses a backend for one request, given rnd, a uniformly random
// uint64 (callers pass rand.Uint64() or a seeded source in tests; the same
// rnd on the same state picks the same backend). It chooses a group with
// probability equal to its plan share, then a backend inside it by the
// Picker's policy, skipping backends at their concurrency limit; when the
// whole group is full it tries the row's other groups in plan order (nearest
// first). The returned Choice holds one slot of its Backend: call Done when
// the request ends. Pick returns ErrAllBusy when every backend is full and
// ErrNoCapacity when the Picker has no backend at all. Pick does not
// allocate.
func (p *Picker) Pick(rnd uint64) (Choice, error) {
	n := len(p.groups)
	if n == 0 {
		return Choice{}, ErrNoCapacity
	}
	// Binary search for the first bound above rnd.
	lo, hi := 0, n-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rnd < p.bound[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	// Inside the group, use bits independent of those that chose it.
	inner := mix64(rnd)
	if c, ok := p.pickIn(lo, inner); ok {
		return c, nil
	}
	for i := range n {
		if i == lo {
			continue
		}
		if c, ok := p.pickIn(i, inner); ok {
			return c, nil
		}
	}
	return Choice{}, ErrAllBusy
}

// pickIn tries to take a backend of group gi.
func (p *Picker) pickIn(gi int, rnd uint64) (Choice, bool) {
	g := &p.groups[gi]
	bs := g.backends
	n := uint32(len(bs))
	var i uint32 // where the scan for a free backend starts
	switch p.policy {
	case LeastRequest:
		if n == 1 {
			break
		}
		// Two distinct indexes from the two halves of rnd (Lemire's
		// multiply-shift range reduction).
		a := uint32((rnd >> 32) * uint64(n) >> 32)
		b := uint32((rnd & math.MaxUint32) * uint64(n-1) >> 32)
		if b >= a {
			b++
		}
		x, y := bs[a], bs[b]
		if y.InFlight() < x.InFlight() {
			x, y = y, x
		}
		if x.TryAcquire() {
			return g.choice(x), true
		}
		if y.TryAcquire() {
			return g.choice(y), true
		}
		i = a
	default:
		i = (g.cursor.Add(1) - 1) % n
	}
	for range n {
		if b := bs[i]; b.TryAcquire() {
			return g.choice(b), true
		}
		if i++; i == n {
			i = 0
		}
	}
	return Choice{}, false
}

func (g *pickGroup) choice(b *Backend) Choice {
	return Choice{Backend: b, Region: g.region, Group: g.group, Reason: g.reason}
}

// mix64 is the SplitMix64 finalizer: a bijection on uint64 whose output bits
// each depend on all input bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
