// Package rtt measures a gfe's round trip to every region, the distance the
// planner orders regions by (DESIGN.md §3 rule 1).
//
// A Prober sends one small HTTP request per region every Interval, over a
// kept-alive connection, and keeps the minimum of the last few samples
// (windowMin): queueing at a busy backend or gfe only ever adds to a round
// trip, so the minimum tracks the network distance, and a burst of slow
// samples cannot make a far region look near. Guarantees:
//
//   - A region gets an estimate with its first answered probe and keeps it
//     while probes fail; a region never answered has none (the planner
//     treats it as unreachable).
//   - A lower sample lowers the estimate at once; a real increase shows
//     after rttWindow samples (TestWindowMin).
//   - Snapshot is safe for concurrent use and returns a copy.
package rtt
