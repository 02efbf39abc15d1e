package autoscale

import (
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
	// StartingReadyIn holds, for each starting instance, the expected
	// time until it serves (its start plus ColdStart, minus now; ≥ 0).
	StartingReadyIn []time.Duration
	// FreeSlotIn is the expected time until a ready instance frees a slot
	// (from the group's request latency); negative means unknown.
	FreeSlotIn time.Duration
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
// on-demand scaling, DESIGN.md §6). Each starting instance takes up to
// MaxConcurrencyPerInstance queued requests, soonest ready first, so the
// request waits for the one that reaches it in queue order. The rules, in
// order:
//
//  1. Past MaxPendingWait: start an instance if below MaxInstances
//     (Running < MaxInstances), else Reject (429).
//  2. A starting instance that takes this request is ready within the
//     time left and no later than ColdStart: Wait for it.
//  3. A running instance frees a slot within the time left and no later
//     than ColdStart: Wait for it.
//  4. Below MaxInstances: StartInstance.
//  5. At MaxInstances: Wait until Deadline, then rule 1 rejects it.
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
	ready := slices.Clone(r.StartingReadyIn)
	slices.Sort(ready)
	if i := r.Ahead / c.MaxConcurrencyPerInstance; i < len(ready) {
		if t := max(0, ready[i]); t <= left && t <= c.ColdStart {
			return PendingDecision{Action: Wait, ForStarting: true, Expected: t, Deadline: left}
		}
	}
	if t := r.FreeSlotIn; t >= 0 && t <= left && t <= c.ColdStart {
		return PendingDecision{Action: Wait, Expected: t, Deadline: left}
	}
	if below {
		return PendingDecision{Action: StartInstance, ForStarting: true, Expected: c.ColdStart, Deadline: left}
	}
	return PendingDecision{Action: Wait, Expected: left, Deadline: left}
}
