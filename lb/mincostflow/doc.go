// Package mincostflow solves the transportation problem behind the min_rtt
// planner (lb/waterfall's ComputeMinRTT): a min-cost flow on a bipartite
// graph from sources to destinations, in which every source places all of
// its supply and the destinations' capacities are shared out evenly when
// the supply does not fit them.
//
// # The problem
//
// A Problem has sources s with a supply, destinations d with a capacity, a
// level L > 0 and arcs (s, d), each with a cost and a keep share k in
// [0, 1]. A flow x ≥ 0 on the arcs is feasible when
//
//   - every source with arcs sends exactly its supply: Σ_d x[s,d] = Supply[s];
//   - every destination takes at most L·Capacity[d].
//
// Costs are pairs compared lexicographically: a unit on arc (s, d) costs
// (0, Cost) up to k·Supply[s] and (1, Cost) beyond it. The optimum first
// minimises the flow sent above the keep shares (the penalty), which is
// zero whenever they can all be met within the destinations' limits, and
// only among those flows the total cost Σ Cost·x. No large constant mixes
// the two, so costs of any magnitude keep their precision.
//
// # What Solve guarantees
//
//   - Optimality: when a feasible flow exists, Solution is a lexicographic
//     optimum of the problem above, exactly up to float rounding (the
//     tests compare it with gonum's simplex on random and hand-made
//     graphs). Residuals of at most 1e-12 of a source's supply, and room of
//     at most 1e-12 of a destination's limit, count as zero.
//   - Uniform overload: when none exists — some sources reach only
//     destinations that cannot take their supply at L — the smallest sets
//     closed under the arcs (sources reaching only the set's destinations,
//     destinations fed only by the set's sources) run at their own level,
//     the set's supply over its capacity, recursively for the most
//     overloaded subsets; the flow is optimal within each set at its level
//     (Solution.Level). So the overload is even inside each set, and no
//     destination runs above L·capacity while a source sending to it
//     reaches a destination with room.
//   - Determinism and purity: Solve reads only its argument, changes
//     nothing of it, and returns the same Solution for the same Problem,
//     bit for bit. Ties between equal-cost paths go to the lower node
//     index (sources, then destinations), and within a source to the arc
//     given first. It does no I/O and keeps no state between calls.
//   - Errors: only a Problem that breaks a rule of Problem or Arc fails,
//     with an error wrapping ErrInvalidProblem.
//   - A certificate for arcs left out (Solution.Priced, PricedFrom): an arc
//     not in the Problem is Priced when its reduced cost under the final
//     node potentials is ≥ 0 and no overloaded set was split off. When
//     every arc of a larger Problem that is missing from this one is
//     Priced, the flow is an optimum of the larger Problem too, so a
//     caller can solve over a few candidate arcs and add only those that
//     fail (lb/waterfall's min_rtt does; TestPricedCertifiesOptimum checks
//     the certificate against Solve on the larger Problem).
//
// # Algorithm and cost
//
// Successive shortest paths with Dijkstra on reduced costs (Ahuja,
// Magnanti and Orlin, Network Flows, §9.7): every source starts at its own
// optimum (its supply on its cheapest arcs, within their keep shares
// first, regardless of the destinations' limits), and the excess of each
// overfull destination is pushed along the cheapest residual path to a
// destination with room, one overfull destination at a time (the first
// in index order whose excess can still move), so that a search stops at
// the room nearest to it. One phase is one Dijkstra over a binary heap,
// O((A + V) log V) for A arcs and V = sources + destinations + 1 nodes,
// cut short by the arcs' ascending cost; a phase saturates an arc's
// residual, an overfull destination's excess or another's room, so in practice a
// solve takes a few phases per arc, and 64 per arc and node at most (a
// guard against float rounding making progress vanish). Splitting off an
// overloaded set solves again only the sets it changed. For the planner's
// 1,000 sites × 100 regions this is a few milliseconds, for 80 × 40 a few
// tenths of one (lb/waterfall's BenchmarkComputeMinRTT; BENCHMARKS.md §8).
package mincostflow
