package autoscale

import (
	"bytes"
	"testing"
	"time"
)

// FuzzTick: over any sequence of samples, every decision keeps the
// invariants of Tick: Recommended in [min, max], Running = Recommended +
// Demoted, counts never negative, a rise is promotions plus starts, and
// a group recommended at zero leaves it only on demand, idleness takes a
// group to zero and only with min_instances 0, and a change by a metric
// driver goes to the drivers' largest count.
func FuzzTick(f *testing.F) {
	f.Add(uint8(0), uint8(5), []byte{10, 0, 200, 3, 0, 0, 0, 0, 90, 90, 1, 1})
	f.Add(uint8(2), uint8(3), []byte{255, 255, 255, 255, 0, 0, 0, 0})
	// Load, then quiet past the concurrency window with min_instances 1.
	f.Add(uint8(1), uint8(2), append(bytes.Repeat([]byte{40, 60, 3, 0}, 20), make([]byte, 4*10)...))
	f.Fuzz(func(t *testing.T, lo, hi uint8, data []byte) {
		c := testConfig()
		c.MinInstances, c.MaxInstances = int(lo%20), int(lo%20)+1+int(hi%50)
		c.ConcurrencyWindow, c.CPUWindow, c.DemotedIdleWindow = 5*time.Second, 5*time.Second, 5*time.Second
		c.ConcurrencyLongWindow, c.IdleTimeout = 20*time.Second, 30*time.Second
		now := t0
		a := New(c, int(hi%60), now)
		prev := a.Recommended()
		for i := 0; i+3 < len(data); i += 4 {
			s := Sample{CPUCores: float64(data[i]) / 8, Concurrency: float64(data[i+1]) / 2, Requests: int64(data[i+2] % 4), ACT: float64(data[i+3] % 12)}
			now = now.Add(time.Second)
			d := a.Tick(now, s)
			if d.Recommended < c.MinInstances || d.Recommended > c.MaxInstances {
				t.Fatalf("Recommended %d outside [%d, %d]", d.Recommended, c.MinInstances, c.MaxInstances)
			}
			if d.Running != d.Recommended+d.Demoted || d.Start < 0 || d.Stopped < 0 || d.Promoted < 0 || d.Demoted < 0 {
				t.Fatalf("inconsistent decision %+v", d)
			}
			if prev == 0 && d.Recommended > 0 && s.Requests == 0 && s.Concurrency == 0 && d.Driver != DriverMin {
				t.Fatalf("left zero without demand: %+v after %+v", d, s)
			}
			if d.Driver == DriverIdle && (c.MinInstances > 0 || d.Recommended != 0) {
				t.Fatalf("idle with min %d: %+v (no traffic is a reason for zero only)", c.MinInstances, d)
			}
			// Outside the override rules, a change is to the drivers'
			// largest count, rounded up, at least 1: never from N, never
			// by a rule of its own.
			if d.Recommended != prev && (d.Driver == DriverCPU || d.Driver == DriverConcurrency || d.Driver == DriverACT) {
				if want := max(1, d.Drivers.CPU, d.Drivers.Concurrency, d.Drivers.ACT); d.Recommended != want {
					t.Fatalf("%d → %d by %s, want the drivers' max %d: %+v", prev, d.Recommended, d.Driver, want, d)
				}
			}
			if d.Start > 0 && d.Start+d.Promoted != d.Recommended-prev {
				t.Fatalf("started %d + promoted %d for a rise %d → %d", d.Start, d.Promoted, prev, d.Recommended)
			}
			prev = d.Recommended
		}
	})
}

// FuzzPending: the guarantees of Pending for any request: a Wait expects
// no more than the time left; StartInstance never at MaxInstances; Reject
// only at MaxInstances after MaxPendingWait.
func FuzzPending(f *testing.F) {
	f.Add(int64(0), 0, 2, 20, int64(0), int64(500), uint8(3))
	f.Add(int64(35e9), 10, 100, 1000, int64(4e9), int64(0), uint8(100))
	f.Fuzz(func(t *testing.T, waited int64, ahead, running, readySlots int, startIn, reqTime int64, maxInst uint8) {
		c := testConfig()
		c.MaxInstances = 1 + int(maxInst)
		if ahead < 0 || running < 0 || readySlots < 0 || ahead > 1e9 || readySlots > 1e9 {
			return
		}
		r := PendingRequest{
			Waited: time.Duration(waited), Ahead: ahead, Running: running, ReadySlots: readySlots,
			RequestTime: time.Duration(reqTime) * time.Millisecond,
		}
		if startIn >= 0 {
			r.StartingReadyIn = []time.Duration{time.Duration(startIn), time.Duration(startIn / 2)}
		}
		d := c.Pending(r)
		left := c.MaxPendingWait - r.Waited
		switch d.Action {
		case Wait:
			if d.Expected > left || left <= 0 {
				t.Fatalf("Pending(%+v) = %+v: waits past the time left %v", r, d, left)
			}
		case StartInstance:
			if running >= c.MaxInstances {
				t.Fatalf("Pending(%+v) = %+v: starts at max instances %d", r, d, c.MaxInstances)
			}
		case Reject:
			if running < c.MaxInstances || left > 0 {
				t.Fatalf("Pending(%+v) = %+v: rejects below max or before the time is up", r, d)
			}
		}
	})
}
