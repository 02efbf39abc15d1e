package waterfall

import (
	"fmt"
	"math"

	"github.com/spillway-lb/spillway/lb/mincostflow"
)

// ComputeMinRTT returns the min_rtt plan for w: among the assignments that
// respect the waterfall's constraints, one of least total RTT (Σ demand ×
// RTT over all flows). Where Compute gives the closest (site, region) pair
// priority, ComputeMinRTT lets a site whose second-nearest region is almost
// as close step aside for a site whose alternatives are far: with region a
// (capacity 100) and b (ample), site x (80, a 10 ms, b 11 ms) and site y
// (80, a 20 ms, b 100 ms), Compute sends x→a 80, y→a 20, y→b 60 (mean RTT
// 45 ms); ComputeMinRTT sends y→a 80, x→a 20, x→b 60 (mean 15.4 ms).
//
// The constraints, and how they map to the rules of docs/design.md §3:
//
//   - Capacity and uniform overload (rules 4, 6): region r takes at most
//     λ·capacity(r), λ as in Compute (Plan.Lambda). When every site with
//     demand reaches every region, the plan is feasible, so no region
//     exceeds its capacity when demand fits (property a) and every region
//     runs at exactly λ when it does not (property c).
//   - Preemptive spill (rule 5): a site sends at most keep(r)·demand to a
//     region r with healthy fraction h < SpillThreshold, keep(r) =
//     min(1, SpillSlope·h) as in Compute. Rule 5 bounds the share of "the
//     demand that reaches" the region; min_rtt has no visiting order, so
//     the demand reaching a region is taken to be the site's whole demand.
//     For the site's nearest region (the case rule 5 is about: an unhealthy
//     region sheds part of its own local traffic) this is exactly Compute's
//     bound; for farther regions it is looser than Compute's, which applies
//     keep to what is left after nearer regions. The bound is soft in the
//     same way as Compute's second pass: the plan first minimises the
//     demand sent above the bounds, which is zero whenever all bounds can
//     be met within the regions' limits, and only then the RTT; a site
//     exceeds a bound only when every other region it reaches is full or
//     already holds its keep share.
//   - Zones (rule 2): each region's share is split over its groups in
//     proportion to capacity after the region flows are decided (property
//     d), by the same code as Compute.
//   - Overload without full reachability: when some sites reach only part
//     of the regions, their demand may not fit at λ·capacity. The regions
//     and sites involved (a set whose sites reach only its regions and
//     whose regions take demand only from its sites) then run at their own
//     level, the set's demand over its capacity, recursively for the most
//     overloaded subsets, so that the overload is uniform inside each set
//     and no region runs above λ·capacity while a site sending there
//     reaches a region with room. A site reaching no region with capacity
//     is unplaced, as in Compute.
//
// Reasons: a flow into the site's nearest region is ReasonNearest. Demand
// elsewhere is labelled by walking the site's region order as Compute does:
// what a region's keep bound refused is ReasonSpillHealth, any other demand
// that left a nearer region is ReasonSpillCapacity, and for sites in an
// overloaded set (placed above λ·capacity) both become ReasonOverload.
// Idle rows (sites without demand) are where a small demand would go over
// the final loads: the nearest regions with room, each taking at most its
// keep share, then the nearest with room regardless of health, then an
// overload spread by capacity, as in Compute.
//
// Algorithm: a min-cost flow over sites → regions (lb/mincostflow): each
// site's supply is its demand, each region's capacity its capacity at level
// λ, and each (site, candidate region with capacity) pair an arc costing
// its RTT with the region's keep as its share without penalty, so the
// solver's penalty is the demand above keep bounds and its overloaded sets
// are the sets above. A site's candidates are its nearest regions with
// capacity: as many as its waterfall walk visits plus three (the fewest
// that need a single solve on every benchmark world). After each solve
// every pair left out must be Priced (its reduced cost under the solver's
// potentials ≥ 0, and no overloaded set split off); sites with one that
// is not get at least twice as many candidates, past it, and the problem
// is solved again, so the loop ends, at worst with every pair an arc. The
// sparse set therefore guarantees exactly what a solve over every pair
// does: the result is an exact optimum over every pair up to float
// rounding (tests compare it with an independent LP, and with the solve
// over every pair from the start, TestComputeMinRTTSparseIsOptimal); where
// optima tie it may be a different one. On 1,000 sites × 100 regions it
// takes about a fifth of the time of sorting every pair once, on 80 × 40
// about as long as that sort and a few times as long as Compute
// (BenchmarkComputeMinRTT, BenchmarkCompute, BenchmarkSortYardstick;
// BENCHMARKS.md §8).
//
// Like Compute, ComputeMinRTT is pure and deterministic: it reads only its
// arguments, changes neither, and returns the same Plan for the same World
// whatever the order of w's slices. It returns the same Plan shape (Flows
// and Idle in the same order, Regions, Groups, Sites, Lambda) and fails
// only on invalid input, with an error wrapping ErrInvalidWorld or
// ErrInvalidConfig.
func ComputeMinRTT(w World, cfg Config) (*Plan, error) {
	p, _, err := computeMinRTT(w, cfg, candidateMargin)
	return p, err
}

