// Package sim is the core the lbsim simulators share: the scenario format
// (regions, groups, sites and a timeline of demand changes and events), the
// timeline evaluated step by step (Trace), the flows each load-balancing
// policy is expected to produce in steady state (`lbsim plan`), and the
// min-RTT linear program the benchmarks score against (SolveLP,
// SolveMinRTT). The policy bench (`lbsim bench`) is sim/policybench; the
// autoscaler's trace replay and scorecard (`lbsim autoscale`,
// `autoscale-bench`) are sim/autoscalebench.
//
// # Scenario
//
// A scenario is a YAML file describing regions with their instance groups
// and edge sites with their demand and RTT vectors (see ParseScenario for
// the exact format). Parsing is strict: unknown keys, duplicate keys, wrong
// types and more than one YAML document are errors, and validation reports
// every problem at once, each with its path (regions[1].groups[0].healthy)
// and the file name. A parsed Scenario has been validated; callers treat it
// as read-only.
//
// # Expected flows
//
// Scenario.ExpectedFlows returns, for one policy, how much of each site's
// demand reaches each instance group in steady state:
//
//   - waterfall: the plan of lb/waterfall.Compute with its DefaultConfig
//     (docs/design.md §3); each flow carries the planner's reason ("nearest",
//     "spill_capacity", "spill_health", "overload").
//   - min_rtt: the plan of lb/waterfall.ComputeMinRTT with the same
//     DefaultConfig: least total RTT under the same constraints, with the
//     same reasons.
//   - envoy_priority: the site's regions in rtt_ms, nearest first, are
//     priority levels 0, 1, ...; each level takes the share of the site's
//     demand that Envoy's priority load gives it from health alone
//     (lb/priority: healthy over all instances of the region's groups
//     that are not drained, overprovisioning factor 1.4; no capacity
//     spill), spread over the level's groups by their healthy instances.
//   - round_robin, least_request, hash2, hash3, hash5: the baselines do not
//     know capacity or RTT, so in steady state every eligible instance in
//     scope receives an equal share of a site's demand. An instance is
//     eligible when it is healthy and its group is not drained (its capacity
//     healthy × rate_per_instance × capacity_scaler is above zero). With
//     ScopeGlobal the scope is every region present in the site's rtt_ms;
//     with ScopeNearestRegion it is the site's nearest region (lowest RTT,
//     ties by name) that has an eligible instance.
//
// Every Result conserves demand: the flows of a site add up to its demand
// (up to float rounding), or ExpectedFlows returns an error.
//
// These are the model's flows, written here for `lbsim plan`: they do not
// run the gfe's routing, and their baselines differ from the gfe's in one
// way: the global scope is limited to the regions in rtt_ms.
//
// # Timeline
//
// A scenario's timeline (Timeline, see ParseScenario) says how long to
// simulate and what changes when. Scenario.NewTrace evaluates it at every
// step: every site's true demand and its gfe's estimate, and every group's
// true state and the state gossip shows, GossipDelayS behind.
//
// Package sim does no I/O beyond LoadScenario reading the named file and
// Result.WriteTable writing to the given writer.
package sim
