package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// LPProblem is one step's min-RTT assignment problem: how to send every
// site's demand to regions so that the total RTT is least, with no region
// above its capacity (scaled by λ when demand exceeds capacity).
type LPProblem struct {
	// Demand[s] is site s's demand, requests/s.
	Demand []float64
	// Capacity[r] is region r's serving capacity, requests/s.
	Capacity []float64
	// RTT[s][r] is the RTT from site s to region r in ms; Reach[s][r] is
	// false when the site does not reach the region.
	RTT   [][]float64
	Reach [][]bool
}

// LPSolution is the optimum of an LPProblem.
type LPSolution struct {
	// Placed is the demand the optimum places, requests/s: every site's
	// demand, less that of sites reaching no region with capacity.
	Placed float64
	// Cost is Σ flow·RTT at the optimum, in (requests/s)·ms; Cost/Placed is
	// the optimal mean RTT.
	Cost float64
	// Flows[s][r] is the optimal flow from site s to region r.
	Flows [][]float64
	// Lambda is the overload factor max(1, placed demand / capacity).
	Lambda float64
}

// ErrLPInfeasible is returned by SolveLP when the sites' reach leaves no
// assignment within λ·capacity (possible only when some site does not reach
// every region).
var ErrLPInfeasible = errors.New("lp: no assignment fits the capacities")

// SolveLP returns the optimum of p with gonum's simplex solver (lp.Simplex).
//
// In standard form (minimise cᵀx subject to Ax = b, x ≥ 0) the variables
// are one flow x[s,r] per pair (s, r) where s has demand, r has capacity and
// s reaches r, plus one slack u[r] per region; the rows are
//
//	Σ_r x[s,r]        = demand[s]            (each site's demand is met)
//	Σ_s x[s,r] + u[r] = λ·capacity[r]        (no region above λ·capacity)
//
// with λ = max(1, D/C) (D the demand of sites that reach some capacity, C
// the capacity of regions such a site reaches), as in docs/design.md §3 rule 6,
// and cost RTT on x and 0 on u. Demands and capacities are divided by D so
// that the solver works on numbers near 1.
//
// When every site reaches every region this is a balanced transportation
// problem (the slacks act as a dummy site whose supply is the spare capacity
// λC − D), and the least-cost method (leastRTTBasis) gives the solver a
// feasible basis near the optimum to start from, which skips its phase 1
// and most iterations (two orders of magnitude faster on 80 sites × 20
// regions). Otherwise, or if that start fails numerically, the solver finds
// its own.
func SolveLP(p LPProblem) (LPSolution, error) { return solveLPFrom(p, true) }

// solveLPFrom is SolveLP; warm = false always lets the solver find its own
// starting basis (phase 1), for tests that compare both ways.
func solveLPFrom(p LPProblem, warm bool) (LPSolution, error) {
	var sites, regions []int
	regionUsed := make([]bool, len(p.Capacity))
	for s, d := range p.Demand {
		if d <= 0 {
			continue
		}
		reaches := false
		for r, c := range p.Capacity {
			if c > 0 && p.Reach[s][r] {
				reaches = true
				regionUsed[r] = true
			}
		}
		if reaches {
			sites = append(sites, s)
		}
	}
	for r, used := range regionUsed {
		if used {
			regions = append(regions, r)
		}
	}
	sol := LPSolution{Flows: make([][]float64, len(p.Demand)), Lambda: 1}
	for s := range sol.Flows {
		sol.Flows[s] = make([]float64, len(p.Capacity))
	}
	var demand, capacity float64
	for _, s := range sites {
		demand += p.Demand[s]
	}
	for _, r := range regions {
		capacity += p.Capacity[r]
	}
	if len(sites) == 0 {
		return sol, nil
	}
	sol.Lambda = max(1, demand/capacity)
	sol.Placed = demand

	type pair struct{ s, r int }
	var pairs []pair
	full := true
	for _, s := range sites {
		for _, r := range regions {
			if p.Reach[s][r] {
				pairs = append(pairs, pair{s, r})
			} else {
				full = false
			}
		}
	}
	m := len(sites) + len(regions)
	n := len(pairs) + len(regions)
	A := mat.NewDense(m, n, nil)
	c := make([]float64, n)
	b := make([]float64, m)
	siteRow := map[int]int{}
	regionRow := map[int]int{}
	for i, s := range sites {
		siteRow[s] = i
		b[i] = p.Demand[s] / demand
	}
	for j, r := range regions {
		regionRow[r] = len(sites) + j
		// A relative hair of extra room keeps rounding from making a
		// problem infeasible when λ scales capacity to exactly the demand.
		b[len(sites)+j] = sol.Lambda * p.Capacity[r] / demand * (1 + 1e-12)
		A.Set(len(sites)+j, len(pairs)+j, 1) // slack u[r]
	}
	for k, pr := range pairs {
		A.Set(siteRow[pr.s], k, 1)
		A.Set(regionRow[pr.r], k, 1)
		c[k] = p.RTT[pr.s][pr.r]
	}

	var basis []int
	if full && warm {
		cost := make([][]float64, len(sites))
		for i, s := range sites {
			cost[i] = make([]float64, len(regions))
			for j, r := range regions {
				cost[i][j] = p.RTT[s][r]
			}
		}
		basis = leastRTTBasis(b[:len(sites)], b[len(sites):], cost)
	}
	f, x, err := simplex(c, A, b, basis)
	if err != nil && basis != nil {
		f, x, err = simplex(c, A, b, nil)
	}
	if errors.Is(err, lp.ErrInfeasible) {
		return LPSolution{}, ErrLPInfeasible
	}
	if err != nil {
		return LPSolution{}, fmt.Errorf("lp: %w", err)
	}
	sol.Cost = f * demand
	for k, pr := range pairs {
		sol.Flows[pr.s][pr.r] = max(0, x[k]) * demand
	}
	return sol, nil
}

