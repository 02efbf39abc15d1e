package pending

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/spillway-lb/spillway/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// slots is a fake backend pool: Try takes a free slot and records who got
// it.
type slots struct {
	free  atomic.Int64
	tries atomic.Int64
	order chan int
}

func (s *slots) try(id int) func() bool {
	return func() bool {
		s.tries.Add(1)
		if s.free.Load() <= 0 {
			return false
		}
		s.free.Add(-1)
		s.order <- id
		return true
	}
}

// waitAll starts a Wait per ticket, one after the other (each has joined
// its line before the next starts), and returns their results' channel.
func waitAll(ctx context.Context, q *Queue, tickets ...Ticket) <-chan Result {
	out := make(chan Result, len(tickets))
	for _, tk := range tickets {
		go func() { out <- q.Wait(ctx, tk) }()
		synctest.Wait()
	}
	return out
}

// histCount returns the sample count of the wait histogram for service
// and result.
func histCount(t *testing.T, q *Queue, service, result string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := q.metrics.wait.WithLabelValues(service, result).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		q := New(Config{}, Options{Clock: clk})
		s := &slots{order: make(chan int, 3)}
		var count atomic.Int64
		tk := func(id int) Ticket {
			return Ticket{Service: "web", Since: clk.Now(), Deadline: t0.Add(10 * time.Second), Try: s.try(id), Count: &count}
		}
		res := waitAll(context.Background(), q, tk(1), tk(2), tk(3))
		if got := count.Load(); got != 3 {
			t.Fatalf("Count = %d, want 3", got)
		}
		if got := testutil.ToFloat64(q.metrics.depth.WithLabelValues("web")); got != 3 {
			t.Errorf("spillway_gfe_pending_requests{web} = %v, want 3", got)
		}

		clk.Advance(100 * time.Millisecond)
		q.Step(clk.Now()) // nothing free: only the head is tried
		if got := s.tries.Load(); got != 1 {
			t.Errorf("tries with no slot = %d, want 1 (the head only)", got)
		}
		s.free.Store(1)
		q.Step(clk.Now())
		synctest.Wait()
		if got, want := <-s.order, 1; got != want {
			t.Errorf("first served = %d, want %d", got, want)
		}
		if got := q.Waiting(); got != 2 {
			t.Errorf("Waiting() = %d, want 2", got)
		}
		s.free.Store(2)
		q.Step(clk.Now())
		for _, want := range []int{2, 3} {
			if got := <-s.order; got != want {
				t.Errorf("served %d, want %d", got, want)
			}
		}
		for range 3 {
			if r := <-res; r != Served {
				t.Errorf("Wait() = %v, want served", r)
			}
		}
		if got := count.Load(); got != 0 {
			t.Errorf("Count after = %d, want 0", got)
		}
		if n, sum := histCount(t, q, "web", "served"); n != 3 || math.Abs(sum-0.3) > 1e-9 {
			t.Errorf("wait histogram{served} = %d samples, sum %v; want 3, 0.3", n, sum)
		}
		if got := testutil.ToFloat64(q.metrics.depth.WithLabelValues("web")); got != 0 {
			t.Errorf("spillway_gfe_pending_requests{web} = %v, want 0", got)
		}
	})
}

// TestBlockedBehindHead: a waiter whose Try would succeed is not tried in
// a round where the one ahead of it failed.
func TestBlockedBehindHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		q := New(Config{}, Options{Clock: clk})
		var secondTried atomic.Bool
		head := Ticket{Service: "web", Since: t0, Deadline: t0.Add(time.Second), Try: func() bool { return false }}
		second := Ticket{Service: "web", Since: t0, Deadline: t0.Add(time.Second), Try: func() bool { secondTried.Store(true); return true }}
		other := Ticket{Service: "api", Since: t0, Deadline: t0.Add(time.Second), Try: func() bool { return true }}
		res := waitAll(context.Background(), q, head, second)
		other1 := waitAll(context.Background(), q, other)
		q.Step(t0)
		if r := <-other1; r != Served {
			t.Errorf("another service's waiter = %v, want served (lines are independent)", r)
		}
		if secondTried.Load() {
			t.Error("second waiter tried in a round where the head failed")
		}
		if got := q.Waiting(); got != 2 {
			t.Errorf("Waiting() = %d, want 2", got)
		}
		q.Step(t0.Add(time.Second)) // both past the deadline: rejected
		for range 2 {
			if r := <-res; r != Rejected {
				t.Errorf("Wait() = %v, want rejected", r)
			}
		}
	})
}

