// Package window holds the sliding mean the autoscalers of lb/autoscale
// and lb/autoscale/kpa share: the mean of the samples of the last Span,
// on the time the caller gives (no clock, no I/O).
package window

import "time"

// Mean is the mean of the samples of the last Span: a sample taken at t
// counts while t > now − Span. Samples are added in time order. The zero
// value with Span set is ready to use.
type Mean struct {
	Span time.Duration
	at   []time.Time
	val  []float64
}

// Add records v at now and forgets the samples taken at or before
// now − Span.
func (w *Mean) Add(now time.Time, v float64) {
	w.at = append(w.at, now)
	w.val = append(w.val, v)
	cut, i := now.Add(-w.Span), 0
	for i < len(w.at) && !w.at[i].After(cut) {
		i++
	}
	if i > 0 {
		w.at = append(w.at[:0], w.at[i:]...)
		w.val = append(w.val[:0], w.val[i:]...)
	}
}

// Value returns the mean of the samples in the window, 0 if there is none.
// It sums afresh each time so that a run of zeros means exactly 0.
func (w *Mean) Value() float64 {
	if len(w.val) == 0 {
		return 0
	}
	var s float64
	for _, v := range w.val {
		s += v
	}
	return s / float64(len(w.val))
}
