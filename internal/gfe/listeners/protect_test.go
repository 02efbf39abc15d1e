package listeners

import "testing"

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
