// Package backend holds what every Spillway policy needs to send a request
// to one backend of a set: the Backend with its in-flight counter and
// concurrency limit, round robin, least request, and the choice inside one
// group that the waterfall Picker makes (docs/design.md §3 rule 3, §4). Each is
// written once here; lb/waterfall's Picker and the gfe's baseline policies
// (lb/routing) import them.
//
// # Model
//
// A Backend is one instance, kept by its owner for as long as the instance is
// configured and handed to every snapshot (Picker, pool) built over it, so
// that its in-flight count carries over from one snapshot to the next.
// TryAcquire takes one of its MaxConcurrency slots and Release returns it.
// Health is not a Backend's concern: unhealthy backends are left out of the
// slices picked from.
//
// The pickers choose an index into a slice the caller owns:
//
//   - RoundRobin.Pick hands out 0, 1, …, n−1 in turn from one atomic cursor;
//     PickAvailable does the same, skipping indexes its callback rejects
//     (the round_robin baseline, Caddy's round_robin).
//   - LeastRequest.Pick draws two distinct indexes at random and returns
//     the one with fewer requests in flight, ties to the first draw ("power
//     of two choices", Mitzenmacher 2001; Envoy's LEAST_REQUEST with
//     choice_count 2: the least_request baseline).
//   - Policy.Acquire chooses a Backend of a group by PolicyRoundRobin or
//     PolicyLeastRequest and takes its slot in the same step, skipping
//     backends at their limit: round robin goes on from the cursor to the
//     next backend with room; least request takes the less loaded of its
//     two draws, else the other, else the first backend with room after the
//     first draw. Its round robin is RoundRobin.PickAvailable and its two
//     draws and their comparison are LeastRequest.Pick's.
//
// # Guarantees
//
//   - Limits: a Backend never has more than MaxConcurrency slots taken by
//     TryAcquire, even under concurrent calls (a compare-and-swap loop);
//     lowering the limit only stops new acquisitions
//     (TestBackendTryAcquireConcurrent).
//   - Acquire takes at most one slot, of a backend that had room, and fails
//     (-1, false) only when it found every backend of the group full
//     (FuzzAcquire, TestAcquireConcurrent).
//   - Round robin is exact: concurrent callers share one cursor and each
//     gets the next index, so k·n picks over n indexes give each exactly k
//     (TestRoundRobinConcurrent).
//   - Least request never picks a strict maximum of in-flight counts out of
//     n ≥ 2 (LeastRequest.Pick), and Acquire picks it only when the less
//     loaded of its two draws is full (TestLeastRequest, TestAcquire).
//   - Determinism: the picks depend only on their arguments, the cursor and
//     the counters; randomness comes in as a rand function (LeastRequest) or
//     a uint64 (Acquire), so tests seed it.
//   - Concurrency: every method is safe for concurrent use and never blocks
//     (a LeastRequest is as safe as its rand function). Backend and
//     RoundRobin hold atomics and must not be copied after first use.
//   - Allocation: TryAcquire, Release, Pick, PickAvailable, LeastRequest.Pick
//     and Acquire do not allocate (TestAcquireAllocs, the Alloc checks of the
//     selector tests, and the benchmarks' allocs/op).
//
// # Example
//
// A group of two backends that take two requests each, picked by round
// robin from a cursor at 0:
//
//	bs := []*backend.Backend{backend.New("10.0.0.1:80", 2), backend.New("10.0.0.2:80", 2)}
//	var rr backend.RoundRobin
//	i, ok := backend.PolicyRoundRobin.Acquire(bs, &rr, rand.Uint64())
//	if !ok {
//		// every backend is at its limit: answer 503
//	}
//	defer bs[i].Release()
//
// Four requests held in flight get 0, 1, 0, 1; both backends are then full
// and the fifth Acquire returns -1, false. When the first request ends
// (bs[0].Release()), the sixth starts at the cursor, 1, finds 10.0.0.2 full
// and takes 10.0.0.1. With PolicyLeastRequest and rnd = 0 the draws are 0
// and then 1; the one with fewer requests in flight is taken, 0 on a tie.
package backend
