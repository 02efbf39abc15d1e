// Package realbench is the real benchmark (docs/design.md §8): it starts a
// whole Spillway deployment on loopback — one control plane, gfes at sites
// nyc, lon and tokyo, test backends in regions us-east, eu-west and asia-east
// that emulate each site's RTT in user space (Deployment) — drives every
// policy in turn with an open-loop load from many client addresses, and
// computes from the measured traffic the table `lbsim bench` computes from
// its model. cmd/lbbench wires it to flags.
//
// # One run
//
// The deployment starts once, with the first policy. Every other policy is
// applied as an operator would: the config file is rewritten with the new
// policy and hash scope, the control plane reloads it and pushes a new
// snapshot, and Run waits until every gfe's /status shows the new policy
// under a new config version. Run then waits until no backend instance has
// a request in flight or queued, so that no policy inherits another's
// backlog, and drives the story: one load per site, at the first phase's
// demand for Config.Warmup (sent, not recorded: the gfes' demand
// estimates, plans and damping settle under the load they are measured
// under), then each phase in turn without a break. The default story is
// "steady" (6 s: nyc 200, lon 150, tokyo 100 req/s, every region under half
// of its 320 req/s) and "flash crowd" (12 s: nyc 450 req/s, 130 req/s more
// than us-east holds). A fresh deployment per policy would cost about 5 s
// more per row and measure the same thing: what carries over between rows
// in a gfe (demand estimates, the damped previous plan, RTT measurements)
// settles within the warmup, and the backends start every row idle.
//
// Every site's load comes from Config.SourcesPerSite addresses in the
// site's /24 (127.Net.s.100 on), used in turn, and every request opens its
// own TCP connection (loadgen.Config.NewConnEach), so the gfe sees a new
// source port each time: 2-tuple hashing sees 64 clients per site, 5-tuple
// hashing a new flow per request. The loader records each request's
// connection address and port; the table's footer gives the share of
// requests with an address:port pair of their own (the kernel may reuse a
// port once its connection has closed).
//
// # What is measured
//
// Each request is recorded by the client: when it was sent, its status,
// the region and instance that answered (the test backend's headers, on
// every answer including its 503 when its queue is full) and its latency.
// From these records alone (table.row):
//
//   - MEAN_MS, P50_MS, P99_MS: latency of requests answered 2xx (nearest
//     rank), as the client saw it: connection set-up, the gfe, the emulated
//     RTT, queueing and service at the backend.
//   - OVER_CAP: arrivals are counted per instance per Config.Window (1 s,
//     the step of `lbsim bench`), by send time, whatever the answer. An
//     instance is over capacity in a window when more requests arrived
//     than its declared capacity allows in that window (rate × window; a
//     shorter last window gets a proportional capacity) by more than
//     Config.Tolerance (1%). OVER_CAP is the share of 2xx answers that came
//     from an instance in a window in which it was over capacity — `lbsim
//     bench`'s definition, with its arrival rate measured per window. The
//     client's send time stands in for the arrival time; the two differ by
//     the gfe's time and the emulated RTT, well under a window.
//     This is chosen over sampling the backends' /admin/stats because it
//     counts exactly what was routed to each instance, in the same window
//     for every instance, with no sampling gaps.
//   - EXCESS: Σ over instances and windows of max(0, arrivals − capacity ×
//     window), over all requests.
//   - ERRORS: requests not answered 2xx (the backend's queue-full 503, the
//     gfe's own errors, transport errors and timeouts) plus requests the
//     loader could not send, over all requests.
//   - CROSS_REGION: answered requests from a region other than the site's
//     nearest.
//   - RTT/LP: the mean emulated RTT (the site's RTT to the answering region)
//     of answered requests over that of the min-RTT linear-program optimum
//     (sim.SolveMinRTT over the declared capacities) of each phase, the
//     phases weighted by the requests answered in them.
//
// OSC_PP (how far the gfes' region shares swing back and forth) is left
// out: per-second shares measured from real traffic swing with sampling
// noise alone, so the number would not say what it says in the simulation.
// Row.Series gives the measured load of every region per window instead.
//
// # Capacity
//
// The config declares 40 req/s per instance and the gfes plan with it. The
// test backend enforces Config.Headroom × that with a token bucket (burst of
// 1/20 s), queues up to 32 requests per instance and answers 503 beyond.
// With the default headroom of 1 the declared capacity is the hard limit:
// overload shows as queueing latency (up to 32/40 s = 0.8 s) and then
// errors, and a region planned to exactly 100% cannot drain a backlog.
// Headroom 1.25 matches `lbsim bench`'s default model, in which an
// instance at its declared capacity is 80% busy.
//
// The run is real: its numbers move with the machine's load (the table's
// footer gives the load average) and from run to run; the quick preset
// more so.
//
// # The autoscaler's story (lbbench --autoscale)
//
// RunAutoscale is the scorecard of `lbsim autoscale-bench` (BENCHMARKS.md
// §7) on the real system, for its step load. Each row gets a deployment of
// its own (AutoscaleConfig.AutoscaleSpec): site nyc in front of us-east,
// autoscaled from min_instances 1 by the control plane's process provider,
// whose instances are real testbackend processes with a real cold start
// (--startup-delay) and no queue of their own, so that the gfe's pending
// queue holds what waits; and, for cloudrun+waterfall, eu-west, a fixed
// group with room further away, as the buffer; RTTs are emulated by the
// backends as above. The load steps from BaseRate to StepRate (10×) and
// back. The rules' windows are cut from minutes to seconds (Block) so that
// a scale-up fits a step of tens of seconds; the scorecard runs them at
// their defaults.
//
// Every column comes from records, not from the model:
//
//   - latency, failures, where each request was served and the timeline:
//     the client's per-request records, as for the policy rows;
//   - instance-seconds, peak and cold starts: the process provider's
//     "started" and "stopped" (or "killed", "exited by itself") log lines,
//     read from the control plane's output through Options.Tee and timed
//     when each line arrives (providerLog): the provider writes them as it
//     starts a process and once it has reaped one;
//   - time to capacity: the gfe's /status, read every Sample (250 ms), the
//     first reading in which the near group's healthy instances hold the
//     step's concurrency in their slots (the scorecard's definition);
//   - waited: the gfe's spillway_gfe_pending_wait_seconds samples, before
//     and after the load.
//
// The return to the near region is judged per Window (1 s) of the step:
// the load is back from the first window from which on every window of
// the step has at least NearShare (95%) of its answered requests from
// us-east. DefaultAutoscaleTargets holds the real system's targets and
// Check judges a row against them; the e2e test TestAutoscaleBenchStep
// runs the quick waterfall row and asserts them.
//
// # The uneven story (lbbench --story uneven)
//
// RunStory runs a Story: one deployment, Reps repetitions, each running
// every policy once in an order rotated by one per repetition, and every
// policy's row the median of its runs with their minimum and maximum. The
// uneven story (UnevenStory) deploys topology.Uneven: four regions, the
// smallest (asia-east, 50 req/s declared) nearest tokyo, which sends half
// of the demand; every instance has a real, time-bound capacity (3 slots
// of 80 ms, no rate limit, 25 req/s declared), and in every region half of
// the instances run with the test backend's --antagonist (3x slower for
// half of every 4 s, seeded per instance). The global demand steps through
// UnevenLoads (0.5x to 1.7x of the declared 350 req/s, then 2x), open loop
// as every story: the load generator starts each request on schedule
// whatever the answers (up to 4096 outstanding; beyond, a request is not
// sent and counts as an error); latency runs from the request's start,
// which the loader's lag (Record.Lag, its 1 ms tick) may put after its due
// time. A request unanswered within the 5 s
// deadline (Config.Timeout) counts as 5 s in the latency measures
// (Measures); refusals and other failures are errors without a latency.
// The result's min_cross_region is the least cross-region share any
// assignment within capacity has (minCrossRegion, the LP of sim with cost
// 1 across regions), to read CROSS_REGION against.
package realbench
