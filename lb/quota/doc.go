// Package quota holds Spillway's per-consumer quota rules (docs/design.md §7,
// Service Control semantics): which limit applies to a consumer, and how an
// allocation is charged against it. It does no I/O and reads no clock: every
// call takes the time, so the control plane's quota service and the tests
// run it on whatever clock they hold. internal/quotaredis keeps the same
// counters in Redis for several control planes, with the same rules (its
// Lua script is checked against Allocator allocation by allocation).
//
// # Limits
//
// A limit is a number of units of one metric (requests, or payload bytes)
// per consumer per minute. EffectiveLimit resolves it from the metric's
// default and the two kinds of override:
//
//	no override               the default
//	producer override only    the producer override (it may raise the default)
//	consumer override only    min(consumer override, default)
//	both                      min(producer override, consumer override)
//
// A producer override is the service owner's grant to a consumer; a consumer
// override is a consumer capping itself, which can only lower what it is
// granted.
//
// # The window
//
// Counters count in fixed one-minute windows aligned to the Unix minute
// (Window): the window of time t is t truncated to the minute, as
// Google Service Control's per-minute quota and envoyproxy/ratelimit's
// fixed windows are. An Allocator never admits more than the limit in one
// window. Worst case over any 60 s that straddle a window boundary: twice the
// limit (a full window's worth at the end of one window and again at the
// start of the next). A sliding window would bound that, at the cost of two
// counters read per allocation; fixed windows are what the tools our users
// compare us with do, and what "requests per minute" means in their
// dashboards.
//
// # Allocation
//
// Allocator.Allocate charges a Request: an operation id, a consumer and an
// amount per metric, in one of three modes.
//
//   - ModeNormal: all or nothing. Every metric must fit under its limit, or
//     nothing is charged and the result is Exhausted.
//   - ModeBestEffort: each metric is charged as much of its amount as fits;
//     the result is Exhausted only when a positive amount was asked and
//     nothing at all could be charged.
//   - ModeCheckOnly: nothing is charged; the result says what ModeNormal
//     would have allocated.
//
// An Exhausted result carries RetryAfter, the time until the next window
// starts. A request may give units back (Returned): what the caller was
// charged in the current window and will not use is taken off the
// counter before the request is charged, so a caller that leases ahead
// does not hold it against the consumer's other callers. An operation id seen before in the current or the previous window
// gets the result it got then, and is not charged again: a client that
// retries an allocation whose answer it lost is charged once. Requests with
// an empty operation id are never deduplicated.
//
// # Admission at the gfe
//
// Lease is a gfe's side of one (service, consumer, metric): it admits from
// a budget the quota service granted, refuses when the consumer's limit is
// used, fails open when the service fails, and says when (at most once per
// Interval) and for how much to ask again, and what to give back. Knowing
// the limit (SetLimit), a consumer is never refused before its limit is
// used: at one gfe, exactly the limit is admitted in every window, at any
// rate (TestLeaseExactLimit), and the service is charged what was admitted
// plus what is leased ahead, which is given back when unused. With three
// gfes, one Allocator and every consumer offered ten times its limit,
// every window admits between 0.98 and 1.02 of the limit
// (TestLeaseAccuracy, TestLeaseAccuracyLeasingAhead). A Lease admits
// without a lock: its budget, grant and window are one atomic word, taken
// by compare-and-swap, so no request ever waits for another (or for the
// once-a-second call); concurrent admissions take exactly what the Lease
// has to give (TestLeaseConcurrent, TestLeaseConcurrentGrants,
// TestLeaseConcurrentLimit).
//
// Memory: counters and operation ids of windows older than the previous one
// are dropped as time moves on, so an Allocator holds at most two windows of
// them.
package quota
