package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The four cases of the effective limit, one named test each (docs/design.md
// §7).

func TestEffectiveLimitNoOverride(t *testing.T) {
	if l, src := EffectiveLimit(100, Override{}, Override{}); l != 100 || src != SourceDefault {
		t.Errorf("EffectiveLimit = %d, %s; want 100, default", l, src)
	}
}

func TestEffectiveLimitProducerOverrideOnly(t *testing.T) {
	for _, p := range []int64{50, 500} { // a producer override may lower or raise the default
		if l, src := EffectiveLimit(100, Overridden(p), Override{}); l != p || src != SourceProducer {
			t.Errorf("producer %d: EffectiveLimit = %d, %s; want %d, producer_override", p, l, src, p)
		}
	}
}

func TestEffectiveLimitConsumerOverrideOnly(t *testing.T) {
	for _, tt := range []struct{ consumer, want int64 }{{50, 50}, {500, 100}} { // never above the default
		if l, src := EffectiveLimit(100, Override{}, Overridden(tt.consumer)); l != tt.want || src != SourceConsumer {
			t.Errorf("consumer %d: EffectiveLimit = %d, %s; want %d, consumer_override", tt.consumer, l, src, tt.want)
		}
	}
}

func TestEffectiveLimitBothOverrides(t *testing.T) {
	for _, tt := range []struct{ producer, consumer, want int64 }{{500, 300, 300}, {200, 300, 200}, {500, 50, 50}} {
		// min(producer, consumer), whatever the default (100)
		if l, src := EffectiveLimit(100, Overridden(tt.producer), Overridden(tt.consumer)); l != tt.want || src != SourceBoth {
			t.Errorf("producer %d, consumer %d: EffectiveLimit = %d, %s; want %d, producer_and_consumer_override", tt.producer, tt.consumer, l, src, tt.want)
		}
	}
}

// t0 is the start of a window.
var t0 = time.Unix(1_800_000_000-1_800_000_000%60, 0)

// limits: 10 requests and 1000 bytes per minute for everyone; "small" has 2
// requests.
func limits(consumer, metric string) (int64, bool) {
	switch metric {
	case "requests":
		if consumer == "small" {
			return 2, true
		}
		return 10, true
	case "bytes":
		return 1000, true
	}
	return 0, false
}

func req(mode Mode, id string, reqs, bytes int64) Request {
	return Request{OperationID: id, Consumer: "acme", Mode: mode, Values: []MetricValue{{"requests", reqs}, {"bytes", bytes}}}
}

// TestAllocateModes: each mode against the same state, 8 requests and 900
// bytes used of 10 and 1000.
func TestAllocateModes(t *testing.T) {
	tests := []struct {
		name          string
		r             Request
		wantAllocated [2]int64
		wantExhausted bool
		wantUsed      [2]int64
	}{
		{"normal fits", req(ModeNormal, "", 2, 100), [2]int64{2, 100}, false, [2]int64{10, 1000}},
		{"normal, one metric over: nothing charged", req(ModeNormal, "", 2, 101), [2]int64{0, 0}, true, [2]int64{8, 900}},
		{"best effort charges what fits", req(ModeBestEffort, "", 5, 50), [2]int64{2, 50}, false, [2]int64{10, 950}},
		{"best effort, some room", req(ModeBestEffort, "", 3, 500), [2]int64{2, 100}, false, [2]int64{10, 1000}},
		{"check only charges nothing", req(ModeCheckOnly, "", 2, 100), [2]int64{2, 100}, false, [2]int64{8, 900}},
		{"check only, over", req(ModeCheckOnly, "", 3, 0), [2]int64{0, 0}, true, [2]int64{8, 900}},
		{"zero asks nothing", req(ModeNormal, "", 0, 0), [2]int64{0, 0}, false, [2]int64{8, 900}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(limits)
			if _, err := a.Allocate(t0, req(ModeNormal, "", 8, 900)); err != nil {
				t.Fatal(err)
			}
			now := t0.Add(15 * time.Second)
			res, err := a.Allocate(now, tt.r)
			if err != nil {
				t.Fatal(err)
			}
			got := [2]int64{res.Allocated[0].Value, res.Allocated[1].Value}
			if got != tt.wantAllocated || res.Exhausted != tt.wantExhausted {
				t.Errorf("Allocate = %v exhausted %v, want %v exhausted %v", got, res.Exhausted, tt.wantAllocated, tt.wantExhausted)
			}
			if used := [2]int64{a.Used(now, "acme", "requests"), a.Used(now, "acme", "bytes")}; used != tt.wantUsed {
				t.Errorf("used %v, want %v", used, tt.wantUsed)
			}
			if want := map[bool]time.Duration{true: 45 * time.Second}[tt.wantExhausted]; res.RetryAfter != want {
				t.Errorf("RetryAfter = %v, want %v (the rest of the window)", res.RetryAfter, want)
			}
		})
	}
}

