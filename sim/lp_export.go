package sim

import (
	"fmt"
	"math"
)

// MinRTTOptimum is the min-RTT linear-program optimum of one steady state:
// the assignment of every site's demand to regions with the least total
// RTT and no region above λ times its capacity. It is the optimum the
// RTT/LP column of `lbsim bench` compares with, exported for the real
// benchmark (internal/realbench).
type MinRTTOptimum struct {
	// MeanRTTMs is the optimum's mean RTT, ms: Σ flow·RTT / Σ flow; 0
	// when no demand is placed.
	MeanRTTMs float64
	// Placed is the demand placed, requests/s: every site's demand, less
	// that of sites that reach no region with capacity.
	Placed float64
	// Lambda is the overload factor max(1, placed demand / capacity of the
	// regions reached).
	Lambda float64
	// Flows[s][r] is the optimal flow from site s to region r,
	// requests/s.
	Flows [][]float64
}

// SolveMinRTT returns the min-RTT optimum (see SolveLP) of sites with the
// given demand (requests/s) over regions with the given capacity
// (requests/s), where rttMs[s][r] is the RTT from site s to region r in ms,
// +Inf when s does not reach r. It fails when the dimensions disagree, a
// number is negative or NaN, or no assignment fits the capacities (possible
// only when some site does not reach every region).
func SolveMinRTT(demand, capacity []float64, rttMs [][]float64) (MinRTTOptimum, error) {
	if len(rttMs) != len(demand) {
		return MinRTTOptimum{}, fmt.Errorf("lp: %d RTT rows for %d sites", len(rttMs), len(demand))
	}
	p := LPProblem{Demand: demand, Capacity: capacity, RTT: make([][]float64, len(demand)), Reach: make([][]bool, len(demand))}
	for s, d := range demand {
		if !(d >= 0) || math.IsInf(d, 0) {
			return MinRTTOptimum{}, fmt.Errorf("lp: demand[%d]: must be finite and >= 0, got %g", s, d)
		}
		if len(rttMs[s]) != len(capacity) {
			return MinRTTOptimum{}, fmt.Errorf("lp: rtt[%d]: %d regions, want %d", s, len(rttMs[s]), len(capacity))
		}
		p.RTT[s] = make([]float64, len(capacity))
		p.Reach[s] = make([]bool, len(capacity))
		for r, v := range rttMs[s] {
			if !(v >= 0) {
				return MinRTTOptimum{}, fmt.Errorf("lp: rtt[%d][%d]: must be >= 0, got %g", s, r, v)
			}
			p.Reach[s][r] = !math.IsInf(v, 1)
			if p.Reach[s][r] {
				p.RTT[s][r] = v
			}
		}
	}
	for r, c := range capacity {
		if !(c >= 0) || math.IsInf(c, 0) {
			return MinRTTOptimum{}, fmt.Errorf("lp: capacity[%d]: must be finite and >= 0, got %g", r, c)
		}
	}
	sol, err := SolveLP(p)
	if err != nil {
		return MinRTTOptimum{}, err
	}
	mean := 0.0
	if m := sol.Cost / sol.Placed; sol.Placed != 0 && !math.IsNaN(m) {
		mean = m
	}
	return MinRTTOptimum{MeanRTTMs: mean, Placed: sol.Placed, Lambda: sol.Lambda, Flows: sol.Flows}, nil
}
