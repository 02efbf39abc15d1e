package policybench

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The numbers below are worked by hand from stepQueue's doc: μ = 125/s
// (rate 100 at utilization 0.8), so 1/μ = 8 ms.
func TestStepQueue(t *testing.T) {
	tests := []struct {
		name                       string
		backlog, lambda, mu, bound float64
		want                       queueStep
	}{
		{
			name:   "at capacity: no backlog, M/M/1 at rho 0.8, mean 1/(125·0.2) = 40 ms",
			lambda: 100, mu: 125, bound: 125,
			want: queueStep{Backlog: 0, Dropped: 0, WaitS: 0, SojournS: 0.04},
		},
		{
			name:   "20% over the service rate: backlog grows by 25, averages 12.5; rho capped at 0.98",
			lambda: 150, mu: 125, bound: 125,
			want: queueStep{Backlog: 25, Dropped: 0, WaitS: 12.5 / 125, SojournS: 1 / (125 * 0.02)},
		},
		{
			name:    "queue fills 0.2 s into the step: 20 dropped, average (122.5·0.2 + 125·0.8)",
			backlog: 120, lambda: 150, mu: 125, bound: 125,
			want: queueStep{Backlog: 125, Dropped: 20, WaitS: 124.5 / 125, SojournS: 0.4},
		},
		{
			name:    "draining to exactly empty at the end of the step: average 25",
			backlog: 50, lambda: 75, mu: 125, bound: 125,
			want: queueStep{Backlog: 0, Dropped: 0, WaitS: 25.0 / 125, SojournS: 1 / (125 * 0.4)},
		},
		{
			name:    "drains in half the step: average 12.5·0.5",
			backlog: 25, lambda: 75, mu: 125, bound: 125,
			want: queueStep{Backlog: 0, Dropped: 0, WaitS: 6.25 / 125, SojournS: 0.02},
		},
		{
			name:   "a small bound caps rho at bound/(bound+1) = 0.8",
			lambda: 110, mu: 125, bound: 4,
			want: queueStep{Backlog: 0, Dropped: 0, WaitS: 0, SojournS: 0.04},
		},
		{
			name:    "steady backlog when lambda = mu",
			backlog: 10, lambda: 125, mu: 125, bound: 125,
			want: queueStep{Backlog: 10, Dropped: 0, WaitS: 0.08, SojournS: 0.4},
		},
		{
			name:    "no service: everything fails",
			backlog: 3, lambda: 10, mu: 0, bound: 0,
			want: queueStep{Dropped: 13},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := stepQueue(tt.backlog, tt.lambda, tt.mu, tt.bound, 1)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(1e-12, 1e-12)); diff != "" {
				t.Errorf("stepQueue(%v, %v, %v, %v, 1) mismatch (-want +got):\n%s", tt.backlog, tt.lambda, tt.mu, tt.bound, diff)
			}
		})
	}
}

func TestExpQuantiles(t *testing.T) {
	points, masses := expQuantiles()
	var sum float64
	for j := range points {
		sum += masses[j]
		if j > 0 && points[j] <= points[j-1] {
			t.Errorf("points[%d] = %v <= points[%d] = %v", j, points[j], j-1, points[j-1])
		}
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("masses sum to %v, want 1", sum)
	}
	// The median and p99 sit on points of their own.
	for _, q := range []float64{0.5, 0.99} {
		want := -math.Log1p(-q)
		found := false
		for _, p := range points {
			found = found || math.Abs(p-want) < 1e-12
		}
		if !found {
			t.Errorf("no point at the %v quantile %v: %v", q, want, points)
		}
	}
}

func TestLatencyHistQuantiles(t *testing.T) {
	// A bin is 0.1 ms; quantiles are bin middles, so they match the exact
	// value within 0.05 ms.
	const tol = histBinMs / 2
	tests := []struct {
		name string
		add  [][3]float64 // weight, shift, mean
		ps   []float64
		want []float64
	}{
		{
			name: "one exponential: 10 ms + Exp(40 ms)",
			add:  [][3]float64{{1000, 10, 40}},
			ps:   []float64{0.5, 0.99},
			want: []float64{10 + 40*math.Ln2, 10 + 40*math.Log(100)},
		},
		{
			name: "two point masses, 98% at 10 ms and 2% at 100 ms",
			add:  [][3]float64{{98, 10, 0}, {2, 100, 0}},
			ps:   []float64{0.01, 0.5, 0.98, 0.99, 1},
			want: []float64{10.05, 10.05, 10.05, 100.05, 100.05},
		},
		{
			name: "probabilities in any order",
			add:  [][3]float64{{98, 10, 0}, {2, 100, 0}},
			ps:   []float64{0.5, 0.99, 0.01, 0.98},
			want: []float64{10.05, 100.05, 10.05, 10.05},
		},
		{
			name: "empty",
			ps:   []float64{0.5, 0.99},
			want: []float64{0, 0},
		},
		{
			name: "beyond the last bin",
			add:  [][3]float64{{1, 2 * histMaxMs, 0}},
			ps:   []float64{0.5},
			want: []float64{histMaxMs + histBinMs/2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newLatencyHist()
			for _, a := range tt.add {
				h.addExp(a[0], a[1], a[2])
			}
			got := h.quantiles(tt.ps)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, tol)); diff != "" {
				t.Errorf("quantiles(%v) mismatch (-want +got):\n%s", tt.ps, diff)
			}
		})
	}
}
