package outlier

import (
	"errors"
	"fmt"
	"time"
)

// Config is what an operator sets for passive outlier detection of one
// Detector (usually one per edge node, shared by every backend group). The
// zero value is not valid; start from DefaultConfig. A Config is read-only
// once handed to New or SetConfig.
type Config struct {
	// Consecutive5xx is the number of failures in a row (5xx responses,
	// connect failures and timeouts alike) that eject a backend. Default 5,
	// as in Envoy. Lower ejects a broken backend after fewer failed requests
	// but also ejects a healthy one that answers a short burst of requests
	// with errors of their own making.
	Consecutive5xx int `mapstructure:"consecutive_5xx"`
	// ConsecutiveConnectFailures is the number of connect failures in a row
	// that eject a backend. Any answer from the backend, even a 5xx or a
	// timeout after the connection opened, breaks the run. Default 3: a
	// backend that cannot be reached fails every request sent to it, so it
	// is ejected sooner than one that answers with errors. Connect failures
	// also count toward Consecutive5xx.
	ConsecutiveConnectFailures int `mapstructure:"consecutive_connect_failures"`

	// BaseEjectionTime is how long the first ejection of a backend lasts.
	// The k-th ejection in a row lasts k × BaseEjectionTime, capped at
	// MaxEjectionTime; the multiplier k decays by one for every
	// BaseEjectionTime the backend spends back in service (see the package
	// doc). Default 30s. Longer spares a broken backend more traffic; shorter
	// returns a recovered backend sooner. Must be > 0.
	BaseEjectionTime time.Duration `mapstructure:"base_ejection_time"`
	// MaxEjectionTime caps the length of one ejection. Default 300s. Must be
	// >= BaseEjectionTime; equal makes every ejection last BaseEjectionTime.
	MaxEjectionTime time.Duration `mapstructure:"max_ejection_time"`

	// MaxEjectionPercent is the largest share of a group's registered
	// backends, in percent [0, 100], that may be ejected at once: an
	// ejection that would take the group over it is refused. Whatever the
	// value, at least one backend of a group always stays in service.
	// Default 50. The share is rounded down, so small groups eject fewer
	// backends than the percentage suggests (at 50%: one of 2 or 3, two of
	// 4 or 5). Zero turns ejection off (failures are still counted and
	// refusals show in Stats). Higher lets detection remove more of a group
	// at the cost of overloading the rest when many backends fail at once.
	MaxEjectionPercent int `mapstructure:"max_ejection_percent"`
}

// DefaultConfig returns a complete, valid Config with Envoy's defaults where
// Envoy has one: eject after 5 failures in a row or 3 connect failures in a
// row, for 30s × the ejection multiplier, at most 300s, never more than half
// of a group.
func DefaultConfig() Config {
	return Config{
		Consecutive5xx:             5,                 // Envoy consecutive_5xx
		ConsecutiveConnectFailures: 3,                 // an unreachable backend fails every request
		BaseEjectionTime:           30 * time.Second,  // Envoy base_ejection_time
		MaxEjectionTime:            300 * time.Second, // Envoy max_ejection_time
		MaxEjectionPercent:         50,                // a group keeps at least half its backends
	}
}

// Validate reports every problem with c, joined with errors.Join. Each
// message names the field by its config path under "outlier." and gives the
// bad value, for example "outlier.consecutive_5xx: must be >= 1, got 0".
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.Consecutive5xx < 1 {
		add("outlier.consecutive_5xx: must be >= 1, got %d", c.Consecutive5xx)
	}
	if c.ConsecutiveConnectFailures < 1 {
		add("outlier.consecutive_connect_failures: must be >= 1, got %d", c.ConsecutiveConnectFailures)
	}
	if c.BaseEjectionTime <= 0 {
		add("outlier.base_ejection_time: must be > 0, got %s", c.BaseEjectionTime)
	}
	if c.MaxEjectionTime <= 0 {
		add("outlier.max_ejection_time: must be > 0, got %s", c.MaxEjectionTime)
	} else if c.BaseEjectionTime > 0 && c.MaxEjectionTime < c.BaseEjectionTime {
		add("outlier.max_ejection_time: must be >= base_ejection_time (%s), got %s", c.BaseEjectionTime, c.MaxEjectionTime)
	}
	if c.MaxEjectionPercent < 0 || c.MaxEjectionPercent > 100 {
		add("outlier.max_ejection_percent: must be in [0, 100], got %d", c.MaxEjectionPercent)
	}
	return errors.Join(errs...)
}

// maxMultiplier is the largest useful ejection multiplier:
// ceil(MaxEjectionTime / BaseEjectionTime). Past it every ejection lasts
// MaxEjectionTime anyway, so the multiplier is capped there; that bounds the
// healthy time needed to decay it back to zero to about
// MaxEjectionTime + BaseEjectionTime.
func (c *Config) maxMultiplier() int {
	return int((c.MaxEjectionTime + c.BaseEjectionTime - 1) / c.BaseEjectionTime)
}

// ejectionTime is how long an ejection with multiplier k (>= 1) lasts:
// k × BaseEjectionTime, capped at MaxEjectionTime.
func (c *Config) ejectionTime(k int) time.Duration {
	if k >= c.maxMultiplier() {
		return c.MaxEjectionTime
	}
	return min(time.Duration(k)*c.BaseEjectionTime, c.MaxEjectionTime)
}

// allowedEjections is how many of a group's total registered backends may be
// ejected at once: floor(total × MaxEjectionPercent / 100), and never all of
// them (at most total-1).
func (c *Config) allowedEjections(total int) int {
	return max(0, min(total*c.MaxEjectionPercent/100, total-1))
}
