package mincostflow

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// penaltyAndCost returns the lexicographic cost of sol's flow on p: the
// flow above the arcs' keep shares, and Σ Cost·flow.
func penaltyAndCost(p Problem, sol *Solution) (pen, cost float64) {
	for a, arc := range p.Arcs {
		x := sol.Flow(a)
		pen += max(0, x-keepCap(p, arc))
		cost += arc.Cost * x
	}
	return pen, cost
}

// keepCap is the flow arc carries without penalty.
func keepCap(p Problem, arc Arc) float64 {
	if arc.Keep < 1 {
		return arc.Keep * p.Supply[arc.Source]
	}
	return p.Supply[arc.Source]
}

// lpOptimum solves p as two linear programs with gonum's simplex,
// independently of Solve: variables x0, x1 ≥ 0 per arc (the flow within
// and above the keep share), Σ x = supply per source with arcs, load ≤
// Level·capacity per destination, x0 ≤ keep·supply and x1 ≤ the rest per
// arc. The first minimises the penalty Σ x1, the second the cost Σ Cost·x
// with the penalty held at the first's optimum. It returns lp.ErrInfeasible
// when no flow keeps every destination within Level·capacity.
func lpOptimum(p Problem) (pen, cost float64, err error) {
	na, nd := len(p.Arcs), len(p.Capacity)
	hasArcs := make([]bool, len(p.Supply))
	for _, a := range p.Arcs {
		hasArcs[a.Source] = true
	}
	var srcRows []int // source of each equality row
	for s, ok := range hasArcs {
		if ok {
			srcRows = append(srcRows, s)
		}
	}
	// Columns: x0[a], x1[a], slack per destination, slack per x0 and x1
	// bound, and one slack for the penalty bound of the second program.
	cols := 2*na + nd + 2*na + 1
	rows := len(srcRows) + nd + 2*na + 1
	build := func(penBound float64) (*mat.Dense, []float64) {
		a := mat.NewDense(rows, cols, nil)
		b := make([]float64, rows)
		row := 0
		for _, s := range srcRows {
			for i, arc := range p.Arcs {
				if int(arc.Source) == s {
					a.Set(row, i, 1)
					a.Set(row, na+i, 1)
				}
			}
			b[row] = p.Supply[s]
			row++
		}
		for d := range nd {
			for i, arc := range p.Arcs {
				if int(arc.Dest) == d {
					a.Set(row, i, 1)
					a.Set(row, na+i, 1)
				}
			}
			a.Set(row, 2*na+d, 1)
			b[row] = p.Level * p.Capacity[d] * (1 + 1e-12)
			row++
		}
		for i, arc := range p.Arcs {
			u0 := keepCap(p, arc)
			a.Set(row, i, 1)
			a.Set(row, 2*na+nd+i, 1)
			b[row] = u0
			row++
			a.Set(row, na+i, 1)
			a.Set(row, 2*na+nd+na+i, 1)
			b[row] = p.Supply[arc.Source] - u0
			row++
		}
		for i := range na {
			a.Set(row, na+i, 1)
		}
		a.Set(row, cols-1, 1)
		b[row] = penBound
		return a, b
	}
	var supply float64
	for _, v := range p.Supply {
		supply += v
	}
	c := make([]float64, cols)
	for i := range na {
		c[na+i] = 1
	}
	a, b := build(supply + 1) // no bound yet
	pen, _, err = lp.Simplex(c, a, b, 1e-10, nil)
	if err != nil {
		return 0, 0, err
	}
	clear(c)
	for i, arc := range p.Arcs {
		c[i], c[na+i] = arc.Cost, arc.Cost
	}
	a, b = build(pen*(1+1e-12) + 1e-12*(1+supply))
	cost, _, err = lp.Simplex(c, a, b, 1e-10, nil)
	return pen, cost, err
}

