package priority

import (
	"slices"
	"testing"
)

func TestHealth(t *testing.T) {
	for _, tt := range []struct {
		l    Level
		op   int
		want int
	}{
		{Level{Healthy: 10, Total: 10}, 140, 100},
		{Level{Healthy: 8, Total: 10}, 140, 100}, // 112, capped
		{Level{Healthy: 6, Total: 10}, 140, 84},
		{Level{Healthy: 5, Total: 10}, 140, 70},
		{Level{Healthy: 1, Total: 3}, 140, 46}, // 140/3 = 46.67, integer division
		{Level{Healthy: 0, Total: 10}, 140, 0},
		{Level{Healthy: 0, Total: 0}, 140, 0},
		{Level{Healthy: 12, Total: 10}, 140, 100}, // clamped to Total
		{Level{Healthy: 6, Total: 10}, 100, 60},
		{Level{Healthy: 6, Total: 10}, 50, 60}, // below 100: none
	} {
		if got := Health(tt.l, tt.op); got != tt.want {
			t.Errorf("Health(%+v, %d) = %d, want %d", tt.l, tt.op, got, tt.want)
		}
	}
}

// TestLoads: Envoy's priority load on constructed worlds, with the
// examples of Envoy's documentation (two and three levels).
func TestLoads(t *testing.T) {
	lv := func(healthy ...int) []Level {
		out := make([]Level, len(healthy))
		for i, h := range healthy {
			out[i] = Level{Healthy: h, Total: 100}
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		levels []Level
		want   []int
	}{
		{"all healthy: everything to P0", lv(100, 100, 100), []int{100, 0, 0}},
		{"P0 at 72% is still fully healthy", lv(72, 100), []int{100, 0}},
		{"P0 at 71%", lv(71, 100), []int{99, 1}},
		{"P0 60% healthy", lv(60, 100), []int{84, 16}},
		{"P0 50% healthy", lv(50, 100), []int{70, 30}},
		{"P0 down", lv(0, 100), []int{0, 100}},
		{"P0 down, P1 half healthy: normalized", lv(0, 50), []int{0, 100}},
		{"P0 20%, P1 20%: normalized by 56", lv(20, 20), []int{50, 50}},
		{"three levels spill in order", lv(20, 20, 100), []int{28, 28, 44}},
		{"three levels, P1 down", lv(50, 0, 100), []int{70, 0, 30}},
		{"overprovisioned levels fill in order", []Level{{1, 3}, {1, 3}, {1, 3}}, []int{46, 46, 8}},
		{"rounding goes to the first healthy level", []Level{{0, 5}, {1, 14}, {1, 14}, {1, 14}}, []int{0, 34, 33, 33}},
		{"nothing healthy", lv(0, 0), []int{0, 0}},
		{"no levels", nil, []int{}},
		{"empty level", []Level{{0, 0}, {5, 5}}, []int{0, 100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Loads(tt.levels, DefaultOverprovisioning)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Loads(%v) = %v, want %v", tt.levels, got, tt.want)
			}
			sum := 0
			for _, v := range got {
				sum += v
			}
			if sum != 0 && sum != 100 {
				t.Errorf("loads add up to %d", sum)
			}
		})
	}
}
