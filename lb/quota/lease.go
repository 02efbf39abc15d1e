package quota

import "time"

// Lease is a gfe's local admission for one (service, consumer, metric): it
// admits requests from a budget the quota service granted, so that the
// request path never waits on the network, and says when to ask for more
// (at most once per Interval) and how much. Pure: every method takes the
// time; the caller makes the AllocateQuota calls (BEST_EFFORT, the amount
// Call returns) and reports their outcome with Granted or Failed.
//
// Admission, in order:
//
//   - the last call failed (the service is unavailable, timing out or
//     failing): admit, charging nothing (fail open) until a call succeeds;
//   - the budget covers the cost: admit and take it from the budget;
//   - the quota service said the window is exhausted: refuse until the
//     window's end (the RetryAfter it gave);
//   - no grant yet in this window: admit on credit, up to Credit units, to
//     be charged by the next call (the first requests of a consumer do not
//     wait for a round trip);
//   - otherwise refuse for now (RetryAfter: until the next call may be
//     made): the consumer uses its budget faster than predicted, and
//     admitting beyond it would let every gfe over-admit by what it admits
//     in one Interval.
//
// So over all gfes the admitted units of a window exceed the limit by at
// most the credit each gfe gives before its first grant; the service never
// grants beyond the limit. Budget a gfe was granted and does not use is the
// under-admission side: Call asks for twice the demand since the previous
// call (plus what is owed), so a gfe holds about one to two Intervals of
// its own traffic.
//
// A Lease is not safe for concurrent use.
type Lease struct {
	// Interval is the least time between two calls. Default 1s.
	Interval time.Duration
	// Credit is how many units are admitted in a window before its first
	// grant. Zero admits nothing before a grant.
	Credit int64

	window    int64
	granted   bool  // a call succeeded in this window
	budget    int64 // granted, not yet admitted
	owed      int64 // admitted on credit, not yet charged
	demand    int64 // units admitted or refused for want of budget since the last call
	failing   bool  // the last call failed: fail open
	exhausted time.Time
	calling   bool
	lastCall  time.Time
}

// interval returns Interval or its default.
func (l *Lease) interval() time.Duration {
	if l.Interval > 0 {
		return l.Interval
	}
	return time.Second
}

// roll moves l to the window of now if it is newer, dropping the old
// window's budget, credit and demand. A time in an older window (a request that
// started just before the turn, decided after a call's answer already
// moved l on) counts in l's window: moving back would drop the new
// window's budget and what is owed, and give its credit again.
func (l *Lease) roll(now time.Time) {
	if w := windowOf(now); w > l.window {
		// Demand counted while the old window was exhausted piled up
		// with no call to reset it: carried over, it would make the new
		// window's first call ask for (and get) the whole limit, leaving
		// the other gfes' credit unpaid.
		l.window, l.granted, l.budget, l.owed, l.demand = w, false, 0, 0, 0
	}
}

// Admit decides whether a request costing cost units is admitted at now
// (see Lease), and when refused, after how long to retry.
func (l *Lease) Admit(now time.Time, cost int64) (ok bool, retryAfter time.Duration) {
	l.roll(now)
	l.demand += cost
	switch {
	case l.failing:
		return true, 0
	case cost <= l.budget:
		l.budget -= cost
		return true, 0
	case now.Before(l.exhausted):
		return false, l.exhausted.Sub(now)
	case !l.granted && l.owed+cost-l.budget <= l.Credit:
		l.owed += cost - l.budget
		l.budget = 0
		return true, 0
	}
	next := l.lastCall.Add(l.interval())
	return false, max(time.Second, next.Sub(now))
}

// Call reports whether a call should be made at now and how many units to
// ask for: what is owed plus twice the demand (units admitted, and refused
// for want of budget) since the previous call. It returns false while a
// call is outstanding, within Interval of the previous call, while the
// window is exhausted, and when there was no demand since the previous
// call (an idle consumer makes no calls). After a true, the caller must
// report the call with Granted or Failed.
func (l *Lease) Call(now time.Time) (ask int64, ok bool) {
	l.roll(now)
	if l.calling || l.demand == 0 || now.Before(l.lastCall.Add(l.interval())) || now.Before(l.exhausted) {
		return 0, false
	}
	l.calling, l.lastCall = true, now
	ask, l.demand = l.owed+2*l.demand, 0
	return ask, true
}

// Granted reports the answer to the call made by the last true Call, at
// now: granted units (what is owed is paid first, the rest is budget), and
// whether the service said the window is exhausted, with its RetryAfter.
func (l *Lease) Granted(now time.Time, granted int64, exhausted bool, retryAfter time.Duration) {
	l.calling, l.failing = false, false
	l.roll(now)
	l.granted = true
	pay := min(granted, l.owed)
	l.owed -= pay
	l.budget += granted - pay
	if exhausted {
		// What was granted before stays: it is this gfe's to admit.
		// What is still owed was admitted beyond the limit.
		l.exhausted = now.Add(retryAfter)
		l.owed = 0
	}
}

// Failed reports that the call made by the last true Call failed (the
// quota service unavailable, timing out or failing): admission fails open
// until a call succeeds.
func (l *Lease) Failed() {
	l.calling, l.failing = false, true
}

// Failing reports whether admission fails open: the last call failed and
// none has succeeded since.
func (l *Lease) Failing() bool { return l.failing }

// Want counts cost units of demand refused at now for a reason of the
// caller's (so that Call still asks, and learns when the reason is gone).
func (l *Lease) Want(now time.Time, cost int64) {
	l.roll(now)
	l.demand += cost
}

// Waiting reports whether l has no grant yet in the window of now and no
// call outstanding: a call now would spare its next requests the wait for
// the next Interval.
func (l *Lease) Waiting(now time.Time) bool {
	return windowOf(now) > l.window || (!l.granted && !l.calling)
}
