package shed

import (
	"errors"
	"fmt"
	"math"

	"github.com/spillway-lb/spillway/lb/waterfall"
)

// Config holds the tunables of the overload shedding rule. Start from
// DefaultConfig; the zero value is not valid.
type Config struct {
	// Admit is the load admitted, as a fraction of the plan's capacity
	// (which already includes target_utilization): what is left when the
	// excess is refused. Default 1: admit exactly the capacity, so that
	// every region runs at 1× its planned capacity. Lower keeps headroom
	// for the error in demand estimates. Must be in (0, 1].
	Admit float64
	// MinFraction is the smallest refused fraction that is applied; a
	// smaller one (the noise of demand estimates around λ = 1) refuses
	// nothing. Default 0.01. Must be in [0, 1).
	MinFraction float64
	// MaxFraction is the largest fraction refused, however high the
	// demand (config overload.max_shed): the bound on what demand gossiped
	// by a lying peer can make this gfe refuse. Default 0.5. Must be in
	// (0, 1].
	MaxFraction float64
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config { return Config{Admit: 1, MinFraction: 0.01, MaxFraction: 0.5} }

// ErrInvalidConfig wraps every problem Validate finds.
var ErrInvalidConfig = errors.New("shed: invalid config")

// Validate reports every problem of c, each naming its field and value,
// joined with errors.Join and wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	if !(c.Admit > 0 && c.Admit <= 1) {
		errs = append(errs, fmt.Errorf("%w: admit: must be in (0, 1], got %v", ErrInvalidConfig, c.Admit))
	}
	if !(c.MinFraction >= 0 && c.MinFraction < 1) {
		errs = append(errs, fmt.Errorf("%w: min_fraction: must be in [0, 1), got %v", ErrInvalidConfig, c.MinFraction))
	}
	if !(c.MaxFraction > 0 && c.MaxFraction <= 1) {
		errs = append(errs, fmt.Errorf("%w: max_fraction: must be in (0, 1], got %v", ErrInvalidConfig, c.MaxFraction))
	}
	return errors.Join(errs...)
}

// Fraction returns the share of arrivals to refuse when a service's global
// demand exceeds its capacity (both in the same unit, requests/s or
// connections): f = 1 − Admit·capacity/demand, so that what is admitted,
// (1 − f)·demand, equals Admit·capacity, but at most MaxFraction; 0 when
// that is not positive or is below MinFraction, and when demand or capacity is not a positive finite
// number (nothing to shed, or nothing known). A capacity of 0 with demand
// refuses nothing here: the plan has no row then and requests fail fast
// already. Every gfe computes the same f from the same plan, so the
// refused share is the same at every site.
func (c Config) Fraction(demand, capacity float64) float64 {
	if !(demand > 0 && capacity > 0) || math.IsInf(demand, 0) || math.IsInf(capacity, 0) {
		return 0
	}
	return c.fromLambda(demand / capacity)
}

func (c Config) fromLambda(lambda float64) float64 {
	if !(lambda > 0) || math.IsInf(lambda, 0) {
		return 0
	}
	f := 1 - c.Admit/lambda
	if !(f >= c.MinFraction) || f <= 0 {
		return 0
	}
	if c.MaxFraction > 0 {
		// The bound on what a peer's gossiped demand can make this gfe
		// refuse; every gfe caps alike, so rule 6's proportions hold
		// (docs/design.md §3). The zero MaxFraction of a Config built by
		// hand caps nothing.
		f = min(f, c.MaxFraction)
	}
	return f
}

// FromPlan returns the Rule for a service's plan: the fraction of
// Fraction with demand/capacity = plan.Lambda, the uniform overload
// factor of docs/design.md §3 rule 6 (every region is planned at λ times
// its capacity; refusing 1 − Admit/λ of the arrivals at every site brings
// each region back to Admit times its capacity, and the plan's proportions
// are unchanged because the same share is refused everywhere). Out of
// overload, where Lambda is 1 whatever the demand, the ratio is planLoad's
// instead: with Admit below 1 a plan at half its capacity refuses nothing,
// one at 95% of it refuses down to Admit × capacity. A nil plan sheds
// nothing.
func (c Config) FromPlan(plan *waterfall.Plan) Rule {
	if plan == nil {
		return Rule{}
	}
	return NewRule(c.fromLambda(planLoad(plan)))
}

// planLoad returns plan's demand over its capacity: Lambda in overload
// (λ > 1); otherwise the sites' demand over every region's capacity. That
// counts the capacity of a region no site with demand reaches too, which
// λ leaves out, so it is at most the true ratio and the share it refuses
// at most the exact one; it is continuous with λ at 1 when every region
// is reached.
func planLoad(plan *waterfall.Plan) float64 {
	if plan.Lambda > 1 {
		return plan.Lambda
	}
	var demand, capacity float64
	for _, s := range plan.Sites {
		demand += s.Demand
	}
	for _, r := range plan.Regions {
		capacity += r.Capacity
	}
	if !(capacity > 0) {
		return plan.Lambda
	}
	return min(1, demand/capacity)
}

// Rule refuses a fixed fraction of arrivals. It is an immutable value,
// safe for concurrent use; Admit does not allocate. The zero Rule admits
// everything.
type Rule struct {
	// Immutable after NewRule.
	fraction float64
	// threshold: rnd < threshold is refused; 0 refuses nothing.
	threshold uint64
}

// NewRule returns the Rule that refuses fraction f of the arrivals (f is
// clamped to [0, 1]; NaN refuses nothing).
func NewRule(f float64) Rule {
	if !(f > 0) {
		return Rule{}
	}
	if f >= 1 {
		return Rule{fraction: 1, threshold: math.MaxUint64}
	}
	return Rule{fraction: f, threshold: uint64(f * (1 << 64))}
}

// Fraction returns the share of arrivals r refuses.
func (r Rule) Fraction() float64 { return r.fraction }

// Admit reports whether an arrival with the uniformly random rnd is
// admitted: it is refused when rnd < Fraction·2^64, so over uniform rnd
// exactly Fraction of the arrivals are refused (all of them when Fraction
// is 1: the value MaxUint64 is refused too).
func (r Rule) Admit(rnd uint64) bool {
	if r.threshold == math.MaxUint64 {
		return false
	}
	return rnd >= r.threshold
}
