package autoscale

import "time"

// ACT is one instance's adaptive concurrency limit (Cloud Run's Adaptive
// Concurrency Tuning): how many requests it takes at once before it
// counts as busy, between 1 and MaxConcurrencyPerInstance. The zero value
// is not usable; use NewACT. It is not safe for concurrent use.
type ACT struct {
	limit    int
	ceiling  int
	interval time.Duration
	high     float64
	low      float64
	lowSince time.Time // start of the current run at the limit below low; zero = none
}

// NewACT returns an instance's ACT at the ceiling MaxConcurrencyPerInstance.
func NewACT(cfg Config) *ACT {
	return &ACT{
		limit:    cfg.MaxConcurrencyPerInstance,
		ceiling:  cfg.MaxConcurrencyPerInstance,
		interval: cfg.ACTInterval,
		high:     cfg.ACTHighCPU,
		low:      cfg.ACTLowCPU,
	}
}

// Limit returns the current limit.
func (a *ACT) Limit() int { return a.limit }

// Observe feeds the instance's CPU utilization (in [0, 1] of its CPUs)
// over the ACTInterval ending at now and its requests in flight at now,
// and returns the new limit. The caller observes once per ACTInterval.
// After Observe returns:
//
//   - if cpu > ACTHighCPU, the limit is one lower (never below 1);
//   - else if the instance has been at its limit (inFlight ≥ limit) with
//     CPU below ACTLowCPU for a whole ACTInterval, the limit is one higher
//     (never above the ceiling), and the next raise needs another whole
//     interval;
//   - else the limit is unchanged.
func (a *ACT) Observe(now time.Time, cpu float64, inFlight int) int {
	switch {
	case cpu > a.high:
		a.limit = max(1, a.limit-1)
		a.lowSince = time.Time{}
	case inFlight >= a.limit && cpu < a.low:
		if a.lowSince.IsZero() {
			// This observation covers the interval ending at now.
			a.lowSince = now.Add(-a.interval)
		}
		if !now.Before(a.lowSince.Add(a.interval)) {
			a.limit = min(a.ceiling, a.limit+1)
			a.lowSince = now
		}
	default:
		a.lowSince = time.Time{}
	}
	return a.limit
}
