package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPendingWaitOrStart: a request waits for a starting instance or for
// a running one when the slots that free up reach it no later than a
// cold start and within the time left; else it starts an instance.
func TestPendingWaitOrStart(t *testing.T) {
	c := testConfig() // cold start 10s, max wait 35s, 10 per instance, max 100
	s := time.Second
	for _, tt := range []struct {
		name string
		r    PendingRequest
		want PendingDecision
	}{
		{"nothing starting, latency unknown: start",
			PendingRequest{Running: 2, ReadySlots: 20},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s, Deadline: 35 * s}},
		{"latency unknown, starting instance holds it: wait 4s for it",
			PendingRequest{Running: 3, ReadySlots: 20, StartingReadyIn: []time.Duration{4 * s}},
			PendingDecision{Action: Wait, ForStarting: true, Expected: 4 * s, Deadline: 35 * s}},
		{"latency unknown, 10 ahead fill the starting one: start",
			PendingRequest{Running: 3, Ahead: 10, ReadySlots: 20, StartingReadyIn: []time.Duration{4 * s}},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s, Deadline: 35 * s}},
		{"20 slots free per second, 39 ahead: wait 2s for a running one",
			PendingRequest{Running: 2, Ahead: 39, ReadySlots: 20, RequestTime: s},
			PendingDecision{Action: Wait, Expected: 2 * s, Deadline: 35 * s}},
		{"399 ahead: 20s for running slots is slower than a cold start: start",
			PendingRequest{Running: 2, Ahead: 399, ReadySlots: 20, RequestTime: s},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s, Deadline: 35 * s}},
		{"199 ahead, one starting in 5s: 100 + 10 by 5s, then 30/s: wait 8s",
			PendingRequest{Running: 3, Ahead: 199, ReadySlots: 20, RequestTime: s, StartingReadyIn: []time.Duration{5 * s}},
			PendingDecision{Action: Wait, ForStarting: true, Expected: 8 * s, Deadline: 35 * s}},
		{"10s wait but 5s left: start",
			PendingRequest{Waited: 30 * s, Running: 2, Ahead: 199, ReadySlots: 20, RequestTime: s},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s, Deadline: 5 * s}},
		{"waited the maximum below max instances: start",
			PendingRequest{Waited: 35 * s, Running: 3, ReadySlots: 30, RequestTime: s},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, c.Pending(tt.r)); diff != "" {
				t.Errorf("Pending(%+v) (-want +got):\n%s", tt.r, diff)
			}
		})
	}
}

// TestExpectedWait: the slot-flow model in numbers.
func TestExpectedWait(t *testing.T) {
	c := testConfig()
	ms := time.Millisecond
	for _, tt := range []struct {
		name         string
		r            PendingRequest
		want         time.Duration
		wantStarting bool
		wantOK       bool
	}{
		{"first in line, 10 slots per 500ms", PendingRequest{ReadySlots: 10, RequestTime: 500 * ms}, 50 * ms, false, true},
		{"nothing ready, one starting in 3s takes 10 at once", PendingRequest{Ahead: 9, RequestTime: 500 * ms, StartingReadyIn: []time.Duration{3000 * ms}}, 3000 * ms, true, true},
		{"11th waits a request time more", PendingRequest{Ahead: 19, RequestTime: 500 * ms, StartingReadyIn: []time.Duration{3000 * ms}}, 3500 * ms, true, true},
		{"nothing at all", PendingRequest{RequestTime: 500 * ms}, 0, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, starting, ok := c.ExpectedWait(tt.r)
			if got != tt.want || starting != tt.wantStarting || ok != tt.wantOK {
				t.Errorf("ExpectedWait(%+v) = %v, %v, %v, want %v, %v, %v", tt.r, got, starting, ok, tt.want, tt.wantStarting, tt.wantOK)
			}
		})
	}
}