// computeMinRTT is ComputeMinRTT with margin candidates per site beyond
// its waterfall walk, or every region it reaches when margin < 0; it also
// returns how many times it solved.
func computeMinRTT(w World, cfg Config, margin int) (*Plan, int, error) {
	m, err := newModel(w, cfg)
	if err != nil {
		return nil, 0, err
	}
	// Candidates: each site's nearest regions with capacity, as many as
	// the waterfall's walk visits plus margin. The waterfall also puts
	// those regions in order (model.regionAt).
	k := make([]int32, len(m.sites))
	if margin >= 0 {
		rows, _ := m.waterfall()
		for s := range k {
			k[s] = int32(len(rows[s]) + margin)
		}
	} else {
		for s, site := range m.sites {
			k[s] = site.reach
		}
	}
	for solves := 1; ; solves++ {
		p, a0 := m.flowProblem(k)
		sol, err := mincostflow.Solve(p)
		if err != nil {
			// Unreachable: newModel validated everything p is made of.
			return nil, solves, fmt.Errorf("%w: min_rtt: %w", ErrInvalidWorld, err)
		}
		if m.grow(k, a0, p, sol) {
			continue
		}
		rows, unplaced := m.cells(p, a0, sol)
		return m.plan(rows, true, unplaced), solves, nil
	}
}

// candidateMargin is how many regions with capacity beyond those its
// waterfall walk visits each site starts with as min_rtt candidates.
const candidateMargin = 3

// flowProblem returns min_rtt's min-cost flow problem for m: sources are
// sites, destinations regions, in the model's order; the arcs of site s are
// p.Arcs[a0[s]:a0[s+1]], one per region with capacity among the site's
// k[s] nearest such regions, nearest first, and none for a site without
// demand.
func (m *model) flowProblem(k []int32) (p mincostflow.Problem, a0 []int32) {
	ns, nr := len(m.sites), len(m.regions)
	p = mincostflow.Problem{
		Supply:   make([]float64, ns),
		Capacity: make([]float64, nr),
		Level:    m.lambda,
	}
	for r := range m.regions {
		p.Capacity[r] = m.regions[r].capacity
	}
	narcs := 0
	for s, site := range m.sites {
		if site.demand > 0 {
			narcs += int(min(k[s], site.reach))
		}
	}
	p.Arcs = make([]mincostflow.Arc, 0, narcs)
	a0 = make([]int32, ns+1)
	for s, site := range m.sites {
		a0[s] = int32(len(p.Arcs))
		p.Supply[s] = site.demand
		if site.demand <= 0 {
			continue
		}
		m.orderPrefix(s, int(k[s]))
		for i := 0; i < int(site.reach) && len(p.Arcs)-int(a0[s]) < int(k[s]); i++ {
			r := m.regionAt(s, i)
			reg := &m.regions[r]
			if reg.capacity <= 0 {
				continue
			}
			p.Arcs = append(p.Arcs, mincostflow.Arc{Source: int32(s), Dest: r,
				Cost: math.Float64frombits(m.rttOf(s, r)), Keep: reg.keep})
		}
	}
	a0[ns] = int32(len(p.Arcs))
	return p, a0
}

// grow checks that sol, solved over each site's k[s] nearest regions with
// capacity, is optimal over all the regions the sites reach: every arc
// left out must be Priced (mincostflow: its reduced cost is ≥ 0 and no
// overloaded set was split off). It reports false when so. Otherwise it
// widens k for every site with an arc that is not, to at least twice its
// size and past that arc, and reports true; the caller solves again. A
// site whose every region is a candidate has nothing left out, so the
// loop ends, at worst with every pair an arc.
func (m *model) grow(k, a0 []int32, p mincostflow.Problem, sol *mincostflow.Solution) bool {
	grown := false
	nr := len(m.regions)
	arc := make([]bool, nr)
	for s, site := range m.sites {
		arcs := p.Arcs[a0[s]:a0[s+1]]
		if site.demand <= 0 || len(arcs) == 0 || int32(len(arcs)) < k[s] {
			continue // no demand, or every region with capacity is an arc
		}
		// Every region left out is at least as far as the last arc: one
		// bound for all of them (PricedFrom), else one check each, in
		// index order (no need to put the site in order).
		if sol.PricedFrom(s, arcs[len(arcs)-1].Cost) {
			continue
		}
		for _, a := range arcs {
			arc[a.Dest] = true
		}
		row := m.rtt[s*nr : (s+1)*nr]
		var worst uint64 // the farthest region that is not Priced
		failed := false
		for r, b := range row {
			if b == unreachable || arc[r] || m.regions[r].capacity <= 0 {
				continue
			}
			if !sol.Priced(s, r, math.Float64frombits(b)) {
				failed = true
				worst = max(worst, b)
			}
		}
		for _, a := range arcs {
			arc[a.Dest] = false
		}
		if !failed {
			continue
		}
		// Widen past the farthest: count the regions with capacity no
		// farther than it.
		var need int32
		for r, b := range row {
			if b != unreachable && b <= worst && m.regions[r].capacity > 0 {
				need++
			}
		}
		k[s] = max(2*k[s], need)
		grown = true
	}
	return grown
}

