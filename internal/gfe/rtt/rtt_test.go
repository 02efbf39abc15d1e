package rtt

import "testing"

func TestWindowMin(t *testing.T) {
	var w windowMin
	if _, ok := w.min(); ok {
		t.Fatal("min of no samples reported ok")
	}
	tests := []struct {
		add  float64
		want float64
	}{
		{5, 5},
		{40, 5}, // a spike does not move the estimate
		{60, 5},
		{4, 4}, // a lower sample does at once
		{6, 4},
		{6, 4},
		{6, 4},
		{6, 4},
		{6, 4}, // 9 samples: 5 has left the window, 4 has not
		{6, 4},
		{6, 4},
		{6, 6}, // 4 (the 4th sample) leaves with the 12th: a real increase shows after the window
	}
	for i, tt := range tests {
		w.add(tt.add)
		if got, _ := w.min(); got != tt.want {
			t.Fatalf("after sample %d (%v): min = %v, want %v", i, tt.add, got, tt.want)
		}
	}
}
