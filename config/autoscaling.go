package config

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/spf13/viper"

	"github.com/spillway-lb/spillway/lb/autoscale"
)

// Autoscaling is an instance group's autoscaler (docs/design.md §6, Cloud Run's
// rules; lb/autoscale implements them). It is on when MaxInstances ≥ 1. An
// absent block is the zero Autoscaling (off); a present one has its absent
// keys filled from DefaultAutoscaling, and must set max_instances unless
// it sets nothing else. Every time constant is configurable so that tests
// can run the rules scaled down.
type Autoscaling struct {
	// MinInstances is the fewest instances the autoscaler keeps running,
	// in 0..max_instances. Default 0: the group scales to zero when it
	// serves no requests.
	MinInstances int `mapstructure:"min_instances"`
	// MaxInstances is the most instances the group may run, in
	// 1..10000. Required to turn autoscaling on; 0 means no autoscaler.
	// A request that finds no free instance at this count waits at most
	// MaxPendingWait, then fails with 429.
	MaxInstances int `mapstructure:"max_instances"`
	// InitialInstances is how many instances run when the autoscaler
	// starts, in min_instances..max_instances. Default 0, which means
	// min_instances.
	InitialInstances int `mapstructure:"initial_instances"`
	// CPUsPerInstance is the CPU cores one instance has, in (0, 1000].
	// Default 1. The CPU driver divides the cores in use by it.
	CPUsPerInstance float64 `mapstructure:"cpus_per_instance"`
	// MaxConcurrencyPerInstance is the most requests one instance serves
	// at once, in 1..1000000. Default 80 (Cloud Run's default per vCPU).
	// It is the capacity of the concurrency driver and the upper bound of
	// an instance's ACT limit.
	MaxConcurrencyPerInstance int `mapstructure:"max_concurrency_per_instance"`
	// CPUTarget is the CPU utilization the autoscaler aims for, in
	// [0.1, 0.95]. Default 0.6.
	CPUTarget float64 `mapstructure:"cpu_target"`
	// ConcurrencyTarget is the concurrency utilization (in-flight over
	// capacity) the autoscaler aims for, in [0.1, 0.95]. Default 0.6. The
	// ACT driver aims for it too.
	ConcurrencyTarget float64 `mapstructure:"concurrency_target"`
	// ColdStart is the estimated time from starting an instance until it
	// serves, in (0, 1h]. Default 10s. It sets MaxPendingWait and tells the
	// pending queue whether waiting beats starting an instance.
	ColdStart time.Duration `mapstructure:"cold_start"`

	// CPUWindow is the window the CPU driver averages cores in use over,
	// in [1s, 1h]. Default 1m.
	CPUWindow time.Duration `mapstructure:"cpu_window"`
	// ConcurrencyWindow is the short window of the concurrency driver
	// (which takes the larger of the short and the long average) and the
	// window of the ACT driver, in [1s, 1h]. Default 1m. It is also how
	// long a group must receive no request before it may scale to zero.
	ConcurrencyWindow time.Duration `mapstructure:"concurrency_window"`
	// ConcurrencyLongWindow is the long window of the concurrency driver,
	// in concurrency_window..24h. Default 10m.
	ConcurrencyLongWindow time.Duration `mapstructure:"concurrency_long_window"`
	// ACTInterval is the period over which an instance's ACT limit is
	// adjusted: lowered by 1 when its CPU over the last interval exceeds
	// ACTHighCPU, raised by 1 when it is at its limit and its CPU stays
	// below ACTLowCPU for an interval. In (0, 1m]. Default 1s.
	ACTInterval time.Duration `mapstructure:"act_interval"`
	// ACTHighCPU is the CPU utilization above which ACT lowers the limit,
	// in (0, 1]. Default 0.9.
	ACTHighCPU float64 `mapstructure:"act_high_cpu"`
	// ACTLowCPU is the CPU utilization below which ACT raises the limit,
	// in (0, act_high_cpu). Default 0.7.
	ACTLowCPU float64 `mapstructure:"act_low_cpu"`
	// Tolerance is the hold band around each target, relative to it, in
	// [0, 0.5]. Default 0.1: at a 60% target the count holds while every
	// driver's utilization is within 54–66%, scales up when one is above
	// and down only when all are below.
	Tolerance float64 `mapstructure:"tolerance"`
	// DemotedIdleUtilization is the utilization below which a demoted set
	// of instances is stopped, in [0, 1]. Default 0.1.
	DemotedIdleUtilization float64 `mapstructure:"demoted_idle_utilization"`
	// DemotedIdleWindow is the window that utilization is measured over,
	// in [1s, 1h]. Default 1m.
	DemotedIdleWindow time.Duration `mapstructure:"demoted_idle_window"`
	// DemotedKeepFraction is the share of instances demoted at once that
	// form the second set, kept until IdleTimeout, in [0, 1]. Default 0.5
	// (docs/design.md §6 names two sets without sizes; this is our choice). The
	// first set is stopped by DemotedIdleUtilization.
	DemotedKeepFraction float64 `mapstructure:"demoted_keep_fraction"`
	// IdleTimeout is how long a kept demoted instance runs without
	// serving a request before it is stopped, in (0, 24h]. Default 15m.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// MinPendingWait and PendingWaitColdStarts give the longest a request
	// waits in the pending queue: max(min_pending_wait,
	// pending_wait_cold_starts × cold_start) (10s and 3.5 by default, so
	// 35s with the default cold start). min_pending_wait in [100ms, 1h],
	// pending_wait_cold_starts in [0, 100].
	MinPendingWait        time.Duration `mapstructure:"min_pending_wait"`
	PendingWaitColdStarts float64       `mapstructure:"pending_wait_cold_starts"`
}

