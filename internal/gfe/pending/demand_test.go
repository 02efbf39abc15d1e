package pending

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway-lb/spillway/internal/clock"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// TestCanceledWaitersAskNoCapacity replays the attack of the second
// security review on the queue and its Asker: for three seconds, every
// 5 ms round ten requests join a service's line and are canceled 50 ms
// later (HTTP/2 HEADERS then RST_STREAM), so that about a hundred of them
// wait at any moment, next to three requests that really wait. Every
// capacity request counts the three alone: 1 + ceil(3/1) = 4 instances,
// "3 requests pending", one per second from the moment they settled.
// Without the settle rule each asked for about a hundred instances more.
func TestCanceledWaitersAskNoCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		cp := &fakeCP{resp: &pb.CapacityResponse{Granted: true}}
		a := newTestAsker(clk, cp, Target{Group: "g", Instances: 1, Healthy: 1, MaxConcurrency: 1})
		q := New(DefaultConfig(), Options{Clock: clk, Asker: a})
		busy := func() bool { return false }
		ticket := func() Ticket {
			return Ticket{Service: "web", Since: clk.Now(), Deadline: clk.Now().Add(time.Minute), Try: busy}
		}
		live := waitAll(context.Background(), q, ticket(), ticket(), ticket())

		const (
			perRound = 10
			lifetime = 50 * time.Millisecond
			rounds   = 600 // 3 s of 5 ms rounds
		)
		type attacker struct {
			cancel context.CancelFunc
			until  time.Time
		}
		var (
			flood    []attacker
			canceled atomic.Int64
			maxLive  int64
		)
		for r := range rounds {
			clk.AdvanceTo(t0.Add(time.Duration(r) * DefaultPoll))
			now := clk.Now()
			kept := flood[:0]
			for _, at := range flood {
				if now.Before(at.until) {
					kept = append(kept, at)
					continue
				}
				at.cancel() // the client resets its stream
			}
			flood = kept
			for range perRound {
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					if q.Wait(ctx, ticket()) == Canceled {
						canceled.Add(1)
					}
				}()
				flood = append(flood, attacker{cancel: cancel, until: now.Add(lifetime)})
			}
			synctest.Wait()
			maxLive = max(maxLive, q.Waiting())
			q.Step(now)
			a.Step(context.Background(), now, q.Lines(now))
			synctest.Wait()
		}
		for _, at := range flood {
			at.cancel()
		}
		synctest.Wait()
		if n := canceled.Load(); n != rounds*perRound {
			t.Errorf("%d flood requests canceled, want %d", n, rounds*perRound)
		}
		if maxLive < 3+perRound {
			t.Fatalf("at most %d requests waited at once, want the flood's too", maxLive)
		}
		cp.mu.Lock()
		reqs := cp.reqs
		cp.mu.Unlock()
		var got []string
		for _, r := range reqs {
			got = append(got, fmt.Sprintf("%d instances, %s", r.GetWantedInstances(), r.GetDetail()))
		}
		// The three settle at 100 ms (DefaultSettle), then one request a
		// second (AskConfig.Interval): at 0.1 s, 1.1 s and 2.1 s.
		want := []string{"4 instances, 3 requests pending for 0.1s", "4 instances, 3 requests pending for 1.1s", "4 instances, 3 requests pending for 2.1s"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("capacity requests under a flood of canceled waiters (at most %d waiting at once):\n got %q\nwant %q", maxLive, got, want)
		}
		if got := testutil.ToFloat64(a.total.WithLabelValues("web", "g", "granted")); got != 3 {
			t.Errorf("capacity_requests_total{granted} = %v, want 3", got)
		}
		q.stop()
		for range 3 {
			if r := <-live; r != Rejected {
				t.Errorf("a live waiter ended %v when the queue stopped, want rejected", r)
			}
		}
		a.Wait()
	})
}

