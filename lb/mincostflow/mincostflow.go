package mincostflow

import (
	"errors"
	"fmt"
	"math"
)

// Tolerances: a residual of at most supplyEps of its source's supply, and
// room or excess of at most roomEps of a destination's limit, count as zero
// (float rounding, not flow).
const (
	supplyEps = 1e-12
	roomEps   = 1e-12
)

// ErrInvalidProblem is wrapped by Solve's errors.
var ErrInvalidProblem = errors.New("mincostflow: invalid problem")

// Problem is one transportation problem (see the package doc).
type Problem struct {
	// Supply is each source's supply, finite and ≥ 0; all of it is placed
	// on the source's arcs. A source without arcs places nothing.
	Supply []float64
	// Capacity is each destination's capacity, finite and ≥ 0.
	Capacity []float64
	// Level, finite and > 0, scales the capacities: while the supply fits,
	// destination d takes at most Level·Capacity[d].
	Level float64
	// Arcs are the arcs, grouped by Source in ascending order and, within
	// a source, in ascending Cost. Ties keep the order given, which then
	// decides between equal-cost solutions.
	Arcs []Arc
}

// Arc is an arc from a source to a destination.
type Arc struct {
	// Source and Dest index Problem.Supply and Problem.Capacity; Dest has
	// a capacity > 0.
	Source, Dest int32
	// Cost is the cost of a unit of flow, finite and ≥ 0 (for min_rtt, the
	// RTT in milliseconds).
	Cost float64
	// Keep, in [0, 1], is the share of the source's supply the arc carries
	// without penalty; each unit beyond Keep·Supply[Source] costs one unit
	// of penalty on top of Cost.
	Keep float64
}

// Solution is the flow Solve found. It is immutable.
type Solution struct {
	n *flowNet
	// maxPot is the greatest potential of a destination, and atLevel
	// whether every node is in the set at Problem.Level (for PricedFrom).
	maxPot  cost
	atLevel bool
}

// Solve returns the optimal flow of p (see the package doc for what is
// optimised and guaranteed). It reads only p, changes nothing of it, and
// returns the same Solution for the same p. It fails only when p breaks a
// rule of Problem or Arc, with an error wrapping ErrInvalidProblem.
func Solve(p Problem) (*Solution, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	n := newFlowNet(p)
	n.solve()
	sol := &Solution{n: n, maxPot: cost{math.Inf(-1), math.Inf(-1)}, atLevel: len(n.level) == 1}
	for d := range n.nr {
		if v := n.pot[n.ns+d]; sol.maxPot.less(v) {
			sol.maxPot = v
		}
	}
	return sol, nil
}

// Priced reports whether an arc from source src to destination d at cost
// c, were it added to the Problem (with any keep share), would leave this
// flow optimal: src and d are in the set at Problem.Level and the arc's
// reduced cost under the solver's final node potentials is ≥ 0. If Priced
// holds for every arc added, the flow is an optimum of the larger Problem
// too, by complementary slackness: every residual arc still has a reduced
// cost ≥ 0 (it may not be the one Solve would return for the larger
// Problem when equal-cost flows tie). False proves nothing: the larger
// Problem may or may not have a better flow. src must have arcs with
// flow (a positive supply) in p, and d a capacity > 0.
func (s *Solution) Priced(src, d int, c float64) bool {
	n := s.n
	if n.comp[src] != 0 || n.comp[n.ns+d] != 0 || len(n.level) != 1 {
		return false
	}
	return !n.pot[src].minus(n.pot[n.ns+d]).plus(cost{0, c}).less(cost{})
}

// PricedFrom reports whether every arc from src of cost at least c, to any
// destination, is Priced: one comparison with the greatest destination
// potential instead of one per destination.
func (s *Solution) PricedFrom(src int, c float64) bool {
	n := s.n
	if !s.atLevel {
		return false
	}
	return !n.pot[src].minus(s.maxPot).plus(cost{0, c}).less(cost{})
}

// Flow returns the flow on p.Arcs[a]: ≥ 0 up to float rounding (a
// rounding residue may leave it a hair below 0).
func (s *Solution) Flow(a int) float64 { return s.n.f0[a] + s.n.f1[a] }

// Level returns the level the set of source src runs at: Problem.Level,
// or the higher level of an overloaded set it belongs to. A source without
// arcs is at Problem.Level.
func (s *Solution) Level(src int) float64 { return s.n.level[s.n.comp[src]] }

// Load returns the total flow into destination d.
func (s *Solution) Load(d int) float64 { return s.n.load[d] }

// HasRoom reports whether destination d has capacity left at its set's
// level (beyond rounding): its load is below its limit.
func (s *Solution) HasRoom(d int) bool {
	n := s.n
	return n.limit[d]-n.load[d] > n.roomE[d] && n.limit[d] > 0
}

// validate checks the rules of Problem and Arc.
func (p Problem) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidProblem, fmt.Sprintf(format, args...))
	}
	finite := func(v float64) bool { return v >= 0 && !math.IsInf(v, 1) } // false for NaN
	if !finite(p.Level) || p.Level == 0 {
		return bad("level %v, want finite and > 0", p.Level)
	}
	for s, v := range p.Supply {
		if !finite(v) {
			return bad("supply[%d] = %v, want finite and ≥ 0", s, v)
		}
	}
	for d, v := range p.Capacity {
		if !finite(v) {
			return bad("capacity[%d] = %v, want finite and ≥ 0", d, v)
		}
	}
	for i, a := range p.Arcs {
		switch {
		case a.Source < 0 || int(a.Source) >= len(p.Supply):
			return bad("arcs[%d]: source %d out of range [0, %d)", i, a.Source, len(p.Supply))
		case a.Dest < 0 || int(a.Dest) >= len(p.Capacity):
			return bad("arcs[%d]: destination %d out of range [0, %d)", i, a.Dest, len(p.Capacity))
		case p.Capacity[a.Dest] <= 0:
			return bad("arcs[%d]: destination %d has no capacity", i, a.Dest)
		case !finite(a.Cost):
			return bad("arcs[%d]: cost %v, want finite and ≥ 0", i, a.Cost)
		case !(a.Keep >= 0 && a.Keep <= 1):
			return bad("arcs[%d]: keep %v, want in [0, 1]", i, a.Keep)
		}
		if i == 0 {
			continue
		}
		switch prev := p.Arcs[i-1]; {
		case a.Source < prev.Source:
			return bad("arcs[%d]: source %d after source %d, want arcs grouped by ascending source", i, a.Source, prev.Source)
		case a.Source == prev.Source && a.Cost < prev.Cost:
			return bad("arcs[%d]: cost %v after %v from source %d, want ascending cost", i, a.Cost, prev.Cost, a.Source)
		}
	}
	return nil
}