// DefaultAutoscaling returns the autoscaling defaults of docs/design.md §6 and
// the Cloud Run documentation: 60% targets, 1-minute CPU and
// concurrency windows and a 10-minute long concurrency window, a 1-second
// ACT interval at 90%/70% CPU, a ±10% hold band, demoted sets stopped
// under 10% over 1 minute or after a 15-minute idle timeout, and a pending
// wait of max(10s, 3.5 × cold start). MaxInstances is 0: autoscaling off.
func DefaultAutoscaling() Autoscaling {
	d := autoscale.DefaultConfig(0, 0) // the rules' own defaults, in one place
	return Autoscaling{
		CPUsPerInstance:           d.CPUsPerInstance,
		MaxConcurrencyPerInstance: d.MaxConcurrencyPerInstance,
		CPUTarget:                 d.CPUTarget,
		ConcurrencyTarget:         d.ConcurrencyTarget,
		ColdStart:                 d.ColdStart,
		CPUWindow:                 d.CPUWindow,
		ConcurrencyWindow:         d.ConcurrencyWindow,
		ConcurrencyLongWindow:     d.ConcurrencyLongWindow,
		ACTInterval:               d.ACTInterval,
		ACTHighCPU:                d.ACTHighCPU,
		ACTLowCPU:                 d.ACTLowCPU,
		Tolerance:                 d.Tolerance,
		DemotedIdleUtilization:    d.DemotedIdleUtilization,
		DemotedIdleWindow:         d.DemotedIdleWindow,
		DemotedKeepFraction:       d.DemotedKeepFraction,
		IdleTimeout:               d.IdleTimeout,
		// d.MaxPendingWait is max(MinPendingWait, PendingWaitColdStarts ×
		// ColdStart) for these defaults (35 s).
		MinPendingWait:        10 * time.Second,
		PendingWaitColdStarts: 3.5,
	}
}

// Enabled reports whether the group is autoscaled (max_instances ≥ 1).
func (a Autoscaling) Enabled() bool { return a.MaxInstances > 0 }

// Initial returns the instances to run at start: initial_instances, or
// min_instances when it is 0.
func (a Autoscaling) Initial() int {
	if a.InitialInstances == 0 {
		return a.MinInstances
	}
	return a.InitialInstances
}

// MaxPendingWait returns the longest a request waits in the pending queue:
// max(min_pending_wait, pending_wait_cold_starts × cold_start).
func (a Autoscaling) MaxPendingWait() time.Duration {
	w := time.Duration(a.PendingWaitColdStarts * float64(a.ColdStart))
	return max(a.MinPendingWait, w)
}

