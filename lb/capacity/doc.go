// Package capacity turns what a gfe's own requests tell it about an
// instance group into the group's effective capacity: the closed loop of
// docs/design.md §3 rule 8.
//
// # Model
//
// The planner fills every group up to the capacity the configuration
// declares for it. A real group may take less: its instances are slower
// than declared, another tenant shares them, or the plan ran ahead of a
// step in demand and left a queue behind. A gfe sees that in its own
// requests long before any configuration changes. Every plan interval the
// gfe sums, per group, what the requests it sent there since the last one
// ended in (Sample) and hands it to the group's Estimator, which returns a
// Factor in [MinFactor, 1]: the fraction of the planned capacity the next
// plan may use. The gfe applies its own factor in its very next plan and
// gossips it; every gfe plans each group with the lowest factor any gfe
// reports, so they all converge on the same world.
//
// # Signals
//
// A Sample is judged once it holds at least MinRequests requests (samples of
// quiet groups accumulate over intervals). It is overloaded when any of
// these signals applies; when several do, the one that sheds the most
// decides (and names the shrink):
//
//   - SignalRejections: more than RejectFraction of the requests were
//     refused for capacity (HTTP 429 and 503, the test backend's
//     X-Spillway-Reject: queue-full, gRPC UNAVAILABLE and
//     RESOURCE_EXHAUSTED);
//   - SignalConnectErrors: more than RejectFraction never got an answer
//     (connection refused or reset, connect or response timeout);
//   - SignalLoadReport: the backends' own load reports (ORCA
//     endpoint-load-metrics, lb/loadreport) average a utilization above
//     UtilizationLimit;
//   - SignalInFlight: the gfe's requests in flight reached
//     InFlightLimit of the group's concurrency limits, or the group
//     stopped answering: they grew by MinRequests (or two per instance, if
//     less) since the last sample and none of them got an answer, or for a
//     second the group had requests out and load planned, took more, and
//     answered nothing (the group then keeps only MinFactor; open streams
//     that sit idle take no more and are not silent). Growth without an
//     answer is not a stall while the requests may be answers still on
//     their way (a slow group's first requests after idle are out for its
//     answer time before one comes back): with the group's answer time
//     known (its baseline), until the oldest has been out twice that;
//     with none known, while they fit in the group's concurrency limits
//     (then the second of silence or full limits tells). A group without
//     limits that never answered has nothing to tell by: its growth
//     counts at once;
//   - SignalQueueing: the mean latency of answered requests rose above the
//     group's baseline, the lowest mean latency of any sample in the last
//     BaselineWindow (the network round trip plus the service time: only
//     queueing adds to it), by more than QueueDelay and more than a
//     quarter of the baseline (a far region's round trip varies more in
//     absolute terms), over consecutive samples that span QueuePersist
//     (a pause of the gfe or its machine delays the answers of one short
//     sample; a queue persists).
//
// SignalInFlight at the concurrency limits and SignalQueueing are
// inferences from time. When the group's instances send load reports, the
// reports decide whether they are the group's doing: below a mean reported
// utilization of ConfirmUtilization (0.8 by default; below it a backend
// queues little), the time went elsewhere (the network, a busy gfe
// machine), and neither signal counts. A group that stopped
// answering sends no reports and is judged as before.
//
// # Reaction
//
// Overload shrinks at once; recovery is slow and linear (AIMD):
//
//   - Shrink: the factor drops so that the next plan sends the group
//     Decrease times the load it carried, or less: for a load report above
//     the limit, limit/utilization times it; for queueing with requests
//     waiting w seconds, (1 − w) times it (down to half), which drains the
//     queue in about a second by Little's law; for rejections and connect
//     errors, also less the refused fraction. The load is the
//     largest of the plan's load on the group, what this gfe alone sent
//     it, and what its instances' load reports say they receive. One
//     shrink takes at most MaxShrink of the factor (a gfe's idea of the
//     load can lag), except for a group that stopped answering. A group
//     that shrank holds for Hold before it may shrink again,
//     so that the plan's change has time to drain the group's queue rather
//     than being mistaken for more overload.
//   - Recover: once RecoverDelay has passed without a signal, the factor
//     grows by RecoverRate per second until it is 1 again. Recovery that
//     overshoots the group's real capacity brings a signal back and the
//     factor steps down again, so a group whose real capacity is below its
//     declared one settles in a saw-tooth of amplitude about 1 − Decrease.
//
// Guarantees: the factor is always in [MinFactor, 1]; it never shrinks
// without a signal nor grows while signals persist; identical inputs give
// identical outputs. Nothing here reads a clock or does I/O: the caller
// passes the time of every Update.
package capacity
