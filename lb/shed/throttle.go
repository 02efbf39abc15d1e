package shed

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// ThrottleConfig holds the tunables of a Throttle. Start from
// DefaultThrottleConfig; the zero value is not valid.
type ThrottleConfig struct {
	// K is the multiplier of accepts in the refusal probability
	// max(0, (requests − K·accepts)/(requests + 1)): the client refuses
	// locally once it sends more than K times what the backends accept.
	// Default 2 (the SRE book's). Lower refuses sooner and wastes less
	// backend work on requests that will be rejected; higher lets more
	// through to discover recovered capacity. Must be >= 1.
	K float64
	// Window is the time requests and accepts are counted over. Default
	// 2 minutes (the SRE book's). Must be at least one Bucket.
	Window time.Duration
	// Bucket is the granularity at which counts leave the window. Default
	// 1s. Must be positive.
	Bucket time.Duration
}

// DefaultThrottleConfig returns the defaults documented on the fields.
func DefaultThrottleConfig() ThrottleConfig {
	return ThrottleConfig{K: 2, Window: 2 * time.Minute, Bucket: time.Second}
}

// maxBuckets bounds Window/Bucket.
const maxBuckets = 4096

// Validate reports every problem of c, each naming its field and value,
// joined with errors.Join and wrapping ErrInvalidConfig.
func (c ThrottleConfig) Validate() error {
	var errs []error
	if !(c.K >= 1) || math.IsInf(c.K, 1) {
		errs = append(errs, fmt.Errorf("%w: k: must be finite and >= 1, got %v", ErrInvalidConfig, c.K))
	}
	if c.Bucket <= 0 {
		errs = append(errs, fmt.Errorf("%w: bucket: must be positive, got %v", ErrInvalidConfig, c.Bucket))
	} else if n := c.Window / c.Bucket; n < 1 || n > maxBuckets {
		errs = append(errs, fmt.Errorf("%w: window: must be 1 to %d buckets of %v, got %v", ErrInvalidConfig, maxBuckets, c.Bucket, c.Window))
	}
	return errors.Join(errs...)
}

// bucket counts one Bucket's requests and accepts.
type bucket struct {
	requests, accepts atomic.Int64
}

// Throttle is the SRE book's client-side adaptive throttling ("Handling
// Overload"): over the last Window it counts the requests the client
// attempted and those the backends accepted, and refuses a new request
// locally with probability max(0, (requests − K·accepts)/(requests + 1)).
// While backends accept everything the probability stays 0; when they
// accept only a share a < 1/K, the client refuses about 1 − K·a of its
// requests itself, at once, instead of sending them to be rejected. Time
// comes in as an argument and randomness as rnd. A Throttle is safe for
// concurrent use and does not allocate; it must not be copied. Under
// concurrent calls at a bucket boundary a count may be lost (never
// counted twice).
type Throttle struct {
	// Immutable after NewThrottle.
	k      float64
	bucket int64 // nanoseconds

	// Accessed atomically.
	buckets           []bucket
	head              atomic.Int64 // the newest bucket's epoch (time / Bucket)
	requests, accepts atomic.Int64 // sums over the buckets
}

// NewThrottle returns a Throttle for cfg whose window ends at now, or an
// error wrapping ErrInvalidConfig.
func NewThrottle(cfg ThrottleConfig, now time.Time) (*Throttle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Throttle{k: cfg.K, bucket: int64(cfg.Bucket), buckets: make([]bucket, cfg.Window/cfg.Bucket)}
	t.head.Store(t.epoch(now))
	return t, nil
}

func (t *Throttle) epoch(now time.Time) int64 { return now.UnixNano() / t.bucket }

// advance moves the window to now's bucket, emptying the buckets it
// leaves, and returns now's bucket.
func (t *Throttle) advance(now time.Time) *bucket {
	e := t.epoch(now)
	n := int64(len(t.buckets))
	for {
		h := t.head.Load()
		if e <= h {
			break
		}
		if !t.head.CompareAndSwap(h, e) {
			continue
		}
		for x := h + 1; x <= e && x <= h+n; x++ {
			b := &t.buckets[x%n]
			t.requests.Add(-b.requests.Swap(0))
			t.accepts.Add(-b.accepts.Swap(0))
		}
		break
	}
	return &t.buckets[e%n]
}

// RefuseProbability returns max(0, (requests − K·accepts)/(requests + 1))
// over the window ending at now.
func (t *Throttle) RefuseProbability(now time.Time) float64 {
	t.advance(now)
	return t.probability()
}

func (t *Throttle) probability() float64 {
	r := float64(t.requests.Load())
	a := float64(t.accepts.Load())
	return max(0, (r-t.k*a)/(r+1))
}

// Admit counts one request attempted at now and reports whether the
// client should send it: false with RefuseProbability (taken before this
// request is counted), decided by rnd, a uniformly random uint64. A
// request it admits that the backend then accepts must be reported with
// Accepted.
func (t *Throttle) Admit(now time.Time, rnd uint64) bool {
	b := t.advance(now)
	p := t.probability()
	b.requests.Add(1)
	t.requests.Add(1)
	return !(float64(rnd>>11)*0x1p-53 < p)
}

// Accepted counts one request the backend accepted (answered, other than
// a rejection for capacity) at now.
func (t *Throttle) Accepted(now time.Time) {
	b := t.advance(now)
	b.accepts.Add(1)
	t.accepts.Add(1)
}