// Rules returns the block as lb/autoscale's Config (the bounds, units,
// targets and time constants; InitialInstances goes to autoscale.New).
func (a Autoscaling) Rules() autoscale.Config {
	return autoscale.Config{
		MinInstances:              a.MinInstances,
		MaxInstances:              a.MaxInstances,
		CPUsPerInstance:           a.CPUsPerInstance,
		MaxConcurrencyPerInstance: a.MaxConcurrencyPerInstance,
		CPUTarget:                 a.CPUTarget,
		ConcurrencyTarget:         a.ConcurrencyTarget,
		ColdStart:                 a.ColdStart,
		CPUWindow:                 a.CPUWindow,
		ConcurrencyWindow:         a.ConcurrencyWindow,
		ConcurrencyLongWindow:     a.ConcurrencyLongWindow,
		ACTInterval:               a.ACTInterval,
		ACTHighCPU:                a.ACTHighCPU,
		ACTLowCPU:                 a.ACTLowCPU,
		Tolerance:                 a.Tolerance,
		DemotedIdleUtilization:    a.DemotedIdleUtilization,
		DemotedIdleWindow:         a.DemotedIdleWindow,
		DemotedKeepFraction:       a.DemotedKeepFraction,
		IdleTimeout:               a.IdleTimeout,
		MaxPendingWait:            a.MaxPendingWait(),
	}
}

// Bounds of autoscaling fields.
const (
	maxCPUsPerInstance = 1000
	maxColdStartFactor = 100
)

// ValidateAutoscaling checks an autoscaling block on its own and returns
// every problem joined, each a *FieldError (matching ErrInvalid) that names
// file and the path prefix + "." + the key (prefix "" gives bare keys).
// lbsim's trace parser uses it for its group: block; Validate checks every
// group's block the same way.
func ValidateAutoscaling(file, prefix string, a Autoscaling) error {
	p := &problems{file: file}
	(&validator{p: p}).autoscaling(prefix, a)
	return p.err()
}

// autoscaling checks one group's autoscaling block at path ap.
func (v *validator) autoscaling(ap string, a Autoscaling) {
	at := func(key string) string { return join(ap, key) }
	if !a.Enabled() {
		if a != DefaultAutoscaling() && a != (Autoscaling{}) {
			v.p.add(at("max_instances"), "required (1..10000) when the autoscaling block is set, got 0")
		}
		return
	}
	if a.MaxInstances < 1 || a.MaxInstances > MaxInstances {
		v.p.add(at("max_instances"), fmt.Sprintf("must be in 1..%d, got %d", MaxInstances, a.MaxInstances))
	}
	if a.MinInstances < 0 || a.MinInstances > a.MaxInstances {
		v.p.add(at("min_instances"), fmt.Sprintf("must be in 0..max_instances (%d), got %d", a.MaxInstances, a.MinInstances))
	}
	if a.InitialInstances != 0 && (a.InitialInstances < a.MinInstances || a.InitialInstances > a.MaxInstances) {
		v.p.add(at("initial_instances"), fmt.Sprintf("must be 0 (= min_instances) or in min_instances..max_instances (%d..%d), got %d", a.MinInstances, a.MaxInstances, a.InitialInstances))
	}
	v.floatIn(at("cpus_per_instance"), a.CPUsPerInstance, 0, maxCPUsPerInstance, false, true)
	if a.MaxConcurrencyPerInstance < 1 || a.MaxConcurrencyPerInstance > maxConcurrency {
		v.p.add(at("max_concurrency_per_instance"), fmt.Sprintf("must be in 1..%d, got %d", maxConcurrency, a.MaxConcurrencyPerInstance))
	}
	v.floatIn(at("cpu_target"), a.CPUTarget, 0.1, 0.95, true, true)
	v.floatIn(at("concurrency_target"), a.ConcurrencyTarget, 0.1, 0.95, true, true)
	v.floatIn(at("act_high_cpu"), a.ACTHighCPU, 0, 1, false, true)
	if a.ACTHighCPU > 0 && a.ACTHighCPU <= 1 {
		v.floatIn(at("act_low_cpu"), a.ACTLowCPU, 0, a.ACTHighCPU, false, false)
	}
	v.floatIn(at("tolerance"), a.Tolerance, 0, 0.5, true, true)
	v.floatIn(at("demoted_idle_utilization"), a.DemotedIdleUtilization, 0, 1, true, true)
	v.floatIn(at("demoted_keep_fraction"), a.DemotedKeepFraction, 0, 1, true, true)
	v.floatIn(at("pending_wait_cold_starts"), a.PendingWaitColdStarts, 0, maxColdStartFactor, true, true)
	const window = "the controller samples once a second"
	for _, d := range []struct {
		key      string
		val      time.Duration
		min, max time.Duration // min 0: any positive value
		why      string        // of min
	}{
		{"cold_start", a.ColdStart, 0, maxShortTimeout, ""},
		{"cpu_window", a.CPUWindow, minAutoscaleWindow, maxShortTimeout, window},
		{"concurrency_window", a.ConcurrencyWindow, minAutoscaleWindow, maxShortTimeout, window + ", and a group idle that long scales to zero"},
		{"concurrency_long_window", a.ConcurrencyLongWindow, 0, maxLongTimeout, ""},
		{"act_interval", a.ACTInterval, 0, time.Minute, ""},
		{"demoted_idle_window", a.DemotedIdleWindow, minAutoscaleWindow, maxShortTimeout, window},
		{"idle_timeout", a.IdleTimeout, 0, maxLongTimeout, ""},
		{"min_pending_wait", a.MinPendingWait, minPendingWait, maxShortTimeout, "a shorter wait never asks for an instance"},
	} {
		if d.val <= 0 {
			v.p.add(at(d.key), fmt.Sprintf("must be > 0, got %v", d.val))
			continue
		}
		v.atLeast(at(d.key), d.val, d.min, d.why)
		v.atMost(at(d.key), d.val, d.max)
	}
	if a.ConcurrencyLongWindow > 0 && a.ConcurrencyWindow > 0 && a.ConcurrencyLongWindow < a.ConcurrencyWindow {
		v.p.add(at("concurrency_long_window"), fmt.Sprintf("must be at least concurrency_window (%v), got %v", a.ConcurrencyWindow, a.ConcurrencyLongWindow))
	}
}

