// Package clock is the fake clock tests drive (Fake), over the time source
// interfaces of lb/clock, which every daemon and pure package takes (the
// real clock is lb/clock.Real). Clock, Timer, Ticker, Real and OrReal are
// lb/clock's under this path too, so that a test that drives a Fake names
// the interfaces from the one import.
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