// cells labels the flows of sol (the solution of p, whose arcs of site s
// are p.Arcs[a0[s]:a0[s+1]]) by Reason into each site's cells, adds the
// idle rows and returns them with each site's unplaced demand, for plan:
// rows[s][i] is the cell of the i-th region of site s's order, and a row
// is as long as the part of the order produced (model.ord), which holds
// every region with an arc. Only sites that need it are put in order
// whole: those in an overloaded set, and sites without demand.
func (m *model) cells(p mincostflow.Problem, a0 []int32, sol *mincostflow.Solution) ([][]cell, []float64) {
	ns, nr := len(m.sites), len(m.regions)
	unplaced := make([]float64, ns)
	overloaded := make([]bool, ns)
	for s, site := range m.sites {
		switch {
		case site.demand <= 0:
			m.siteReach(s)
		case a0[s] == a0[s+1]:
			unplaced[s] = site.demand
		case sol.Level(s) > m.lambda*(1+1e-9):
			overloaded[s] = true
			m.siteReach(s)
		}
	}
	n := 0
	for s := range m.sites {
		if unplaced[s] == 0 {
			n += len(m.ord[s])
		}
	}
	arena := make([]cell, n)
	rows := make([][]cell, ns)
	for s := range m.sites {
		if unplaced[s] == 0 {
			l := len(m.ord[s])
			rows[s], arena = arena[:l:l], arena[l:]
		}
	}

	x := make([]float64, nr)
	for s, site := range m.sites {
		if site.demand <= 0 || unplaced[s] > 0 {
			continue
		}
		arcs := p.Arcs[a0[s]:a0[s+1]]
		for i, a := range arcs {
			x[a.Dest] = max(0, sol.Flow(int(a0[s])+i))
		}
		row := rows[s]
		m.label(row, s, site.demand, x)
		for _, a := range arcs {
			x[a.Dest] = 0
		}
		if overloaded[s] {
			for i := range row {
				c := &row[i]
				c[ReasonOverload] += c[ReasonSpillCapacity] + c[ReasonSpillHealth]
				c[ReasonSpillCapacity], c[ReasonSpillHealth] = 0, 0
			}
		}
	}

	// Idle rows: a small demand takes no room, so it goes to the nearest
	// regions with room, each keeping at most its keep share of it; what
	// is left goes to the nearest region with room, or is spread as
	// overload when there is none.
	hasRoom := func(r int32) bool { return sol.HasRoom(int(r)) }
	for s, site := range m.sites {
		if site.demand > 0 {
			continue
		}
		reach := m.siteReach(s)
		rem := 1.0
		for _, r := range reach {
			if rem > 0 && hasRoom(r) {
				t := min(m.regions[r].keep, rem)
				x[r] += t
				rem -= t
			}
		}
		if rem > dustEps {
			for _, r := range reach {
				if hasRoom(r) {
					x[r] += rem
					rem = 0
					break
				}
			}
		}
		row := rows[s]
		m.label(row, s, 1, x)
		for _, r := range reach {
			x[r] = 0
		}
		if rem > dustEps {
			m.spread(s, rem, func(i int, _ int32) *cell { return &row[i] })
		}
	}
	return rows, unplaced
}

// label adds to row (site s's cells, row[i] that of the i-th region of its
// order) the demand x[r] the site sends to each region r, split by Reason:
// it walks the site's regions in order holding
// the demand not yet placed by the cause of its last move, as Compute's
// walker does. Demand starts as ReasonNearest; after region r, the part of
// it beyond r's keep bound (keep·demand) that r did not take becomes
// ReasonSpillHealth and the rest ReasonSpillCapacity. It walks the part of
// the order produced so far (model.ord), which holds every region x sends
// to: regions beyond the last of those would add nothing.
func (m *model) label(row []cell, s int, demand float64, x []float64) {
	left := [...]float64{demand, 0, 0}
	for i, r := range m.ord[s] {
		t := x[r]
		rem := left[0] + left[1] + left[2]
		if rem <= 0 {
			row[i][ReasonSpillCapacity] += t // rounding only
			continue
		}
		if t > 0 {
			for j, v := range left {
				row[i][j] += t * (v / rem)
			}
		}
		after := max(0, rem-t)
		var h float64
		if k := m.regions[r].keep; k < 1 {
			h = min(max(0, rem-k*demand), after)
		}
		left = [...]float64{0, after - h, h}
	}
}
