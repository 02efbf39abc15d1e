package testbackend

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/clock"
)

type loadSnapshot struct{ InFlight, Queued, MaxInFlight, MaxQueued int }

func loadOf(l *limiter) loadSnapshot {
	var s loadSnapshot
	s.InFlight, s.Queued, s.MaxInFlight, s.MaxQueued = l.load()
	return s
}

// TestLimiterHandOver checks that a released slot goes to the oldest waiter
// and that the accounting stays exact.
func TestLimiterHandOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	l := newLimiter(Capacity{MaxConcurrency: 1, Queue: 2}, clock.NewFake(time.Unix(0, 0)))
	if err := l.acquire(ctx); err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	order := make(chan int, 2)
	for i := range 2 {
		go func() {
			if err := l.acquire(ctx); err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			order <- i
		}()
		if err := l.waitFor(ctx, func(_, q int) bool { return q == i+1 }); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.acquire(ctx); !errors.Is(err, ErrQueueFull) {
		t.Errorf("acquire with a full queue = %v, want ErrQueueFull", err)
	}
	for want := range 2 {
		l.release()
		if got := <-order; got != want {
			t.Errorf("slot went to waiter %d, want %d (FIFO)", got, want)
		}
	}
	if diff := cmp.Diff(loadSnapshot{InFlight: 1, MaxInFlight: 1, MaxQueued: 2}, loadOf(l)); diff != "" {
		t.Errorf("load after hand-overs (-want +got):\n%s", diff)
	}
	l.release()
	if got := loadOf(l).InFlight; got != 0 {
		t.Errorf("in flight after the last release = %d, want 0", got)
	}
}

// TestLimiterCancel checks that a request that gives up while waiting for a
// token or a slot leaves the queue and holds nothing.
func TestLimiterCancel(t *testing.T) {
	tests := []struct {
		name string
		c    Capacity
		// wait blocks until the second acquire is waiting.
		wait func(ctx context.Context, l *limiter, clk *clock.Fake) error
	}{
		{
			name: "waiting for a token",
			c:    Capacity{MaxRPS: 10, Burst: 1, Queue: 1},
			wait: func(ctx context.Context, _ *limiter, clk *clock.Fake) error { return clk.BlockUntil(ctx, 1) },
		},
		{
			name: "waiting for a slot",
			c:    Capacity{MaxConcurrency: 1, Queue: 1},
			wait: func(ctx context.Context, l *limiter, _ *clock.Fake) error {
				return l.waitFor(ctx, func(_, q int) bool { return q == 1 })
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
			defer cancel()
			clk := clock.NewFake(time.Unix(0, 0))
			l := newLimiter(tt.c, clk)
			if err := l.acquire(ctx); err != nil {
				t.Fatalf("first acquire: %v", err)
			}
			wctx, wcancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- l.acquire(wctx) }()
			if err := tt.wait(ctx, l, clk); err != nil {
				t.Fatal(err)
			}
			wcancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("canceled acquire = %v, want context.Canceled", err)
			}
			l.release()
			if diff := cmp.Diff(loadSnapshot{MaxInFlight: 1, MaxQueued: 1}, loadOf(l)); diff != "" {
				t.Errorf("load after cancel and release (-want +got):\n%s", diff)
			}
		})
	}
}
