package quota

import (
	"sync"
	"testing"
	"time"
)

// gfeSim drives Leases that know the limit against one Allocator on an
// injected clock, one millisecond at a time, as the gfe's quotaclient
// does: every call Next wants is made at once and answered callRTT later.
type gfeSim struct {
	t       *testing.T
	alloc   *Allocator
	now     time.Time
	callRTT time.Duration
	leases  []*Lease
	pending []*simCall
	calls   int
}

type simCall struct {
	l   *Lease
	ask Ask
	at  time.Time
}

// newGFESim returns a simulation of gfes Leases of one consumer at limit
// per minute, starting at the start of a window.
func newGFESim(t *testing.T, gfes int, limit int64) *gfeSim {
	s := &gfeSim{t: t, now: t0, callRTT: time.Millisecond,
		alloc: NewAllocator(func(string, string) (int64, bool) { return limit, true })}
	for range gfes {
		l := &Lease{Interval: time.Second}
		l.SetLimit(limit)
		s.leases = append(s.leases, l)
	}
	return s
}

// step answers the calls due, lets admit run, then makes the calls the
// Leases want, and moves the clock on by a millisecond.
func (s *gfeSim) step(admit func(now time.Time)) {
	keep := s.pending[:0]
	for _, c := range s.pending {
		if s.now.Before(c.at) {
			keep = append(keep, c)
			continue
		}
		req := Request{Consumer: "acme", Mode: ModeBestEffort, Values: []MetricValue{{"calls", c.ask.Units}}}
		if c.ask.Return > 0 {
			req.Returned, req.ReturnedWindow = []MetricValue{{"calls", c.ask.Return}}, c.ask.Window
		}
		res, err := s.alloc.Allocate(s.now, req)
		if err != nil {
			s.t.Fatal(err)
		}
		c.l.Granted(s.now, res.Allocated[0].Value, res.Exhausted, res.RetryAfter)
	}
	s.pending = keep
	admit(s.now)
	for _, l := range s.leases {
		if a, ok := l.Next(s.now); ok {
			s.calls++
			s.pending = append(s.pending, &simCall{l: l, ask: a, at: s.now.Add(s.callRTT)})
		}
	}
	s.now = s.now.Add(time.Millisecond)
}

// TestLeaseExactLimit (second security review, item 13): at 60 a minute,
// a consumer's requests at one gfe in a fresh minute — back to back (one
// a millisecond), or spread over the minute (one every 400 ms) — are
// admitted exactly 60 times, and the 61st is refused until the window's
// end; what the service charged is what was admitted. Where a Lease that
// did not know the limit refused the 4th request of a burst (its first
// grant covered twice the demand of one round trip, and the next call was
// a second away), and charged up to twice what it admitted.
func TestLeaseExactLimit(t *testing.T) {
	for _, tt := range []struct {
		name  string
		every time.Duration
	}{
		{"back to back", time.Millisecond},
		{"spread over the minute", 400 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newGFESim(t, 1, 60)
			l := s.leases[0]
			var admitted, sent int
			var refusedAt int
			var retry time.Duration
			for s.now.Before(t0.Add(Window - time.Second)) {
				s.step(func(now time.Time) {
					if now.Sub(t0)%tt.every != 0 || sent == 61 {
						return
					}
					sent++
					d := l.Decide(now, 1)
					switch {
					case d.OK:
						admitted++
					case refusedAt == 0:
						refusedAt, retry = sent, d.RetryAfter
						if want := WindowEnd(windowOf(now)).Sub(now); retry != want {
							t.Errorf("request %d refused with RetryAfter %v, want the rest of the window, %v", sent, retry, want)
						}
					}
				})
			}
			if admitted != 60 || refusedAt != 61 {
				t.Errorf("61 requests at 60 a minute: %d admitted, first refusal request %d; want 60 and the 61st", admitted, refusedAt)
			}
			if used := s.alloc.Used(s.now, "acme", "calls"); used != 60 {
				t.Errorf("the service charged %d, want the 60 admitted", used)
			}
			t.Logf("%s: %d admitted, request %d refused (Retry-After %v), %d calls", tt.name, admitted, refusedAt, retry.Round(time.Millisecond), s.calls)
		})
	}
	// The same burst on a Lease that does not know the limit (credit 1,
	// as the gfe gave before): refused from the 4th request on.
	old := &Lease{Interval: time.Second, Credit: 1}
	alloc := NewAllocator(func(string, string) (int64, bool) { return 60, true })
	admitted := 0
	for i := range 61 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		if ok, _ := old.Admit(now, 1); ok {
			admitted++
		}
		if ask, ok := old.Call(now); ok {
			res, _ := alloc.Allocate(now, Request{Consumer: "acme", Mode: ModeBestEffort, Values: []MetricValue{{"calls", ask}}})
			old.Granted(now, res.Allocated[0].Value, res.Exhausted, res.RetryAfter)
		}
	}
	t.Logf("without the limit known: %d of 61 admitted in the burst, %d charged", admitted, alloc.Used(t0, "acme", "calls"))
}

