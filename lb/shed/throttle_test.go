package shed

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustThrottle(t testing.TB, cfg ThrottleConfig) *Throttle {
	t.Helper()
	th, err := NewThrottle(cfg, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// TestThrottleSteadyState: a client attempts 100 requests/s; the backend
// accepts at most capacity per second and rejects the rest. Over the last
// 10s of each phase the client sends about K·capacity (what the SRE book's
// rule converges to: p = 1 − K·capacity/demand) and refuses the rest
// locally; when the backend takes everything, nothing is refused.
func TestThrottleSteadyState(t *testing.T) {
	cfg := ThrottleConfig{K: 2, Window: 10 * time.Second, Bucket: time.Second}
	th := mustThrottle(t, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	phases := []struct {
		capacity int // accepted per second
		wantSent float64
	}{
		{200, 100}, // under capacity: all sent
		{25, 50},   // K·25
		{10, 20},   // K·10
		{200, 100}, // recovered
	}
	now := epoch
	for _, ph := range phases {
		var sent, lastSent int
		for s := range 30 {
			accepted := 0
			sentThis := 0
			for range 100 {
				now = now.Add(10 * time.Millisecond)
				if !th.Admit(now, rng.Uint64()) {
					continue
				}
				sentThis++
				if accepted < ph.capacity {
					accepted++
					th.Accepted(now)
				}
			}
			if s >= 20 {
				sent += sentThis
			}
			lastSent = sentThis
		}
		if got := float64(sent) / 10; math.Abs(got-ph.wantSent) > 0.08*ph.wantSent {
			t.Errorf("capacity %d/s: sent %.1f/s over the last 10s, want %.0f ± 8%%", ph.capacity, got, ph.wantSent)
		}
		if ph.wantSent == 100 && lastSent != 100 {
			t.Errorf("capacity %d/s: %d of 100 sent in the last second, want all", ph.capacity, lastSent)
		}
	}
}

// TestThrottleWindow: counts leave the window: 100 rejected requests make
// the refusal probability 100/101; a window later it is 0 again.
func TestThrottleWindow(t *testing.T) {
	th := mustThrottle(t, ThrottleConfig{K: 2, Window: 10 * time.Second, Bucket: time.Second})
	for range 100 {
		th.Admit(epoch, math.MaxUint64) // MaxUint64 is always admitted
	}
	if got := th.RefuseProbability(epoch); math.Abs(got-100.0/101) > 1e-12 {
		t.Errorf("after 100 requests and no accepts: p = %v, want 100/101", got)
	}
	if got := th.RefuseProbability(epoch.Add(9 * time.Second)); math.Abs(got-100.0/101) > 1e-12 {
		t.Errorf("9s later: p = %v, want 100/101 (still in the window)", got)
	}
	if got := th.RefuseProbability(epoch.Add(10 * time.Second)); got != 0 {
		t.Errorf("10s later: p = %v, want 0 (out of the window)", got)
	}
	th.Admit(epoch.Add(time.Hour), math.MaxUint64)
	if got := th.RefuseProbability(epoch.Add(time.Hour)); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("an hour later, one request: p = %v, want 1/2", got)
	}
}

// TestThrottleConcurrent: concurrent Admit and Accepted keep the window's
// sums equal to its buckets' (run with -race).
func TestThrottleConcurrent(t *testing.T) {
	th := mustThrottle(t, ThrottleConfig{K: 2, Window: 4 * time.Second, Bucket: time.Second})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for k := range 5000 {
				now := epoch.Add(time.Duration(k) * time.Millisecond)
				if th.Admit(now, rng.Uint64()) && k%3 != 0 {
					th.Accepted(now)
				}
			}
		}()
	}
	wg.Wait()
	var r, a int64
	for i := range th.buckets {
		r += th.buckets[i].requests.Load()
		a += th.buckets[i].accepts.Load()
	}
	if r != th.requests.Load() || a != th.accepts.Load() {
		t.Errorf("sums %d/%d, buckets %d/%d: want equal", th.requests.Load(), th.accepts.Load(), r, a)
	}
	if a := testing.AllocsPerRun(100, func() { th.Admit(epoch, 1); th.Accepted(epoch) }); a != 0 {
		t.Errorf("Admit + Accepted allocate %v", a)
	}
}

func BenchmarkThrottle(b *testing.B) {
	th := mustThrottle(b, DefaultThrottleConfig())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var s uint64
		now := epoch
		for pb.Next() {
			s += 0x9e3779b97f4a7c15
			if th.Admit(now, s) {
				th.Accepted(now)
			}
		}
	})
}

func BenchmarkRuleAdmit(b *testing.B) {
	r := NewRule(0.2)
	b.ReportAllocs()
	var s uint64
	for range b.N {
		s += 0x9e3779b97f4a7c15
		r.Admit(s)
	}
}