// TestLinesCountSettledWaiters: a waiter counts in Lines once it has
// waited Config.Settle (or half its wait, if shorter) with its client
// still there — it is asked when it settles, even behind a blocked head —
// and stops counting the moment it is canceled.
func TestLinesCountSettledWaiters(t *testing.T) {
	tests := []struct {
		name     string
		wait     time.Duration // Deadline - Since
		gone     bool          // the client goes away after the first round
		settleAt time.Duration // the first round at which it counts; 0: never
	}{
		{name: "default settle", wait: time.Minute, settleAt: DefaultSettle},
		{name: "a short wait settles at its half", wait: 60 * time.Millisecond, settleAt: 30 * time.Millisecond},
		{name: "a client gone before it settles never counts", wait: 60 * time.Millisecond, gone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clock.NewFake(t0)
				q := New(DefaultConfig(), Options{Clock: clk})
				ctx, cancel := context.WithCancel(context.Background())
				var gone atomic.Bool
				// The head blocks the line and settles at 100 ms only: tk,
				// behind it, is asked Gone every GoneEvery, and when it
				// settles.
				busy := func() bool { return false }
				head := Ticket{Service: "web", Since: t0, Deadline: t0.Add(time.Hour), Try: busy}
				tk := Ticket{Service: "web", Since: t0, Deadline: t0.Add(tt.wait), Try: busy, Gone: gone.Load}
				res := waitAll(ctx, q, head, tk)
				q.Step(t0) // tk asked once (never before): there
				gone.Store(tt.gone)
				counted := time.Duration(0)
				for at := DefaultPoll; at < tt.wait && at < DefaultSettle && counted == 0; at += DefaultPoll {
					clk.AdvanceTo(t0.Add(at))
					q.Step(clk.Now())
					if l := q.Lines(clk.Now()); len(l) == 1 && l[0].Waiting == 1 {
						counted = at
						if l[0].Oldest != at {
							t.Errorf("Lines()[0].Oldest = %v, want %v", l[0].Oldest, at)
						}
					}
				}
				if counted == 0 && tt.settleAt == DefaultSettle {
					clk.AdvanceTo(t0.Add(DefaultSettle))
					q.Step(clk.Now())
					if l := q.Lines(clk.Now()); len(l) == 1 && l[0].Waiting == 2 {
						counted = DefaultSettle
					}
				}
				if counted != tt.settleAt {
					t.Errorf("counted in Lines from +%v, want +%v (0: never)", counted, tt.settleAt)
				}
				left := 2
				if tt.gone {
					if r := <-res; r != Canceled {
						t.Errorf("a gone client's wait = %v, want canceled", r)
					}
					left--
				}
				cancel()
				for range left {
					<-res
				}
				if l := q.Lines(clk.Now()); len(l) != 0 {
					t.Errorf("Lines after every waiter was canceled = %+v, want none", l)
				}
			})
		})
	}
}

// TestFull: a line holds at most its Ticket.Limit waiters and the queue at
// most Config.MaxWaiting; a request beyond either does not wait (Full, at
// once), is not counted as waiting, and is counted by bound.
func TestFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		q := New(Config{MaxWaiting: 3}, Options{Clock: clk})
		ctx, cancel := context.WithCancel(context.Background())
		var count atomic.Int64
		tk := func(service string) Ticket {
			return Ticket{Service: service, Since: t0, Deadline: t0.Add(time.Minute), Try: func() bool { return false }, Count: &count, Limit: 2}
		}
		res := waitAll(ctx, q, tk("web"), tk("web"))
		if r := q.Wait(ctx, tk("web")); r != Full {
			t.Errorf("a third request of a line limited to 2 = %v, want full", r)
		}
		other := waitAll(ctx, q, tk("api"))
		if r := q.Wait(ctx, tk("api")); r != Full {
			t.Errorf("a fourth request with MaxWaiting 3 = %v, want full", r)
		}
		if got, c := q.Waiting(), count.Load(); got != 3 || c != 3 {
			t.Errorf("Waiting() = %d, Count = %d; want 3, 3 (the refused ones never waited)", got, c)
		}
		for _, c := range []struct {
			service, bound string
			want           float64
		}{{"web", "service", 1}, {"api", "total", 1}, {"web", "total", 0}, {"api", "service", 0}} {
			if got := testutil.ToFloat64(q.metrics.full.WithLabelValues(c.service, c.bound)); got != c.want {
				t.Errorf("spillway_gfe_pending_full_total{%s,%s} = %v, want %v", c.service, c.bound, got, c.want)
			}
		}
		if n, _ := histCount(t, q, "web", "full"); n != 0 {
			t.Errorf("wait histogram{full} = %d samples, want 0: a refused request did not wait", n)
		}
		cancel()
		for range 2 {
			<-res
		}
		<-other
		again := waitAll(context.Background(), q, Ticket{Service: "web", Since: t0, Deadline: t0.Add(time.Minute), Try: func() bool { return true }, Limit: 2})
		q.Step(t0)
		if r := <-again; r != Served {
			t.Errorf("a request once the line emptied = %v, want served", r)
		}
	})
}
