package quota

import (
	"sync"
	"sync/atomic"
	"time"
)

// Lease is a gfe's local admission for one (service, consumer, metric): it
// admits requests from a budget the quota service granted, so that the
// request path never waits on the network, and says when to ask for more
// (at most once per Interval) and how much. Pure: every method takes the
// time; the caller makes the AllocateQuota calls (BEST_EFFORT, the amount
// Call returns) and reports their outcome with Granted, Failed or Denied.
//
// Admission, in order:
//
//   - the last call was refused by the service (Denied): refuse, until a
//     call succeeds (the gfe answers 409);
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
// # Concurrency
//
// A Lease is safe for concurrent use, and admission never waits: Admit,
// Decide, Want, Waiting and Failing are lock-free (a few atomic loads and
// one compare-and-swap, retried only when another admission or a grant
// changed the lease in between), and the window roll is one of those
// compare-and-swaps. Call, Granted, Failed and Denied (the once-a-second
// call) take a mutex among themselves; no admission ever takes it. The
// budget, the credit, whether the window has a grant and the window
// itself are one 64-bit word, so every admission sees and changes them
// together: concurrent admissions take exactly what a sequence of the
// same admissions would, never more than was granted (TestLeaseConcurrent).
// The demand Call asks for is a prediction: an admission racing with the
// roll to a new window may count its demand in either window.
//
// A Lease holds at most MaxBudget units at once (a grant beyond it is held
// as MaxBudget). Interval and Credit must not change once the Lease is in
// use. A Lease must not be copied after first use.
type Lease struct {
	// Interval is the least time between two calls. Default 1s.
	Interval time.Duration
	// Credit is how many units are admitted in a window before its first
	// grant. Zero admits nothing before a grant.
	Credit int64

	// Accessed atomically, by admissions and calls.
	state     atomic.Uint64 // see packState
	demand    atomic.Int64  // units admitted or refused for want of budget since the last call
	mode      atomic.Int32  // modeOK, modeFailing (fail open) or modeDenied
	exhausted atomic.Int64  // Unix ns until which the window is exhausted; 0 none
	lastCall  atomic.Int64  // Unix ns of the last call; 0 none
	calling   atomic.Bool   // a call is outstanding

	// Guarded by mu: the calls (Call, Granted, Failed, Denied).
	mu      sync.Mutex
	owed    int64  // admitted on credit and not yet paid, after the window's first grant
	owedTag uint64 // the window (tag) owed belongs to
}

// The modes of a Lease after its last call.
const (
	modeOK      = iota // the last call succeeded, or none was made
	modeFailing        // it failed: fail open
	modeDenied         // the service refused it: refuse
)

// MaxBudget is the most units a Lease holds at once: 2^40−1, about 1.1e12
// (a payload-bytes limit over a terabyte a minute is held as one).
const MaxBudget = availMask

// The state word: | valid (1) | granted (1) | window tag (22) | avail (40) |.
// avail is the budget once the window has a grant, and the credit left
// before (before its first grant a window's budget is always 0, and after
// it no credit is given, so one number holds whichever applies). The
// window tag is the window (WindowOf) modulo 2^22 (about 8 years); valid
// is 0 only in a Lease never used.
const (
	availBits  = 40
	windowBits = 22
	availMask  = 1<<availBits - 1
	windowMask = 1<<windowBits - 1
	grantedBit = 1 << (availBits + windowBits)
	validBit   = 1 << (availBits + windowBits + 1)
)

// packState returns the state word of window tag, granted or not, with
// avail (clamped to [0, MaxBudget]).
func packState(tag uint64, granted bool, avail int64) uint64 {
	s := validBit | tag<<availBits | uint64(min(max(avail, 0), availMask))
	if granted {
		s |= grantedBit
	}
	return s
}

func tagOfState(s uint64) uint64 { return s >> availBits & windowMask }
func availOf(s uint64) int64     { return int64(s & availMask) }
func grantedOf(s uint64) bool    { return s&grantedBit != 0 }
func tagOf(now time.Time) uint64 { return uint64(windowOf(now)) & windowMask }
func nanos(t time.Time) int64    { return t.UnixNano() }
func (l *Lease) credit() int64   { return min(max(l.Credit, 0), availMask) }

// newer reports whether window tag w is after tag cur (modulo 2^22: up
// to about 4 years after).
func newer(w, cur uint64) bool {
	d := (w - cur) & windowMask
	return d != 0 && d < 1<<(windowBits-1)
}

// interval returns Interval or its default.
func (l *Lease) interval() time.Duration {
	if l.Interval > 0 {
		return l.Interval
	}
	return time.Second
}

// current returns l's state word, first moving l to the window of now if
// it is newer, dropping the old window's budget, credit and demand (one
// compare-and-swap: whichever admission or call sees the new window first
// rolls it). A time in an older window (a request that started just
// before the turn, decided after a call's answer already moved l on)
// counts in l's window: moving back would drop the new window's budget and
// what is owed, and give its credit again.
func (l *Lease) current(now time.Time) uint64 {
	w := tagOf(now)
	for {
		s := l.state.Load()
		if s&validBit != 0 && !newer(w, tagOfState(s)) {
			return s
		}
		fresh := packState(w, false, l.credit())
		if l.state.CompareAndSwap(s, fresh) {
			// Demand counted while the old window was exhausted piled
			// up with no call to reset it: carried over, it would make
			// the new window's first call ask for (and get) the whole
			// limit, leaving the other gfes' credit unpaid.
			l.demand.Store(0)
			return fresh
		}
	}
}

