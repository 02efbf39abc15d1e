package autoscale

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/lb/autoscale/window"
)

// Sample is what a group did during one tick, as a controller (or a
// trace) observes it. Quantities are group totals, not per instance.
type Sample struct {
	// CPUCores is the CPU cores in use during the tick, summed over the
	// group's instances (CPU-seconds per second).
	CPUCores float64
	// Concurrency is the mean number of requests in flight during the
	// tick, summed over the group's instances.
	Concurrency float64
	// Requests is the number of requests the group received during the
	// tick (served, pending or failed).
	Requests int64
	// ACT is the mean ACT limit of the group's instances (see ACT): the
	// requests one instance takes before it counts as busy. 0 means
	// MaxConcurrencyPerInstance.
	ACT float64
}

// Driver names what set a recommendation.
type Driver string

// The drivers. The first three are the metric drivers of docs/design.md §6; the
// others name a rule that overrode them.
const (
	// DriverCPU: ceil(mean cores over CPUWindow / CPUsPerInstance /
	// CPUTarget).
	DriverCPU Driver = "cpu"
	// DriverConcurrency: ceil(max(mean concurrency over ConcurrencyWindow,
	// over ConcurrencyLongWindow) / MaxConcurrencyPerInstance /
	// ConcurrencyTarget).
	DriverConcurrency Driver = "concurrency"
	// DriverACT: ceil(mean concurrency over ConcurrencyWindow / mean ACT
	// limit / ConcurrencyTarget).
	DriverACT Driver = "act"
	// DriverMin: the drivers asked for fewer than MinInstances.
	DriverMin Driver = "min"
	// DriverMax: the drivers asked for more than MaxInstances.
	DriverMax Driver = "max"
	// DriverDemand: a request reached a group recommended at zero
	// (on-demand scaling, the only way up from zero).
	DriverDemand Driver = "demand"
	// DriverIdle: a group with MinInstances 0 received no request and had
	// none in flight over ConcurrencyWindow, so it goes to zero whatever
	// its CPU (or stays there).
	DriverIdle Driver = "idle"
)

// Drivers holds each metric driver's instance count before the band and
// the clamp.
type Drivers struct {
	CPU         int `json:"cpu"`
	Concurrency int `json:"concurrency"`
	ACT         int `json:"act"`
}

// Decision is the outcome of one Tick.
type Decision struct {
	// Recommended is the instance count the group should serve with, in
	// [MinInstances, MaxInstances]. Instances beyond it are demoted.
	Recommended int
	// Driver is what set Recommended: the metric driver with the largest
	// count (ties: cpu, concurrency, act), or the rule that overrode it.
	Driver Driver
	// Drivers is each metric driver's count.
	Drivers Drivers
	// Held is true when every driver's utilization was inside the hold
	// band, so Recommended is the previous recommendation.
	Held bool
	// Start is how many instances to start now; Promoted how many demoted
	// instances became recommended again (they need no start).
	Start, Promoted int
	// Demoted is the demoted instances running after this tick; Stopped
	// how many demoted instances to stop now (already left out of
	// Demoted and Running).
	Demoted, Stopped int
	// Running is the instances that exist after this tick, starting ones
	// included: Recommended + Demoted.
	Running int
}

// Autoscaler applies the rules of one instance group, tick by tick. It
// holds no clock: Tick takes the time. It is not safe for concurrent use;
// one goroutine (a controller's loop) owns it.
type Autoscaler struct {
	// Immutable after New.
	cfg Config

	// Owned by the caller of Tick.
	cpu, conc, concLong window.Mean
	lastActive          time.Time // last tick with a request or one in flight
	demandHold          time.Time // no scale-down before (OnDemand + ColdStart)
	recommended         int
	sets                []demotedSet
}

// demotedSet is instances demoted together. A first set (keep false) is
// stopped when its utilization over DemotedIdleWindow is below
// DemotedIdleUtilization; a second set (keep true) when it served nothing
// for IdleTimeout.
type demotedSet struct {
	n        int
	keep     bool
	since    time.Time   // demoted at
	lastBusy time.Time   // last tick it served overflow
	util     window.Mean // per-instance utilization of the demoted instances
}

// New returns an Autoscaler for cfg, which must be valid (Config.Validate),
// whose group runs initial instances at now, all recommended (clamped to
// [MinInstances, MaxInstances]). The idle clock starts at now.
func New(cfg Config, initial int, now time.Time) *Autoscaler {
	return &Autoscaler{
		cfg:         cfg,
		cpu:         window.Mean{Span: cfg.CPUWindow},
		conc:        window.Mean{Span: cfg.ConcurrencyWindow},
		concLong:    window.Mean{Span: cfg.ConcurrencyLongWindow},
		lastActive:  now,
		recommended: min(max(initial, cfg.MinInstances), cfg.MaxInstances),
	}
}