// floatIn adds a problem at path unless x is a finite number in the range
// from lo to hi, each end included or not as loIn and hiIn say.
func (v *validator) floatIn(path string, x, lo, hi float64, loIn, hiIn bool) {
	ok := !math.IsNaN(x) && !math.IsInf(x, 0) &&
		(x > lo || loIn && x == lo) && (x < hi || hiIn && x == hi)
	if ok {
		return
	}
	l, r := "(", ")"
	if loIn {
		l = "["
	}
	if hiIn {
		r = "]"
	}
	v.p.add(path, fmt.Sprintf("must be in %s%v, %v%s, got %v", l, lo, hi, r, x))
}

// DecodeAutoscaling decodes an autoscaling block held outside an operator
// config (lbsim's autoscale traces put one under group:) exactly as Load
// decodes one in a group: raw is the block as a YAML decoder returns it (a
// map), its absent keys take DefaultAutoscaling, unknown keys and values
// of the wrong type are errors, and the result is validated; max_instances
// is required. Every problem is returned at once, each a *FieldError
// naming file and path + "." + the key.
func DecodeAutoscaling(file, path string, raw any) (Autoscaling, error) {
	p := &problems{file: file}
	ch := &checker{p: p}
	t := reflect.TypeFor[Autoscaling]()
	v, ok := ch.checkValue(path, t, deepCopy(raw), reflect.Zero(t))
	if !ok {
		return Autoscaling{}, p.err()
	}
	dv := viper.New()
	if err := dv.MergeConfigMap(v.(map[string]any)); err != nil {
		return Autoscaling{}, fmt.Errorf("%s: %s: %w", file, path, err)
	}
	var a Autoscaling
	if err := dv.UnmarshalExact(&a); err != nil {
		p.errs = append(p.errs, &FieldError{File: file, Path: path, Msg: "decoding: " + err.Error(), Err: err})
		return Autoscaling{}, p.err()
	}
	vp := &problems{file: file}
	(&validator{p: vp}).autoscaling(path, a)
	for _, e := range vp.errs {
		if fe, ok := e.(*FieldError); ok && under(fe.Path, ch.bad) {
			continue
		}
		p.errs = append(p.errs, e)
	}
	if !a.Enabled() && !under(join(path, "max_instances"), ch.bad) && len(p.errs) == 0 {
		p.add(join(path, "max_instances"), "required (1..10000)")
	}
	if len(p.errs) > 0 {
		return Autoscaling{}, p.err()
	}
	return a, nil
}
