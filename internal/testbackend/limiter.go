package testbackend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/lb/clock"
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
	// arrivals counts the calls of acquire over the last second, for the
	// load reports. Counting here, under the lock acquire takes anyway and
	// at the time it reads anyway, costs no extra synchronization.
	arrivals rateWindow
	// busy is the integral of inFlight over time since newLimiter, in
	// request-seconds, up to busyAt: the average concurrency over any span
	// is the difference of two readings divided by the span (see
	// busyLocked).
	busy   float64
	busyAt time.Time
}

func newLimiter(c Capacity, clk clock.Clock) *limiter {
	l := &limiter{clock: clk, maxConc: c.MaxConcurrency, queueMax: c.Queue, changed: make(chan struct{}), busyAt: clk.Now()}
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
	l.arrivals.add(now)
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
	l.busyLocked(l.clock.Now())
	l.inFlight--
	l.notifyLocked()
}

// busyLocked brings the concurrency integral up to now and returns it, in
// request-seconds since newLimiter. Every change of inFlight calls it first,
// so between two changes inFlight is constant and the integral exact. A now
// before the last reading (a clock that went back) adds nothing. Caller must
// hold l.mu.
func (l *limiter) busyLocked(now time.Time) float64 {
	if d := now.Sub(l.busyAt); d > 0 {
		l.busy += float64(l.inFlight) * d.Seconds()
		l.busyAt = now
	}
	return l.busy
}

// busySeconds returns the concurrency integral at now (see busyLocked).
func (l *limiter) busySeconds(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.busyLocked(now)
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

// report returns what the load reports are made of: the requests in
// flight and queued now, and the arrivals per second over the last second
// (every call of acquire: admitted, queued or rejected).
func (l *limiter) report() (inFlight, queued int, rps float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight, l.queued, l.arrivals.rate(l.clock.Now())
}

// slotFreeLocked reports whether a request may take a slot now without
// overtaking a waiter. Caller must hold l.mu.
func (l *limiter) slotFreeLocked() bool {
	return len(l.waiters) == 0 && (l.maxConc == 0 || l.inFlight < l.maxConc)
}

// startLocked counts a request into a slot. Caller must hold l.mu.
func (l *limiter) startLocked() {
	l.busyLocked(l.clock.Now())
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

// The arrival rate is counted in rateBuckets buckets of rateBucket each:
// the second before now starts in the oldest one.
const (
	rateBucket  = 100 * time.Millisecond
	rateBuckets = int(time.Second/rateBucket) + 1
)

// rateWindow measures an event rate over the last second, as a sliding
// window of fixed buckets: add counts an event in the bucket of its time,
// and rate sums the buckets the second before now covers, the oldest in
// proportion to how much of it the second covers (events spread evenly in
// it, as the sliding-window counters of rate limiters assume). The
// estimate is off by at most the events of one bucket. It does no
// allocation and no I/O; the zero value is empty. It is not safe for
// concurrent use (the limiter guards it with its mutex).
type rateWindow struct {
	counts [rateBuckets]int
	// epochs[i] is the bucket number (time since the Unix epoch divided
	// by rateBucket, rounded down) that counts[i] belongs to; a bucket of
	// another number is stale and counts 0.
	epochs [rateBuckets]int64
}

// bucketOf returns the bucket number of t and how much of the bucket has
// elapsed at t, in [0, 1).
func bucketOf(t time.Time) (epoch int64, elapsed float64) {
	ns := t.UnixNano()
	epoch = ns / int64(rateBucket)
	if ns%int64(rateBucket) < 0 { // round toward -inf before 1970
		epoch--
	}
	return epoch, float64(ns-epoch*int64(rateBucket)) / float64(rateBucket)
}

// slotOf returns the index of bucket number epoch in a rateWindow.
func slotOf(epoch int64) int {
	s := int(epoch % int64(rateBuckets))
	if s < 0 {
		s += rateBuckets
	}
	return s
}

// add counts one event at now.
func (w *rateWindow) add(now time.Time) {
	e, _ := bucketOf(now)
	i := slotOf(e)
	if w.epochs[i] != e {
		w.epochs[i], w.counts[i] = e, 0
	}
	w.counts[i]++
}

// rate returns the events per second over the second before now.
func (w *rateWindow) rate(now time.Time) float64 {
	e, elapsed := bucketOf(now)
	var sum float64
	for k := range int64(rateBuckets) {
		b := e - k
		i := slotOf(b)
		if w.epochs[i] != b {
			continue
		}
		c := float64(w.counts[i])
		if k == int64(rateBuckets)-1 {
			c *= 1 - elapsed // the part of the oldest bucket in the second
		}
		sum += c
	}
	return sum // over one second: per second
}
