// Package pending is the gfe's pending queue (docs/design.md §4 and §6):
// a request of an autoscaled service that finds no free backend
// waits here for a slot to free or an instance to start, instead of
// failing at once, and while requests wait the gfe asks the control
// plane for capacity.
//
// # Model
//
// A Queue holds one FIFO line per service. The proxy (internal/gfe/httpproxy)
// hands it a Ticket when a pick fails with every backend busy or none
// healthy: the service, the arrival time, a deadline (arrival + the largest
// autoscaling.MaxPendingWait of the service's autoscaled groups, bounded by
// the route's timeout), and Try, which picks again from the live routing
// table. Wait blocks the request's goroutine until the ticket is Served,
// Rejected (deadline: the proxy answers 429) or Canceled (the client went
// away: not counted as served). A client goes away through Wait's context
// (net/http), or, for a client no context follows (the fast path), through
// Ticket.Gone, which the queue asks before it tries the waiter and every
// GoneEvery otherwise (TestGone).
//
// Waking is by polling, for waiting requests only: Run runs a round (Step)
// every Config.Poll (5ms) while anyone waits, and at once on Kick (the gfe
// kicks on every new routing table and a request kicks when it joins).
// A round tries each line's waiters in arrival order until one fails, then
// rejects those past their deadline. A notification on every slot release
// would put a branch and a shared write on lb/backend's hot path for
// every request of every service; polling costs nothing while nobody
// waits, and a freed slot is found at most Poll late.
//
// Only requests that really wait ask for capacity. A request counts as
// demand (Lines, which feeds the Asker and the pending load the gfe
// gossips to the autoscaler) once it has waited Config.Settle (100ms, or
// half its wait if shorter) with its client still there, and stops
// counting the moment it is canceled: a client that opens requests and
// resets them (HTTP/2 HEADERS then RST_STREAM) never asks for an
// instance (TestCanceledWaitersAskNoCapacity), as it is not the planner's
// demand either.
//
// The lines are bounded: a service's line holds at most Ticket.Limit (its
// max_pending_requests, 1000 by default) and the queue at most
// Config.MaxWaiting (10000); a request beyond either is refused at once
// (Full; the proxy answers 429 with the Retry-After of a wait that ran
// out) and never waits (TestFull).
//
// An Asker turns the lines into RequestCapacity calls (proto
// CapacityRequest): per (service, group) at most one call in flight and at
// most one per AskConfig.Interval (1s), for the group its Target function
// names, asking for an absolute count, so that a retried call does not
// scale twice:
//
//	wanted_instances = max(1, instances + ceil(waiting / max_concurrency_per_instance), rate_want)
//
// where rate_want (Target.RateWant) is the instances the gfe's arrival rate
// for the service needs at the concurrency target (Little's law over the
// group's mean latency; autoscale.Config.RateStarts), so that a capacity
// request covers the requests that arrive during the cold start too; with
// reason NO_INSTANCE when the group has no healthy instance, QUEUEING
// otherwise.
//
// # Guarantees
//
//   - FIFO within a service's line: in a round no waiter is tried after
//     one ahead of it failed, so a slot that frees goes to the oldest
//     waiter that can use it (TestFIFO, TestBlockedBehindHead). With
//     Ticket.Count the proxy also sends a new request of a service that
//     has waiters to the end of the line instead of letting it take a
//     freed slot first; requests that arrive while nobody waits are not
//     queued at all.
//   - A waiter is resolved exactly once: Try is never called after Wait
//     returned, and a Served result's Try writes happen before Wait
//     returns (TestCancel).
//   - A waiter whose Try keeps failing is rejected by the first round at
//     or after its Deadline, at most Poll late (TestDeadline).
//   - When Run returns (the gfe drains), every waiter is Rejected, and so is
//     every later Wait, at once: no request waits for rounds that will not
//     come (TestRun).
//   - Nothing costs a request that finds a free backend; while nobody
//     waits Run sleeps on a channel with no timer firing.
//   - No request waits on the control plane: capacity calls run on
//     goroutines of their own, bounded by AskConfig.Timeout, awaited when
//     Run ends (TestAskerRate, TestAskerOneInFlight).
//
// # Metrics
//
//	spillway_gfe_pending_requests{service}               gauge: requests waiting now
//	spillway_gfe_pending_wait_seconds{service,result}    histogram: served, rejected, canceled
//	spillway_gfe_pending_full_total{service,bound}       requests refused, the line (service) or the queue (total) full
//	spillway_gfe_capacity_requests_total{service,group,result}  granted, refused, error
//
// # Example
//
// A service with one autoscaled group, one instance at max_concurrency 1
// busy, min_pending_wait 300ms: a second request's pick fails (all busy),
// it waits; when the first ends, the next round (≤ 5ms later) picks the
// freed slot and the second is Served after about the first's remaining
// time. Had the first held the slot for a second, the second would have
// been Rejected at 300ms and answered 429. Meanwhile the Asker asked once
// (in the first round after the second settled, 100ms after it arrived)
// for 1 + ceil(1/1) = 2 instances, reason QUEUEING.
package pending
