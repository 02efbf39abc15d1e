// Package clock is the fake clock tests drive (Fake), over the time source
// interfaces of lb/clock. Clock, Timer, Ticker and Real are lb/clock's own
// types under their old import path, so that the daemons, which take an
// internal/clock.Clock, and the pure packages under lb/, which may not
// import internal/, share one Clock.
package clock

import "github.com/spillway-lb/spillway/lb/clock"

// Clock, Timer, Ticker and Real are lb/clock's.
type (
	Clock  = clock.Clock
	Timer  = clock.Timer
	Ticker = clock.Ticker
	Real   = clock.Real
)

// OrReal returns c, or the real clock when c is nil (lb/clock.OrReal).
func OrReal(c Clock) Clock { return clock.OrReal(c) }
