package sim

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestSolveMinRTT checks the exported optimum on hand-worked cases: the
// real benchmark's flash crowd (nyc 450 req/s against us-east's 320), an
// unreachable region, and bad input.
func TestSolveMinRTT(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name     string
		demand   []float64
		capacity []float64
		rtt      [][]float64
		want     MinRTTOptimum
		wantErr  bool
	}{
		{
			// nyc keeps 320 in us-east and spills 130 to eu-west (35 ms);
			// lon and tokyo stay local: (570·8 + 130·35) / 700 = 13.014 ms.
			name:     "flash crowd",
			demand:   []float64{450, 150, 100},
			capacity: []float64{320, 320, 320},
			rtt:      [][]float64{{8, 35, 90}, {35, 8, 80}, {90, 80, 8}},
			want: MinRTTOptimum{MeanRTTMs: (570*8 + 130*35) / 700.0, Placed: 700, Lambda: 1,
				Flows: [][]float64{{320, 130, 0}, {0, 150, 0}, {0, 0, 100}}},
		},
		{
			// a cannot reach Y: it takes X; b goes to Y.
			name:     "unreachable region",
			demand:   []float64{100, 100},
			capacity: []float64{100, 100},
			rtt:      [][]float64{{50, inf}, {10, 20}},
			want:     MinRTTOptimum{MeanRTTMs: 35, Placed: 200, Lambda: 1, Flows: [][]float64{{100, 0}, {0, 100}}},
		},
		{name: "rows disagree", demand: []float64{1, 1}, capacity: []float64{1}, rtt: [][]float64{{1}}, wantErr: true},
		{name: "columns disagree", demand: []float64{1}, capacity: []float64{1}, rtt: [][]float64{{1, 2}}, wantErr: true},
		{name: "negative demand", demand: []float64{-1}, capacity: []float64{1}, rtt: [][]float64{{1}}, wantErr: true},
		{name: "NaN rtt", demand: []float64{1}, capacity: []float64{1}, rtt: [][]float64{{math.NaN()}}, wantErr: true},
		{name: "infinite capacity", demand: []float64{1}, capacity: []float64{inf}, rtt: [][]float64{{1}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SolveMinRTT(tt.demand, tt.capacity, tt.rtt)
			if (err != nil) != tt.wantErr {
				t.Fatalf("SolveMinRTT() error = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
				t.Errorf("SolveMinRTT() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
