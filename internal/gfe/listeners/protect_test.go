package listeners

import (
	"net/netip"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
)

// TestResetBudget: a connection goes over its HTTP/2 reset budget only
// when its early resets pass the minimum and are more than half of its
// streams; it is reported once.
func TestResetBudget(t *testing.T) {
	tests := []struct {
		name string
		// every is the period of resets among the streams: 1 = every
		// stream reset, 2 = every other one, 0 = none.
		every, streams int
		wantAt         int // the stream after which end reports true; 0 = never
	}{
		{"rapid reset", 1, 1000, 101},
		{"a legitimate client cancels some", 3, 10000, 0},
		{"half is not more than half", 2, 10000, 0},
		{"few streams, all reset", 1, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g connGuard
			got := 0
			for i := 1; i <= tt.streams; i++ {
				reset := tt.every > 0 && i%tt.every == 0
				if g.end(reset, DefaultMaxEarlyResets) {
					if got != 0 {
						t.Fatalf("reported twice, at stream %d and %d", got, i)
					}
					got = i
				}
			}
			if got != tt.wantAt {
				t.Errorf("over the budget at stream %d, want %d (0 = never)", got, tt.wantAt)
			}
		})
	}
}

// TestClientResetBudget: an address goes over its reset budget when its
// decaying charge passes the budget, stays over until the charge has
// decayed below half of it (on the injected clock), and other addresses
// are not charged.
func TestClientResetBudget(t *testing.T) {
	const max, half = 200, 30 * time.Second
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	cr := newClientResets(max, half, clk)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	steps := []struct {
		name        string
		advance     time.Duration
		charges     int
		wantOver    bool // after the step
		wantBlocked bool
	}{
		{"at the budget", 0, max, false, false},
		{"one more", 0, 1, true, true},
		{"a half-life later: 100.5, not under half", half, 0, true, true},
		{"another half-life: 50.25, under half", half, 0, false, false},
		{"charged again: 50.25 + 149, under the budget", 0, 149, false, false},
		{"past it", 0, 1, true, true},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		over := cr.blocked(a)
		for range s.charges {
			over = cr.charge(a)
		}
		if over != s.wantOver || cr.blocked(a) != s.wantBlocked {
			t.Errorf("%s: over %v, blocked %v; want %v, %v", s.name, over, cr.blocked(a), s.wantOver, s.wantBlocked)
		}
		if cr.blocked(b) {
			t.Errorf("%s: another address is blocked", s.name)
		}
	}
}
