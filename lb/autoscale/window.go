package autoscale

import "time"

// window is the mean of the samples of the last span: a sample taken at t
// counts while t > now − span. Samples are added in time order.
type window struct {
	span time.Duration
	at   []time.Time
	val  []float64
}

// add records v at now and forgets samples older than the span.
func (w *window) add(now time.Time, v float64) {
	w.at = append(w.at, now)
	w.val = append(w.val, v)
	w.trim(now)
}

// trim forgets the samples taken at or before now − span.
func (w *window) trim(now time.Time) {
	cut := now.Add(-w.span)
	i := 0
	for i < len(w.at) && !w.at[i].After(cut) {
		i++
	}
	if i > 0 {
		w.at = append(w.at[:0], w.at[i:]...)
		w.val = append(w.val[:0], w.val[i:]...)
	}
}

// mean returns the mean of the samples in the window, 0 if there is none.
// It sums afresh each time so that a run of zeros means exactly 0.
func (w *window) mean() float64 {
	if len(w.val) == 0 {
		return 0
	}
	var s float64
	for _, v := range w.val {
		s += v
	}
	return s / float64(len(w.val))
}