// checkFlow reports how sol's flow on p breaks the rules every Solution
// keeps: each source with arcs sends its supply, no arc carries less than
// zero, and no destination takes more than its capacity times the level of
// every source sending to it.
func checkFlow(p Problem, sol *Solution) error {
	sent := make([]float64, len(p.Supply))
	has := make([]bool, len(p.Supply))
	load := make([]float64, len(p.Capacity))
	for a, arc := range p.Arcs {
		x := sol.Flow(a)
		if x < -1e-9*p.Supply[arc.Source] {
			return fmt.Errorf("arc %d carries %v", a, x)
		}
		sent[arc.Source] += x
		has[arc.Source] = true
		load[arc.Dest] += x
	}
	for s, v := range p.Supply {
		if has[s] && math.Abs(sent[s]-v) > 1e-9*(1+v) {
			return fmt.Errorf("source %d sends %v of its supply %v", s, sent[s], v)
		}
		if !has[s] && sol.Level(s) != p.Level {
			return fmt.Errorf("source %d has no arcs but level %v, want %v", s, sol.Level(s), p.Level)
		}
	}
	for d, l := range load {
		if math.Abs(l-sol.Load(d)) > 1e-9*(1+l) {
			return fmt.Errorf("destination %d: Load %v, flows add to %v", d, sol.Load(d), l)
		}
	}
	for a, arc := range p.Arcs {
		if sol.Flow(a) <= 1e-9 {
			continue
		}
		if lim := sol.Level(int(arc.Source)) * p.Capacity[arc.Dest]; load[arc.Dest] > lim*(1+1e-9) {
			return fmt.Errorf("destination %d takes %v, above its limit %v at the level of source %d", arc.Dest, load[arc.Dest], lim, arc.Source)
		}
	}
	return nil
}

// compareLP checks sol against lpOptimum(p): where every source runs at
// p.Level (overloaded false), the penalty and the cost must be the LP's
// optimum to rounding; where some set runs above it, the LP must be
// infeasible.
func compareLP(p Problem, sol *Solution) (overloaded bool, err error) {
	for s := range p.Supply {
		overloaded = overloaded || sol.Level(s) > p.Level*(1+1e-9)
	}
	pen, cost := penaltyAndCost(p, sol)
	lpPen, lpCost, lpErr := lpOptimum(p)
	switch {
	case overloaded:
		if !errors.Is(lpErr, lp.ErrInfeasible) {
			return true, fmt.Errorf("overloaded set, but the LP says %v (%v, %v)", lpErr, lpPen, lpCost)
		}
	case lpErr != nil:
		return false, fmt.Errorf("LP: %w", lpErr)
	case math.Abs(pen-lpPen) > 1e-6*(1+lpPen) || math.Abs(cost-lpCost) > 1e-6*max(1, lpCost):
		return false, fmt.Errorf("(penalty, cost) = (%v, %v), LP optimum (%v, %v)", pen, cost, lpPen, lpCost)
	}
	return overloaded, nil
}

