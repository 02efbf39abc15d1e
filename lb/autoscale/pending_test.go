package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPendingWaitOrStart: a request waits for a starting instance, then
// for a running one, when that is no slower than a cold start and fits in
// the time left; else it starts an instance.
func TestPendingWaitOrStart(t *testing.T) {
	c := testConfig() // cold start 10s, max wait 35s, 10 per instance, max 100
	s := time.Second
	for _, tt := range []struct {
		name string
		r    PendingRequest
		want PendingDecision
	}{
		{"nothing starting, no estimate: start",
			PendingRequest{Running: 2, FreeSlotIn: -1},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s, Deadline: 35 * s}},
		{"starting ready in 4s: wait for it",
			PendingRequest{Running: 3, StartingReadyIn: []time.Duration{4 * s}, FreeSlotIn: 2 * s},
			PendingDecision{Action: Wait, ForStarting: true, Expected: 4 * s, Deadline: 35 * s}},
		{"starting one full (10 ahead), slot in 2s: wait for a running one",
			PendingRequest{Running: 3, Ahead: 10, StartingReadyIn: []time.Duration{4 * s}, FreeSlotIn: 2 * s},
			PendingDecision{Action: Wait, Expected: 2 * s, Deadline: 35 * s}},
		{"second starting instance takes request 11",
			PendingRequest{Running: 4, Ahead: 10, StartingReadyIn: []time.Duration{8 * s, 3 * s}, FreeSlotIn: -1},
			PendingDecision{Action: Wait, ForStarting: true, Expected: 8 * s, Deadline: 35 * s}},
		{"slot in 12s is slower than a cold start: start",
			PendingRequest{Running: 3, FreeSlotIn: 12 * s},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s, Deadline: 35 * s}},
		{"starting one ready after the time left: start another",
			PendingRequest{Waited: 30 * s, Running: 3, StartingReadyIn: []time.Duration{6 * s}, FreeSlotIn: -1},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s, Deadline: 5 * s}},
		{"waited the maximum below max instances: start",
			PendingRequest{Waited: 35 * s, Running: 3, FreeSlotIn: s},
			PendingDecision{Action: StartInstance, ForStarting: true, Expected: 10 * s}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Pending(tt.r); got != tt.want {
				t.Errorf("Pending(%+v) = %+v, want %+v", tt.r, got, tt.want)
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
		{"at max, slot unknown: wait out the time left",
			PendingRequest{Waited: 5 * s, Running: 3, FreeSlotIn: -1},
			PendingDecision{Action: Wait, Expected: 30 * s, Deadline: 30 * s}},
		{"at max, slot in 20s (slower than a cold start, none can start): wait",
			PendingRequest{Running: 3, FreeSlotIn: 20 * s},
			PendingDecision{Action: Wait, Expected: 35 * s, Deadline: 35 * s}},
		{"at max, waited 35s: 429",
			PendingRequest{Waited: 35 * s, Running: 3, FreeSlotIn: -1},
			PendingDecision{Action: Reject}},
		{"at max, waited 40s: 429",
			PendingRequest{Waited: 40 * s, Running: 3, FreeSlotIn: s},
			PendingDecision{Action: Reject}},
		{"below max, waited 35s: start, no 429",
			PendingRequest{Waited: 35 * s, Running: 2, FreeSlotIn: -1},
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
