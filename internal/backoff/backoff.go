// Package backoff computes how long to wait before retrying after failures
// in a row: exponential growth from a floor to a cap, with jitter, the
// schedule of gRPC's connection backoff. It reads no clock and draws no
// random numbers itself: the caller passes the attempt and a random value,
// so waits are reproducible in tests.
package backoff

import "time"

// Jittered returns the wait after failure number attempt (from 0) in a row:
// d = lo·2^attempt capped at hi, then jittered uniformly into [d/2, d] by r
// (any uniform 64-bit value). lo must be > 0 and hi ≥ lo.
func Jittered(attempt int, lo, hi time.Duration, r uint64) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + time.Duration(r%uint64(d-half+1))
}
