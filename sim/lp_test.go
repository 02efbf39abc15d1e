package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// all returns a reach matrix where every site reaches every region.
func all(sites, regions int) [][]bool {
	r := make([][]bool, sites)
	for i := range r {
		r[i] = make([]bool, regions)
		for j := range r[i] {
			r[i][j] = true
		}
	}
	return r
}

// TestSolveLP checks optima worked out by hand. Sites a and b, regions X
// and Y.
func TestSolveLP(t *testing.T) {
	tests := []struct {
		name    string
		p       LPProblem
		want    LPSolution
		wantErr error
	}{
		{
			// X has room for a's 100 and 50 of b's; a gains 20/unit from X,
			// b only 5, so a takes X first: 100·10 + 50·20 + 50·25.
			name: "both want X, a gains more from it",
			p: LPProblem{
				Demand: []float64{100, 100}, Capacity: []float64{150, 100},
				RTT: [][]float64{{10, 30}, {20, 25}}, Reach: all(2, 2),
			},
			want: LPSolution{Placed: 200, Cost: 3250, Flows: [][]float64{{100, 0}, {50, 50}}, Lambda: 1},
		},
		{
			// Nearest-first would put a on X (10) and b on Y (100): 11000.
			// The optimum moves a to Y (12) and b to X (11): 2300.
			name: "optimum is not nearest-first",
			p: LPProblem{
				Demand: []float64{100, 100}, Capacity: []float64{100, 100},
				RTT: [][]float64{{10, 12}, {11, 100}}, Reach: all(2, 2),
			},
			want: LPSolution{Placed: 200, Cost: 2300, Flows: [][]float64{{0, 100}, {100, 0}}, Lambda: 1},
		},
		{
			// 300 on 200: λ = 1.5, each region takes 150, all local.
			name: "global overload scales capacity by lambda",
			p: LPProblem{
				Demand: []float64{150, 150}, Capacity: []float64{100, 100},
				RTT: [][]float64{{10, 50}, {50, 10}}, Reach: all(2, 2),
			},
			want: LPSolution{Placed: 300, Cost: 3000, Flows: [][]float64{{150, 0}, {0, 150}}, Lambda: 1.5},
		},
		{
			name: "partial reach takes the solver's own start",
			p: LPProblem{
				Demand: []float64{100, 100}, Capacity: []float64{150, 100},
				RTT: [][]float64{{10, 0}, {20, 25}}, Reach: [][]bool{{true, false}, {true, true}},
			},
			want: LPSolution{Placed: 200, Cost: 3250, Flows: [][]float64{{100, 0}, {50, 50}}, Lambda: 1},
		},
		{
			name: "a site that reaches no capacity is left out",
			p: LPProblem{
				Demand: []float64{100, 40}, Capacity: []float64{0, 100},
				RTT: [][]float64{{10, 0}, {30, 20}}, Reach: [][]bool{{true, false}, {true, true}},
			},
			want: LPSolution{Placed: 40, Cost: 800, Flows: [][]float64{{0, 0}, {0, 40}}, Lambda: 1},
		},
		{
			name: "no demand",
			p: LPProblem{
				Demand: []float64{0, 0}, Capacity: []float64{100, 100},
				RTT: [][]float64{{1, 2}, {2, 1}}, Reach: all(2, 2),
			},
			want: LPSolution{Flows: [][]float64{{0, 0}, {0, 0}}, Lambda: 1},
		},
		{
			name: "one region: an exactly constrained system",
			p: LPProblem{
				Demand: []float64{30, 20}, Capacity: []float64{100},
				RTT: [][]float64{{7}, {9}}, Reach: all(2, 1),
			},
			want: LPSolution{Placed: 50, Cost: 390, Flows: [][]float64{{30}, {20}}, Lambda: 1},
		},
		{
			// a reaches only X (50) with 100 of demand; λ = 110/250 < 1.
			name: "infeasible",
			p: LPProblem{
				Demand: []float64{100, 10}, Capacity: []float64{50, 200},
				RTT: [][]float64{{10, 0}, {0, 10}}, Reach: [][]bool{{true, false}, {false, true}},
			},
			wantErr: ErrLPInfeasible,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SolveLP(tt.p)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("SolveLP() error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(1e-9, 1e-6)); diff != "" {
				t.Errorf("SolveLP() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLeastRTTBasis checks on random problems that the least-cost start is
// a basis the solver accepts (S+R distinct columns) and that starting from
// it reaches the same optimum as the solver's own phase 1.
func TestLeastRTTBasis(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 40 {
		S, R := 1+rng.IntN(12), 1+rng.IntN(6)
		p := LPProblem{Demand: make([]float64, S), Capacity: make([]float64, R), RTT: make([][]float64, S), Reach: all(S, R)}
		for s := range S {
			p.Demand[s] = math.Round(1000 * rng.Float64())
			p.RTT[s] = make([]float64, R)
			for r := range R {
				p.RTT[s][r] = math.Round(200 * rng.Float64())
			}
		}
		for r := range R {
			p.Capacity[r] = 1 + math.Round(1500*rng.Float64())
		}
		supply := make([]float64, S)
		copy(supply, p.Demand)
		basis := leastRTTBasis(supply, p.Capacity, p.RTT)
		if len(basis) != S+R {
			t.Fatalf("%d×%d: basis has %d columns, want %d", S, R, len(basis), S+R)
		}
		seen := map[int]bool{}
		for _, c := range basis {
			if seen[c] || c < 0 || c >= S*R+R {
				t.Fatalf("%d×%d: bad basis %v", S, R, basis)
			}
			seen[c] = true
		}
		warm, err := solveLPFrom(p, true)
		if err != nil {
			t.Fatalf("%d×%d: warm start: %v", S, R, err)
		}
		cold, err := solveLPFrom(p, false)
		if err != nil {
			t.Fatalf("%d×%d: phase 1: %v", S, R, err)
		}
		if math.Abs(warm.Cost-cold.Cost) > 1e-6*max(1, cold.Cost) {
			t.Errorf("%d×%d: cost from the least-cost start %v, from phase 1 %v", S, R, warm.Cost, cold.Cost)
		}
	}
}

// largeScenarioPath is the shipped 80-site × 20-region scenario (see
// sim/policybench's TestLargeScenarioFile).
var largeScenarioPath = filepath.Join("..", "configs", "scenarios", "large.yaml")

// TestSolveLPLarge solves the first step of the shipped 80×20 scenario,
// restricted to its first 40 sites to keep phase 1 quick, both ways.
func TestSolveLPLarge(t *testing.T) {
	s, err := LoadScenario(largeScenarioPath)
	if err != nil {
		t.Fatal(err)
	}
	tr := s.NewTrace(s.Timeline, 1)
	regionAt := map[string]int{}
	capacity := make([]float64, len(s.Regions))
	g := 0
	for ri, r := range s.Regions {
		regionAt[r.Name] = ri
		for _, grp := range r.Groups {
			st := tr.Groups[0][g]
			capacity[ri] += float64(st.Healthy) * grp.RatePerInstance * st.CapacityScaler
			g++
		}
	}
	const n = 40
	p := LPProblem{Demand: tr.Demand[0][:n], Capacity: capacity}
	for _, st := range s.Sites[:n] {
		rtt, reach := make([]float64, len(s.Regions)), make([]bool, len(s.Regions))
		for name, v := range st.RTTms {
			rtt[regionAt[name]], reach[regionAt[name]] = v, true
		}
		p.RTT, p.Reach = append(p.RTT, rtt), append(p.Reach, reach)
	}
	warm, err := solveLPFrom(p, true)
	if err != nil {
		t.Fatal(err)
	}
	cold, err := solveLPFrom(p, false)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(warm.Cost-cold.Cost) > 1e-6*cold.Cost {
		t.Errorf("cost from the least-cost start %v, from phase 1 %v", warm.Cost, cold.Cost)
	}
	var placed float64
	for s := range warm.Flows {
		for r, f := range warm.Flows[s] {
			placed += f
			if f < 0 {
				t.Fatalf("flow %d→%d = %v", s, r, f)
			}
		}
	}
	if math.Abs(placed-warm.Placed) > 1e-6*warm.Placed {
		t.Errorf("flows sum to %v, want %v", placed, warm.Placed)
	}
}