// Recommended returns the current recommendation.
func (a *Autoscaler) Recommended() int { return a.recommended }

// Demoted returns the demoted instances still running.
func (a *Autoscaler) Demoted() int {
	n := 0
	for _, s := range a.sets {
		n += s.n
	}
	return n
}

// eps is the float tolerance of the rules' comparisons, in instances.
const eps = 1e-9

// ceil rounds x up to an integer, treating x within 1e-9 above an integer
// as that integer (so 2.4/0.6 = 4.000000000000001 gives 4, not 5).
func ceil(x float64) int {
	if x <= 0 || math.IsNaN(x) {
		return 0
	}
	return int(math.Ceil(x - eps))
}

// needs returns each metric driver's exact instance count at its target
// (fractional, before rounding): cores / CPUsPerInstance / CPUTarget, etc.
func (a *Autoscaler) needs(act float64) (cpu, conc, actN float64) {
	c := a.cfg
	cpu = a.cpu.Value() / c.CPUsPerInstance / c.CPUTarget
	short := a.conc.Value()
	conc = max(short, a.concLong.Value()) / float64(c.MaxConcurrencyPerInstance) / c.ConcurrencyTarget
	actN = short / act / c.ConcurrencyTarget
	return cpu, conc, actN
}

// Tick feeds the sample of the tick that ended at now and returns the
// decision. now must not go backwards. After Tick returns:
//
//   - Recommended is in [MinInstances, MaxInstances].
//   - If MinInstances is 0 and the group was idle over ConcurrencyWindow
//     (no request received, none in flight), Recommended = 0 (Driver
//     idle): CPU never keeps a group without requests up, nor takes one
//     with requests to zero. With MinInstances ≥ 1 being idle is no rule:
//     the drivers decide as below (a 10-minute concurrency average still
//     asking for 3 keeps 3), so a lone request after a quiet minute cannot
//     bring back instances the group never gave up.
//   - If the previous recommendation was 0, Recommended stays 0 unless
//     the sample has a request or one in flight (Driver demand, at least
//     1): only demand scales from zero.
//   - Otherwise each driver's need n_d (usage / unit / target) is compared
//     with the previous recommendation N: if some n_d > N·(1+Tolerance)
//     (utilization above the band) or every n_d < N·(1−Tolerance) (all
//     below it), Recommended = ceil(max n_d), at least 1; else N is held.
//     So a scale-down needs usage more than Tolerance below target on every
//     driver, and the count is recomputed from usage, never from N.
//   - Demoted instances are promoted before any start; a decrease demotes
//     the difference, floor(DemotedKeepFraction·k) of k into a second set.
//   - Stopped counts demoted instances whose rule stops them at now.
func (a *Autoscaler) Tick(now time.Time, s Sample) Decision {
	c := a.cfg
	a.cpu.Add(now, s.CPUCores)
	a.conc.Add(now, s.Concurrency)
	a.concLong.Add(now, s.Concurrency)
	active := s.Requests > 0 || s.Concurrency > 0
	if active {
		a.lastActive = now
	}
	// A tuned limit lies in [1, MaxConcurrencyPerInstance] (ACT's own
	// range); anything else — none (0), NaN or a value out of range from a
	// gfe's gossip — is held to it, so no gossiped ACT can ask for more
	// instances than the drivers' floor of one request per instance.
	act := s.ACT
	if !(act > 0) || act > float64(c.MaxConcurrencyPerInstance) {
		act = float64(c.MaxConcurrencyPerInstance)
	}
	act = max(act, 1)
	nCPU, nConc, nACT := a.needs(act)
	d := Decision{Drivers: Drivers{CPU: ceil(nCPU), Concurrency: ceil(nConc), ACT: ceil(nACT)}}
	// Ties (within eps, so that float noise does not flip the driver from
	// tick to tick) go to the earlier driver.
	need, driver := nCPU, DriverCPU
	if nConc > need+eps {
		need, driver = nConc, DriverConcurrency
	}
	if nACT > need+eps {
		need, driver = nACT, DriverACT
	}
	n := a.recommended
	switch {
	case c.MinInstances == 0 && !now.Before(a.lastActive.Add(c.ConcurrencyWindow)):
		// No traffic is a reason to go to zero, and only to zero: with
		// min_instances ≥ 1 the drivers decide, with their windows, and
		// the count falls by demotion like any other scale-down.
		n, driver = 0, DriverIdle
	case n == 0 && !active:
		driver = DriverIdle
	case n == 0:
		n, driver = max(1, ceil(need)), DriverDemand
	default:
		// The band's edges belong to it; eps absorbs float error
		// (6.6/0.6 is 11.000000000000002).
		high, low := float64(n)*(1+c.Tolerance)+eps, float64(n)*(1-c.Tolerance)-eps
		up := nCPU > high || nConc > high || nACT > high
		down := nCPU < low && nConc < low && nACT < low
		switch {
		case down && now.Before(a.demandHold):
			// Raised by demand less than a cold start ago: its instances
			// cannot have served yet, so their usage says nothing.
			driver, d.Held = DriverDemand, true
		case up || down:
			n = max(1, ceil(need))
		default:
			d.Held = true
		}
	}
	switch {
	case n < c.MinInstances:
		n, driver = c.MinInstances, DriverMin
	case n > c.MaxInstances:
		n, driver = c.MaxInstances, DriverMax
	}
	d.Recommended, d.Driver = n, driver
	a.resize(now, n, &d)
	a.serveDemoted(now, s.Concurrency, n, act)
	d.Stopped = a.stop(now)
	a.recommended = n
	d.Demoted = a.Demoted()
	d.Running = n + d.Demoted
	return d
}

