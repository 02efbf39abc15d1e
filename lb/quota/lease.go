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
// Next or Call returns) and reports their outcome with Granted, Failed or
// Denied.
//
// A Lease runs in one of two ways: knowing the consumer's limit (SetLimit,
// as the gfe's quotaclient does for every metric its configuration has),
// or not.
//
// # Knowing the limit: never refused before the limit is used
//
// A consumer is refused only when its limit is used: by the requests this
// gfe admitted in the window, or, as far as the service says, by all.
// Admission, in order:
//
//   - the last call was refused by the service (Denied): refuse, until a
//     call succeeds (the gfe answers 409);
//   - the last call failed (the service is unavailable, timing out or
//     failing): admit, charging nothing (fail open) until a call succeeds;
//   - the budget covers the cost: admit and take it from the budget;
//   - the service said the window is exhausted (RESOURCE_EXHAUSTED):
//     refuse until the window's end (the RetryAfter it gave), or until a
//     later call finds room again; after a grant smaller than the ask
//     (the window was full), refuse until the next call may be made;
//   - otherwise admit, to be charged by the next call, as long as this
//     gfe's admissions in the window stay within the limit; refuse beyond
//     it until the window's end.
//
// The calls lease ahead and give back: the first call of a window asks for
// the whole limit (BEST_EFFORT grants what is left), so a consumer alone
// on this gfe has its whole limit at once, at any rate; every later call
// asks for what was admitted beyond the grants plus enough for twice the
// demand since the previous call, and returns (Ask.Return) what the budget
// holds beyond that, so that what one gfe leased and does not use is back
// for the consumer's other gfes within an Interval. A window the service
// said was full is still asked about every Interval while there is
// demand: another gfe's return can make room. One gfe alone is therefore
// admitted exactly the limit in a window (TestLeaseExactLimit), whatever
// the rate; the service is charged what was admitted plus what is leased
// ahead (at most twice the last Interval's demand once the first call's
// lease is given back).
//
// Over several gfes, a window admits the limit, plus what a gfe admitted
// beyond its grants that its next call could not get paid because the
// others had used the rest meanwhile: before its first grant (what comes
// in during the first call's round trip) and when its demand more than
// doubled within an Interval just as the window filled. Under steady
// overload, 0.98 to 1.02 of the limit (TestLeaseAccuracyLeasingAhead).
// The other side: the first gfe to call in a window leases the rest of
// it, and another gfe of the consumer told meanwhile that the window is
// exhausted refuses it until a call of its own (made on its next refused
// request, at most one an Interval) finds what the first gave back at its
// next call: up to about two Intervals (TestLeaseSparseAtTwoGFEs).
//
// # Not knowing the limit
//
// Without SetLimit, admission is as above, except that beyond the budget
// only the first grant's wait is bridged: no grant yet in this window,
// admit on credit, up to Credit units, to be charged by the next call;
// otherwise refuse for now (RetryAfter: until the next call may be made).
// Call asks for what is owed plus twice the demand since the previous
// call and gives nothing back, and no call is made while the window is
// exhausted. Over all gfes the admitted units of a window exceed the
// limit by at most the credit each gfe gives before its first grant
// (TestLeaseAccuracy); budget a gfe was granted and does not use is the
// under-admission side, and a consumer whose budget runs out between two
// calls is refused before its limit is used.
//
// # Concurrency
//
// A Lease is safe for concurrent use, and admission never waits: Admit,
// Decide, Want, Waiting and Failing are lock-free (a few atomic loads and
// one compare-and-swap, retried only when another admission or a grant
// changed the lease in between), and the window roll is one of those
// compare-and-swaps. Next, Call, Granted, Failed and Denied (the
// once-a-second call) take a mutex among themselves; no admission ever
// takes it. What the window was granted net of what was admitted (the
// budget, or, negative, what is owed), whether the window has a grant and
// the window itself are one 64-bit word, so every admission sees and
// changes them together: concurrent admissions take exactly what a
// sequence of the same admissions would, never more than was granted or
// the limit allows (TestLeaseConcurrent, TestLeaseConcurrentLimit). The
// demand a call asks for is a prediction: an admission racing with the
// roll to a new window may count its demand in either window.
//
// A Lease holds at most MaxBudget units at once (a grant beyond it is held
// as MaxBudget). Interval and Credit must not change once the Lease is in
// use. A Lease must not be copied after first use.
type Lease struct {
	// Interval is the least time between two calls. Default 1s.
	Interval time.Duration
	// Credit is how many units are admitted in a window before its first
	// grant, when the Lease does not know the limit. Zero admits nothing
	// before a grant.
	Credit int64

	// Accessed atomically, by admissions and calls.
	state     atomic.Uint64 // see packState
	limit     atomic.Int64  // the limit + 1 (SetLimit); 0 unknown
	demand    atomic.Int64  // units admitted or refused for want of budget since the last call
	mode      atomic.Int32  // modeOK, modeFailing (fail open) or modeDenied
	exhausted atomic.Int64  // Unix ns until which the window is exhausted; 0 none
	lastCall  atomic.Int64  // Unix ns of the last call; 0 none
	calling   atomic.Bool   // a call is outstanding
	// grants is the window's grants net of returns, with its window tag
	// (packGrants): written under mu, read by admissions for the limit.
	grants atomic.Uint64

	// Guarded by mu: the calls (Next, Call, Granted, Failed, Denied).
	mu    sync.Mutex
	asked int64 // what the outstanding call asks for
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

// The state word: | valid (1) | granted (1) | window tag (21) | net (41) |.
// net is the window's grants less its admissions, offset by 2^40: the
// budget when positive, what is owed (admitted beyond the grants: credit,
// and beyond the budget when the limit is known) when negative. The
// window tag is the window (WindowOf) modulo 2^21 (about 4 years); valid
// is 0 only in a Lease never used.
const (
	availBits  = 40
	netBits    = availBits + 1
	windowBits = 21
	availMask  = 1<<availBits - 1
	netOffset  = 1 << availBits
	windowMask = 1<<windowBits - 1
	grantedBit = 1 << (netBits + windowBits)
	validBit   = 1 << (netBits + windowBits + 1)
	// The grants word: | window tag (21) | grants (43) |.
	grantsBits = 64 - windowBits
	grantsMask = 1<<grantsBits - 1
)

// packState returns the state word of window tag, granted or not, with
// net (clamped to [−MaxBudget−1, MaxBudget]).
func packState(tag uint64, granted bool, net int64) uint64 {
	s := validBit | tag<<netBits | uint64(min(max(net, -netOffset), availMask)+netOffset)
	if granted {
		s |= grantedBit
	}
	return s
}

func tagOfState(s uint64) uint64 { return s >> netBits & windowMask }
func netOf(s uint64) int64       { return int64(s&(1<<netBits-1)) - netOffset }
func grantedOf(s uint64) bool    { return s&grantedBit != 0 }
func tagOf(now time.Time) uint64 { return uint64(windowOf(now)) & windowMask }
func nanos(t time.Time) int64    { return t.UnixNano() }
func (l *Lease) credit() int64   { return min(max(l.Credit, 0), availMask) }

// availOf returns the budget of state word s: its net when positive.
func availOf(s uint64) int64 { return max(netOf(s), 0) }

// packGrants returns the grants word of window tag.
func packGrants(tag uint64, g int64) uint64 {
	return tag<<grantsBits | uint64(min(max(g, 0), grantsMask))
}

// grantsIn returns the grants of the window whose tag is tag (0 when the
// word is another window's).
func (l *Lease) grantsIn(tag uint64) int64 {
	g := l.grants.Load()
	if g>>grantsBits != tag {
		return 0
	}
	return int64(g & grantsMask)
}

// newer reports whether window tag w is after tag cur (modulo 2^21: up
// to about 2 years after).
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

// SetLimit tells l the consumer's limit per window (≥ 0; a configuration
// reload may change it): from then on l admits by the rules of a Lease
// that knows the limit. Safe for concurrent use.
func (l *Lease) SetLimit(limit int64) { l.limit.Store(min(max(limit, 0), availMask) + 1) }

// knownLimit returns the limit SetLimit gave, and false before any.
func (l *Lease) knownLimit() (int64, bool) {
	n := l.limit.Load()
	return n - 1, n > 0
}

// current returns l's state word, first moving l to the window of now if
// it is newer, dropping the old window's budget, debt and demand (one
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
		fresh := packState(w, false, 0)
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
	limit, known := l.knownLimit()
	for {
		net := netOf(s)
		// floor is how far below zero net may go: the credit before the
		// first grant, or, knowing the limit, what keeps this gfe's
		// admissions of the window within it (admitted = grants − net).
		var floor int64 = 1 // nothing beyond the budget
		switch {
		case known:
			floor = l.grantsIn(tagOfState(s)) - limit
		case !grantedOf(s):
			floor = -l.credit()
		}
		switch ex := l.exhausted.Load(); {
		case cost <= max(net, 0):
			if cost > 0 && !l.state.CompareAndSwap(s, s-uint64(cost)) {
				s = l.current(now)
				continue
			}
			return Decision{OK: true}
		case nanos(now) < ex:
			return Decision{RetryAfter: time.Duration(ex - nanos(now))}
		case net-cost >= floor:
			if !l.state.CompareAndSwap(s, s-uint64(cost)) {
				s = l.current(now)
				continue
			}
			return Decision{OK: true}
		case known:
			// This gfe's admissions would pass the limit: nothing but the
			// next window changes that.
			return Decision{RetryAfter: RetryAfter(windowOf(now), now)}
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

// Ask is a call a Lease wants made.
type Ask struct {
	// Units to ask for (AllocateQuota's value, BEST_EFFORT).
	Units int64
	// Return is units of the grants of window Window that the Lease gives
	// back (AllocateQuota's returned and returned_window): taken out of
	// its budget already, whatever the call's outcome.
	Return int64
	Window int64
}

// Next reports whether a call should be made at now and what it asks
// for and gives back (see Lease). It returns false while a call is
// outstanding, within Interval of the previous call, and when there is
// nothing to ask or give back (an idle consumer makes no calls); not
// knowing the limit, also while the window is exhausted. After a true,
// the caller must report the call with Granted, Failed or Denied.
func (l *Lease) Next(now time.Time) (Ask, bool) { return l.next(now, true) }

// Call is Next for a caller that cannot give units back: it returns only
// what to ask for, and never takes units out of the budget to return.
func (l *Lease) Call(now time.Time) (ask int64, ok bool) {
	a, ok := l.next(now, false)
	return a.Units, ok
}

func (l *Lease) next(now time.Time, canReturn bool) (Ask, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.current(now)
	limit, known := l.knownLimit()
	exhausted := nanos(now) < l.exhausted.Load()
	if l.calling.Load() || nanos(now) < l.lastCall.Load()+int64(l.interval()) || (exhausted && !known) {
		return Ask{}, false
	}
	net := netOf(s)
	owed, budget := max(-net, 0), max(net, 0)
	demand := l.demand.Load()
	var a Ask
	switch {
	case !known:
		if demand == 0 {
			return Ask{}, false
		}
		a.Units = owed + 2*demand
	case !grantedOf(s):
		// The window's first call: lease the rest of the window.
		if demand == 0 && owed == 0 {
			return Ask{}, false
		}
		a.Units = max(limit, owed)
	default:
		target := 2 * demand
		room := max(limit-l.grantsIn(tagOfState(s)), 0)
		a.Units = min(owed+max(target-budget, 0), room)
		if canReturn {
			a.Return = max(budget-target, 0)
		}
		if a.Units == 0 && a.Return == 0 {
			return Ask{}, false
		}
	}
	if a.Return > 0 {
		a.Return, a.Window = l.giveBack(now, a.Return), windowOf(now)
	}
	// Admissions since the Load count toward the next call.
	l.demand.Add(-demand)
	l.calling.Store(true)
	l.lastCall.Store(nanos(now))
	l.asked = a.Units
	return a, true
}

// giveBack takes up to n units out of the budget of the window of now
// (what admissions have not taken meanwhile), and out of its grants, and
// returns how many it took. Caller must hold l.mu.
func (l *Lease) giveBack(now time.Time, n int64) int64 {
	for {
		s := l.current(now)
		if tagOfState(s) != tagOf(now) {
			return 0 // now is older than l's window: nothing of it to return
		}
		take := min(n, availOf(s))
		if take == 0 {
			return 0
		}
		// The budget first, the grants after: an admission that sees
		// the smaller budget and the old grants is refused sooner, never
		// admitted beyond the limit.
		if l.state.CompareAndSwap(s, s-uint64(take)) {
			tag := tagOfState(s)
			l.grants.Store(packGrants(tag, l.grantsIn(tag)-take))
			return take
		}
	}
}

// Granted reports the answer to the call made by the last true Next or
// Call, at now: granted units (what is owed is paid first, the rest is
// budget), and whether the service said the window is exhausted, with its
// RetryAfter. Knowing the limit, a grant smaller than the ask also says
// the window was full (nothing beyond the budget until the next call may
// be made), and a whole grant that it has room again.
func (l *Lease) Granted(now time.Time, granted int64, exhausted bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	granted = max(granted, 0)
	_, known := l.knownLimit()
	switch {
	case exhausted:
		// Before the budget changes: an admission that sees it and not
		// yet the new budget is one decided just after this answer.
		l.exhausted.Store(nanos(now.Add(retryAfter)))
	case known && granted < l.asked:
		// The window was full when the service answered: nothing beyond
		// the budget until the next call may ask again (other gfes may
		// give back meanwhile; a full window then answers it
		// RESOURCE_EXHAUSTED).
		l.exhausted.Store(l.lastCall.Load() + int64(l.interval()))
	case known && l.asked > 0:
		l.exhausted.Store(0)
	}
	if granted > 0 {
		// The grants first, the budget after: an admission that sees the
		// new grants and the old budget is refused sooner, never
		// admitted beyond the limit.
		tag := tagOfState(l.current(now))
		l.grants.Store(packGrants(tag, l.grantsIn(tag)+granted))
	}
	for {
		s := l.current(now)
		net := netOf(s) + granted
		if exhausted && !known {
			// What is still owed was admitted beyond the limit; what
			// was granted before stays: it is this gfe's to admit.
			net = max(net, 0)
		}
		if l.state.CompareAndSwap(s, packState(tagOfState(s), true, net)) {
			break
		}
	}
	// After the budget: until now, admissions failed open (or were denied)
	// as they did before this answer.
	l.mode.Store(modeOK)
	l.calling.Store(false)
}

// NotTaken reports that the service did not take back n of the units the
// call made by the last true Next gave back of window w (it refused the
// call before charging anything, or does not take returns): they are l's
// again, if l is still in window w. Call it before Granted or Denied.
func (l *Lease) NotTaken(now time.Time, w, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 0 || windowOf(now) != w {
		return
	}
	tag := uint64(w) & windowMask
	for {
		s := l.current(now)
		if tagOfState(s) != tag {
			return
		}
		// The grants first, the budget after, as in Granted.
		g := l.grantsIn(tag)
		l.grants.Store(packGrants(tag, g+n))
		if l.state.CompareAndSwap(s, packState(tag, grantedOf(s), netOf(s)+n)) {
			return
		}
		l.grants.Store(packGrants(tag, g))
	}
}

// Failed reports that the call made by the last true Next or Call failed
// (the quota service unavailable, timing out or failing): admission fails
// open until a call succeeds. What the call gave back stays given back:
// the service may have taken it before it failed.
func (l *Lease) Failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mode.Store(modeFailing)
	l.calling.Store(false)
}

// Denied reports that the service refused the call made by the last true
// Next or Call for a reason that is not its failure (a malformed request,
// an unknown metric): admission refuses (Decision.Denied) until a call
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
