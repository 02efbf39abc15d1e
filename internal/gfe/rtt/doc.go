// Package rtt measures a gfe's round trip to every region, the distance the
// planner orders regions by (docs/design.md §3 rule 1).
//
// A Prober probes one instance per region every Interval, from the gfe's
// source address, in the protocol the instance speaks: the protocol of the
// health check of the service that uses its group (Target.Protocol). A
// region whose instances answer only TCP or gRPC is measured as well as an
// HTTP one:
//
//   - http (the default, also for "" and unknown protocols): GET Path over
//     a kept-alive connection, timed to the response headers; any status
//     counts.
//   - https: the same over TLS, certificates not verified (backends are
//     addressed by IP, as for the https health check).
//   - tcp: a fresh TCP connection per sample, timed from dial to
//     established (one handshake round trip), then closed unused.
//   - grpc: grpc.health.v1 Health/Check over one kept-alive gRPC
//     connection per target address, timed to the answer. Any status the
//     server answers counts, NOT_SERVING and UNIMPLEMENTED (no health
//     service) included: it proves the round trip. A transport error or a
//     timeout (Unavailable, DeadlineExceeded, Canceled) does not, and the
//     connection is closed so the next round dials afresh.
//
// The prober keeps the minimum of the last few samples (windowMin):
// queueing at a busy backend or gfe only ever adds to a round trip, so the
// minimum tracks the network distance, and a burst of slow samples cannot
// make a far region look near. The first sample over a new kept-alive
// connection includes its handshakes; the minimum drops it once a reused
// connection answers. Guarantees:
//
//   - A region gets an estimate with its first answered probe and keeps it
//     while probes fail; a region never answered has none (the planner
//     treats it as unreachable). This holds for every protocol
//     (TestProtocols).
//   - A lower sample lowers the estimate at once; a real increase shows
//     after rttWindow samples (TestWindowMin).
//   - An estimate is never below the target's round trip: a sample is timed
//     around a complete exchange (TestDelayedTarget).
//   - A region whose target changes protocol keeps its window; the new
//     protocol's samples join it (TestProtocolChange).
//   - After a round, a region no longer among the targets has no estimate,
//     and no gRPC connection is kept to an address that is no longer a grpc
//     target; when Run returns every connection it opened is closed
//     (TestGRPCConnClosed, goleak in TestMain).
//   - Snapshot is safe for concurrent use and returns a copy.
package rtt