// TestAt429AtMax: at max instances a request never starts one; it waits
// up to MaxPendingWait and then fails with 429.
func TestAt429AtMax(t *testing.T) {
	c := testConfig()
	c.MaxInstances = 3
	s := time.Second
	for _, tt := range []struct {
		name string
		r    PendingRequest
		want PendingDecision
	}{
		{"at max, latency unknown: wait out the time left",
			PendingRequest{Waited: 5 * s, Running: 3, ReadySlots: 30},
			PendingDecision{Action: Wait, Expected: 30 * s, Deadline: 30 * s}},
		{"at max, 20s to a slot (slower than a cold start, none can start): wait",
			PendingRequest{Running: 3, Ahead: 599, ReadySlots: 30, RequestTime: s},
			PendingDecision{Action: Wait, Expected: 35 * s, Deadline: 35 * s}},
		{"at max, waited 35s: 429",
			PendingRequest{Waited: 35 * s, Running: 3, ReadySlots: 30},
			PendingDecision{Action: Reject}},
		{"at max, waited 40s: 429",
			PendingRequest{Waited: 40 * s, Running: 3, ReadySlots: 30, RequestTime: s},
			PendingDecision{Action: Reject}},
		{"below max, waited 35s: start, no 429",
			PendingRequest{Waited: 35 * s, Running: 2, ReadySlots: 20},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, c.Pending(tt.r)); diff != "" {
				t.Errorf("Pending(%+v) (-want +got):\n%s", tt.r, diff)
			}
		})
	}
}

// TestMaxPendingWaitDefault: 35s = max(10s, 3.5 × 10s).
func TestMaxPendingWaitDefault(t *testing.T) {
	if got := DefaultConfig(0, 1).MaxPendingWait; got != 35*time.Second {
		t.Errorf("DefaultConfig MaxPendingWait = %v, want 35s", got)
	}
}

// BenchmarkPending: one decision for a request behind 500 others, with
// 20 starting instances (sorted, as a gfe keeps them): no allocation.
func BenchmarkPending(b *testing.B) {
	c := testConfig()
	starting := make([]time.Duration, 20)
	for i := range starting {
		starting[i] = time.Duration(i) * 500 * time.Millisecond
	}
	r := PendingRequest{Waited: time.Second, Ahead: 500, Running: 40, ReadySlots: 200, StartingReadyIn: starting, RequestTime: 500 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		c.Pending(r)
	}
}

// TestPendingUnsortedInput: an unsorted StartingReadyIn gives the same
// decision and is left as it was.
func TestPendingUnsortedInput(t *testing.T) {
	c := testConfig()
	in := []time.Duration{8 * time.Second, 3 * time.Second}
	r := PendingRequest{Running: 4, Ahead: 10, StartingReadyIn: in}
	got := c.Pending(r)
	want := c.Pending(PendingRequest{Running: 4, Ahead: 10, StartingReadyIn: []time.Duration{3 * time.Second, 8 * time.Second}})
	if got != want || in[0] != 8*time.Second {
		t.Errorf("unsorted: %+v (input now %v), sorted: %+v", got, in, want)
	}
}

// TestRateStarts: on-demand starts sized by the arrival rate: the
// instances that hold rate × request time at the concurrency target, less
// those running, within max instances.
func TestRateStarts(t *testing.T) {
	c := testConfig() // 10 slots per instance, 60% target, max 100
	for _, tt := range []struct {
		name    string
		rate    float64
		reqTime time.Duration
		running int
		max     int
		want    int
	}{
		{"200/s of 0.5s from 2: 100 in flight ⇒ 17", 200, 500 * time.Millisecond, 2, 100, 15},
		{"already enough", 200, 500 * time.Millisecond, 17, 100, 0},
		{"more than enough", 200, 500 * time.Millisecond, 30, 100, 0},
		{"capped at max instances", 200, 500 * time.Millisecond, 2, 10, 8},
		{"exact need rounds to itself: 12/s ⇒ 6 ⇒ 1", 12, 500 * time.Millisecond, 0, 100, 1},
		{"no rate", 0, 500 * time.Millisecond, 0, 100, 0},
		{"unknown request time", 200, 0, 0, 100, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c.MaxInstances = tt.max
			if got := c.RateStarts(tt.rate, tt.reqTime, tt.running); got != tt.want {
				t.Errorf("RateStarts(%v, %v, %d) = %d, want %d", tt.rate, tt.reqTime, tt.running, got, tt.want)
			}
		})
	}
}
