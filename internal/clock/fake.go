package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Fake is a Clock whose time moves only when Advance or AdvanceTo is called.
// It is safe for concurrent use and is meant for tests: timer-driven code
// runs against it deterministically and without sleeping.
//
// Firing rules:
//   - Advance and AdvanceTo fire every timer and ticker whose deadline has
//     been reached, one at a time in deadline order (ties in the order they
//     were armed), with Now equal to that deadline while it fires. When they
//     return, Now is the target time and every due event has fired.
//   - A channel timer or ticker fires by a non-blocking send on its channel,
//     which holds one value, as in the time package: a tick the reader has
//     not taken yet makes later ticks drop.
//   - An AfterFunc function runs synchronously on the goroutine that calls
//     Advance, outside the clock's lock, so it may call any method of the
//     clock except Advance and AdvanceTo. When Advance returns, every due
//     function has returned.
//   - A timer armed with d <= 0 is due at once: a channel timer's value is in
//     its channel before NewTimer or Reset returns; an AfterFunc function is
//     started in a new goroutine, as the time package does.
//
// Tests wait for the code under test to arm its timers with BlockUntil
// instead of sleeping.
//
// A Fake must not be copied after first use.
type Fake struct {
	// advanceMu serialises Advance and AdvanceTo so that events fire in
	// order even when several goroutines advance the clock.
	advanceMu sync.Mutex

	mu sync.Mutex
	// Guarded by mu.
	now     time.Time
	events  eventHeap     // pending timers and tickers, earliest first
	seq     uint64        // arming order, breaks deadline ties
	changed chan struct{} // closed and replaced when len(events) changes
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake clock that reads start until it is advanced.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns f.Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTimer returns a timer that fires when the clock reaches Now()+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	ev := &event{f: f, ch: make(chan time.Time, 1), index: -1}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(ev, d, 0)
	return (*fakeTimer)(ev)
}

// NewTicker returns a ticker that fires each time the clock passes a
// multiple of d after Now(). It panics if d <= 0.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	ev := &event{f: f, ch: make(chan time.Time, 1), index: -1}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(ev, d, d)
	return (*fakeTicker)(ev)
}

// AfterFunc returns a timer that calls fn when the clock reaches Now()+d
// (see Fake for which goroutine calls it).
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	ev := &event{f: f, fn: fn, index: -1}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(ev, d, 0)
	return (*fakeTimer)(ev)
}

// Advance moves the clock forward by d, firing what falls due (see Fake).
// A d <= 0 fires nothing new and leaves the time unchanged.
func (f *Fake) Advance(d time.Duration) {
	f.advanceMu.Lock()
	defer f.advanceMu.Unlock()
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.advanceToLocked(target)
}

// AdvanceTo moves the clock forward to t, firing what falls due (see Fake).
// A t before Now() leaves the time unchanged: a Fake never goes backwards.
func (f *Fake) AdvanceTo(t time.Time) {
	f.advanceMu.Lock()
	defer f.advanceMu.Unlock()
	f.advanceToLocked(t)
}

// Waiters returns the number of timers and tickers that are armed and have
// not fired yet (AfterFunc timers included; a ticker counts until stopped).
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events)
}

// BlockUntil blocks until at least n timers and tickers are armed (as counted
// by Waiters), or ctx is done, in which case it returns ctx.Err(). Tests call
// it to wait until the code under test has reached its next wait before they
// Advance the clock.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		got, changed := len(f.events), f.changed
		f.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// advanceToLocked fires due events up to target and sets the time.
// Caller must hold f.advanceMu, and not f.mu.
func (f *Fake) advanceToLocked(target time.Time) {
	for {
		f.mu.Lock()
		if len(f.events) == 0 || f.events[0].when.After(target) {
			if target.After(f.now) {
				f.now = target
			}
			f.mu.Unlock()
			return
		}
		ev := f.events[0]
		if ev.when.After(f.now) {
			f.now = ev.when
		}
		fired := f.now
		sent := true
		if ev.ch != nil {
			select {
			case ev.ch <- fired:
			default:
				sent = false
			}
		}
		if ev.period > 0 {
			next := ev.when.Add(ev.period)
			if !sent && !next.After(target) {
				// The reader has not taken the last tick, so every
				// tick up to target would be dropped too: skip them.
				n := target.Sub(ev.when)/ev.period + 1
				next = ev.when.Add(n * ev.period)
			}
			ev.when = next
			ev.seq = f.nextSeqLocked()
			heap.Fix(&f.events, ev.index)
		} else {
			heap.Pop(&f.events)
			f.notifyLocked()
		}
		fn := ev.fn
		f.mu.Unlock()
		if fn != nil {
			fn()
		}
	}
}

// armLocked schedules ev to fire d from now with the given period (0 for a
// one-shot timer). Caller must hold f.mu, and ev must not be armed.
func (f *Fake) armLocked(ev *event, d, period time.Duration) {
	ev.period = period
	if d <= 0 && period == 0 {
		if ev.ch != nil {
			ev.ch <- f.now // the channel was drained or is new: never blocks
		} else {
			go ev.fn()
		}
		return
	}
	ev.when = f.now.Add(d)
	ev.seq = f.nextSeqLocked()
	heap.Push(&f.events, ev)
	f.notifyLocked()
}

// disarmLocked unschedules ev and drains its channel. It reports whether the
// event was armed or had an undelivered value. Caller must hold f.mu.
func (f *Fake) disarmLocked(ev *event) bool {
	active := false
	if ev.index >= 0 {
		heap.Remove(&f.events, ev.index)
		f.notifyLocked()
		active = true
	}
	if ev.ch != nil {
		select {
		case <-ev.ch:
			active = true
		default:
		}
	}
	return active
}

// nextSeqLocked returns the next arming sequence number. Caller must hold f.mu.
func (f *Fake) nextSeqLocked() uint64 {
	f.seq++
	return f.seq
}

// notifyLocked wakes BlockUntil callers. Caller must hold f.mu.
func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// event is one armed timer or ticker. Its fields are guarded by f.mu,
// except f, ch and fn, which are immutable.
type event struct {
	f      *Fake
	ch     chan time.Time // nil for AfterFunc
	fn     func()         // nil for channel timers and tickers
	when   time.Time
	period time.Duration // > 0 for tickers
	seq    uint64
	index  int // position in f.events, -1 when not armed
}

type fakeTimer event

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.disarmLocked((*event)(t))
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	active := f.disarmLocked((*event)(t))
	f.armLocked((*event)(t), d, 0)
	return active
}

type fakeTicker event

func (t *fakeTicker) C() <-chan time.Time { return t.ch }

func (t *fakeTicker) Stop() {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disarmLocked((*event)(t))
}

func (t *fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disarmLocked((*event)(t))
	f.armLocked((*event)(t), d, d)
}

// eventHeap orders events by deadline, then by arming order.
type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *eventHeap) Push(x any) {
	ev := x.(*event)
	ev.index = len(*h)
	*h = append(*h, ev)
}
func (h *eventHeap) Pop() any {
	old := *h
	n := len(old)
	ev := old[n-1]
	old[n-1] = nil
	ev.index = -1
	*h = old[:n-1]
	return ev
}
