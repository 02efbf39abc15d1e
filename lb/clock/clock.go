// Package clock is the time source of every time-based part of Spillway:
// the Clock, Timer and Ticker interfaces and Real, the clock of the time
// package. It holds no state and does no I/O; the fake clock tests drive
// is internal/clock.Fake, and internal/clock names these same types (as
// aliases), so a Clock of either package is the other's.
//
// Code that waits, schedules or measures takes a Clock (usually through an
// Options struct) instead of calling the time package directly, so that tests
// can drive it with a Fake clock and never sleep. The shape follows
// tailscale's tstime: Now, NewTimer, NewTicker, AfterFunc and Since, with
// timers and tickers returned as small interfaces. Pure code (lb/routing,
// lb/waterfall) takes no Clock at all: it is given the time as a value.
//
// A nil Clock means the real clock; resolve it once with OrReal:
//
//	type Options struct {
//		// Clock is the time source. Nil means the real clock.
//		Clock clock.Clock
//	}
//
//	func New(opts Options) *Thing {
//		return &Thing{clock: clock.OrReal(opts.Clock)}
//	}
package clock

import "time"

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once,
	// after at least d. A d <= 0 makes the timer fire at once.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that sends the time on its channel every d.
	// Ticks are dropped, never queued, when the reader falls behind (the
	// channel holds at most one tick). It panics if d <= 0, as
	// time.NewTicker does.
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine after at least d, unless the
	// timer is stopped first. The returned Timer's C is nil. (The Fake clock
	// calls f on the goroutine that advances it instead; see Fake.)
	AfterFunc(d time.Duration, f func()) Timer
	// Since returns the time elapsed since t, by this clock.
	Since(t time.Time) time.Duration
}

// Timer is a one-shot timer made by a Clock. Its methods follow time.Timer
// with Go 1.23+ semantics: after Stop or Reset returns, no stale value is
// received from C.
type Timer interface {
	// C returns the channel the timer fires on; nil for an AfterFunc timer.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether the call
	// stopped the timer (false if it had already fired or been stopped).
	Stop() bool
	// Reset re-arms the timer to fire after d, whether or not it had fired.
	// It reports whether the timer was active before the call.
	Reset(d time.Duration) bool
}

// Ticker is a periodic ticker made by a Clock.
type Ticker interface {
	// C returns the channel the ticks are sent on.
	C() <-chan time.Time
	// Stop turns the ticker off. No tick is sent after Stop returns.
	Stop()
	// Reset stops the ticker and restarts it with period d, the first tick
	// coming d after the call. It panics if d <= 0.
	Reset(d time.Duration)
}

// OrReal returns c, or the real clock when c is nil. Constructors call it on
// their Options.Clock so that a nil Clock means the real clock.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Real is the Clock of the time package. The zero value is ready to use.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTimer returns a time.NewTimer(d).
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker returns a time.NewTicker(d).
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// AfterFunc returns a time.AfterFunc(d, f).
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }
