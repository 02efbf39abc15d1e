package quota

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Window is the length of a quota window. Windows are aligned to the Unix
// minute.
const Window = time.Minute

// Mode is how an allocation is charged (see the package documentation).
type Mode int

// The allocation modes of Service Control's AllocateQuota.
const (
	ModeNormal Mode = iota
	ModeBestEffort
	ModeCheckOnly
)

// String returns the mode's name as the API spells it.
func (m Mode) String() string {
	switch m {
	case ModeNormal:
		return "NORMAL"
	case ModeBestEffort:
		return "BEST_EFFORT"
	case ModeCheckOnly:
		return "CHECK_ONLY"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// MetricValue is an amount of one metric.
type MetricValue struct {
	Metric string
	Value  int64
}

// Request is one allocation.
type Request struct {
	// OperationID identifies the operation among the consumer's: a request
	// with an id the consumer used in the current or the previous window
	// gets the earlier result and is not charged again. Empty: never
	// deduplicated.
	OperationID string
	// Consumer is the consumer charged (a project).
	Consumer string
	// Values are the amounts to charge, at most one per metric, each ≥ 0.
	Values []MetricValue
	Mode   Mode
	// Returned are units of the consumer's earlier allocations in window
	// ReturnedWindow (WindowOf) that the caller will not use, at most one
	// per metric, each ≥ 0 and of a metric in Values: given back before
	// Values are charged (the counter goes down by them, never below 0),
	// so that what one caller leased ahead and does not use is the
	// consumer's again (Lease.Next). Applied only when ReturnedWindow is
	// the window charged (a return that crossed a window's end is
	// dropped), not in ModeCheckOnly, and not again for a repeated
	// operation.
	Returned       []MetricValue
	ReturnedWindow int64
}

// Result is the outcome of an allocation.
type Result struct {
	// Allocated holds what was charged (ModeCheckOnly: what would be), in
	// the order of Request.Values.
	Allocated []MetricValue
	// Exhausted reports that the consumer's quota cannot cover the request
	// in this window (see the modes); RetryAfter is then the time until the
	// next window starts.
	Exhausted  bool
	RetryAfter time.Duration
	// Returned is what was given back of Request.Returned when the return
	// applied (see Request.Returned): one entry per metric of Values, in
	// their order, 0 for a metric without a return; nil when it did not.
	Returned []MetricValue
}

// Limits returns the effective limit per window of metric for consumer,
// and false for a metric it does not know.
type Limits func(consumer, metric string) (int64, bool)

// Errors of Allocate. Both are quota errors other than exhaustion.
var (
	// ErrInvalidRequest wraps problems with a request itself.
	ErrInvalidRequest = errors.New("quota: invalid request")
	// ErrUnknownMetric wraps a metric the limits do not know.
	ErrUnknownMetric = errors.New("quota: unknown metric")
)

// Allocator charges allocations against per-consumer limits in fixed
// windows, in memory. It is safe for concurrent use.
type Allocator struct {
	limits Limits

	mu     sync.Mutex
	window int64 // the newest window seen, in Unix minutes
	counts map[counterKey]int64
	ops    map[opKey]opRecord
}

// opKey names an operation: ids are the consumer's own, so two consumers'
// operations never collide.
type opKey struct{ consumer, id string }

type counterKey struct {
	window   int64
	consumer string
	metric   string
}

type opRecord struct {
	window int64
	result Result
}

// NewAllocator returns an Allocator that takes limits from limits.
func NewAllocator(limits Limits) *Allocator {
	return &Allocator{limits: limits, counts: map[counterKey]int64{}, ops: map[opKey]opRecord{}}
}

// WindowOf returns the window of t, in Unix minutes: the number that names
// it in counters (the Redis store's keys too).
func WindowOf(t time.Time) int64 { return t.Unix() / int64(Window/time.Second) }

// windowOf is WindowOf.
func windowOf(t time.Time) int64 { return WindowOf(t) }

// WindowEnd returns when window w ends: the start of window w+1.
func WindowEnd(w int64) time.Time { return time.Unix((w+1)*int64(Window/time.Second), 0) }

// RetryAfter returns how long a consumer refused in window w at now waits
// for the next window: the rest of w, between 1s and Window.
func RetryAfter(w int64, now time.Time) time.Duration {
	return min(Window, max(time.Second, WindowEnd(w).Sub(now)))
}

// Allocate charges r at now (see the package documentation). It fails
// only on an invalid request (ErrInvalidRequest: no consumer, a negative
// amount, a metric listed twice, an unknown mode) or an unknown metric
// (ErrUnknownMetric), and then charges nothing. A time earlier than one
// seen before counts in the newest window seen.
func (a *Allocator) Allocate(now time.Time, r Request) (Result, error) {
	if err := r.Validate(); err != nil {
		return Result{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.advance(windowOf(now))
	if r.OperationID != "" {
		if op, ok := a.ops[opKey{r.Consumer, r.OperationID}]; ok {
			return op.result, nil
		}
	}
	limits := make([]int64, len(r.Values))
	for i, v := range r.Values {
		l, ok := a.limits(r.Consumer, v.Metric)
		if !ok {
			return Result{}, fmt.Errorf("%w %q (consumer %q)", ErrUnknownMetric, v.Metric, r.Consumer)
		}
		limits[i] = l
	}
	var returned []MetricValue
	if r.Mode != ModeCheckOnly && r.ReturnedWindow == w && len(r.Returned) > 0 {
		for _, v := range r.Returned {
			k := counterKey{w, r.Consumer, v.Metric}
			a.counts[k] = max(0, a.counts[k]-v.Value)
		}
		returned = make([]MetricValue, len(r.Values))
		for i, v := range r.Values {
			returned[i].Metric = v.Metric
			for _, u := range r.Returned {
				if u.Metric == v.Metric {
					returned[i].Value = u.Value
				}
			}
		}
	}
	res := Result{Allocated: make([]MetricValue, len(r.Values)), Returned: returned}
	var asked, granted int64
	fits := true
	for i, v := range r.Values {
		left := max(0, limits[i]-a.counts[counterKey{w, r.Consumer, v.Metric}])
		res.Allocated[i] = MetricValue{Metric: v.Metric, Value: v.Value}
		if v.Value > left {
			fits = false
			if r.Mode == ModeBestEffort {
				res.Allocated[i].Value = left
			}
		}
		asked += v.Value
		granted += res.Allocated[i].Value
	}
	switch r.Mode {
	case ModeNormal, ModeCheckOnly:
		res.Exhausted = !fits
		if res.Exhausted {
			for i := range res.Allocated {
				res.Allocated[i].Value = 0
			}
		}
	case ModeBestEffort:
		res.Exhausted = asked > 0 && granted == 0
	}
	if res.Exhausted {
		res.RetryAfter = RetryAfter(w, now)
	}
	if r.Mode != ModeCheckOnly {
		for _, v := range res.Allocated {
			if v.Value > 0 {
				a.counts[counterKey{w, r.Consumer, v.Metric}] += v.Value
			}
		}
		if r.OperationID != "" {
			a.ops[opKey{r.Consumer, r.OperationID}] = opRecord{window: w, result: res}
		}
	}
	return res, nil
}

// Validate reports the first problem with r itself, wrapping
// ErrInvalidRequest: no consumer, an unknown mode, a negative amount, a
// metric listed twice, a return of a metric not in Values. Every store
// checks it before charging.
func (r *Request) Validate() error {
	if r.Consumer == "" {
		return fmt.Errorf("%w: no consumer", ErrInvalidRequest)
	}
	switch r.Mode {
	case ModeNormal, ModeBestEffort, ModeCheckOnly:
	default:
		return fmt.Errorf("%w: unknown mode %v", ErrInvalidRequest, r.Mode)
	}
	for i, v := range r.Values {
		if v.Value < 0 {
			return fmt.Errorf("%w: values[%d] (%s): must be >= 0, got %d", ErrInvalidRequest, i, v.Metric, v.Value)
		}
		for _, u := range r.Values[:i] {
			if u.Metric == v.Metric {
				return fmt.Errorf("%w: values[%d]: metric %q listed twice", ErrInvalidRequest, i, v.Metric)
			}
		}
	}
	for i, v := range r.Returned {
		if v.Value < 0 {
			return fmt.Errorf("%w: returned[%d] (%s): must be >= 0, got %d", ErrInvalidRequest, i, v.Metric, v.Value)
		}
		if !slices.ContainsFunc(r.Values, func(u MetricValue) bool { return u.Metric == v.Metric }) {
			return fmt.Errorf("%w: returned[%d]: metric %q is not in values", ErrInvalidRequest, i, v.Metric)
		}
		for _, u := range r.Returned[:i] {
			if u.Metric == v.Metric {
				return fmt.Errorf("%w: returned[%d]: metric %q listed twice", ErrInvalidRequest, i, v.Metric)
			}
		}
	}
	return nil
}

// advance moves the allocator to window w if it is newer than the newest
// seen, dropping counters and operations of windows before the previous
// one, and returns the window to charge. Callers hold a.mu.
func (a *Allocator) advance(w int64) int64 {
	if w <= a.window {
		return a.window
	}
	a.window = w
	for k := range a.counts {
		if k.window < w {
			delete(a.counts, k) // only the current window's counters are read
		}
	}
	for id, op := range a.ops {
		if op.window < w-1 {
			delete(a.ops, id)
		}
	}
	return w
}

// Used returns what consumer has been charged of metric in the window of
// now (0 for an older window than the newest seen).
func (a *Allocator) Used(now time.Time, consumer, metric string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counts[counterKey{windowOf(now), consumer, metric}]
}