// TestSolve plays small hand-made problems whose optimum is known, and
// checks each against the LP too.
func TestSolve(t *testing.T) {
	full := func(src, dst int32, cost float64) Arc { return Arc{Source: src, Dest: dst, Cost: cost, Keep: 1} }
	tests := []struct {
		name string
		p    Problem
		// flows per arc, levels per source and the penalty of the optimum
		flows  []float64
		levels []float64
		pen    float64
	}{
		{
			name:   "nearest fits",
			p:      Problem{Supply: []float64{10}, Capacity: []float64{20, 20}, Level: 1, Arcs: []Arc{full(0, 0, 1), full(0, 1, 5)}},
			flows:  []float64{10, 0},
			levels: []float64{1},
		},
		{
			// ComputeMinRTT's doc example: x steps aside for y, whose
			// alternative is far.
			name: "step aside",
			p: Problem{Supply: []float64{80, 80}, Capacity: []float64{100, 1000}, Level: 1,
				Arcs: []Arc{full(0, 0, 10), full(0, 1, 11), full(1, 0, 20), full(1, 1, 100)}},
			flows:  []float64{20, 60, 80, 0},
			levels: []float64{1, 1},
		},
		{
			name: "keep share met elsewhere",
			p: Problem{Supply: []float64{10}, Capacity: []float64{100, 100}, Level: 1,
				Arcs: []Arc{{Source: 0, Dest: 0, Cost: 1, Keep: 0.3}, full(0, 1, 5)}},
			flows:  []float64{3, 7},
			levels: []float64{1},
		},
		{
			name: "keep share exceeded when nothing else reaches",
			p: Problem{Supply: []float64{10}, Capacity: []float64{100}, Level: 1,
				Arcs: []Arc{{Source: 0, Dest: 0, Cost: 1, Keep: 0.3}}},
			flows:  []float64{10},
			levels: []float64{1},
			pen:    7,
		},
		{
			name: "keep share exceeded only by what the other destination cannot take",
			p: Problem{Supply: []float64{10}, Capacity: []float64{100, 4}, Level: 1,
				Arcs: []Arc{{Source: 0, Dest: 0, Cost: 1, Keep: 0.3}, full(0, 1, 5)}},
			flows:  []float64{6, 4},
			levels: []float64{1},
			pen:    3,
		},
		{
			name: "level scales capacity",
			p: Problem{Supply: []float64{15}, Capacity: []float64{10, 100}, Level: 1.5,
				Arcs: []Arc{full(0, 0, 1), full(0, 1, 2)}},
			flows:  []float64{15, 0},
			levels: []float64{1.5},
		},
		{
			name: "uniform overload of the whole problem",
			p: Problem{Supply: []float64{30, 30}, Capacity: []float64{10, 20}, Level: 1,
				Arcs: []Arc{full(0, 0, 1), full(0, 1, 2), full(1, 1, 1), full(1, 0, 3)}},
			flows:  []float64{20, 10, 30, 0},
			levels: []float64{2, 2},
		},
		{
			// s0 reaches only d0, which s1 leaves for d1: {s0, d0} runs
			// at 30/10, the rest at Level.
			name: "overloaded closed set",
			p: Problem{Supply: []float64{30, 10}, Capacity: []float64{10, 100}, Level: 1,
				Arcs: []Arc{full(0, 0, 1), full(1, 0, 1), full(1, 1, 2)}},
			flows:  []float64{30, 0, 10},
			levels: []float64{3, 1},
		},
		{
			// d0's excess (s0's) is stuck at once: s0 reaches only d0.
			// d1's (s1's) is stuck too, but s1 also reaches d0, so the
			// closed set is all of it and runs at one level, 45/20, with
			// s1 sending 7.5 to d0: splitting off {s0, d0} as soon as
			// its search fails would run it at 1.5 and {s1, d1} at 3.
			name: "stuck excess whose set reaches another stuck set",
			p: Problem{Supply: []float64{15, 30}, Capacity: []float64{10, 10}, Level: 1,
				Arcs: []Arc{full(0, 0, 1), full(1, 1, 1), full(1, 0, 5)}},
			flows:  []float64{15, 22.5, 7.5},
			levels: []float64{2.25, 2.25},
		},
		{
			name: "sources without supply or arcs",
			p: Problem{Supply: []float64{0, 5, 7}, Capacity: []float64{10}, Level: 1,
				Arcs: []Arc{full(0, 0, 1), full(1, 0, 1)}},
			flows:  []float64{0, 5},
			levels: []float64{1, 1, 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sol, err := Solve(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkFlow(tc.p, sol); err != nil {
				t.Error(err)
			}
			for a, want := range tc.flows {
				if got := sol.Flow(a); math.Abs(got-want) > 1e-9 {
					t.Errorf("arc %d (%d→%d): flow %v, want %v", a, tc.p.Arcs[a].Source, tc.p.Arcs[a].Dest, got, want)
				}
			}
			for s, want := range tc.levels {
				if got := sol.Level(s); math.Abs(got-want) > 1e-12 {
					t.Errorf("source %d: level %v, want %v", s, got, want)
				}
			}
			pen, _ := penaltyAndCost(tc.p, sol)
			if math.Abs(pen-tc.pen) > 1e-9 {
				t.Errorf("penalty %v, want %v", pen, tc.pen)
			}
			if _, err := compareLP(tc.p, sol); err != nil {
				t.Error(err)
			}
		})
	}
}

// randomProblem is a small random problem: 1–6 sources, 1–5 destinations,
// each pair an arc with probability 0.7, integer-ish costs with ties, a
// third of the destinations with a keep share below 1, and supply at
// 30–150% of capacity.
func randomProblem(rng *rand.Rand) Problem {
	ns, nd := 1+rng.IntN(6), 1+rng.IntN(5)
	p := Problem{Supply: make([]float64, ns), Capacity: make([]float64, nd), Level: 1 + rng.Float64()*float64(rng.IntN(2))}
	keep := make([]float64, nd)
	var capacity float64
	for d := range nd {
		p.Capacity[d] = 5 + 50*rng.Float64()
		capacity += p.Capacity[d]
		keep[d] = 1
		if rng.IntN(3) == 0 {
			keep[d] = rng.Float64()
		}
	}
	ratio := 0.3 + 1.2*rng.Float64()
	for s := range ns {
		if rng.IntN(8) != 0 {
			p.Supply[s] = ratio * capacity / float64(ns) * (0.2 + 1.6*rng.Float64())
		}
		var arcs []Arc
		for d := range nd {
			if rng.Float64() < 0.7 {
				arcs = append(arcs, Arc{Source: int32(s), Dest: int32(d), Cost: float64(1 + rng.IntN(20)), Keep: keep[d]})
			}
		}
		slices.SortStableFunc(arcs, func(a, b Arc) int { return int(a.Cost - b.Cost) })
		p.Arcs = append(p.Arcs, arcs...)
	}
	return p
}

// TestSolveMatchesLP compares Solve with the two-program LP on random small
// problems: where every source runs at Level, the penalty and the cost
// must be the LP's optimum to rounding; where some set is overloaded, the
// LP must be infeasible. Both kinds must occur, so the test can tell.
func TestSolveMatchesLP(t *testing.T) {
	var compared, overloaded int
	for seed := range uint64(1000) {
		p := randomProblem(rand.New(rand.NewPCG(seed, 3)))
		sol, err := Solve(p)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := checkFlow(p, sol); err != nil {
			t.Errorf("seed %d: %v\n%+v", seed, err, p)
			continue
		}
		over, err := compareLP(p, sol)
		if err != nil {
			t.Errorf("seed %d: %v\n%+v", seed, err, p)
		}
		if over {
			overloaded++
		} else {
			compared++
		}
	}
	t.Logf("%d problems matched the LP, %d overloaded ones found infeasible by it", compared, overloaded)
	if compared < 300 || overloaded < 100 {
		t.Errorf("compared %d problems with the LP (want ≥ 300) and %d overloaded ones (want ≥ 100)", compared, overloaded)
	}
}

// TestSolveDeterministic: the same Problem gives the same Solution bit for
// bit, and Solve changes nothing of its argument.
func TestSolveDeterministic(t *testing.T) {
	for seed := range uint64(50) {
		p := randomProblem(rand.New(rand.NewPCG(seed, 5)))
		supply, capacity, arcs := slices.Clone(p.Supply), slices.Clone(p.Capacity), slices.Clone(p.Arcs)
		a, err := Solve(p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Solve(p)
		if !slices.Equal(p.Supply, supply) || !slices.Equal(p.Capacity, capacity) || !slices.Equal(p.Arcs, arcs) {
			t.Fatalf("seed %d: Solve changed its argument", seed)
		}
		for i := range p.Arcs {
			if math.Float64bits(a.Flow(i)) != math.Float64bits(b.Flow(i)) {
				t.Errorf("seed %d: arc %d: flow %v then %v", seed, i, a.Flow(i), b.Flow(i))
			}
		}
		for s := range p.Supply {
			if a.Level(s) != b.Level(s) {
				t.Errorf("seed %d: source %d: level %v then %v", seed, s, a.Level(s), b.Level(s))
			}
		}
		for d := range p.Capacity {
			if a.Load(d) != b.Load(d) || a.HasRoom(d) != b.HasRoom(d) {
				t.Errorf("seed %d: destination %d differs", seed, d)
			}
		}
	}
}

// TestSolveHasRoom: a destination has room exactly when its load is below
// its limit at its set's level.
func TestSolveHasRoom(t *testing.T) {
	p := Problem{Supply: []float64{10, 30}, Capacity: []float64{10, 20, 10}, Level: 1,
		Arcs: []Arc{{Source: 0, Dest: 0, Cost: 1, Keep: 1}, {Source: 0, Dest: 1, Cost: 2, Keep: 1},
			{Source: 1, Dest: 2, Cost: 1, Keep: 1}}}
	sol, err := Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	// d0 is full at 10, d1 empty, d2 overloaded alone at level 3 (and full).
	for d, want := range []bool{false, true, false} {
		if got := sol.HasRoom(d); got != want {
			t.Errorf("destination %d (load %v): HasRoom %v, want %v", d, sol.Load(d), got, want)
		}
	}
	if got := sol.Level(1); got != 3 {
		t.Errorf("source 1: level %v, want 3", got)
	}
}

func TestSolveInvalid(t *testing.T) {
	ok := func() Problem {
		return Problem{Supply: []float64{1, 1}, Capacity: []float64{1, 1}, Level: 1,
			Arcs: []Arc{{0, 0, 1, 1}, {0, 1, 2, 1}, {1, 0, 1, 1}}}
	}
	tests := []struct {
		name string
		edit func(p *Problem)
	}{
		{"zero level", func(p *Problem) { p.Level = 0 }},
		{"NaN level", func(p *Problem) { p.Level = math.NaN() }},
		{"infinite level", func(p *Problem) { p.Level = math.Inf(1) }},
		{"negative supply", func(p *Problem) { p.Supply[1] = -1 }},
		{"NaN supply", func(p *Problem) { p.Supply[0] = math.NaN() }},
		{"infinite capacity", func(p *Problem) { p.Capacity[0] = math.Inf(1) }},
		{"source out of range", func(p *Problem) { p.Arcs[2].Source = 2 }},
		{"negative destination", func(p *Problem) { p.Arcs[0].Dest = -1 }},
		{"destination out of range", func(p *Problem) { p.Arcs[1].Dest = 2 }},
		{"destination without capacity", func(p *Problem) { p.Capacity[1] = 0 }},
		{"negative cost", func(p *Problem) { p.Arcs[0].Cost = -1 }},
		{"NaN cost", func(p *Problem) { p.Arcs[1].Cost = math.NaN() }},
		{"keep above 1", func(p *Problem) { p.Arcs[0].Keep = 1.5 }},
		{"NaN keep", func(p *Problem) { p.Arcs[0].Keep = math.NaN() }},
		{"sources out of order", func(p *Problem) { p.Arcs[0], p.Arcs[2] = p.Arcs[2], p.Arcs[0] }},
		{"costs out of order", func(p *Problem) { p.Arcs[0].Cost = 3 }},
	}
	if _, err := Solve(ok()); err != nil {
		t.Fatalf("the valid problem: %v", err)
	}
	for _, tc := range tests {
		p := ok()
		tc.edit(&p)
		if _, err := Solve(p); !errors.Is(err, ErrInvalidProblem) {
			t.Errorf("%s: Solve error %v, want one wrapping ErrInvalidProblem", tc.name, err)
		}
	}
}

// TestPricedCertifiesOptimum drops arcs from random problems, solves what
// is left and asks Priced about every dropped arc: where all are Priced,
// the smaller problem's flow must be an optimum of the whole problem (its
// penalty and cost those of Solve on the whole one, to rounding); and
// PricedFrom(src, c) must never hold where Priced fails for an arc of cost
// ≥ c. Both verdicts must occur, so the test can tell.
func TestPricedCertifiesOptimum(t *testing.T) {
	var certified, refused int
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 11))
		full := randomProblem(rng)
		sub := full
		sub.Arcs = nil
		var dropped []Arc
		for i, a := range full.Arcs {
			first := i == 0 || full.Arcs[i-1].Source != a.Source
			if !first && rng.IntN(3) == 0 {
				dropped = append(dropped, a)
				continue
			}
			sub.Arcs = append(sub.Arcs, a)
		}
		sol, err := Solve(sub)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		all, asked := true, 0
		for _, a := range dropped {
			if full.Supply[a.Source] <= 0 {
				continue
			}
			asked++
			ok := sol.Priced(int(a.Source), int(a.Dest), a.Cost)
			all = all && ok
			if !ok && sol.PricedFrom(int(a.Source), a.Cost) {
				t.Errorf("seed %d: PricedFrom(%d, %v) holds but Priced fails for %+v", seed, a.Source, a.Cost, a)
			}
		}
		if asked == 0 {
			continue
		}
		if !all {
			refused++
			continue
		}
		certified++
		want, err := Solve(full)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		wantPen, wantCost := penaltyAndCost(full, want)
		gotPen, gotCost := penaltyAndCost(sub, sol)
		tol := 1e-9 * (1 + math.Abs(wantCost))
		if math.Abs(gotPen-wantPen) > 1e-9*(1+wantPen) || math.Abs(gotCost-wantCost) > tol {
			t.Errorf("seed %d: certified flow has penalty %v cost %v, the whole problem's optimum %v %v\n%+v", seed, gotPen, gotCost, wantPen, wantCost, full)
		}
	}
	t.Logf("%d subproblems certified optimal for the whole problem, %d refused", certified, refused)
	if certified < 400 || refused < 100 {
		t.Errorf("certified %d (want ≥ 400), refused %d (want ≥ 100)", certified, refused)
	}
}
