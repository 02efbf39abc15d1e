package testbackend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
)

// ErrQueueFull is returned by admission when a request can neither start at
// once nor wait, because Capacity.Queue requests are already waiting. The
// instance answers it with 503.
var ErrQueueFull = errors.New("testbackend: queue full")

// limiter admits requests into an instance's capacity: a concurrency limit,
// a GCRA token bucket and a bounded FIFO queue in front of both (see the
// package doc). It must not be copied.
type limiter struct {
	// Immutable after newLimiter.
	clock    clock.Clock
	maxConc  int           // 0: unlimited
	queueMax int           // waiting requests allowed
	interval time.Duration // time per token; 0: no rate limit
	tau      time.Duration // burst tolerance: (burst-1) * interval

	// Guarded by mu.
	mu          sync.Mutex
	inFlight    int
	queued      int             // admitted, waiting for a token or a slot
	waiters     []chan struct{} // waiting for a slot, oldest first; closed on hand-over
	tat         time.Time       // GCRA theoretical arrival time of the next token
	maxInFlight int             // high-water mark of inFlight
	maxQueued   int             // high-water mark of queued
	changed     chan struct{}   // closed and replaced when inFlight or queued changes
}

func newLimiter(c Capacity, clk clock.Clock) *limiter {
	l := &limiter{clock: clk, maxConc: c.MaxConcurrency, queueMax: c.Queue, changed: make(chan struct{})}
	if c.MaxRPS > 0 {
		l.interval = time.Duration(float64(time.Second) / c.MaxRPS)
		l.tau = time.Duration(max(c.Burst-1, 0)) * l.interval
	}
	return l
}

// acquire admits one request. It returns nil once the request holds a slot,
// and the caller must then call release exactly once. It returns
// ErrQueueFull at once when the request cannot start and the queue is full,
// and ctx.Err() when ctx ends while the request waits (the request then
// holds nothing).
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	now := l.clock.Now()
	var wait time.Duration
	if l.interval > 0 {
		tat := l.tat
		if tat.Before(now) {
			tat = now
		}
		wait = max(tat.Add(-l.tau).Sub(now), 0)
	}
	if wait == 0 && l.slotFreeLocked() {
		l.takeTokenLocked(now)
		l.startLocked()
		l.mu.Unlock()
		return nil
	}
	if l.queued >= l.queueMax {
		l.mu.Unlock()
		return ErrQueueFull
	}
	l.takeTokenLocked(now)
	l.queued++
	l.maxQueued = max(l.maxQueued, l.queued)
	l.notifyLocked()
	l.mu.Unlock()

	if err := sleep(ctx, l.clock, wait); err != nil {
		l.mu.Lock()
		l.queued--
		l.notifyLocked()
		l.mu.Unlock()
		return err
	}

	l.mu.Lock()
	if l.slotFreeLocked() {
		l.queued--
		l.startLocked() // notifies
		l.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	l.waiters = append(l.waiters, w)
	l.mu.Unlock()

	select {
	case <-w:
		return nil // release handed its slot over and did the accounting
	case <-ctx.Done():
		l.mu.Lock()
		if i := slices.Index(l.waiters, w); i >= 0 {
			l.waiters = slices.Delete(l.waiters, i, i+1)
			l.queued--
			l.notifyLocked()
			l.mu.Unlock()
			return ctx.Err()
		}
		l.mu.Unlock()
		// The slot was handed over while ctx ended: give it back.
		l.release()
		return ctx.Err()
	}
}

// release frees the slot of a request admitted by acquire, handing it to the
// oldest waiter if there is one.
func (l *limiter) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiters) > 0 {
		w := l.waiters[0]
		l.waiters = slices.Delete(l.waiters, 0, 1)
		l.queued--
		close(w) // inFlight is unchanged: the slot moves to w
		l.notifyLocked()
		return
	}
	l.inFlight--
	l.notifyLocked()
}

// waitFor blocks until cond(inFlight, queued) holds or ctx ends; cond is
// called with l.mu held. Tests use it to reach a state without sleeping.
func (l *limiter) waitFor(ctx context.Context, cond func(inFlight, queued int) bool) error {
	for {
		l.mu.Lock()
		ok, changed := cond(l.inFlight, l.queued), l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notifyLocked wakes waitFor callers. Caller must hold l.mu.
func (l *limiter) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// load returns the current and peak in-flight and queued counts.
func (l *limiter) load() (inFlight, queued, maxInFlight, maxQueued int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight, l.queued, l.maxInFlight, l.maxQueued
}

// slotFreeLocked reports whether a request may take a slot now without
// overtaking a waiter. Caller must hold l.mu.
func (l *limiter) slotFreeLocked() bool {
	return len(l.waiters) == 0 && (l.maxConc == 0 || l.inFlight < l.maxConc)
}

// startLocked counts a request into a slot. Caller must hold l.mu.
func (l *limiter) startLocked() {
	l.inFlight++
	l.maxInFlight = max(l.maxInFlight, l.inFlight)
	l.notifyLocked()
}

// takeTokenLocked reserves the next rate-limit token. Caller must hold l.mu.
func (l *limiter) takeTokenLocked(now time.Time) {
	if l.interval == 0 {
		return
	}
	if l.tat.Before(now) {
		l.tat = now
	}
	l.tat = l.tat.Add(l.interval)
}

// sleep waits d on c, or until ctx ends. It arms no timer when d <= 0.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