// Decision is a Lease's answer to one request.
type Decision struct {
	// OK admits the request.
	OK bool
	// RetryAfter is set when a request is refused for want of quota: when
	// to retry.
	RetryAfter time.Duration
	// FailOpen is set when OK is because the last call failed.
	FailOpen bool
	// Denied is set when the request is refused because the service
	// refused the last call (Denied); RetryAfter is 0 then.
	Denied bool
}

// Decide decides whether a request costing cost units (a negative cost
// counts as 0) is admitted at now, by the rules of Lease. It never waits.
func (l *Lease) Decide(now time.Time, cost int64) Decision {
	cost = max(cost, 0)
	s := l.current(now)
	l.demand.Add(cost)
	switch l.mode.Load() {
	case modeDenied:
		return Decision{Denied: true}
	case modeFailing:
		return Decision{OK: true, FailOpen: true}
	}
	for {
		var budget, credit int64
		if grantedOf(s) {
			budget = availOf(s)
		} else {
			credit = availOf(s)
		}
		switch ex := l.exhausted.Load(); {
		case cost <= budget:
			if cost > 0 && !l.state.CompareAndSwap(s, s-uint64(cost)) {
				s = l.current(now)
				continue
			}
			return Decision{OK: true}
		case nanos(now) < ex:
			return Decision{RetryAfter: time.Duration(ex - nanos(now))}
		case !grantedOf(s) && cost <= credit:
			if !l.state.CompareAndSwap(s, s-uint64(cost)) {
				s = l.current(now)
				continue
			}
			return Decision{OK: true}
		}
		next := l.lastCall.Load() + int64(l.interval())
		return Decision{RetryAfter: max(time.Second, time.Duration(next-nanos(now)))}
	}
}

// Admit decides whether a request costing cost units is admitted at now
// (Decide), and when refused, after how long to retry (0 when Denied).
func (l *Lease) Admit(now time.Time, cost int64) (ok bool, retryAfter time.Duration) {
	d := l.Decide(now, cost)
	return d.OK, d.RetryAfter
}

// owedLocked returns what is owed in the window of state word s: before
// the window's first grant, the credit taken; after it, what its grants
// have not paid. Caller must hold l.mu.
func (l *Lease) owedLocked(s uint64) int64 {
	switch {
	case !grantedOf(s):
		return l.credit() - availOf(s)
	case l.owedTag == tagOfState(s):
		return l.owed
	}
	return 0
}

// Call reports whether a call should be made at now and how many units to
// ask for: what is owed plus twice the demand (units admitted, and refused
// for want of budget) since the previous call. It returns false while a
// call is outstanding, within Interval of the previous call, while the
// window is exhausted, and when there was no demand since the previous
// call (an idle consumer makes no calls). After a true, the caller must
// report the call with Granted, Failed or Denied.
func (l *Lease) Call(now time.Time) (ask int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.current(now)
	if l.calling.Load() || l.demand.Load() == 0 || nanos(now) < l.lastCall.Load()+int64(l.interval()) || nanos(now) < l.exhausted.Load() {
		return 0, false
	}
	l.calling.Store(true)
	l.lastCall.Store(nanos(now))
	return l.owedLocked(s) + 2*l.demand.Swap(0), true
}

// Granted reports the answer to the call made by the last true Call, at
// now: granted units (what is owed is paid first, the rest is budget), and
// whether the service said the window is exhausted, with its RetryAfter.
func (l *Lease) Granted(now time.Time, granted int64, exhausted bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	granted = max(granted, 0)
	if exhausted {
		// Before the budget changes: an admission that sees it and not
		// yet the new budget is one decided just after this answer.
		l.exhausted.Store(nanos(now.Add(retryAfter)))
	}
	for {
		s := l.current(now)
		owed := l.owedLocked(s)
		var budget int64
		if grantedOf(s) {
			budget = availOf(s)
		}
		pay := min(granted, owed)
		owed -= pay
		budget += granted - pay
		if exhausted {
			// What was granted before stays: it is this gfe's to admit.
			// What is still owed was admitted beyond the limit.
			owed = 0
		}
		if l.state.CompareAndSwap(s, packState(tagOfState(s), true, budget)) {
			l.owed, l.owedTag = owed, tagOfState(s)
			break
		}
	}
	// After the budget: until now, admissions failed open (or were denied)
	// as they did before this answer.
	l.mode.Store(modeOK)
	l.calling.Store(false)
}

// Failed reports that the call made by the last true Call failed (the
// quota service unavailable, timing out or failing): admission fails open
// until a call succeeds.
func (l *Lease) Failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mode.Store(modeFailing)
	l.calling.Store(false)
}

// Denied reports that the service refused the call made by the last true
// Call for a reason that is not its failure (a malformed request, an
// unknown metric): admission refuses (Decision.Denied) until a call
// succeeds; the demand still counts, so that calls go on and learn when
// the reason is gone.
func (l *Lease) Denied() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mode.Store(modeDenied)
	l.calling.Store(false)
}

// Failing reports whether admission fails open or is denied: the last
// call failed or was refused and none has succeeded since.
func (l *Lease) Failing() bool { return l.mode.Load() != modeOK }

// Want counts cost units of demand refused at now for a reason of the
// caller's (so that Call still asks, and learns when the reason is gone).
func (l *Lease) Want(now time.Time, cost int64) {
	l.current(now)
	l.demand.Add(max(cost, 0))
}

// Waiting reports whether l has no grant yet in the window of now and no
// call outstanding: a call now would spare its next requests the wait for
// the next Interval.
func (l *Lease) Waiting(now time.Time) bool {
	s := l.state.Load()
	return s&validBit == 0 || newer(tagOf(now), tagOfState(s)) || (!grantedOf(s) && !l.calling.Load())
}
