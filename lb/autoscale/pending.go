package autoscale

import (
	"math"
	"slices"
	"time"
)

// Action is what the gfe does with a request that found no free instance.
type Action int

// The actions of Pending.
const (
	// Wait: keep the request in the pending queue, for an instance that
	// is starting (ForStarting) or for a slot on a running one.
	Wait Action = iota
	// StartInstance: start an instance for it (on-demand scaling) and
	// keep it queued for that instance.
	StartInstance
	// Reject: fail it with 429; the group is at MaxInstances and the
	// request has waited MaxPendingWait.
	Reject
)

func (a Action) String() string {
	switch a {
	case Wait:
		return "wait"
	case StartInstance:
		return "start"
	case Reject:
		return "reject"
	}
	return "unknown"
}

// PendingRequest describes a request that found no free instance, and
// the group as the gfe sees it.
type PendingRequest struct {
	// Waited is how long the request has been in the pending queue.
	Waited time.Duration
	// Ahead is the requests queued before it.
	Ahead int
	// Running is the group's instances, ready and starting.
	Running int
	// ReadySlots is the requests the ready instances take at once (the
	// sum of their limits); all are taken, or the request would not wait.
	ReadySlots int
	// StartingReadyIn holds, for each starting instance, the expected
	// time until it serves (≥ 0). Each brings MaxConcurrencyPerInstance
	// slots. Pending does not modify it; sorted ascending, it is not
	// copied.
	StartingReadyIn []time.Duration
	// RequestTime is the mean time a request holds a slot (the group's
	// mean latency): slots free at ReadySlots/RequestTime per second. 0
	// means unknown: running slots are not counted on, and a starting
	// instance takes only the MaxConcurrencyPerInstance requests it can
	// hold when it becomes ready.
	RequestTime time.Duration
}

// PendingDecision is what Pending decided.
type PendingDecision struct {
	Action Action
	// ForStarting is true when the request waits for a starting instance
	// (or the one StartInstance starts), false when for a running one.
	ForStarting bool
	// Expected is the expected wait from now until an instance takes the
	// request (0 with Reject).
	Expected time.Duration
	// Deadline is the time left before the request has waited
	// MaxPendingWait; the gfe asks again then (0 with Reject).
	Deadline time.Duration
}

// Pending decides, for a request that found no free instance, whether to
// wait for a starting or a running instance or to start one (Cloud Run's
// on-demand scaling, docs/design.md §6). The request is served, in queue
// order, when the slots that free up reach it: the ready instances free
// ReadySlots per RequestTime, and each starting instance, once ready,
// takes MaxConcurrencyPerInstance requests at once and as many per
// RequestTime after (ExpectedWait). The rules, in order:
//
//  1. Past MaxPendingWait: start an instance if below MaxInstances
//     (Running < MaxInstances), else Reject (429).
//  2. The expected wait is within the time left and no longer than a
//     cold start: Wait (ForStarting when a starting instance is the
//     sooner source).
//  3. Below MaxInstances: StartInstance.
//  4. At MaxInstances: Wait until Deadline, then rule 1 rejects it.
//
// A Wait never expects more than the time left, and StartInstance never
// takes Running above MaxInstances. Pending is a pure function.
func (c Config) Pending(r PendingRequest) PendingDecision {
	left := c.MaxPendingWait - r.Waited
	below := r.Running < c.MaxInstances
	if left <= 0 {
		if below {
			return PendingDecision{Action: StartInstance, ForStarting: true, Expected: c.ColdStart}
		}
		return PendingDecision{Action: Reject}
	}
	if t, starting, ok := c.ExpectedWait(r); ok && t <= left && t <= c.ColdStart {
		return PendingDecision{Action: Wait, ForStarting: starting, Expected: t, Deadline: left}
	}
	if below {
		return PendingDecision{Action: StartInstance, ForStarting: true, Expected: c.ColdStart, Deadline: left}
	}
	return PendingDecision{Action: Wait, Expected: left, Deadline: left}
}

// ExpectedWait returns how long the request r waits for a slot, by the
// model of Pending, and whether a starting instance serves it before the
// running ones alone would; ok is false when no slot is expected at all
// (nothing starting that reaches it and RequestTime or ReadySlots 0).
//
// With RequestTime T, by time t the ready instances have freed
// ReadySlots·t/T slots and a starting instance ready at s has taken
// C·(1 + (t−s)/T) requests once t ≥ s (C = MaxConcurrencyPerInstance);
// the request is served at the first t where their sum exceeds Ahead.
// With T = 0 only the starting instances count, C requests each.
func (c Config) ExpectedWait(r PendingRequest) (wait time.Duration, starting, ok bool) {
	ready := r.StartingReadyIn
	if !slices.IsSorted(ready) { // sorted (the usual case): no allocation
		ready = slices.Sorted(slices.Values(ready))
	}
	need := float64(r.Ahead + 1)
	C := float64(c.MaxConcurrencyPerInstance)
	if r.RequestTime <= 0 {
		if i := r.Ahead / c.MaxConcurrencyPerInstance; i < len(ready) {
			return max(0, ready[i]), true, true
		}
		return 0, false, false
	}
	T := r.RequestTime.Seconds()
	// served(t) is piecewise linear: rate (ReadySlots + C·k)/T with k
	// instances ready, plus a jump of C at each ready time.
	rate := float64(r.ReadySlots) / T
	var served, at float64 // served by time at (seconds from now)
	for k, s := range ready {
		ts := max(0, s.Seconds())
		if rate > 0 && served+rate*(ts-at) >= need {
			return time.Duration((at + (need-served)/rate) * float64(time.Second)), k > 0, true
		}
		served += rate*(ts-at) + C
		at = ts
		if served >= need {
			return time.Duration(at * float64(time.Second)), true, true
		}
		rate += C / T
	}
	if rate <= 0 {
		return 0, false, false
	}
	return time.Duration((at + (need-served)/rate) * float64(time.Second)), len(ready) > 0, true
}

// RateStarts returns how many instances to start on demand for a group
// whose requests wait while they arrive at rate (requests per second),
// each holding a slot for requestTime: the instances that, with the
// running ones (starting ones included), hold rate × requestTime requests
// in flight (Little's law) at ConcurrencyTarget of their
// MaxConcurrencyPerInstance slots, within MaxInstances; 0 when the running
// ones already do, or for a rate or request time that is not positive.
//
// It sizes on-demand scaling for the requests that will arrive during the
// cold start, which Pending, deciding for the requests already waiting,
// cannot see (see the package doc's "Reading the rules").
func (c Config) RateStarts(rate float64, requestTime time.Duration, running int) int {
	if !(rate > 0) || math.IsInf(rate, 1) || requestTime <= 0 {
		return 0
	}
	want := ceil(rate * requestTime.Seconds() / float64(c.MaxConcurrencyPerInstance) / c.ConcurrencyTarget)
	return max(0, min(want, c.MaxInstances)-max(0, running))
}
