package quantile

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"
)

func TestOf(t *testing.T) {
	var s []float64
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, float64(i))
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		q    float64
		want float64
	}{
		{0.50, 50}, {0.99, 99}, {1, 100}, {0.01, 1}, {0, 1},
		{0.07, 7},         // 0.07 × 100 is 7.000000000000001 in float64
		{0.505, 51},       // between ranks: the higher
		{0.991, 100},      // ⌈99.1⌉
		{-1, 1}, {2, 100}, // clamped
	} {
		if got := Of(s, tt.q); got != tt.want {
			t.Errorf("Of(1..100, %v) = %v, want %v", tt.q, got, tt.want)
		}
		if got, want := Of(ds, tt.q), time.Duration(tt.want)*time.Millisecond; got != want {
			t.Errorf("Of(1ms..100ms, %v) = %v, want %v", tt.q, got, want)
		}
	}
	if got := Of([]float64(nil), 0.5); got != 0 {
		t.Errorf("Of(nil) = %v, want 0", got)
	}
	if got := Of([]float64{3}, 0.99); got != 3 {
		t.Errorf("Of([3], 0.99) = %v, want 3", got)
	}
}

// TestOfIsGonumEmpirical checks that Of is gonum's stat.Quantile with
// stat.Empirical wherever q·n is not within float error of a whole number.
func TestOfIsGonumEmpirical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + rng.IntN(300)
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(rng.IntN(50))
		}
		slices.Sort(x)
		q := rng.Float64()
		if Of(x, q) != stat.Quantile(q, stat.Empirical, x, nil) {
			t.Fatalf("n %d, q %v: Of %v, stat.Quantile %v", n, q, Of(x, q), stat.Quantile(q, stat.Empirical, x, nil))
		}
	}
}

func TestOfCounts(t *testing.T) {
	values, counts := []int64{500, 540, 20500}, []int64{98, 1, 1}
	for _, tt := range []struct {
		q    float64
		want int64
	}{{0.5, 500}, {0.98, 500}, {0.99, 540}, {1, 20500}, {0, 500}} {
		if got := OfCounts(values, counts, tt.q); got != tt.want {
			t.Errorf("OfCounts(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := OfCounts([]int64{1, 2}, []int64{0, 0}, 0.5); got != 0 {
		t.Errorf("OfCounts of no counts = %v, want 0", got)
	}
	// A histogram is its expanded sorted slice.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		var vs, expanded []float64
		var cs []int64
		for v := range 1 + rng.IntN(20) {
			c := int64(rng.IntN(5))
			vs, cs = append(vs, float64(v)), append(cs, c)
			for range c {
				expanded = append(expanded, float64(v))
			}
		}
		q := rng.Float64()
		if got, want := OfCounts(vs, cs, q), Of(expanded, q); got != want {
			t.Fatalf("OfCounts(%v, %v, %v) = %v, Of(expanded) = %v", vs, cs, q, got, want)
		}
	}
}

func TestRank(t *testing.T) {
	for _, tt := range []struct {
		q    float64
		n    int64
		want int64
	}{{0.5, 0, 0}, {0, 10, 1}, {0.5, 10, 5}, {0.51, 10, 6}, {0.99, 160, 159}, {1, 7, 7}} {
		if got := Rank(tt.q, tt.n); got != tt.want {
			t.Errorf("Rank(%v, %d) = %d, want %d", tt.q, tt.n, got, tt.want)
		}
	}
}
