package backend

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundRobin(t *testing.T) {
	tests := []struct {
		name  string
		start uint64
		n     int
		picks int
		want  []int
	}{
		{name: "zero value", n: 3, picks: 7, want: []int{0, 1, 2, 0, 1, 2, 0}},
		{name: "start", start: 5, n: 3, picks: 4, want: []int{2, 0, 1, 2}},
		{name: "one backend", n: 1, picks: 3, want: []int{0, 0, 0}},
		{name: "no backends", n: 0, picks: 2, want: []int{-1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRoundRobin(tt.start)
			var got []int
			for range tt.picks {
				i, ok := r.Pick(tt.n)
				if ok != (tt.n > 0) {
					t.Fatalf("Pick(%d) ok = %v, want %v", tt.n, ok, tt.n > 0)
				}
				got = append(got, i)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Pick(%d) sequence mismatch (-want +got):\n%s", tt.n, diff)
			}
		})
	}
}

func TestRoundRobinPickAvailable(t *testing.T) {
	down := map[int]bool{1: true, 2: true}
	avail := func(i int) bool { return !down[i] }
	var r RoundRobin
	var got []int
	for range 8 {
		i, _ := r.PickAvailable(4, avail)
		got = append(got, i)
	}
	// Cursor 0→0, 1→3 (1, 2 down), 2→3, 3→3, 4→0, …
	want := []int{0, 3, 3, 3, 0, 3, 3, 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PickAvailable sequence mismatch (-want +got):\n%s", diff)
	}
	if i, ok := r.PickAvailable(4, func(int) bool { return false }); ok || i != -1 {
		t.Errorf("PickAvailable(none available) = %d, %v, want -1, false", i, ok)
	}
	if got := testing.AllocsPerRun(100, func() { r.PickAvailable(4, avail) }); got != 0 {
		t.Errorf("PickAvailable allocs/op = %v, want 0", got)
	}
}

// TestRoundRobinConcurrent checks that concurrent callers share one cursor:
// 8 goroutines × 300 picks over 6 backends give each backend exactly 400.
func TestRoundRobinConcurrent(t *testing.T) {
	var r RoundRobin
	var counts [6]atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 300 {
				i, _ := r.Pick(len(counts))
				counts[i].Add(1)
			}
		})
	}
	wg.Wait()
	for i := range counts {
		if got := counts[i].Load(); got != 400 {
			t.Errorf("backend %d picked %d times, want 400", i, got)
		}
	}
}

// counters returns in-flight counters set to loads, and an inflight func
// reading them, as a gfe snapshot would hold them.
func counters(loads ...int64) ([]atomic.Int64, func(int) int64) {
	c := make([]atomic.Int64, len(loads))
	for i, l := range loads {
		c[i].Store(l)
	}
	return c, func(i int) int64 { return c[i].Load() }
}

func TestLeastRequest(t *testing.T) {
	tests := []struct {
		name   string
		loads  []int64
		wantOK bool
		// want[i] is the expected number of picks of i out of 30,000 when
		// two distinct candidates are drawn uniformly.
		want []float64
	}{
		{name: "empty", loads: nil, want: []float64{}},
		{name: "single", loads: []int64{9}, wantOK: true, want: []float64{30000}},
		// With two candidates both are always drawn: the less loaded wins.
		{name: "two", loads: []int64{5, 2}, wantOK: true, want: []float64{0, 30000}},
		// The 6 unordered pairs are equally likely; each pair goes to its
		// less loaded member: 0 wins the 3 pairs it is in, 2 wins {2,1} and
		// {2,3}, 1 wins {1,3}, and 3 (the maximum) never wins.
		{name: "four", loads: []int64{0, 4, 2, 9}, wantOK: true, want: []float64{15000, 5000, 10000, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewLeastRequest(rand.New(rand.NewPCG(1, 2)).Uint64)
			_, inflight := counters(tt.loads...)
			got := make([]float64, len(tt.loads))
			for range 30000 {
				i, ok := p.Pick(len(tt.loads), inflight)
				if ok != tt.wantOK {
					t.Fatalf("Pick(%v) ok = %v, want %v", tt.loads, ok, tt.wantOK)
				}
				if !ok {
					if i != -1 {
						t.Fatalf("Pick(%v) = %d, false, want -1", tt.loads, i)
					}
					continue
				}
				got[i]++
			}
			// 3% of the draws: over 4σ for these binomials.
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 900 && b-a < 900 })); diff != "" {
				t.Errorf("Pick(%v) counts mismatch (-want +got):\n%s", tt.loads, diff)
			}
		})
	}
}

func TestLeastRequestNilRandAndAllocs(t *testing.T) {
	p := NewLeastRequest(nil)
	_, inflight := counters(3, 1, 2)
	seen := map[int]bool{}
	for range 1000 {
		i, ok := p.Pick(3, inflight)
		if !ok || i < 0 || i > 2 {
			t.Fatalf("Pick() = %d, %v, want a member of [0, 3)", i, ok)
		}
		seen[i] = true
	}
	if seen[0] || !seen[1] || !seen[2] {
		t.Errorf("picked %v, want 1 and 2 (never the maximum 0)", seen)
	}
	if got := testing.AllocsPerRun(1000, func() { p.Pick(3, inflight) }); got != 0 {
		t.Errorf("Pick allocs/op = %v, want 0", got)
	}
}

func BenchmarkLeastRequest(b *testing.B) {
	p := NewLeastRequest(nil)
	c, inflight := counters(make([]int64, 100)...)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i, _ := p.Pick(len(c), inflight)
			c[i].Add(1)
			c[i].Add(-1)
		}
	})
}

func BenchmarkRoundRobin(b *testing.B) {
	var r RoundRobin
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Pick(100)
		}
	})
}
