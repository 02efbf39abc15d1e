package backoff

import (
	"testing"
	"time"
)

func TestJittered(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 5 * time.Second
	tests := []struct {
		name    string
		attempt int
		r       uint64
		want    time.Duration
	}{
		{name: "first retry, least jitter", attempt: 0, r: 0, want: 50 * time.Millisecond},
		{name: "first retry, most jitter", attempt: 0, r: uint64(50 * time.Millisecond), want: 100 * time.Millisecond},
		{name: "doubles", attempt: 3, r: 0, want: 400 * time.Millisecond},
		{name: "capped", attempt: 10, r: uint64(2500 * time.Millisecond), want: hi},
		{name: "capped at huge attempt", attempt: 1000, r: 0, want: hi / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Jittered(tt.attempt, lo, hi, tt.r); got != tt.want {
				t.Errorf("Jittered(%d, %v, %v, %d) = %v, want %v", tt.attempt, lo, hi, tt.r, got, tt.want)
			}
		})
	}
	for attempt := range 70 {
		for _, r := range []uint64{0, 1, 12345, 1 << 63, ^uint64(0)} {
			d := Jittered(attempt, lo, hi, r)
			if d < lo/2 || d > hi {
				t.Errorf("Jittered(%d, r=%d) = %v, outside [%v, %v]", attempt, r, d, lo/2, hi)
			}
		}
	}
}
