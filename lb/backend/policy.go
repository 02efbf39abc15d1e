package backend

import (
	"math"
	"strconv"
)

// Policy is how requests are spread over the backends of one group
// (docs/design.md §3 rule 3): the in-group choice of the waterfall Picker,
// made by Acquire.
type Policy uint8

const (
	// PolicyRoundRobin takes the group's backends in turn, skipping full
	// ones.
	PolicyRoundRobin Policy = iota
	// PolicyLeastRequest draws two distinct backends at random and takes the
	// one with fewer requests in flight (power of two choices), or the other
	// if that one is full, or else the first backend after them that is not.
	PolicyLeastRequest
)

// String returns "round_robin" or "least_request".
func (p Policy) String() string {
	switch p {
	case PolicyRoundRobin:
		return "round_robin"
	case PolicyLeastRequest:
		return "least_request"
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// Acquire chooses a backend of bs by p, takes one concurrency slot of it
// (Backend.TryAcquire) and returns its index and true; it returns -1 and
// false when every backend of bs is full, or bs is empty. Backends at their
// limit are skipped:
//
//   - PolicyRoundRobin (and any unknown Policy): rr.PickAvailable over bs,
//     that is the backend at rr's cursor or else the first after it that is
//     not full. rr is the group's cursor, shared by every caller that picks
//     from the group, and must not be nil; rnd is not used.
//   - PolicyLeastRequest: two distinct backends drawn from rnd, the high 32
//     bits choosing the first and the low 32 bits the second (as
//     LeastRequest.Pick draws them from two values); the one with fewer
//     requests in flight (ties: the first draw), else the other, else the
//     first backend after the first draw that is not full. rr is not used
//     and may be nil.
//
// rnd is a uniformly random uint64 (rand.Uint64() or a seeded source in
// tests): the same rnd, cursor and counters give the same choice. The caller
// must Release the backend when the request ends. Acquire is safe for
// concurrent use, never blocks and does not allocate.
func (p Policy) Acquire(bs []*Backend, rr *RoundRobin, rnd uint64) (int, bool) {
	return p.acquire(bs, rr, rnd, false)
}

// AcquireHard is Acquire under the backends' configured limits only,
// ignoring their soft limits (Backend.TryAcquireHard).
func (p Policy) AcquireHard(bs []*Backend, rr *RoundRobin, rnd uint64) (int, bool) {
	return p.acquire(bs, rr, rnd, true)
}

func (p Policy) acquire(bs []*Backend, rr *RoundRobin, rnd uint64, hard bool) (int, bool) {
	tryAcquire := func(i int) bool {
		if hard {
			return bs[i].TryAcquireHard()
		}
		return bs[i].TryAcquire()
	}
	n := len(bs)
	switch {
	case n == 0:
		return -1, false
	case p != PolicyLeastRequest:
		// rr.PickAvailable(n, tryAcquire), spelled out so that the scan and
		// tryAcquire are inlined here.
		return scan(n, rr.advance(n), tryAcquire)
	case n == 1:
		return scan(n, 0, tryAcquire)
	}
	// The high half of rnd, and the low half moved up: least reduces each
	// with a 64-bit multiply-shift, which on these values is the 32-bit
	// multiply-shift of the half.
	i, j, jLess := least(rnd&^math.MaxUint32, rnd<<32, n, func(i int) int64 { return bs[i].InFlight() })
	win, lose := i, j
	if jLess {
		win, lose = j, i
	}
	if tryAcquire(win) {
		return win, true
	}
	if tryAcquire(lose) {
		return lose, true
	}
	return scan(n, i, tryAcquire)
}
