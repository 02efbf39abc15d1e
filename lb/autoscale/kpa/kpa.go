// Package kpa is Knative's Pod Autoscaler (KPA) as documented, pure on an
// injected clock: the baseline that lb/autoscale's Cloud Run rules are
// benchmarked against (`lbsim autoscale-bench`, the autoscaler scorecard).
//
// # The algorithm
//
// The sources are knative/serving's pkg/autoscaler/scaling/autoscaler.go,
// config/core/configmaps/autoscaler.yaml and the kpa-specific docs, as
// summarised in shared/anchors/autoscaling-and-quota.md §1. Every second
// the autoscaler observes the revision's concurrency: requests in flight
// on pods plus those buffered at the activator. Every TickInterval (2s),
// and at once when a request reaches a revision at zero, Scale computes:
//
//	ready       = max(1, ready pods)
//	maxUp       = ceil(MaxScaleUpRate · ready)
//	maxDown     = floor(ready / MaxScaleDownRate)       (0 with no ready pod)
//	stable      = ceil(mean concurrency over StableWindow (60s) / Target)
//	panicking   = ceil(mean concurrency over PanicWindow (6s) / Target)
//
// both clamped to [maxDown, maxUp], Target being container concurrency ×
// 70%. Panic starts when panicking/ready ≥ PanicThreshold (200%); every
// Scale still over it extends it; it ends only when under the threshold a
// whole StableWindow after the last time over it. Outside panic the
// desired count is stable; in panic it is max(stable, panicking) and never
// decreases. The result is clamped to [MinScale, MaxScale]. A revision
// goes to zero when its stable mean is zero (no traffic for a whole
// stable window); from zero, a request buffered at the activator makes
// the desired count at least 1 at once. Scale-down is immediate (the
// default scale-down-delay is 0s), at most halving per tick.
//
// Not modelled: pod sampling of large revisions, the weighted-exponential
// window, target burst capacity (it decides whether the activator is in
// the path; the scorecard runs both cases, `kpa` without it above zero
// and `kpa+activator` with it whenever a request waits).
package kpa

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/lb/autoscale/window"
)

// Config holds the KPA's parameters.
type Config struct {
	// Target is the concurrency per pod aimed for:
	// container-concurrency × container-concurrency-target-percentage.
	Target float64
	// StableWindow and PanicWindow are the averaging windows (60s and 10%
	// of it).
	StableWindow, PanicWindow time.Duration
	// PanicThreshold is the panicking/ready ratio that starts panic (2.0).
	PanicThreshold float64
	// MaxScaleUpRate and MaxScaleDownRate bound one tick's change
	// (1000 and 2).
	MaxScaleUpRate, MaxScaleDownRate float64
	// TickInterval is the period between Scale calls (2s).
	TickInterval time.Duration
	// MinScale and MaxScale bound the desired count.
	MinScale, MaxScale int
}

// DefaultConfig returns Knative's defaults for pods of the given container
// concurrency (target 70% of it) and the given max scale.
func DefaultConfig(containerConcurrency, maxScale int) Config {
	return Config{
		Target:           0.7 * float64(containerConcurrency),
		StableWindow:     60 * time.Second,
		PanicWindow:      6 * time.Second,
		PanicThreshold:   2.0,
		MaxScaleUpRate:   1000,
		MaxScaleDownRate: 2,
		TickInterval:     2 * time.Second,
		MaxScale:         maxScale,
	}
}

// Decision is the outcome of Scale.
type Decision struct {
	// Desired is the pod count the revision should have.
	Desired int
	// Panic reports whether the autoscaler is in panic mode.
	Panic bool
}

// Autoscaler is one revision's KPA. It is not safe for concurrent use.
type Autoscaler struct {
	cfg          Config
	stable, pnc  window.Mean
	panicTime    time.Time // zero: not in panic
	maxPanicPods int
	desired      int
	lastTraffic  time.Time // last observation above zero
}

// New returns a KPA whose revision has initial pods at now (which counts
// as the last traffic: a revision reaches zero a stable window later at the
// earliest).
func New(cfg Config, initial int, now time.Time) *Autoscaler {
	return &Autoscaler{
		cfg:         cfg,
		stable:      window.Mean{Span: cfg.StableWindow},
		pnc:         window.Mean{Span: cfg.PanicWindow},
		desired:     initial,
		lastTraffic: now,
	}
}

// Observe records the revision's concurrency at now (requests in flight on
// pods plus those buffered at the activator); called once a second.
func (a *Autoscaler) Observe(now time.Time, concurrency float64) {
	a.stable.Add(now, concurrency)
	a.pnc.Add(now, concurrency)
	if concurrency > 0 {
		a.lastTraffic = now
	}
}

// Desired returns the last desired count.
func (a *Autoscaler) Desired() int { return a.desired }

// Scale returns the desired pod count at now given the ready pods, by the
// algorithm of the package doc. activated reports a request buffered at
// the activator while the revision is at zero: the desired count is then
// at least 1.
func (a *Autoscaler) Scale(now time.Time, readyPods int, activated bool) Decision {
	c := a.cfg
	ready := float64(max(1, readyPods))
	maxUp := int(math.Ceil(c.MaxScaleUpRate * ready))
	maxDown := 0
	if readyPods > 0 {
		maxDown = int(math.Floor(ready / c.MaxScaleDownRate))
	}
	clamp := func(n int) int { return min(max(n, maxDown), maxUp) }
	dspc := clamp(ceil(a.stable.Value() / c.Target))
	dppc := clamp(ceil(a.pnc.Value() / c.Target))
	over := float64(dppc)/ready >= c.PanicThreshold
	switch {
	case over:
		a.panicTime = now
	case !a.panicTime.IsZero() && !now.Before(a.panicTime.Add(c.StableWindow)):
		a.panicTime, a.maxPanicPods = time.Time{}, 0
	}
	desired := dspc
	if !a.panicTime.IsZero() {
		desired = max(dspc, dppc, a.maxPanicPods)
		a.maxPanicPods = desired
	}
	// The last pod goes only after a whole stable window without traffic;
	// a request buffered at the activator brings one back at once.
	if desired == 0 && (activated || readyPods > 0 && now.Before(a.lastTraffic.Add(c.StableWindow))) {
		desired = 1
	}
	desired = max(desired, c.MinScale)
	if c.MaxScale > 0 {
		desired = min(desired, c.MaxScale)
	}
	a.desired = desired
	return Decision{Desired: desired, Panic: !a.panicTime.IsZero()}
}

// ceil rounds x up, treating x within 1e-9 above an integer as that
// integer (float noise must not add a pod).
func ceil(x float64) int {
	if x <= 0 || math.IsNaN(x) {
		return 0
	}
	return int(math.Ceil(x - 1e-9))
}