// OnDemand raises the recommendation by n for requests that found no free
// instance and for which Config.Pending said StartInstance (on-demand
// scaling; from zero, the only way up). It never goes past MaxInstances:
// the returned Decision's Recommended is min(previous + n, MaxInstances),
// Driver demand, with Promoted demoted instances taken back first and
// Start the rest. The group counts as active at now. The next Tick applies
// the metric rules from the raised recommendation, except that it does not
// lower it before ColdStart has passed: the instances started for the
// demand cannot have served before that, so a low usage then is no reason
// to scale down (rule 3's demand hold).
func (a *Autoscaler) OnDemand(now time.Time, n int) Decision {
	a.lastActive = now
	a.demandHold = now.Add(a.cfg.ColdStart)
	next := min(a.recommended+max(0, n), a.cfg.MaxInstances)
	d := Decision{Recommended: next, Driver: DriverDemand}
	a.resize(now, next, &d)
	a.recommended = next
	d.Demoted = a.Demoted()
	d.Running = next + d.Demoted
	return d
}

// resize moves from the previous recommendation to n: promotes demoted
// instances (newest sets first) and starts the rest, or demotes the
// difference as a new pair of sets.
func (a *Autoscaler) resize(now time.Time, n int, d *Decision) {
	prev := a.recommended
	switch {
	case n > prev:
		need := n - prev
		for i := len(a.sets) - 1; i >= 0 && need > 0; i-- {
			k := min(need, a.sets[i].n)
			a.sets[i].n -= k
			need -= k
			d.Promoted += k
		}
		a.sets = dropEmpty(a.sets)
		d.Start = need
	case n < prev:
		k := prev - n
		keep := int(math.Floor(a.cfg.DemotedKeepFraction * float64(k)))
		for _, set := range []demotedSet{{n: k - keep}, {n: keep, keep: true}} {
			if set.n == 0 {
				continue
			}
			set.since, set.lastBusy = now, now
			set.util = window.Mean{Span: a.cfg.DemotedIdleWindow}
			a.sets = append(a.sets, set)
		}
	}
}

// serveDemoted records what the demoted instances served at now: the
// requests in flight beyond what the n recommended instances take at
// their limit (act each) — demoted instances get traffic only when the
// recommended ones are busy — spread evenly over them.
func (a *Autoscaler) serveDemoted(now time.Time, concurrency float64, n int, act float64) {
	demoted := a.Demoted()
	if demoted == 0 {
		return
	}
	overflow := max(0, concurrency-float64(n)*act)
	util := min(1, overflow/(float64(demoted)*float64(a.cfg.MaxConcurrencyPerInstance)))
	for i := range a.sets {
		a.sets[i].util.Add(now, util)
		if overflow > 0 {
			a.sets[i].lastBusy = now
		}
	}
}

// stop removes the demoted sets whose rule stops them at now and returns
// how many instances they held.
func (a *Autoscaler) stop(now time.Time) int {
	stopped := 0
	for i, s := range a.sets {
		var done bool
		if s.keep {
			done = !now.Before(s.lastBusy.Add(a.cfg.IdleTimeout))
		} else {
			done = !now.Before(s.since.Add(a.cfg.DemotedIdleWindow)) && s.util.Value() < a.cfg.DemotedIdleUtilization
		}
		if done {
			stopped += s.n
			a.sets[i].n = 0
		}
	}
	a.sets = dropEmpty(a.sets)
	return stopped
}

// dropEmpty removes the sets with no instance left, in place.
func dropEmpty(sets []demotedSet) []demotedSet {
	out := sets[:0]
	for _, s := range sets {
		if s.n > 0 {
			out = append(out, s)
		}
	}
	return out
}
