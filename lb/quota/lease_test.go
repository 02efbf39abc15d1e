package quota

import (
	"fmt"
	"testing"
	"time"
)

// TestLeaseAdmission walks one Lease through each rule, on an injected
// clock starting 20 s into a window.
func TestLeaseAdmission(t *testing.T) {
	now := t0.Add(20 * time.Second)
	l := &Lease{Credit: 3}
	admit := func(cost int64) bool { ok, _ := l.Admit(now, cost); return ok }

	// Before any grant: credit, then refused.
	if !admit(1) || !admit(2) || admit(1) {
		t.Fatal("before a grant: want 3 units admitted on credit, then refused")
	}
	ask, ok := l.Call(now)
	if !ok || ask != 3+2*4 { // owed 3, demand 4 (3 admitted, 1 refused)
		t.Fatalf("Call = %d, %v; want 3 owed + 2 × 4 demand = 11", ask, ok)
	}
	if _, again := l.Call(now.Add(500 * time.Millisecond)); again {
		t.Error("a second call while the first is outstanding")
	}
	l.Granted(now, 10, false, 0) // pays the 3 owed, 7 budget
	for i := range 7 {
		if !admit(1) {
			t.Fatalf("budget unit %d refused", i)
		}
	}
	ok, retry := l.Admit(now, 1)
	if ok || retry != time.Second {
		t.Errorf("out of budget after a grant: Admit = %v, retry %v; want refused until the next call, 1s", ok, retry)
	}
	if _, ok := l.Call(now.Add(999 * time.Millisecond)); ok {
		t.Error("a call within Interval of the previous one")
	}

	// Exhausted: refused until the window ends, no calls meanwhile.
	now = now.Add(time.Second)
	if _, ok := l.Call(now); !ok {
		t.Fatal("no call after Interval with demand")
	}
	l.Granted(now, 0, true, 39*time.Second)
	if ok, retry := l.Admit(now.Add(time.Second), 1); ok || retry != 38*time.Second {
		t.Errorf("exhausted: Admit = %v, %v; want refused for 38s", ok, retry)
	}
	if _, ok := l.Call(now.Add(2 * time.Second)); ok {
		t.Error("a call while the window is exhausted")
	}

	// The next window: credit again.
	now = t0.Add(Window + time.Second)
	if !admit(3) || admit(1) {
		t.Error("next window: want 3 units of credit again, then refused")
	}

	// The service fails: fail open until a call succeeds.
	ask, _ = l.Call(now)
	l.Failed()
	for i := range 100 {
		if !admit(5) {
			t.Fatalf("failing open: request %d refused", i)
		}
	}
	now = now.Add(time.Second)
	if ask, ok = l.Call(now); !ok {
		t.Fatal("no call after a failure")
	}
	l.Granted(now, 0, false, 0)
	if admit(1) {
		t.Error("after a successful empty grant: admitted without budget")
	}

	// Idle: no calls.
	idle := &Lease{}
	if _, ok := idle.Call(now); ok {
		t.Error("a call without demand")
	}
}

// TestLeaseNeverRollsBack: a request that started in the previous window
// but is decided after a grant of the new one counts in the new window:
// it neither drops the new budget and debt nor gets the credit again
// (found by cmd/quotabench: windows of 60..90 admitted 1 or 2 over).
func TestLeaseNeverRollsBack(t *testing.T) {
	turn := t0.Add(Window)
	l := &Lease{Credit: 1}
	if ok, _ := l.Admit(turn, 1); !ok { // on credit: owed 1
		t.Fatal("first request of the window refused")
	}
	if _, ok := l.Call(turn); !ok {
		t.Fatal("no call")
	}
	late := turn.Add(-time.Millisecond) // started in the previous window
	if ok, _ := l.Admit(late, 1); ok {
		t.Error("a request from the old window got the new window's credit again")
	}
	l.Granted(turn.Add(time.Millisecond), 5, false, 0) // pays 1, budget 4
	for i := range 4 {
		if ok, _ := l.Admit(late, 1); !ok {
			t.Fatalf("late request %d: refused with budget left", i)
		}
	}
	if ok, _ := l.Admit(turn.Add(2*time.Millisecond), 1); ok {
		t.Error("admitted beyond the 5 granted in the window")
	}
}

// TestLeaseNewWindowAsksForItsOwnDemand: demand refused during an
// exhausted window does not carry over, so the new window's first call
// asks for what is owed plus twice the new window's demand, not for the
// whole limit (found by cmd/quotabench: with three gfes, one got a
// window's whole limit and the other two's credit went unpaid).
func TestLeaseNewWindowAsksForItsOwnDemand(t *testing.T) {
	l := &Lease{Credit: 1}
	now := t0.Add(10 * time.Second)
	l.Admit(now, 1)
	l.Call(now)
	l.Granted(now, 0, true, 50*time.Second) // exhausted until the turn
	for i := range 100 {                    // refused, counted as demand
		l.Admit(now.Add(time.Duration(i)*100*time.Millisecond), 1)
	}
	turn := t0.Add(Window)
	if ok, _ := l.Admit(turn, 1); !ok {
		t.Fatal("first request of the new window refused")
	}
	if ask, ok := l.Call(turn); !ok || ask != 1+2*1 {
		t.Errorf("first call of the new window = %d, %v; want 1 owed + 2 × 1 demand = 3", ask, ok)
	}
}