// simplex is lp.Simplex, turning its panic on a bad initial basis into an
// error.
func simplex(c []float64, A mat.Matrix, b []float64, basis []int) (f float64, x []float64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("simplex: %v", r)
		}
	}()
	return lp.Simplex(c, A, b, 1e-10, basis)
}

// leastRTTBasis returns a basic feasible solution of the transportation
// problem with the given supplies (sites), capacities (regions) and costs
// (cost[i][j], the RTT), found by the least-cost method: take cells in
// ascending cost, the cells of a dummy supply row of Σcapacity − Σsupply
// (the slacks) last; give each cell whose row and column are both still open
// as much as both allow, then close its row if the row's supply is used up
// (or its column is the last one open), else its column. Every cell closes
// exactly one line but the last, which closes the final row and column, so
// the S+R cells taken form a spanning tree: a nonsingular, feasible and
// possibly degenerate basis, usually close to the optimum. It returns the
// variable indexes in the column layout of SolveLP for a full reach (pair
// s·R + r, slack S·R + r).
func leastRTTBasis(supply, capacity []float64, cost [][]float64) []int {
	S, R := len(supply), len(capacity)
	left := append([]float64(nil), supply...)
	var spare float64
	for _, v := range capacity {
		spare += v
	}
	for _, v := range supply {
		spare -= v
	}
	left = append(left, math.Max(spare, 0))
	room := append([]float64(nil), capacity...)
	type cell struct {
		i, j int
		c    float64
	}
	cells := make([]cell, 0, (S+1)*R)
	for i := range S + 1 {
		for j := range R {
			c := math.Inf(1)
			if i < S {
				c = cost[i][j]
			}
			cells = append(cells, cell{i, j, c})
		}
	}
	slices.SortStableFunc(cells, func(a, b cell) int { return cmp.Compare(a.c, b.c) })
	rowOpen := make([]bool, S+1)
	colOpen := make([]bool, R)
	for i := range rowOpen {
		rowOpen[i] = true
	}
	for j := range colOpen {
		colOpen[j] = true
	}
	rows, cols := S+1, R
	basis := make([]int, 0, S+R)
	for _, c := range cells {
		if !rowOpen[c.i] || !colOpen[c.j] {
			continue
		}
		if c.i == S {
			basis = append(basis, S*R+c.j)
		} else {
			basis = append(basis, c.i*R+c.j)
		}
		q := math.Min(left[c.i], room[c.j])
		left[c.i] -= q
		room[c.j] -= q
		if len(basis) == S+R {
			return basis
		}
		if (left[c.i] <= room[c.j] && rows > 1) || cols == 1 {
			rowOpen[c.i] = false
			rows--
		} else {
			colOpen[c.j] = false
			cols--
		}
	}
	return basis
}