// TestLeaseGivesBack: what the first call of a window leases ahead and
// the consumer does not use is given back at the next call, beyond twice
// the demand since the previous one; an idle consumer gives everything
// back, and is admitted again at once (on credit, paid by its next call).
func TestLeaseGivesBack(t *testing.T) {
	s := newGFESim(t, 1, 60)
	l := s.leases[0]
	burst := func(n int) func(time.Time) {
		return func(now time.Time) {
			for range n {
				if ok, _ := l.Admit(now, 1); !ok {
					t.Fatalf("request refused at +%v", now.Sub(t0))
				}
			}
		}
	}
	idle := func(time.Time) {}
	used := func() int64 { return s.alloc.Used(s.now, "acme", "calls") }
	s.step(burst(5))
	s.step(idle) // the first call's answer: the whole limit leased
	if got := used(); got != 60 {
		t.Fatalf("after the first call: charged %d, want the whole limit, 60", got)
	}
	for s.now.Before(t0.Add(time.Second)) {
		s.step(idle)
	}
	s.step(burst(3)) // the next call: 3 demand, 52 budget → keep 6, give back 46
	s.step(idle)
	if got := used(); got != 14 {
		t.Errorf("a second on, 8 admitted: charged %d, want 14 (8 admitted, 6 held: twice the demand of 3 since the first call)", got)
	}
	for s.now.Before(t0.Add(3 * time.Second)) {
		s.step(idle)
	}
	if got := used(); got != 8 {
		t.Errorf("idle for two seconds: charged %d, want the 8 admitted (everything else given back)", got)
	}
	for range 52 {
		s.step(burst(1))
	}
	for s.now.Before(t0.Add(5 * time.Second)) {
		s.step(idle)
	}
	if ok, _ := l.Admit(s.now, 1); ok {
		t.Error("admitted a 61st request")
	}
	if got := used(); got != 60 {
		t.Errorf("60 admitted: charged %d, want 60", got)
	}
}

// TestLeaseConcurrentLimit: many goroutines admitting at once from a
// Lease that knows its limit take exactly the limit — before any grant,
// and around one — never a unit more (run it with -race).
func TestLeaseConcurrentLimit(t *testing.T) {
	const goroutines, attempts = 64, 200
	now := t0.Add(10 * time.Second)
	at := func() time.Time { return now }
	l := &Lease{}
	l.SetLimit(700)
	if got := admitAll(l, goroutines, attempts, 1, at); got != 700 {
		t.Errorf("before a grant: admitted %d, want exactly the limit, 700", got)
	}
	l2 := &Lease{}
	l2.SetLimit(700)
	admitAll(l2, 8, 25, 1, at) // 200 on credit
	a, _ := l2.Next(now)
	var wg sync.WaitGroup
	var got int64
	wg.Go(func() { got = admitAll(l2, goroutines, attempts, 3, at) })
	l2.Granted(now, a.Units, false, 0) // 700: pays 200, 500 budget
	wg.Wait()
	if got != 498 { // 166 × 3: 2 units left to the limit
		t.Errorf("around a grant: admitted %d more units, want 498 (166 requests of 3)", got)
	}
}

// TestLeaseBurstAtThreeGFEs: a consumer's burst at three gfes at once, one
// request a millisecond at each, calls answered in 1 ms: the first gfe to
// call leases the window, the others are told it is exhausted; each
// admitted its first request before its first answer. The window admits
// 62 of 60 — the bound of over-admission is what comes in during the
// first call's round trip.
func TestLeaseBurstAtThreeGFEs(t *testing.T) {
	s := newGFESim(t, 3, 60)
	admitted := make([]int, 3)
	for range 200 {
		s.step(func(now time.Time) {
			for g, l := range s.leases {
				if ok, _ := l.Admit(now, 1); ok {
					admitted[g]++
				}
			}
		})
	}
	total := admitted[0] + admitted[1] + admitted[2]
	if total != 62 || admitted[0] != 60 {
		t.Errorf("admitted %v (%d in all), want 60, 1, 1", admitted, total)
	}
	if used := s.alloc.Used(s.now, "acme", "calls"); used != 60 {
		t.Errorf("charged %d, want 60", used)
	}
	t.Logf("burst at three gfes: admitted %v", admitted)
}

// TestLeaseSparseAtTwoGFEs: a consumer far below its limit (60 a minute)
// whose requests alternate between two gfes is refused only while the
// other gfe holds the window's lease and before it gave it back: every 2 s
// (each gfe's lease given back before the other's next request), never;
// every 500 ms, once: the second gfe's first call is told the window is
// exhausted (the first gfe still holds it), and its next request is
// refused; the call that request makes finds the units given back.
func TestLeaseSparseAtTwoGFEs(t *testing.T) {
	for _, tt := range []struct {
		every   time.Duration
		refused int
	}{
		{2 * time.Second, 0},
		{500 * time.Millisecond, 1},
	} {
		s := newGFESim(t, 2, 60)
		sent, refused := 0, 0
		for s.now.Before(t0.Add(Window - time.Second)) {
			s.step(func(now time.Time) {
				if now.Sub(t0)%tt.every != 0 || sent == 30 {
					return
				}
				if ok, _ := s.leases[sent%2].Admit(now, 1); !ok {
					refused++
				}
				sent++
			})
		}
		if refused != tt.refused {
			t.Errorf("a request every %v, alternating: %d of %d refused, want %d", tt.every, refused, sent, tt.refused)
		}
		t.Logf("a request every %v, alternating: %d of %d refused, %d charged, %d calls", tt.every, refused, sent, s.alloc.Used(s.now, "acme", "calls"), s.calls)
	}
}
