package health

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	pass = Result{}
	fail = Result{Err: errors.New("boom")}
)

func TestNextTable(t *testing.T) {
	cfg := DefaultConfig() // healthy_threshold 2, unhealthy_threshold 3
	tests := []struct {
		name string
		s    State
		r    Result
		want State
	}{
		{"unknown pass becomes healthy at once", State{StatusUnknown, 0, 0}, pass, State{StatusHealthy, 1, 0}},
		{"unknown fail counts", State{StatusUnknown, 0, 0}, fail, State{StatusUnknown, 0, 1}},
		{"unknown fail below threshold", State{StatusUnknown, 0, 1}, fail, State{StatusUnknown, 0, 2}},
		{"unknown fail reaches threshold", State{StatusUnknown, 0, 2}, fail, State{StatusUnhealthy, 0, 3}},
		{"unknown pass after fails", State{StatusUnknown, 0, 2}, pass, State{StatusHealthy, 1, 0}},
		{"healthy pass stays, count capped", State{StatusHealthy, 2, 0}, pass, State{StatusHealthy, 2, 0}},
		{"healthy first fail is a blip", State{StatusHealthy, 2, 0}, fail, State{StatusHealthy, 0, 1}},
		{"healthy second fail", State{StatusHealthy, 0, 1}, fail, State{StatusHealthy, 0, 2}},
		{"healthy third fail flips", State{StatusHealthy, 0, 2}, fail, State{StatusUnhealthy, 0, 3}},
		{"healthy pass resets fails", State{StatusHealthy, 0, 2}, pass, State{StatusHealthy, 1, 0}},
		{"unhealthy fail stays, count capped", State{StatusUnhealthy, 0, 3}, fail, State{StatusUnhealthy, 0, 3}},
		{"unhealthy first pass is a blip", State{StatusUnhealthy, 0, 3}, pass, State{StatusUnhealthy, 1, 0}},
		{"unhealthy second pass flips", State{StatusUnhealthy, 1, 0}, pass, State{StatusHealthy, 2, 0}},
		{"unhealthy fail resets passes", State{StatusUnhealthy, 1, 0}, fail, State{StatusUnhealthy, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := next(tt.s, tt.r, cfg)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("next(%+v, passed=%v) (-want +got):\n%s", tt.s, tt.r.Passed(), diff)
			}
		})
	}
}

// TestNextSequences feeds runs of results from each initial status and checks
// the status after every step.
func TestNextSequences(t *testing.T) {
	tests := []struct {
		name    string
		initial Status
		ht, ut  int
		results string // P = pass, F = fail
		want    []Status
	}{
		{
			name: "blips never flip", initial: StatusHealthy, ht: 2, ut: 3,
			results: "FFPFFPFPF",
			want:    repeat(StatusHealthy, 9),
		},
		{
			name: "exactly unhealthy_threshold fails flip, then healthy_threshold passes", initial: StatusHealthy, ht: 2, ut: 3,
			results: "FFFPP",
			want:    []Status{StatusHealthy, StatusHealthy, StatusUnhealthy, StatusUnhealthy, StatusHealthy},
		},
		{
			name: "unhealthy needs consecutive passes", initial: StatusUnhealthy, ht: 3, ut: 3,
			results: "PPFPPP",
			want:    []Status{StatusUnhealthy, StatusUnhealthy, StatusUnhealthy, StatusUnhealthy, StatusUnhealthy, StatusHealthy},
		},
		{
			name: "initial unhealthy earns healthy_threshold", initial: StatusUnhealthy, ht: 2, ut: 3,
			results: "PP",
			want:    []Status{StatusUnhealthy, StatusHealthy},
		},
		{
			name: "initial unknown: first pass admits", initial: StatusUnknown, ht: 5, ut: 3,
			results: "FP",
			want:    []Status{StatusUnknown, StatusHealthy},
		},
		{
			name: "initial unknown: dead backend becomes unhealthy", initial: StatusUnknown, ht: 2, ut: 2,
			results: "FFP",
			want:    []Status{StatusUnknown, StatusUnhealthy, StatusUnhealthy},
		},
		{
			name: "thresholds of one flip every time", initial: StatusHealthy, ht: 1, ut: 1,
			results: "FPF",
			want:    []Status{StatusUnhealthy, StatusHealthy, StatusUnhealthy},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.HealthyThreshold, cfg.UnhealthyThreshold, cfg.InitialStatus = tt.ht, tt.ut, tt.initial
			s := initialState(cfg)
			var got []Status
			for _, c := range tt.results {
				r := pass
				if c == 'F' {
					r = fail
				}
				s = next(s, r, cfg)
				got = append(got, s.Status)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("statuses after %s (-want +got):\n%s", tt.results, diff)
			}
		})
	}
}

func TestNextLoweredThreshold(t *testing.T) {
	cfg := DefaultConfig()
	s := State{Status: StatusHealthy, Fails: 2}
	cfg.UnhealthyThreshold = 1
	if got := next(s, fail, cfg); got.Status != StatusUnhealthy || got.Fails != 1 {
		t.Errorf("next after lowering unhealthy_threshold to 1 = %+v, want unhealthy with fails 1", got)
	}
}

func repeat(s Status, n int) []Status {
	out := make([]Status, n)
	for i := range out {
		out[i] = s
	}
	return out
}
