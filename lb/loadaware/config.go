package loadaware

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config holds the tunables of a Chooser. Start from DefaultConfig; the zero
// value is not valid (Validate says why).
type Config struct {
	// Decay is the time constant τ of the peak EWMA of latency and of the
	// fading of utilization reports: a sample t after the previous one
	// keeps exp(−t/τ) of the old estimate, and between samples the
	// estimate fades by the same factor. Default 1s. Longer smooths more
	// and remembers a slow spell longer (Finagle and linkerd use 10s);
	// shorter follows a recovering instance sooner at the cost of noise.
	Decay time.Duration
	// ProbeAfter is how long an estimate lives without a sample. An
	// instance whose last answer is older (or that never answered) is
	// "unknown": with no request in flight it costs 0, so the next pick
	// that draws it sends it one request, a probe; while that probe is in
	// flight it costs more than any known instance, so it gets no second
	// one. The probe's answer replaces the forgotten estimate. Default 2s:
	// an instance that was slow gets about one request per ProbeAfter
	// while it stays slow, and its full share back at most ProbeAfter
	// plus the latency of the probe it still holds after it recovers.
	// Must be positive and at most one hour.
	ProbeAfter time.Duration
	// UtilizationWeight β says how much an ORCA utilization report ρ
	// counts: the cost is multiplied by 1 + β·ρ/(1−ρ), ρ capped at
	// MaxUtilization (β = 1: 1/(1−ρ), an M/M/1 queue's response time over
	// its service time). In-flight counts see only this gfe's requests;
	// utilization is what every client of the instance causes. Default 1;
	// 0 ignores utilization.
	UtilizationWeight float64
	// MaxUtilization caps ρ in the factor above. Default 0.95 (a factor
	// of at most 20 at β = 1). Must be in [0, 1).
	MaxUtilization float64
	// SlowStart is the window over which a new or returning instance's
	// weight ramps up (Envoy's slow_start_window, HAProxy's slowstart):
	// t into the window its cost is divided by
	// max(MinWeight, (t/SlowStart)^(1/Aggression)). Default 30s; 0 turns
	// slow start off.
	SlowStart time.Duration
	// Aggression shapes the ramp (Envoy's aggression): 1 is linear, above
	// 1 ramps faster at first. Default 1. Must be positive.
	Aggression float64
	// MinWeight is the weight an instance starts its window with (Envoy's
	// min_weight_percent, as a fraction). Default 0.1. Must be in (0, 1].
	MinWeight float64
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		Decay:             time.Second,
		ProbeAfter:        2 * time.Second,
		UtilizationWeight: 1,
		MaxUtilization:    0.95,
		SlowStart:         30 * time.Second,
		Aggression:        1,
		MinWeight:         0.1,
	}
}

// ErrInvalidConfig wraps every problem Validate finds.
var ErrInvalidConfig = errors.New("loadaware: invalid config")

// Validate reports every problem of c, each naming its field and value,
// joined with errors.Join and wrapping ErrInvalidConfig; nil when c is
// usable by New.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s, got %v", ErrInvalidConfig, field, rule, v))
	}
	if c.Decay <= 0 {
		bad("decay", "must be positive", c.Decay)
	}
	if c.ProbeAfter <= 0 || c.ProbeAfter > time.Hour {
		bad("probe_after", "must be in (0, 1h]", c.ProbeAfter)
	}
	if !(c.UtilizationWeight >= 0) || math.IsInf(c.UtilizationWeight, 1) {
		bad("utilization_weight", "must be finite and >= 0", c.UtilizationWeight)
	}
	if !(c.MaxUtilization >= 0 && c.MaxUtilization < 1) {
		bad("max_utilization", "must be in [0, 1)", c.MaxUtilization)
	}
	if c.SlowStart < 0 {
		bad("slow_start", "must be >= 0", c.SlowStart)
	}
	if !(c.Aggression > 0) || math.IsInf(c.Aggression, 1) {
		bad("aggression", "must be finite and positive", c.Aggression)
	}
	if !(c.MinWeight > 0 && c.MinWeight <= 1) {
		bad("min_weight", "must be in (0, 1]", c.MinWeight)
	}
	return errors.Join(errs...)
}