// TestLeaseAccuracy is the accuracy target of quota (docs/design.md §7;
// BENCHMARKS.md §6) on the pure parts: 3 gfes, one Allocator, consumers with
// limits of 60 to 6,000 a minute, each offered 10× its limit spread evenly
// over the gfes, every gfe calling at most once a second with the answer one
// 10 ms tick later, and giving 0.5% of the limit (rounded down) on credit at
// the start of a window. Every consumer is admitted between 0.98 and 1.02 of
// its limit in every window.
func TestLeaseAccuracy(t *testing.T) { leaseAccuracy(t, false) }

// TestLeaseAccuracyLeasingAhead is TestLeaseAccuracy with Leases that know
// the limit (SetLimit): the first call of a window leases the whole
// limit, later calls give back what is held beyond twice the demand
// (Ask.Return, applied by the Allocator), and every consumer is still
// admitted between 0.98 and 1.02 of its limit in every window.
func TestLeaseAccuracyLeasingAhead(t *testing.T) { leaseAccuracy(t, true) }

// leaseAccuracy runs TestLeaseAccuracy's deployment; known sets the
// Leases' limits, whose calls then give units back.
func leaseAccuracy(t *testing.T, known bool) {
	limits := []int64{60, 600, 1000, 6000}
	alloc := NewAllocator(func(consumer, _ string) (int64, bool) {
		var l int64
		fmt.Sscan(consumer, &l)
		return l, true
	})
	const gfes, tick = 3, 10 * time.Millisecond
	type pending struct {
		ask Ask
		at  time.Time
	}
	leases := make([][]*Lease, len(limits))
	calls := make([][]*pending, len(limits))
	carry := make([][]float64, len(limits))
	admitted := make([]map[int64]int64, len(limits))
	for c, lim := range limits {
		leases[c] = make([]*Lease, gfes)
		calls[c] = make([]*pending, gfes)
		carry[c] = make([]float64, gfes)
		admitted[c] = map[int64]int64{}
		for g := range leases[c] {
			leases[c][g] = &Lease{Credit: lim / 200} // 0.5% of the limit, rounded down
			if known {
				leases[c][g].SetLimit(lim)
			}
		}
	}
	start := t0
	for step := range int(3 * Window / tick) {
		now := start.Add(time.Duration(step) * tick)
		for c, lim := range limits {
			consumer := fmt.Sprint(lim)
			for g, l := range leases[c] {
				if p := calls[c][g]; p != nil && !now.Before(p.at) {
					req := Request{Consumer: consumer, Mode: ModeBestEffort, Values: []MetricValue{{"m", p.ask.Units}}}
					if p.ask.Return > 0 {
						req.Returned, req.ReturnedWindow = []MetricValue{{"m", p.ask.Return}}, p.ask.Window
					}
					res, err := alloc.Allocate(now, req)
					if err != nil {
						t.Fatal(err)
					}
					l.Granted(now, res.Allocated[0].Value, res.Exhausted, res.RetryAfter)
					calls[c][g] = nil
				}
				// 10× the limit a minute, over gfes, per tick.
				carry[c][g] += float64(10*lim) / gfes * tick.Seconds() / Window.Seconds()
				for ; carry[c][g] >= 1; carry[c][g]-- {
					if ok, _ := l.Admit(now, 1); ok {
						admitted[c][windowOf(now)]++
					}
				}
				var ask Ask
				var ok bool
				if known {
					ask, ok = l.Next(now)
				} else {
					ask.Units, ok = l.Call(now)
				}
				if ok {
					calls[c][g] = &pending{ask: ask, at: now.Add(tick)}
				}
			}
		}
	}
	lo, hi := 2.0, 0.0
	for c, lim := range limits {
		for w, n := range admitted[c] {
			r := float64(n) / float64(lim)
			lo, hi = min(lo, r), max(hi, r)
			if r < 0.98 || r > 1.02 {
				t.Errorf("limit %d: window %d admitted %d (%.3f of the limit), want 0.98..1.02", lim, w-windowOf(start), n, r)
			}
		}
		if len(admitted[c]) != 3 {
			t.Errorf("limit %d: admitted in %d windows, want 3", lim, len(admitted[c]))
		}
	}
	t.Logf("admitted per window over the limit: %.4f to %.4f", lo, hi)
}

func BenchmarkLeaseAdmit(b *testing.B) {
	l := &Lease{}
	l.Granted(t0, 1<<40, false, 0)
	b.ReportAllocs()
	for b.Loop() {
		l.Admit(t0, 1)
	}
}