func TestDeadline(t *testing.T) {
	tests := []struct {
		name string
		at   time.Duration // Step at t0+at
		want int64         // waiting after
	}{
		{name: "before the deadline", at: 299 * time.Millisecond, want: 1},
		{name: "at the deadline", at: 300 * time.Millisecond, want: 0},
		{name: "after it", at: 305 * time.Millisecond, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clock.NewFake(t0)
				q := New(Config{}, Options{Clock: clk})
				res := waitAll(context.Background(), q, Ticket{Service: "web", Since: t0, Deadline: t0.Add(300 * time.Millisecond), Try: func() bool { return false }})
				q.Step(t0.Add(tt.at))
				if got := q.Waiting(); got != tt.want {
					t.Fatalf("Waiting() after Step(+%v) = %d, want %d", tt.at, got, tt.want)
				}
				if tt.want == 0 {
					if r := <-res; r != Rejected {
						t.Errorf("Wait() = %v, want rejected", r)
					}
					if n, sum := histCount(t, q, "web", "rejected"); n != 1 || sum != tt.at.Seconds() {
						t.Errorf("wait histogram{rejected} = %d samples, sum %v; want 1, %v", n, sum, tt.at.Seconds())
					}
				}
				q.Step(t0.Add(time.Second)) // let a waiter left go
			})
		})
	}
}

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		q := New(Config{}, Options{Clock: clk})
		ctx, cancel := context.WithCancel(context.Background())
		var tries atomic.Int64
		var count atomic.Int64
		res := waitAll(ctx, q, Ticket{Service: "web", Since: t0, Deadline: t0.Add(time.Second), Count: &count,
			Try: func() bool { tries.Add(1); return false }})
		q.Step(t0)
		clk.Advance(40 * time.Millisecond)
		cancel()
		if r := <-res; r != Canceled {
			t.Fatalf("Wait() = %v, want canceled", r)
		}
		q.Step(clk.Now())
		if got := tries.Load(); got != 1 {
			t.Errorf("tries = %d, want 1 (none after the cancel)", got)
		}
		if got, c := q.Waiting(), count.Load(); got != 0 || c != 0 {
			t.Errorf("Waiting() = %d, Count = %d after cancel, want 0, 0", got, c)
		}
		if n, sum := histCount(t, q, "web", "canceled"); n != 1 || sum != 0.04 {
			t.Errorf("wait histogram{canceled} = %d samples, sum %v; want 1, 0.04", n, sum)
		}
		if n, _ := histCount(t, q, "web", "served"); n != 0 {
			t.Errorf("wait histogram{served} = %d samples, want 0", n)
		}
	})
}

