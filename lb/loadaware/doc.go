// Package loadaware is the load-aware choice of an instance inside one
// group: the power of two choices (Mitzenmacher 2001) over a cost that
// combines the requests in flight, the ORCA utilization the instance
// reports and its latency as a peak EWMA that fades (Finagle's and
// linkerd's peak EWMA), with a slow-start window for new and returning
// instances (Envoy's slow_start_config, HAProxy's slowstart). It is pure:
// it reads no clock (every method takes now) and draws no random number
// (Acquire takes rnd), so tests drive it on virtual time.
//
// # Model
//
// An Endpoint wraps one lb/backend.Backend, whose in-flight counter and
// limits it uses as they are, and adds what a Chooser learns about the
// instance: a latency estimate L with the time of its latest sample, the
// last utilization report ρ, and the start of its slow-start window. Like
// the Backend it is kept by its owner across snapshots. The caller
// reports every answer (Chooser.Observe, with the time to the answer) and
// every load report (Endpoint.ObserveUtilization), and calls
// Endpoint.Restart when an instance comes back. A Registry does that
// bookkeeping for the goroutine that builds snapshots: one Endpoint per
// Backend, established at the first build, slow-starting when new or
// back after a build without it (TestRegistry).
//
// # Algorithm
//
// The estimate L is a peak EWMA with time constant τ (Config.Decay): a
// sample l at Δ after the previous one gives L' = l when l ≥ L·e^(−Δ/τ)
// (a sample above the faded estimate replaces it: an instance turning
// slow costs more at its first slow answer), else L' = L·e^(−Δ/τ) +
// l·(1 − e^(−Δ/τ)). Between samples L fades towards zero by the same
// factor, and after Config.ProbeAfter without a sample it is forgotten:
// the instance is unknown. The cost of one more request (Chooser.Cost) is
//
//	unknown, nothing in flight:  0                  (probe it)
//	unknown, n in flight:        1e12 + n           (its probe is out)
//	known, n in flight:          L·(n+1)·(1 + β·ρ/(1−ρ))
//
// with ρ faded like L and capped at Config.MaxUtilization, β =
// Config.UtilizationWeight. Acquire draws two distinct instances and
// takes the cheaper (ties to the first draw), skipping full backends as
// lb/backend's Policy.Acquire does. Slow start acts on the draws, not the
// cost: an instance t into its window of length W (Config.SlowStart) has
// weight w = max(MinWeight, (t/W)^(1/Aggression)) (Envoy's formula) and a
// draw that lands on it is kept with probability w, else drawn again.
//
// # Guarantees
//
//   - No starvation (the failure of Traefik's leasttime policy, where an
//     instance with a few slow replies never got traffic back): an
//     instance that stops being chosen is unknown after ProbeAfter, and
//     its next draw sends it one request; its answer replaces the old
//     estimate. A slow instance thus costs one request per ProbeAfter
//     while it stays slow, and a recovered one is chosen on its merits
//     ProbeAfter plus the latency of the probe it still holds after it
//     recovers. TestSlowInstanceRecovers plays it: three instances at
//     10ms, one 20 or 500 times slower for 5s; its share falls below 2%
//     within a second and is back to a third within 3s (20x) or 4s (500x)
//     of recovering, while without fading and forgetting it stays at 0.
//   - No herd: an unknown instance with a request in flight costs more
//     than any known one, so an instance whose answers stop coming gets
//     no more requests once ProbeAfter has passed since its last answer,
//     although its faded estimate would make it look cheap (without this
//     rule it draws a fifth of the traffic while 500 times slower:
//     TestSlowInstanceRecovers' "fading alone").
//   - Slow start: a new instance's share ramps from about MinWeight of an
//     established one's to an equal share over the window
//     (TestSlowStartRamp); when every instance is in the same window the
//     draws stay uniform.
//   - Limits: Acquire takes at most one slot, of a backend that had room,
//     and fails only when every backend is full (TestAcquire,
//     TestAcquireConcurrent).
//   - Determinism: the choice depends only on its arguments and the
//     Endpoints' state.
//   - Concurrency and allocation: a Chooser is immutable; Acquire, Cost,
//     Weight, Observe and ObserveUtilization are safe for concurrent use
//     and do not allocate (TestAcquireAllocs, BenchmarkAcquire). Picks
//     never lock; Observe takes the Endpoint's mutex.
//
// # Example
//
// Two instances answer in 10ms; the first has 2 requests in flight, the
// second none and reports utilization 0.5. Their costs are 0.010·3 = 0.030
// and 0.010·1·2 = 0.020: the second is taken. Had it last answered 3s
// ago (more than ProbeAfter), it would cost 0 and be probed.
package loadaware
