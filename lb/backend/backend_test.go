package backend

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// backendsOf returns n backends named name-0 … name-(n-1), each limited to
// limit requests at a time (≤ 0: unlimited).
func backendsOf(name string, n int, limit int64) []*Backend {
	bs := make([]*Backend, n)
	for i := range bs {
		bs[i] = New(fmt.Sprintf("%s-%d", name, i), limit)
	}
	return bs
}

func TestBackendTryAcquireConcurrent(t *testing.T) {
	b := New("x", 7)
	var won atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if b.TryAcquire() {
					won.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if won.Load() != 7 || b.InFlight() != 7 || !b.Full() {
		t.Errorf("concurrent TryAcquire won %d, in flight %d, full %v; want 7, 7, true", won.Load(), b.InFlight(), b.Full())
	}
	b.Release()
	if b.Full() || b.InFlight() != 6 {
		t.Errorf("after Release: full %v, in flight %d; want false, 6", b.Full(), b.InFlight())
	}
	u := New("u", -3)
	for range 1000 {
		if !u.TryAcquire() {
			t.Fatal("TryAcquire on an unlimited backend failed")
		}
	}
	if u.Full() || u.MaxConcurrency() != 0 || u.InFlight() != 1000 {
		t.Errorf("unlimited backend: full %v, max %d, in flight %d; want false, 0, 1000", u.Full(), u.MaxConcurrency(), u.InFlight())
	}
}

func TestBackendSetMaxConcurrency(t *testing.T) {
	b := New("x", 2)
	for range 2 {
		if !b.TryAcquire() {
			t.Fatal("TryAcquire below the limit failed")
		}
	}
	tests := []struct {
		name     string
		limit    int64
		wantMax  int64
		wantFull bool
		wantTake bool
	}{
		{name: "at the limit", limit: 2, wantMax: 2, wantFull: true},
		{name: "raised: a slot frees at once", limit: 3, wantMax: 3, wantTake: true},
		{name: "lowered below in flight: no new slot", limit: 1, wantMax: 1, wantFull: true},
		{name: "unlimited", limit: 0, wantMax: 0, wantTake: true},
		{name: "negative means unlimited", limit: -1, wantMax: 0, wantTake: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.SetMaxConcurrency(tt.limit)
			if got := b.MaxConcurrency(); got != tt.wantMax {
				t.Errorf("MaxConcurrency() = %d, want %d", got, tt.wantMax)
			}
			if got := b.Full(); got != tt.wantFull {
				t.Errorf("Full() with %d in flight = %v, want %v", b.InFlight(), got, tt.wantFull)
			}
			before := b.InFlight()
			got := b.TryAcquire()
			if got != tt.wantTake {
				t.Errorf("TryAcquire() with %d in flight = %v, want %v", before, got, tt.wantTake)
			}
			if got {
				b.Release()
			}
			if b.InFlight() != before {
				t.Errorf("in flight = %d after TryAcquire and Release, want %d", b.InFlight(), before)
			}
		})
	}
}

// TestSignals: Observe and ObserveLoad count, TakeSignals returns the
// counts and starts again.
func TestSignals(t *testing.T) {
	b := New("a:1", 0)
	b.Observe(OutcomeOK, 10*time.Millisecond)
	b.Observe(OutcomeOK, 30*time.Millisecond)
	b.Observe(OutcomeRejected, time.Second)
	b.Observe(OutcomeFailed, time.Second)
	b.ObserveLoad(0.5)
	b.ObserveLoad(1.25)
	b.ObserveLoad(math.NaN())
	b.ObserveLoad(-1)
	b.ObserveRate(30)
	b.ObserveRate(math.NaN())
	want := Signals{Answered: 3, Rejected: 1, Failed: 1, Latency: 40 * time.Millisecond, Reports: 2, Utilization: 1.75, Rates: 1, Rate: 30}
	if got := b.TakeSignals(); got != want {
		t.Errorf("TakeSignals = %+v, want %+v", got, want)
	}
	if got := b.TakeSignals(); got != (Signals{}) {
		t.Errorf("second TakeSignals = %+v, want zero", got)
	}
	if n := testing.AllocsPerRun(100, func() { b.Observe(OutcomeOK, time.Millisecond); b.ObserveLoad(0.3) }); n != 0 {
		t.Errorf("Observe allocates %v times", n)
	}
}

// TestSoftLimit: the lower of the configured and soft limits applies; the
// soft limit alone applies to an unlimited backend; MaxConcurrency stays
// the configured one.
func TestSoftLimit(t *testing.T) {
	tests := []struct {
		limit, soft int64
		want        int // acquisitions before TryAcquire fails
	}{
		{0, 0, -1}, {4, 0, 4}, {0, 3, 3}, {4, 2, 2}, {2, 4, 2},
	}
	for _, tt := range tests {
		b := New("a:1", tt.limit)
		b.SetSoftLimit(tt.soft)
		n := 0
		for n < 10 && b.TryAcquire() {
			n++
		}
		if tt.want < 0 && n != 10 || tt.want >= 0 && n != tt.want {
			t.Errorf("limit %d soft %d: %d acquisitions, want %d", tt.limit, tt.soft, n, tt.want)
		}
		if full := b.Full(); full != (tt.want >= 0) {
			t.Errorf("limit %d soft %d: Full() = %v after acquiring", tt.limit, tt.soft, full)
		}
		if b.MaxConcurrency() != tt.limit || b.SoftLimit() != tt.soft {
			t.Errorf("limit %d soft %d: MaxConcurrency %d SoftLimit %d", tt.limit, tt.soft, b.MaxConcurrency(), b.SoftLimit())
		}
	}
}

// TestACTLimit: the ACT limit caps TryAcquire and TryAcquireHard with the
// configured one (the lower wins), unlike the soft limit that only
// TryAcquire honours; 0 removes it.
func TestACTLimit(t *testing.T) {
	for _, tt := range []struct {
		name               string
		limit, act, soft   int64
		wantSoft, wantHard int
	}{
		{"act below configured", 10, 3, 0, 3, 3},
		{"act above configured", 4, 8, 0, 4, 4},
		{"no act", 5, 0, 0, 5, 5},
		{"act with unlimited configured", 0, 2, 0, 2, 2},
		{"soft below act: soft for TryAcquire only", 10, 6, 2, 2, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, hard := range []bool{false, true} {
				b := New("a:1", tt.limit)
				b.SetACTLimit(tt.act)
				b.SetSoftLimit(tt.soft)
				n := 0
				for n < 100 && (hard && b.TryAcquireHard() || !hard && b.TryAcquire()) {
					n++
				}
				want := tt.wantSoft
				if hard {
					want = tt.wantHard
				}
				if n != want || b.Full() != (tt.wantSoft <= n) {
					t.Errorf("hard=%v: acquired %d, want %d (Full %v)", hard, n, want, b.Full())
				}
			}
		})
	}
	b := New("a:1", 0)
	b.ObserveCPU(0.95)
	b.ObserveCPU(0.85)
	b.ObserveCPU(-1)
	if s := b.TakeSignals(); s.CPUReports != 2 || s.CPU < 1.8-1e-6 || s.CPU > 1.8+1e-6 {
		t.Errorf("CPU signals = %d reports, sum %v; want 2, 1.8", s.CPUReports, s.CPU)
	}
}
