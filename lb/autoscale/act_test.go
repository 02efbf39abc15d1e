package autoscale

import (
	"testing"
	"time"
)

// TestACTLimit: the limit falls by 1 for each interval over 90% CPU and
// rises by 1 for each whole interval at the limit under 70%, within
// [1, MaxConcurrencyPerInstance].
func TestACTLimit(t *testing.T) {
	type obs struct {
		cpu      float64
		inFlight int
		want     int
	}
	for _, tt := range []struct {
		name  string
		start int // limit to lower to first, by CPU 1.0 observations
		steps []obs
	}{
		{"over 90% lowers", 10, []obs{{0.95, 10, 9}, {0.91, 9, 8}, {0.9, 8, 8}}},
		{"never below 1", 2, []obs{{1, 2, 1}, {1, 1, 1}}},
		{"at the limit under 70% raises", 6, []obs{{0.5, 6, 7}, {0.5, 7, 8}, {0.5, 8, 9}}},
		{"below the limit does not raise", 6, []obs{{0.5, 5, 6}, {0.2, 0, 6}}},
		{"70–90% changes nothing", 6, []obs{{0.8, 6, 6}, {0.7, 6, 6}}},
		{"never above the maximum", 9, []obs{{0.1, 9, 10}, {0.1, 10, 10}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := NewACT(testConfig()) // ceiling 10, interval 1s
			now := t0
			for a.Limit() > tt.start {
				now = now.Add(time.Second)
				a.Observe(now, 1, 0)
			}
			for i, o := range tt.steps {
				now = now.Add(time.Second)
				if got := a.Observe(now, o.cpu, o.inFlight); got != o.want {
					t.Errorf("step %d: Observe(cpu %v, in flight %d) = %d, want %d", i, o.cpu, o.inFlight, got, o.want)
				}
			}
		})
	}
}

// TestACTRaiseNeedsWholeInterval: observed every 250ms, a low-CPU run at
// the limit raises it once per second, not once per observation.
func TestACTRaiseNeedsWholeInterval(t *testing.T) {
	a := NewACT(testConfig())
	now := t0
	a.Observe(now, 1, 0) // 9
	a.Observe(now, 1, 0) // 8
	var got []int
	for range 8 {
		now = now.Add(250 * time.Millisecond)
		got = append(got, a.Observe(now, 0.5, a.Limit()))
	}
	want := []int{9, 9, 9, 9, 10, 10, 10, 10}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("limits every 250ms = %v, want %v", got, want)
		}
	}
}
