package fdlimit

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestFromLimit(t *testing.T) {
	for _, tc := range []struct {
		soft, reserve uint64
		want          int64
	}{
		{20_000, 0, 18_000}, // a tenth
		{1024, 0, 768},      // at least 256
		{300, 0, 150},       // at most half
		{1 << 20, 1000, 1<<20 - 1000},
		{100, 500, 1},   // a reserve beyond the limit leaves one
		{1 << 63, 0, 0}, // infinite: unlimited
	} {
		if got := FromLimit(tc.soft, tc.reserve).Size(); got != tc.want {
			t.Errorf("FromLimit(%d, %d).Size() = %d, want %d", tc.soft, tc.reserve, got, tc.want)
		}
	}
}

func TestBudget(t *testing.T) {
	b := NewBudget(4)
	if !b.TryAcquire(2) || !b.TryAcquire(2) || b.TryAcquire(1) {
		t.Fatal("a budget of 4 gave other than two 2s")
	}
	if b.Used() != 4 {
		t.Fatalf("used = %d, want 4", b.Used())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := b.Acquire(ctx, 1); err == nil {
		t.Fatal("Acquire on a spent budget returned before its ctx ended")
	}
	a, c := net.Pipe()
	defer c.Close()
	wrapped := Conn(a, b, 2)
	wrapped.Close()
	wrapped.Close() // gives back once
	if b.Used() != 2 {
		t.Fatalf("used after Close = %d, want 2", b.Used())
	}
	var unlimited *Budget
	if !unlimited.TryAcquire(1 << 40) {
		t.Fatal("a nil budget refused")
	}
	unlimited.Release(1 << 40)
}