// TestBestEffortExhausted: best effort with nothing left at all is
// exhausted.
func TestBestEffortExhausted(t *testing.T) {
	a := NewAllocator(limits)
	r := Request{Consumer: "small", Mode: ModeBestEffort, Values: []MetricValue{{"requests", 5}}}
	first, _ := a.Allocate(t0, r)
	second, _ := a.Allocate(t0, r)
	if first.Allocated[0].Value != 2 || first.Exhausted || second.Allocated[0].Value != 0 || !second.Exhausted || second.RetryAfter != time.Minute {
		t.Errorf("first %+v, second %+v; want 2 allocated, then 0 and exhausted for a minute", first, second)
	}
}

// TestWindows: a consumer gets its limit in every window and no more; the
// next window starts at the Unix minute; over the two windows it gets twice
// the limit (the documented worst case of fixed windows).
func TestWindows(t *testing.T) {
	a := NewAllocator(limits)
	admitted := map[int64]int{}
	// A request every 100 ms for 150 s from 10 s into a window: 500, 600
	// and 400 tries in three windows.
	start := t0.Add(10 * time.Second)
	for i := range 1500 {
		now := start.Add(time.Duration(i) * 100 * time.Millisecond)
		res, err := a.Allocate(now, Request{Consumer: "acme", Values: []MetricValue{{"requests", 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Exhausted {
			admitted[windowOf(now)]++
		}
	}
	want := map[int64]int{windowOf(t0): 10, windowOf(t0) + 1: 10, windowOf(t0) + 2: 10}
	if diff := cmp.Diff(want, admitted); diff != "" {
		t.Errorf("admitted per window (-want +got):\n%s", diff)
	}
	// Across the boundary: the last 10 of window 0 and the first 10 of
	// window 1 can fall within one minute.
	b := NewAllocator(limits)
	n := 0
	for _, at := range []time.Duration{59 * time.Second, 60 * time.Second} {
		for range 20 {
			if res, _ := b.Allocate(t0.Add(at), Request{Consumer: "acme", Values: []MetricValue{{"requests", 1}}}); !res.Exhausted {
				n++
			}
		}
	}
	if n != 20 {
		t.Errorf("admitted %d within 1 s across a window boundary, want 20 (2 × the limit of 10)", n)
	}
}

// TestOperationIDChargedOnce: a retried operation gets the same result and
// is not charged again, in the same window and the next; another consumer's
// operation of the same id is its own; after two windows the id is
// forgotten.
func TestOperationIDChargedOnce(t *testing.T) {
	a := NewAllocator(limits)
	first, _ := a.Allocate(t0, req(ModeNormal, "op-1", 4, 0))
	retry, _ := a.Allocate(t0.Add(30*time.Second), req(ModeNormal, "op-1", 4, 0))
	if diff := cmp.Diff(first, retry); diff != "" {
		t.Errorf("retry result differs (-first +retry):\n%s", diff)
	}
	if used := a.Used(t0, "acme", "requests"); used != 4 {
		t.Errorf("used %d after a retried operation of 4, want 4", used)
	}
	other := Request{OperationID: "op-1", Consumer: "small", Values: []MetricValue{{"requests", 1}}}
	if res, _ := a.Allocate(t0, other); res.Allocated[0].Value != 1 || a.Used(t0, "small", "requests") != 1 {
		t.Errorf("another consumer's op-1: %+v, used %d; want charged 1", res, a.Used(t0, "small", "requests"))
	}
	next := t0.Add(Window + time.Second)
	if res, _ := a.Allocate(next, req(ModeNormal, "op-1", 4, 0)); a.Used(next, "acme", "requests") != 0 || res.Allocated[0].Value != 4 {
		t.Errorf("retry in the next window charged %d (result %+v), want the earlier result and no charge", a.Used(next, "acme", "requests"), res)
	}
	later := t0.Add(2*Window + time.Second)
	if _, err := a.Allocate(later, req(ModeNormal, "op-1", 4, 0)); err != nil || a.Used(later, "acme", "requests") != 4 {
		t.Errorf("op-1 two windows later charged %d, want 4 (a new operation)", a.Used(later, "acme", "requests"))
	}
	// Only two windows are held.
	if len(a.ops) != 1 || len(a.counts) != 1 {
		t.Errorf("held %d operations and %d counters, want 1 and 1 (older windows dropped)", len(a.ops), len(a.counts))
	}
}

func TestAllocateErrors(t *testing.T) {
	tests := []struct {
		r    Request
		want error
		msg  string
	}{
		{Request{Values: []MetricValue{{"requests", 1}}}, ErrInvalidRequest, "no consumer"},
		{Request{Consumer: "acme", Values: []MetricValue{{"requests", -1}}}, ErrInvalidRequest, "values[0] (requests): must be >= 0, got -1"},
		{Request{Consumer: "acme", Values: []MetricValue{{"requests", 1}, {"requests", 2}}}, ErrInvalidRequest, `values[1]: metric "requests" listed twice`},
		{Request{Consumer: "acme", Mode: 7}, ErrInvalidRequest, "unknown mode Mode(7)"},
		{Request{Consumer: "acme", Values: []MetricValue{{"requests", 1}, {"calls", 1}}}, ErrUnknownMetric, `unknown metric "calls" (consumer "acme")`},
		{Request{Consumer: "acme", Values: []MetricValue{{"requests", 1}}, Returned: []MetricValue{{"requests", -1}}}, ErrInvalidRequest, "returned[0] (requests): must be >= 0, got -1"},
		{Request{Consumer: "acme", Values: []MetricValue{{"requests", 1}}, Returned: []MetricValue{{"bytes", 1}}}, ErrInvalidRequest, `returned[0]: metric "bytes" is not in values`},
		{Request{Consumer: "acme", Values: []MetricValue{{"requests", 1}}, Returned: []MetricValue{{"requests", 1}, {"requests", 1}}}, ErrInvalidRequest, `returned[1]: metric "requests" listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			a := NewAllocator(limits)
			_, err := a.Allocate(t0, tt.r)
			if !errors.Is(err, tt.want) || err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Allocate error %v, want %v saying %q", err, tt.want, tt.msg)
			}
			if used := a.Used(t0, "acme", "requests"); used != 0 {
				t.Errorf("a failed allocation charged %d", used)
			}
		})
	}
}

// TestAllocateReturns: units given back lower the window's counter (never
// below zero) before the request is charged; a return of another window,
// in CHECK_ONLY, or of a repeated operation is not applied.
func TestAllocateReturns(t *testing.T) {
	w := WindowOf(t0)
	back := func(mode Mode, id string, ask, ret, window int64) Request {
		return Request{OperationID: id, Consumer: "acme", Mode: mode, Values: []MetricValue{{"requests", ask}},
			Returned: []MetricValue{{"requests", ret}}, ReturnedWindow: window}
	}
	for _, tt := range []struct {
		name     string
		r        Request
		want     int64 // allocated
		wantUsed int64
	}{
		{"given back, then charged", back(ModeNormal, "", 4, 6, w), 4, 8},
		{"more than was charged: to zero", back(ModeBestEffort, "", 0, 50, w), 0, 0},
		{"room made by the return", back(ModeNormal, "", 10, 10, w), 10, 10},
		{"another window's: dropped", back(ModeBestEffort, "", 5, 10, w-1), 0, 10},
		{"check only: not applied", back(ModeCheckOnly, "", 0, 10, w), 0, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(limits)
			if _, err := a.Allocate(t0, req(ModeNormal, "", 10, 0)); err != nil {
				t.Fatal(err)
			}
			res, err := a.Allocate(t0.Add(time.Second), tt.r)
			if err != nil || res.Allocated[0].Value != tt.want {
				t.Fatalf("Allocate = %+v, %v; want %d allocated", res, err, tt.want)
			}
			if used := a.Used(t0, "acme", "requests"); used != tt.wantUsed {
				t.Errorf("used %d, want %d", used, tt.wantUsed)
			}
		})
	}
	a := NewAllocator(limits)
	a.Allocate(t0, req(ModeNormal, "", 10, 0))
	a.Allocate(t0, back(ModeBestEffort, "op-1", 0, 4, w))
	a.Allocate(t0, back(ModeBestEffort, "op-1", 0, 4, w)) // a retry: not given back again
	if used := a.Used(t0, "acme", "requests"); used != 6 {
		t.Errorf("a repeated operation's return: used %d, want 6", used)
	}
}

func BenchmarkAllocate(b *testing.B) {
	a := NewAllocator(limits)
	r := Request{Consumer: "acme", Mode: ModeBestEffort, Values: []MetricValue{{"requests", 1}}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		a.Allocate(t0.Add(time.Duration(i)*time.Millisecond), r)
	}
}
