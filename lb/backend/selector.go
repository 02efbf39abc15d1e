package backend

import (
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
)

// RoundRobin hands out the indexes 0, 1, …, n−1 in turn: the round_robin
// baseline of docs/design.md §4, and the cursor of PolicyRoundRobin inside a
// group (Policy.Acquire). It is safe for concurrent use (the cursor is an
// atomic counter, so concurrent callers each get the next index) and never
// blocks. The zero value starts at index 0; use NewRoundRobin to start
// elsewhere, so that gfes do not all send their first request to the same
// backend. A RoundRobin must not be copied after first use.
type RoundRobin struct {
	// Accessed atomically.
	next atomic.Uint64
}

// NewRoundRobin returns a RoundRobin whose first pick is start mod n.
func NewRoundRobin(start uint64) *RoundRobin {
	r := &RoundRobin{}
	r.next.Store(start)
	return r
}

// Pick returns the next index in [0, n) and true, or -1 and false when
// n ≤ 0. It does not allocate.
func (r *RoundRobin) Pick(n int) (int, bool) {
	if n <= 0 {
		return -1, false
	}
	return r.advance(n), true
}

// advance moves the cursor on by one and returns where it was, mod n > 0.
func (r *RoundRobin) advance(n int) int { return int((r.next.Add(1) - 1) % uint64(n)) }

// PickAvailable is Pick that skips the indexes for which available reports
// false, as Caddy's round_robin does: it tries at most n consecutive indexes
// starting at the cursor and returns -1 and false when none is available.
// The cursor advances by one per call whatever is skipped, so an unavailable
// backend's turn goes to its successor. available must not block; it is
// called from the calling goroutine only, on consecutive indexes until it
// returns true, so it may take what it reports (Policy.Acquire scans the
// same way with Backend.TryAcquire). PickAvailable does not allocate (if
// available does not).
func (r *RoundRobin) PickAvailable(n int, available func(i int) bool) (int, bool) {
	if n <= 0 {
		return -1, false
	}
	return scan(n, r.advance(n), available)
}

// scan returns the first of the n indexes start, start+1, …, n−1, 0, …,
// start−1 for which ok returns true, and true; -1 and false when there is
// none. It calls ok in that order and stops at the first true.
func scan(n, start int, ok func(i int) bool) (int, bool) {
	i := start
	for range n {
		if ok(i) {
			return i, true
		}
		if i++; i == n {
			i = 0
		}
	}
	return -1, false
}

// LeastRequest picks the less loaded of two distinct random candidates
// ("power of two choices", Mitzenmacher 2001; the algorithm of Envoy's
// LEAST_REQUEST policy with choice_count 2): the least_request baseline of
// docs/design.md §4 (PolicyLeastRequest draws its two candidates the same way).
// Two random choices avoid the herd behaviour of always picking the global
// minimum from stale counts, and need only two reads per pick. A
// LeastRequest is immutable; its safety for concurrent use is that
// of its rand function.
type LeastRequest struct {
	// Immutable after NewLeastRequest.
	rand func() uint64
}

// NewLeastRequest returns a LeastRequest drawing its choices from rand.
// A nil rand means math/rand/v2's Uint64, which is safe for concurrent use;
// tests pass a seeded source (a *rand.Rand is not safe for concurrent use,
// so guard or confine it).
func NewLeastRequest(rand func() uint64) *LeastRequest {
	if rand == nil {
		rand = randUint64
	}
	return &LeastRequest{rand: rand}
}

func randUint64() uint64 { return rand.Uint64() }

// Pick returns, out of two distinct candidates drawn uniformly at random
// from [0, n), the one with fewer requests in flight (ties go to the first
// draw), and true; 0 and true when n = 1; -1 and false when n ≤ 0.
//
// inflight(i) reports the requests in flight on candidate i, typically an
// atomic.Int64 the caller increments when a request to backend i starts and
// decrements when it ends; a stale value is fine. It must not block and is
// called twice, from the calling goroutine. Pick does not allocate (if
// inflight does not; a closure over a slice of counters does not).
func (p *LeastRequest) Pick(n int, inflight func(i int) int64) (int, bool) {
	switch {
	case n <= 0:
		return -1, false
	case n == 1:
		return 0, true
	}
	i, j, jLess := least(p.rand(), p.rand(), n, inflight)
	if jLess {
		return j, true
	}
	return i, true
}

// least is the power of two choices: it draws two distinct indexes of
// [0, n), n ≥ 2, i from the uniform 64-bit value x over the n indexes and j
// from y over the other n−1 (Lemire's multiply-shift range reduction), and
// reports whether j has fewer requests in flight than i (ties go to i, the
// first draw). It calls inflight(j), then inflight(i).
func least(x, y uint64, n int, inflight func(i int) int64) (i, j int, jLess bool) {
	i = reduce(x, n)
	j = reduce(y, n-1)
	if j >= i {
		j++ // j is uniform over the n−1 indexes other than i
	}
	return i, j, inflight(j) < inflight(i)
}

// reduce maps a uniform 64-bit value to [0, n) (Lemire's multiply-shift).
func reduce(x uint64, n int) int {
	hi, _ := bits.Mul64(x, uint64(n))
	return int(hi)
}
