// Package autoscale is Spillway's autoscaler for instance groups: Cloud
// Run's rules (docs/design.md §6) as
// pure code on an injected clock.
//
// # Model
//
// An Autoscaler holds one group's recent history and its recommendation.
// A controller (or `lbsim autoscale` replaying a trace) calls Tick once per
// tick with the time and a Sample of what the group did in that tick: CPU
// cores in use, requests in flight and received, and the instances' mean
// ACT limit, all group totals. Tick returns a Decision: the recommended
// count, the driver that set it, each driver's count, how many instances
// to start, promote, and stop, and how many stay demoted. The package does
// no I/O and reads no clock; time enters only as Tick's now, so a test
// drives hours of rules in microseconds. Actuation (starting and stopping
// processes), readiness and the gfe's picker are the caller's: the
// Decision tells the picker that Recommended instances are preferred and
// the rest demoted, and tells the provider what to start and stop.
//
// Two smaller pieces complete the rules: ACT, one instance's adaptive
// concurrency limit, and Config.Pending, the decision for a request that
// finds no free instance.
//
// # The rules
//
// With N the previous recommendation and, per driver, its need n_d (the
// exact instance count at which that driver's utilization equals its
// target):
//
//	cpu:          n = mean cores over CPUWindow (1m) / CPUsPerInstance / CPUTarget
//	concurrency:  n = max(mean in flight over 1m, over 10m) / MaxConcurrencyPerInstance / ConcurrencyTarget
//	act:          n = mean in flight over 1m / mean ACT limit / ConcurrencyTarget
//
// Tick applies, in order:
//
//  1. Idle, to zero only: with MinInstances 0, no request received and
//     none in flight over ConcurrencyWindow ⇒ 0 (driver idle). CPU plays
//     no part: an instance's CPU is never exactly zero, so it could
//     neither reach nor forbid zero. No traffic is docs/design.md §6's reason to go
//     to zero and nothing else: with MinInstances ≥ 1 a quiet group is
//     left to rules 3–5 (its 10-minute concurrency average still counts,
//     and it shrinks by demotion), so one request after a quiet minute
//     cannot bring back instances it never gave up (TestNoFlapWithoutLoad).
//  2. At zero, only demand leaves it: a request (or one in flight) ⇒
//     max(1, ceil(max n_d)) (driver demand); otherwise stay at zero.
//  3. Hold band: if some n_d > N·(1+Tolerance) (a driver's utilization is
//     above target by more than 10%) or every n_d < N·(1−Tolerance)
//     (all more than 10% below), recompute ceil(max n_d), at least 1;
//     else hold N. At a 60% target that holds through 54–66%. The
//     recomputation starts from usage and target, not from N, and rounds
//     up: a need of 4.1 gives 5. Demand hold: for a ColdStart after
//     OnDemand raised the count, a scale-down is held (driver demand):
//     the instances started for the demand cannot have served yet.
//  4. Clamp to [MinInstances, MaxInstances] (drivers min, max).
//  5. Up: promote demoted instances first (no cold start), start the
//     rest. Down: demote the difference k, floor(k·DemotedKeepFraction)
//     of it into a second set. Demoted instances get traffic only when
//     the recommended ones are at their limit; the first set is stopped
//     once its utilization over DemotedIdleWindow (1m) is below
//     DemotedIdleUtilization (10%), the second once it has served nothing
//     for IdleTimeout (15m).
//
// Memory is never a driver: a Sample has no memory figure.
//
// # Guarantees
//
// After every Tick (autoscaler_test.go names a test per rule; FuzzTick
// checks the invariants over random sample sequences):
//
//   - MinInstances ≤ Recommended ≤ MaxInstances, and Running =
//     Recommended + Demoted.
//   - A rise from N to M is exactly Promoted + Start = M − N; no instance
//     is started while a demoted one could be promoted.
//   - A group with a request or one in flight in the last
//     ConcurrencyWindow is never recommended zero instances; a group at
//     zero leaves it only in a tick with demand (or by MinInstances).
//   - Apart from the idle, demand and clamp rules, Recommended changes only
//     when some driver leaves the band: up when one is above, down when
//     all are below.
//   - Driver is the metric driver with the largest need (ties: cpu,
//     concurrency, act) unless a rule overrode it (min, max, demand,
//     idle); Drivers holds every driver's count.
//
// Pending guarantees that a Wait never expects more than the time left of
// MaxPendingWait, that a start never takes the group past MaxInstances,
// and that a request fails with 429 (Reject) only at MaxInstances after
// MaxPendingWait.
//
// # Worked example
//
// TestWorkedExample runs it, with ticks a minute apart so that each
// one-minute window holds one sample (with ticks every second the same
// fall walks down one instance at a time as the mean decays, to the same
// 5). One CPU and 10 requests per instance, 60% targets, 10 instances
// recommended. Over the last minute the group used 5.7 cores and had 30
// requests in flight: cpu needs 5.7/0.6 = 9.5, concurrency 30/10/0.6 =
// 5, act (limits at 10) 5. 9.5 lies in 10·[0.9, 1.1] = [9, 11]: hold 10
// (cpu at 57%, inside 54–66%). Load falls to 3 cores and 30 in flight:
// cpu 5, concurrency 5, act 5, all below 9 ⇒ recommend ceil(5) = 5
// (driver cpu). The 5 others are demoted: 3 in a first set, 2 in a
// second. The recommended 5 take up to 50 requests, so the demoted serve
// nothing; a minute later the first set's utilization is 0 < 10% and its
// 3 are stopped (Stopped 3, Running 7); 15 minutes after its demotion the
// second set's 2 are stopped (Running 5). If the load had come back in
// between, they would have been promoted before any new start.
//
// # The pending queue
//
// A request that finds no free instance asks Config.Pending. Its wait is
// estimated from the slots that free up ahead of it (ExpectedWait): the
// ready instances free ReadySlots per request time, and a starting
// instance, once ready, takes its MaxConcurrencyPerInstance at once and
// as many per request time after. If that wait is no longer than a cold
// start and fits in the time left of MaxPendingWait (max(10s, 3.5 × cold
// start)), the request waits (for a starting instance first, then a
// running one, as docs/design.md §6 orders it); else an instance is started for it
// (Autoscaler.OnDemand) if the group is below MaxInstances; at
// MaxInstances it waits until MaxPendingWait and then fails with 429.
//
// # Reading the rules
//
// Each of these was measured with the scorecard (`lbsim autoscale-bench`,
// autoscalebench.Run; BENCHMARKS.md §7 has the rows) and kept only
// where it helped.
//
//   - On-demand starts sized by the arrival rate (Config.RateStarts), a
//     departure: docs/design.md §6 starts an instance for a request when waiting
//     would take longer than starting one, which is right for the
//     requests already waiting but blind to those that arrive during the
//     cold start. So, while requests wait, the caller also starts the
//     instances that, with the running and starting ones, hold arrival
//     rate × request time (Little's law) at the concurrency target — the
//     count the concurrency driver will ask for once its window has seen
//     the load, started a minute sooner. Alone (no buffer region), with a
//     25s cold start, it cut the p99 of the 10× step from 25.7 to 19.4 s
//     and of the ramp from 25.4 to 4.4 s, at about the same
//     instance-seconds (step 9906 → 9915, ramp 7556 → 6777). In the
//     running system each gfe's capacity requests ask for at least the
//     count its own arrival rate needs (internal/gfe/pending.Target's
//     RateWant), over the group's mean latency at that gfe.
//   - The drivers given arrival rate × request time as concurrency
//     (Little's law on the arrivals, so that demand above the ready
//     capacity is visible): measured on top of the rate-sized starts, it
//     changed no p99 and cost up to 50% more instance-seconds on the spike
//     (6795 → 10227); not kept. Without a buffer the waiting requests are
//     the pending queue's to start instances for.
//   - The spilled demand as concurrency, a reading: the demand the gfes'
//     plans send past the group to a farther region is load the group
//     would serve with the capacity, so the controller counts it by
//     Little's law (controller.Load.Concurrency). That is what lets the
//     waterfall be the buffer while the region scales up: the spill
//     drives the count up and ends as capacity arrives, and no request
//     waits.
//   - Starting on the spill (rate-sized starts whenever the plan spills,
//     as if the spill were waiting requests): it brought capacity back
//     two to three times sooner (step, 25s: 59 → 26 s) but, with the
//     buffer already serving every spilled request within its RTT, only
//     added instance-seconds (spike, 25s: 4818 → 10015); not kept.
package autoscale
