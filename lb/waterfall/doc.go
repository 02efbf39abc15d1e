// Package waterfall is Spillway's Waterfall-by-Region planner and the picker
// that turns its plan into backend choices (docs/design.md §3).
//
// # Model
//
// A World is one immutable snapshot of what every gfe learns by gossip:
// sites with their demand and their RTT to each region they reach, and
// regions with their instance groups, each with a capacity (in the same
// units as demand) and a count of healthy instances. Compute turns a World
// into a Plan: for every site, how much of its demand goes to every group.
// Compute is a pure function — no I/O, clock, randomness or map-order
// dependence — so every gfe that holds the same World computes the same Plan
// and takes its own site's row (Plan.Row) without a central scheduler.
//
// A gfe then smooths successive plans with Damp (rule 8), builds a Picker
// from its row and its healthy backends, and holds the Picker in an
// atomic.Pointer[Picker]: requests Load it once and call Pick; the goroutine
// that receives plan or health updates builds a new Picker and Stores it.
// Backends (lb/backend: in-flight counters, concurrency limits) outlive
// Pickers.
//
// # The algorithm
//
// Let D be the total demand and C the total capacity of the regions that some
// site with demand reaches, and λ = max(1, D/C). Every region r has room
// λ·capacity(r). Its healthy fraction h is healthy instances over instances,
// and it keeps k = min(1, SpillSlope·h) of the demand reaching it when
// h < SpillThreshold, else k = 1.
//
//  1. All (site, region) pairs a site reaches are taken in ascending RTT,
//     ties by site name and then region name. In that order, a site with
//     demand left places min(k·left, room left) in the region.
//  2. Demand left over after step 1 (spilled by health but finding no room
//     farther away) walks the same order again with k = 1: it returns to
//     the nearest regions that still have room, rather than being dropped.
//  3. Demand still left over finds every region its site reaches full. That
//     only happens when some sites do not reach every region; it is placed
//     above λ·capacity over the regions the site reaches, in proportion to
//     their capacity (ReasonOverload). A site that reaches no region with
//     capacity is not placed at all: SiteLoad.Unplaced holds its demand,
//     it has no row, and its Picker returns ErrNoCapacity. One isolated site
//     does not fail the plan of every other site.
//  4. Each region's share is split over its groups in proportion to their
//     capacity.
//
// Sites without demand get an idle row (Plan.Idle): the same walk for a
// vanishingly small demand over the final loads, so that a gfe whose demand
// estimate is still zero has a row to pick from.
//
// # Cost
//
// The order of step 1 is never built by sorting every pair, nor is any
// site's order built whole unless a pass needs it. newModel reads every
// site's RTTs into one dense table (Site.RTTByRegion is read straight
// through; an RTT map costs a map iteration and a name lookup per entry).
// A priority queue then holds one entry per site still placing demand,
// keyed by the site's next (RTT, site name) pair, and pops the pairs in
// exactly the order of the global sort, ties included: each site's regions
// come in its order, and distinct sites tie only on RTT. A site's next
// region is found lazily: each of its first six by one scan of its RTTs
// (the least (RTT bits, region index) after the last one found), past that
// by one bucket sort of the whole site. A site leaves the queue as soon as
// its demand is placed, so a site that fits in its nearest region costs
// one scan and one pop, and the walk costs O(sites · regions) for the
// scans plus O((sites + spills) · log sites) instead of a sort of sites ×
// regions pairs. Step 2 runs the same queue over the sites with demand
// left. Cells exist only for the regions a site's walk visited. Only
// sites that need their full order (step 3, idle rows) are sorted whole.
//
// A Plan does not carry each site's full order either: Plan.SiteRegions
// puts one site's regions in order on demand from the RTT table the Plan
// keeps (Plan.Orders), and Damp orders only the regions of a site's
// previous and next rows, which are all its rule needs.
//
// On the benchmark world of 1,000 sites × 100 regions × 3 zones, Compute
// with RTTByRegion takes about a tenth of the time of sorting every
// (site, region) RTT once (BenchmarkSortYardstick), and about a fifth with
// RTT maps (BenchmarkComputeMaps); the global sort it replaced took about
// as long as that sort. BENCHMARKS.md §8 has the figures.
//
// # Guarantees
//
// These are the rules of docs/design.md §3 as properties of every Plan; the
// tests check each of them over thousands of random Worlds
// (property_test.go).
//
//   - Nearest first (rule 1): a site whose nearest region still has room in
//     the plan sends all its demand there, unless that region is unhealthy.
//   - Waterfall (rule 4): a site sends to a region only when every region
//     nearer to it (in its RTT order) is full at λ·capacity, or keeps less
//     than all demand because it is unhealthy (property b). Competing sites
//     are served nearest pair first, so the sites that spill are those for
//     which spilling costs least.
//   - Capacity (rule 6): when total demand fits and every site with demand
//     reaches every region, no region exceeds its capacity (property a);
//     when it does not fit, every region runs at the same load/capacity = λ
//     (property c). Without full reachability no region exceeds
//     λ·capacity except by step 3, for sites whose every region is full.
//   - Zones (rule 2): inside a region, group load ∝ group capacity
//     (property d); groups without capacity get nothing.
//   - Preemptive spill (rule 5): a region with h < SpillThreshold takes at
//     most k of the demand reaching it from each site, unless every
//     healthy region that site reaches is full (property e).
//   - Determinism (property f): equal Worlds give identical Plans, whatever
//     the order of their slices.
//   - Conservation (property g): each site's flows sum to its demand and its
//     shares to 1, unless it reaches no capacity (then Unplaced = Demand).
//
// A flow's Reason tells why its demand is in that region (nearest, spilled
// for capacity, spilled for health, overload), so a gfe can count its
// decisions by reason.
//
// # Worked example
//
// Region us-east has groups us-east-b (capacity 60) and us-east-c (40);
// eu-west has eu-west-b (100). Site nyc (demand 150) is 10 ms from us-east
// and 80 ms from eu-west; site ams (demand 30) the other way round. Total
// demand 180 ≤ capacity 200, so λ = 1. The pairs in order: (ams, eu-west,
// 10), (nyc, us-east, 10), (ams, us-east, 80), (nyc, eu-west, 80).
//
//	ams → eu-west    30  (room 100 → 70)              nearest
//	nyc → us-east   100  (room 100 → 0): b 60, c 40   nearest
//	ams: nothing left
//	nyc → eu-west    50  (room 70 → 20)               spill_capacity
//
// If 6 of eu-west's 10 instances fail, h = 0.4 and eu-west keeps k = 0.8 of
// what reaches it: ams places 24 there and 6 flows on to us-east, which is
// full, so step 2 returns them to eu-west; nyc's 50 spilled from us-east
// become 40 + 10 the same way. The plan is unchanged because no region had
// room to take the preemptive spill.
//
// # The min_rtt planner
//
// ComputeMinRTT is an alternative to Compute over the same World and Config,
// with the same Plan shape: the assignment of least total RTT under the same
// constraints (λ·capacity per region, rule 5's keep share, zones split by
// capacity), solved as a min-cost flow. Where the waterfall serves the
// nearest pairs first, min_rtt lets a site whose next region is almost as
// close step aside for one whose alternatives are far. It keeps properties
// (a), (c), (d), (f) and (g); it gives up the waterfall order of (b), and
// applies keep to each site's whole demand rather than to what reaches the
// region (see ComputeMinRTT).
//
// It does not give the solver every pair. Each site starts with the
// regions its waterfall walk visits plus three more (its nearest regions
// with capacity); after each solve, every pair left out is checked against
// the solver's node potentials (mincostflow's Priced: reduced cost ≥ 0),
// and sites with a pair that fails get at least twice as many candidates,
// past it, and the problem is solved again. What the sparse set
// guarantees: the plan returned is an optimum over every pair, exactly as
// if every pair had been an arc (complementary slackness; up to float
// rounding), whatever the candidates were — a set too small only costs
// another solve, and at worst every pair becomes an arc. Where optima tie
// it may pick a different one than a solve over every pair would.
//
// # Picking
//
// A Picker chooses a group with probability equal to its share of the row
// (cumulative weights, binary search on a random uint64), then a backend of
// the group by round robin or least-request power of two choices, skipping
// backends at their maximum concurrency (rule 3; backend.Policy.Acquire,
// with a round-robin cursor per group). A full group passes the request to
// the row's other groups in plan order; when all are full Pick returns
// ErrAllBusy. Pick takes the random value as an argument and does not
// allocate.
//
// NewPickerLoadAware swaps the choice inside a group for lb/loadaware's:
// two draws compared by in-flight requests, peak-EWMA latency and ORCA
// utilization, with slow start for new and returning instances. Groups,
// shares, fallbacks, demoted backends and soft limits are unchanged; pick
// with PickAt (the costs are read at its now), and report each answer to
// the Choice's Endpoint (TestPickLoadAware, TestPickLoadAwareFallbacks;
// PickAt does not allocate either: TestPickLoadAwareAllocs).
//
// A group may also hold demoted backends (NewPickerDemoted): instances the
// autoscaler scaled down and will stop, or an operator's warm standby
// (config.Instance.Demoted). They are not in the group's capacity, so the
// plan never counts on them; the Picker keeps them apart and guarantees:
//
//   - A demoted backend gets a request only when every active backend of
//     its group is at its limit — its soft limit in the first pass, its
//     configured limit in the second (TestPickDemotedIdleWhileActiveFree,
//     TestPickDemotedProperty).
//   - Inside one pass, a group's demoted backends are tried right after its
//     active ones and before the next group of the row: a request that
//     finds its group busy stays on a local demoted instance rather than
//     spilling to a farther region, which keeps traffic close and lets the
//     autoscaler see the demand it demoted too early (TestPickDemotedLast).
//   - A group with only demoted backends is never a first choice, whatever
//     its share, only a fallback (TestPickDemotedOnlyGroup).
//   - Pick still does not allocate (TestPickDemotedAllocs).
//
// For example, a group of two active backends of limit 1 and one demoted:
// the first two picks take the active ones, the third the demoted one, and
// only the fourth goes to the next group.
package waterfall
