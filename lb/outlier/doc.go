// Package outlier is passive outlier detection for the edge proxy
// (docs/design.md §4): backends that fail requests in a row are ejected,
// taken out of the set the proxy picks from, for a time that grows with each
// ejection, and never more than a configured share of a group at once.
// Envoy's outlier detection is the model
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/outlier):
// consecutive_5xx, base_ejection_time × number of ejections, capped at
// max_ejection_time, and max_ejection_percent.
//
// The package is pure: it does no I/O, reads no clock and starts no
// goroutine. Every call that depends on time takes now as an argument, and
// an ejection ends lazily, when a call's now reaches its deadline.
//
// # Use
//
// The proxy makes one Detector, registers each backend with
// Register(group, name) and keeps the returned *Host next to the backend.
// When picking it skips hosts for which Ejected(now) is true; when a request
// finishes it calls Report(result, now). Both are lock-free and
// allocation-free on the paths taken by healthy traffic. A backend that
// leaves the configuration is removed with Remove.
//
// # Model
//
// Each host counts two runs of failures, both ended by a Success:
//
//   - the 5xx run counts ServerError, Timeout and ConnectFailure results;
//     reaching Consecutive5xx completes it;
//   - the connect run counts ConnectFailure results and is also ended by any
//     answer (ServerError, Timeout); reaching ConsecutiveConnectFailures
//     completes it.
//
// Completing a run ejects the host unless its group's limit forbids it.
// Either way both runs restart from zero, so a refused host is considered
// again after another full run. Failures reported while a host is ejected
// (requests already in flight) are not counted, so a host comes back with
// clean runs.
//
// An ejection with multiplier k lasts min(k × BaseEjectionTime,
// MaxEjectionTime). Each ejection sets k to the host's current multiplier
// plus one, and k is capped at ceil(MaxEjectionTime / BaseEjectionTime).
// After an ejection ends, k decays by one for every full BaseEjectionTime
// the host stays in service, so a backend that recovers is not penalised
// forever: with the defaults, a host ejected ten times in a row (300s)
// needs 300s in service to start again from 30s.
//
// A group may have at most floor(n × MaxEjectionPercent / 100) of its n
// registered hosts ejected at once, and never all n: at least one host of a
// group is always in service. The count is taken over the hosts ejected at
// the time of the decision, which the Detector's mutex serialises. Remove
// keeps both bounds by ending ejections early when a group shrinks.
//
// # Example
//
// With DefaultConfig (Consecutive5xx 5, ConsecutiveConnectFailures 3,
// BaseEjectionTime 30s, MaxEjectionTime 300s, MaxEjectionPercent 50) and a
// group "api" of four hosts a, b, c, d, of which at most two may be ejected:
//
//	0:00  a answers 5xx to 5 requests in a row. The 5th Report ejects a
//	      with k = 1 for 30s, until 0:30.
//	0:10  b refuses 3 connections in a row: ejected, k = 1, until 0:40.
//	      Two of four are out: the group's limit.
//	0:20  c answers 5 × 5xx. Ejecting it would take three of four out, so
//	      the ejection is refused (Stats.Refused) and c's runs restart.
//	0:30  a is back in service: Ejected(0:30) is false. Nothing runs at
//	      0:30; the deadline simply passes.
//	0:45  a fails 5 in a row again. Only 15s have passed since its
//	      ejection ended, less than BaseEjectionTime, so k is still 1 and
//	      becomes 2: ejected for 60s, until 1:45.
//	1:45  a is back. Staying healthy, its multiplier is 2 until 2:15,
//	      1 until 2:45 and 0 from 2:45 on.
//	2:30  a fails 5 in a row: k has decayed to 1 (45s in service), so it
//	      becomes 2 again and a is ejected for 60s, until 3:30.
//
// A host that fails every time it returns is ejected for 30s, 60s, 90s, …,
// 270s, then 300s each time after.
package outlier
