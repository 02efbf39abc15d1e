package autoscale

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config holds the parameters of the rules for one instance group: the
// operator's autoscaling block (config.Autoscaling, whose Rules method
// converts it) in domain form. Every duration is a span of the injected
// clock; nothing here reads a real one.
type Config struct {
	// MinInstances and MaxInstances bound the recommendation:
	// 0 ≤ MinInstances ≤ MaxInstances, MaxInstances ≥ 1.
	MinInstances, MaxInstances int
	// CPUsPerInstance is the cores of one instance (> 0): the CPU
	// driver's unit.
	CPUsPerInstance float64
	// MaxConcurrencyPerInstance is the most in-flight requests of one
	// instance (≥ 1): the concurrency driver's unit and the ceiling of an
	// instance's ACT limit.
	MaxConcurrencyPerInstance int
	// CPUTarget and ConcurrencyTarget are the utilizations aimed for, in
	// (0, 1]. The ACT driver uses ConcurrencyTarget.
	CPUTarget, ConcurrencyTarget float64
	// ColdStart is the estimated time from a start to a serving instance
	// (> 0). The pending queue compares waiting with it.
	ColdStart time.Duration
	// CPUWindow is the CPU driver's averaging window; ConcurrencyWindow
	// and ConcurrencyLongWindow the concurrency driver's (it takes the
	// larger average); the ACT driver averages over ConcurrencyWindow.
	// A group that received no request and had nothing in flight over
	// ConcurrencyWindow is idle and scales to zero if MinInstances is 0;
	// with MinInstances ≥ 1 idleness is no rule (the drivers decide).
	CPUWindow, ConcurrencyWindow, ConcurrencyLongWindow time.Duration
	// ACTInterval, ACTHighCPU and ACTLowCPU are the ACT rule (see ACT).
	ACTInterval           time.Duration
	ACTHighCPU, ACTLowCPU float64
	// Tolerance is the hold band relative to each target, in [0, 1): the
	// count holds while no driver's utilization is above
	// target·(1+Tolerance) and not every one is below target·(1−Tolerance).
	Tolerance float64
	// DemotedIdleUtilization and DemotedIdleWindow stop a first demoted
	// set whose mean utilization over the window is below the former.
	DemotedIdleUtilization float64
	DemotedIdleWindow      time.Duration
	// DemotedKeepFraction is the share of each demotion (rounded down)
	// that forms the second set, stopped only after IdleTimeout without
	// traffic.
	DemotedKeepFraction float64
	IdleTimeout         time.Duration
	// MaxPendingWait is the longest a request waits in the pending queue
	// before an instance is started for it, or, at MaxInstances, before
	// it fails with 429 (max(10s, 3.5 × cold start) by default).
	MaxPendingWait time.Duration
}

// DefaultConfig returns the defaults of docs/design.md §6 with the given
// bounds: what config.DefaultAutoscaling holds, with a 10-second cold
// start and a 35-second pending wait.
func DefaultConfig(minInstances, maxInstances int) Config {
	return Config{
		MinInstances:              minInstances,
		MaxInstances:              maxInstances,
		CPUsPerInstance:           1,
		MaxConcurrencyPerInstance: 80,
		CPUTarget:                 0.6,
		ConcurrencyTarget:         0.6,
		ColdStart:                 10 * time.Second,
		CPUWindow:                 time.Minute,
		ConcurrencyWindow:         time.Minute,
		ConcurrencyLongWindow:     10 * time.Minute,
		ACTInterval:               time.Second,
		ACTHighCPU:                0.9,
		ACTLowCPU:                 0.7,
		Tolerance:                 0.1,
		DemotedIdleUtilization:    0.1,
		DemotedIdleWindow:         time.Minute,
		DemotedKeepFraction:       0.5,
		IdleTimeout:               15 * time.Minute,
		MaxPendingWait:            35 * time.Second,
	}
}

// ErrConfig matches every error of Config.Validate.
var ErrConfig = errors.New("autoscale: invalid config")

// Validate reports the first field outside the range its doc gives
// (operator configs are checked, with paths, by package config; this
// guards hand-built ones). The error matches ErrConfig.
func (c Config) Validate() error {
	pos := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	frac := func(x float64) bool { return x >= 0 && x <= 1 }
	switch {
	case c.MaxInstances < 1 || c.MinInstances < 0 || c.MinInstances > c.MaxInstances:
		return fmt.Errorf("%w: instances must satisfy 0 ≤ min ≤ max, max ≥ 1; got min %d, max %d", ErrConfig, c.MinInstances, c.MaxInstances)
	case !pos(c.CPUsPerInstance) || c.MaxConcurrencyPerInstance < 1:
		return fmt.Errorf("%w: cpus per instance %v and max concurrency %d must be positive", ErrConfig, c.CPUsPerInstance, c.MaxConcurrencyPerInstance)
	case !pos(c.CPUTarget) || c.CPUTarget > 1 || !pos(c.ConcurrencyTarget) || c.ConcurrencyTarget > 1:
		return fmt.Errorf("%w: targets must be in (0, 1]; got cpu %v, concurrency %v", ErrConfig, c.CPUTarget, c.ConcurrencyTarget)
	case !frac(c.Tolerance) || c.Tolerance >= 1 || !frac(c.DemotedIdleUtilization) || !frac(c.DemotedKeepFraction) ||
		!frac(c.ACTHighCPU) || !frac(c.ACTLowCPU):
		return fmt.Errorf("%w: tolerance, demoted idle utilization, keep fraction and ACT CPU thresholds must be in [0, 1]", ErrConfig)
	case c.ColdStart <= 0 || c.CPUWindow <= 0 || c.ConcurrencyWindow <= 0 || c.ConcurrencyLongWindow <= 0 ||
		c.ACTInterval <= 0 || c.DemotedIdleWindow <= 0 || c.IdleTimeout <= 0 || c.MaxPendingWait <= 0:
		return fmt.Errorf("%w: every duration must be > 0", ErrConfig)
	}
	return nil
}