// TestGone: a waiter whose client went away (Gone) is canceled before it
// is tried, and the slot goes to the next one; a waiter behind a blocked
// head is asked every GoneEvery.
func TestGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		q := New(Config{}, Options{Clock: clk})
		s := &slots{order: make(chan int, 3)}
		var gone [3]atomic.Bool
		var asked [3]atomic.Int64
		tk := func(id int) Ticket {
			return Ticket{Service: "web", Since: t0, Deadline: t0.Add(10 * time.Second), Try: s.try(id),
				Gone: func() bool { asked[id].Add(1); return gone[id].Load() }}
		}
		res := waitAll(context.Background(), q, tk(0), tk(1), tk(2))
		q.Step(t0) // no slot: the head is asked and tried, the others asked once (never before)
		if got := [3]int64{asked[0].Load(), asked[1].Load(), asked[2].Load()}; got != [3]int64{1, 1, 1} {
			t.Errorf("Gone asked %v times, want [1 1 1]", got)
		}
		clk.Advance(50 * time.Millisecond)
		q.Step(clk.Now()) // within GoneEvery: only the head is asked
		if got := [3]int64{asked[0].Load(), asked[1].Load(), asked[2].Load()}; got != [3]int64{2, 1, 1} {
			t.Errorf("Gone asked %v times after 50ms, want [2 1 1]", got)
		}
		gone[0].Store(true)
		gone[2].Store(true)
		s.free.Store(1)
		clk.Advance(50 * time.Millisecond)
		q.Step(clk.Now())
		if got := <-s.order; got != 1 {
			t.Errorf("the slot went to %d, want 1 (0 is gone)", got)
		}
		results := map[Result]int{}
		for range 3 {
			results[<-res]++
		}
		if results[Served] != 1 || results[Canceled] != 2 {
			t.Errorf("results %v, want 1 served and 2 canceled", results)
		}
		if n, _ := histCount(t, q, "web", "canceled"); n != 2 {
			t.Errorf("wait histogram{canceled} = %d samples, want 2", n)
		}
	})
}

// TestRun: Run polls every Poll while requests wait, runs a round at once
// on Kick (a new table), and rejects the waiters left when it stops, and
// any later one at once.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		q := New(Config{Poll: 5 * time.Millisecond}, Options{Clock: clk})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- q.Run(ctx) }()
		var free atomic.Bool
		var tries atomic.Int64
		try := func() bool { tries.Add(1); return free.Load() }
		res := waitAll(context.Background(), q, Ticket{Service: "web", Since: t0, Deadline: t0.Add(time.Second), Try: try})
		if got := tries.Load(); got != 1 {
			t.Fatalf("tries after joining = %d, want 1 (joining kicks a round)", got)
		}
		for range 4 {
			clk.Advance(5 * time.Millisecond)
			synctest.Wait()
		}
		if got := tries.Load(); got != 5 {
			t.Errorf("tries after 4 polls = %d, want 5", got)
		}
		free.Store(true)
		q.Kick()
		if r := <-res; r != Served {
			t.Errorf("Wait() after Kick = %v, want served", r)
		}
		synctest.Wait()
		n := tries.Load()
		clk.Advance(time.Second) // nobody waits: no round
		synctest.Wait()
		if got := tries.Load(); got != n {
			t.Errorf("tries while nobody waits went from %d to %d", n, got)
		}
		free.Store(false)
		left := waitAll(context.Background(), q, Ticket{Service: "web", Since: clk.Now(), Deadline: clk.Now().Add(time.Hour), Try: try})
		stop()
		if r := <-left; r != Rejected {
			t.Errorf("Wait() when Run stops = %v, want rejected", r)
		}
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
		if r := q.Wait(context.Background(), Ticket{Service: "web", Since: clk.Now(), Deadline: clk.Now().Add(time.Hour), Try: try}); r != Rejected {
			t.Errorf("Wait() after Run returned = %v, want rejected at once", r)
		}
		if n, _ := histCount(t, q, "web", "rejected"); n != 2 {
			t.Errorf("wait histogram{rejected} = %d samples, want 2", n)
		}
	})
}

// BenchmarkStep measures one round over lines of waiters whose head finds
// no free backend: the cost of polling while requests wait (one Try per
// line, a deadline check per waiter).
func BenchmarkStep(b *testing.B) {
	for _, bc := range []struct{ lines, waiters int }{{1, 1}, {1, 100}, {100, 100}} {
		b.Run(fmt.Sprintf("lines=%d/waiters=%d", bc.lines, bc.waiters), func(b *testing.B) {
			q := New(Config{}, Options{Clock: clock.NewFake(t0)})
			busy := func() bool { return false }
			for l := range bc.lines {
				name := fmt.Sprintf("svc-%d", l)
				for range bc.waiters {
					w := &waiter{Ticket: Ticket{Service: name, Since: t0, Deadline: t0.Add(time.Hour), Try: busy}, done: make(chan struct{})}
					q.lines[name] = append(q.lines[name], w)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				q.Step(t0)
			}
		})
	}
}
