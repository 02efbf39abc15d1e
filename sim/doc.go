// Package sim holds the scenario format of the lbsim simulator and the flows
// each load-balancing policy is expected to produce on a scenario.
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
// # Bench
//
// Scenario.Bench (`lbsim bench`) runs a scenario's timeline step by step
// with one simulated gfe per site that runs the gfe's own routing: a
// routing.Builder (lb/routing) per site builds the routing table
// from a snapshot of the world as gossip shows it, and the site's demand
// is split over instances as that table picks (the plan row's Picker,
// round robin over the pool, or the table's Maglev for every synthetic
// client connection). Each gfe closes the loop as the gfe does: what its
// requests ended in on each instance (served and how fast, refused by a
// full queue, failed at an instance that is down, load reports) goes into
// the builder's backend counters, and the builder's capacity factors are
// gossiped to the other gfes (timeline feedback and model load_reports turn
// this off). The queueing of the backends, the LP optimum and the metrics
// are the simulator's own. See Bench for the model.
//
// Package sim does no I/O beyond LoadScenario reading the named file and
// Result.WriteTable writing to the given writer.
package sim
