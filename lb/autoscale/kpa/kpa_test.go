package kpa

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// feed observes conc once a second for d, calling Scale every 2s with
// ready pods = the last desired count, and returns the last decision.
func feed(a *Autoscaler, now *time.Time, d time.Duration, conc float64) Decision {
	var last Decision
	for end := now.Add(d); now.Before(end); {
		*now = now.Add(time.Second)
		a.Observe(*now, conc)
		if now.Sub(t0)%(2*time.Second) == 0 {
			last = a.Scale(*now, a.Desired(), false)
		}
	}
	return last
}

// TestStable: outside panic the desired count is ceil(stable mean / 7).
func TestStable(t *testing.T) {
	for _, tt := range []struct {
		conc float64
		want int
	}{{7, 1}, {14, 2}, {15, 3}, {70, 10}} {
		a := New(DefaultConfig(10, 0), ceilInt(tt.conc/7), t0)
		now := t0
		d := feed(a, &now, 2*time.Minute, tt.conc)
		if d.Desired != tt.want || d.Panic {
			t.Errorf("concurrency %v: %+v, want %d without panic", tt.conc, d, tt.want)
		}
	}
}

func ceilInt(x float64) int { return ceil(x) }

// TestPanic: a jump to more than twice the ready pods' target starts
// panic at once; the count follows the 6s window and does not fall until
// a stable window after the last tick over the threshold.
func TestPanic(t *testing.T) {
	a := New(DefaultConfig(10, 0), 2, t0)
	now := t0
	feed(a, &now, 2*time.Minute, 14) // 2 pods
	d := feed(a, &now, 2*time.Second, 70)
	// panic mean (4×14+2×70)/6 = 32.7 ⇒ 5; 5/2 ≥ 2 ⇒ panic.
	if !d.Panic || d.Desired != 5 {
		t.Fatalf("2s after the jump: %+v, want panic at 5", d)
	}
	d = feed(a, &now, 6*time.Second, 70)
	if !d.Panic || d.Desired != 10 {
		t.Fatalf("8s after the jump: %+v, want panic at 10", d)
	}
	d = feed(a, &now, 10*time.Second, 14) // load back to 14: panic holds 10
	if !d.Panic || d.Desired != 10 {
		t.Fatalf("after the load falls: %+v, want panic holding 10", d)
	}
	d = feed(a, &now, 70*time.Second, 14)
	if d.Panic {
		t.Fatalf("a stable window later: %+v, want out of panic", d)
	}
}

// TestMaxScaleDownRate: out of panic the count at most halves per tick.
func TestMaxScaleDownRate(t *testing.T) {
	a := New(DefaultConfig(10, 0), 40, t0)
	now := t0
	now = now.Add(time.Second)
	a.Observe(now, 7)
	var got []int
	for range 4 {
		now = now.Add(2 * time.Second)
		got = append(got, a.Scale(now, a.Desired(), false).Desired)
	}
	want := []int{20, 10, 5, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("desired per tick = %v, want %v", got, want)
		}
	}
}

// TestScaleToZeroAndBack: no traffic for a stable window takes the
// revision to zero; a request at the activator brings one pod at once.
func TestScaleToZeroAndBack(t *testing.T) {
	a := New(DefaultConfig(10, 0), 1, t0)
	now := t0
	d := feed(a, &now, 58*time.Second, 0)
	if d.Desired != 1 {
		t.Fatalf("no traffic for 58s: %+v, want 1 (a whole stable window first)", d)
	}
	d = feed(a, &now, 2*time.Second, 0)
	if d.Desired != 0 {
		t.Fatalf("no traffic for 60s: %+v, want 0", d)
	}
	now = now.Add(time.Second)
	a.Observe(now, 1)
	if d := a.Scale(now, 0, true); d.Desired != 1 {
		t.Errorf("activated at zero: %+v, want 1", d)
	}
	b := New(DefaultConfig(10, 5), 3, t0)
	b.Observe(t0, 700)
	if d := b.Scale(t0, 3, false); d.Desired != 5 || !d.Panic {
		t.Errorf("max scale 5: %+v, want 5 in panic", d)
	}
}
