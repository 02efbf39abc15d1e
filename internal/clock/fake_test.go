package clock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const defaultTestTimeout = 10 * time.Second

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// recv returns the value waiting on c, or fails the test if there is none.
// The Fake delivers synchronously, so a value is either there or not.
func recv(t *testing.T, c <-chan time.Time) time.Time {
	t.Helper()
	select {
	case v := <-c:
		return v
	default:
		t.Fatal("no value on channel, want one")
		return time.Time{}
	}
}

func empty(t *testing.T, c <-chan time.Time) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("got value %v on channel, want none", v)
	default:
	}
}

func TestFakeAfterFuncOrder(t *testing.T) {
	type arm struct {
		name string
		d    time.Duration
	}
	tests := []struct {
		name    string
		arms    []arm
		steps   []time.Duration // Advance calls
		want    []string        // "name@offset" in firing order
		wantNow time.Duration
	}{
		{
			name:    "deadline order in one advance",
			arms:    []arm{{"c", 3 * time.Second}, {"a", 1 * time.Second}, {"b", 2 * time.Second}},
			steps:   []time.Duration{10 * time.Second},
			want:    []string{"a@1s", "b@2s", "c@3s"},
			wantNow: 10 * time.Second,
		},
		{
			name:    "ties fire in arming order",
			arms:    []arm{{"x", 2 * time.Second}, {"y", 2 * time.Second}, {"z", 2 * time.Second}},
			steps:   []time.Duration{2 * time.Second},
			want:    []string{"x@2s", "y@2s", "z@2s"},
			wantNow: 2 * time.Second,
		},
		{
			name:    "not due yet",
			arms:    []arm{{"a", 5 * time.Second}},
			steps:   []time.Duration{4*time.Second + 999*time.Millisecond},
			want:    nil,
			wantNow: 4*time.Second + 999*time.Millisecond,
		},
		{
			name:    "small steps",
			arms:    []arm{{"b", 2 * time.Second}, {"a", 1 * time.Second}},
			steps:   []time.Duration{time.Second, 0, time.Second, time.Second},
			want:    []string{"a@1s", "b@2s"},
			wantNow: 3 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake(epoch)
			var got []string
			for _, a := range tt.arms {
				f.AfterFunc(a.d, func() { got = append(got, a.name+"@"+f.Since(epoch).String()) })
			}
			for _, s := range tt.steps {
				f.Advance(s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("firing order (-want +got):\n%s", diff)
			}
			if got := f.Since(epoch); got != tt.wantNow {
				t.Errorf("Since(start) = %v, want %v", got, tt.wantNow)
			}
		})
	}
}

func TestFakeAfterFuncRearmsWithinAdvance(t *testing.T) {
	f := NewFake(epoch)
	var fired []time.Duration
	var tm Timer
	tm = f.AfterFunc(3*time.Second, func() {
		fired = append(fired, f.Since(epoch))
		tm.Reset(3 * time.Second)
	})
	f.Advance(10 * time.Second)
	want := []time.Duration{3 * time.Second, 6 * time.Second, 9 * time.Second}
	if diff := cmp.Diff(want, fired); diff != "" {
		t.Errorf("self re-arming AfterFunc fired at (-want +got):\n%s", diff)
	}
	if got := f.Waiters(); got != 1 {
		t.Errorf("Waiters() = %d, want 1 (re-armed for 12s)", got)
	}
	if !tm.Stop() {
		t.Errorf("Stop() = false, want true for an armed timer")
	}
	f.Advance(10 * time.Second)
	if len(fired) != 3 {
		t.Errorf("fired %d times after Stop, want 3", len(fired))
	}
}

func TestFakeTimerChannel(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(5 * time.Second)
	if got := f.Waiters(); got != 1 {
		t.Fatalf("Waiters() = %d, want 1", got)
	}
	f.Advance(4 * time.Second)
	empty(t, tm.C())
	f.Advance(time.Second)
	if got, want := recv(t, tm.C()), epoch.Add(5*time.Second); !got.Equal(want) {
		t.Errorf("timer sent %v, want %v", got, want)
	}
	if got := f.Waiters(); got != 0 {
		t.Errorf("Waiters() after firing = %d, want 0", got)
	}
	f.Advance(time.Hour)
	empty(t, tm.C())
}

func TestFakeTimerStopReset(t *testing.T) {
	tests := []struct {
		name string
		// run acts on a timer armed for 10s on a fresh clock and returns
		// the Stop/Reset result.
		run         func(f *Fake, tm Timer) bool
		want        bool
		wantWaiters int
		// After the run, advance by this much and expect a value at
		// wantFire (offset from epoch), or none if wantFire is 0.
		then     time.Duration
		wantFire time.Duration
		// wantNow: the run left a value sent at epoch in the channel.
		wantNow bool
	}{
		{
			name:        "stop pending",
			run:         func(f *Fake, tm Timer) bool { return tm.Stop() },
			want:        true,
			wantWaiters: 0,
			then:        time.Hour,
		},
		{
			name: "stop twice",
			run: func(f *Fake, tm Timer) bool {
				tm.Stop()
				return tm.Stop()
			},
			want: false,
			then: time.Hour,
		},
		{
			name: "stop after fire and receive",
			run: func(f *Fake, tm Timer) bool {
				f.Advance(10 * time.Second)
				<-tm.C()
				return tm.Stop()
			},
			want: false,
			then: time.Hour,
		},
		{
			name: "stop after fire, value not received, drains it",
			run: func(f *Fake, tm Timer) bool {
				f.Advance(10 * time.Second)
				return tm.Stop()
			},
			want: true,
			then: time.Hour,
		},
		{
			name: "reset pending moves deadline",
			run: func(f *Fake, tm Timer) bool {
				f.Advance(5 * time.Second)
				return tm.Reset(20 * time.Second)
			},
			want:        true,
			wantWaiters: 1,
			then:        30 * time.Second,
			wantFire:    25 * time.Second,
		},
		{
			name: "reset after fire re-arms and drops stale value",
			run: func(f *Fake, tm Timer) bool {
				f.Advance(10 * time.Second)
				return tm.Reset(time.Second)
			},
			want:        true,
			wantWaiters: 1,
			then:        time.Second,
			wantFire:    11 * time.Second,
		},
		{
			name: "reset stopped timer",
			run: func(f *Fake, tm Timer) bool {
				tm.Stop()
				return tm.Reset(2 * time.Second)
			},
			want:        false,
			wantWaiters: 1,
			then:        2 * time.Second,
			wantFire:    2 * time.Second,
		},
		{
			name: "reset to zero fires at once",
			run: func(f *Fake, tm Timer) bool {
				return tm.Reset(0)
			},
			want:        true,
			wantWaiters: 0,
			wantNow:     true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake(epoch)
			tm := f.NewTimer(10 * time.Second)
			if got := tt.run(f, tm); got != tt.want {
				t.Errorf("result = %v, want %v", got, tt.want)
			}
			if got := f.Waiters(); got != tt.wantWaiters {
				t.Errorf("Waiters() = %d, want %d", got, tt.wantWaiters)
			}
			if tt.wantNow {
				if got := recv(t, tm.C()); !got.Equal(epoch) {
					t.Errorf("Reset(0) sent %v, want %v", got, epoch)
				}
				return
			}
			empty(t, tm.C())
			f.Advance(tt.then)
			if tt.wantFire == 0 {
				empty(t, tm.C())
				return
			}
			if got, want := recv(t, tm.C()), epoch.Add(tt.wantFire); !got.Equal(want) {
				t.Errorf("timer sent %v, want %v", got, want)
			}
		})
	}
}

func TestFakeTicker(t *testing.T) {
	f := NewFake(epoch)
	tk := f.NewTicker(time.Second)
	for i := 1; i <= 5; i++ {
		f.Advance(time.Second)
		if got, want := recv(t, tk.C()), epoch.Add(time.Duration(i)*time.Second); !got.Equal(want) {
			t.Fatalf("tick %d = %v, want %v", i, got, want)
		}
		empty(t, tk.C())
	}
	if got := f.Waiters(); got != 1 {
		t.Errorf("Waiters() with a live ticker = %d, want 1", got)
	}

	// A slow reader: ten periods pass, one tick is kept, the rest dropped,
	// and the schedule stays on the period grid.
	f.Advance(10*time.Second + 500*time.Millisecond)
	if got, want := recv(t, tk.C()), epoch.Add(6*time.Second); !got.Equal(want) {
		t.Errorf("buffered tick = %v, want %v (the first one due)", got, want)
	}
	empty(t, tk.C())
	f.Advance(500 * time.Millisecond)
	if got, want := recv(t, tk.C()), epoch.Add(16*time.Second); !got.Equal(want) {
		t.Errorf("next tick = %v, want %v", got, want)
	}

	// Reset changes the period, counted from the Reset.
	tk.Reset(3 * time.Second)
	f.Advance(2 * time.Second)
	empty(t, tk.C())
	f.Advance(time.Second)
	if got, want := recv(t, tk.C()), epoch.Add(19*time.Second); !got.Equal(want) {
		t.Errorf("tick after Reset = %v, want %v", got, want)
	}

	tk.Stop()
	if got := f.Waiters(); got != 0 {
		t.Errorf("Waiters() after Stop = %d, want 0", got)
	}
	f.Advance(time.Minute)
	empty(t, tk.C())
}

func TestFakeTickerStopDrains(t *testing.T) {
	f := NewFake(epoch)
	tk := f.NewTicker(time.Second)
	f.Advance(time.Second)
	tk.Stop()
	empty(t, tk.C())
}

func TestFakeTickerPanicsOnNonPositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewTicker(%v) did not panic", d)
				}
			}()
			NewFake(epoch).NewTicker(d)
		}()
	}
}

func TestFakeAfterFuncSeesDeadlineAndMayUseClock(t *testing.T) {
	f := NewFake(epoch)
	var sawNow time.Time
	var inner Timer
	f.AfterFunc(2*time.Second, func() {
		sawNow = f.Now()
		// Calling back into the clock from fn must not deadlock.
		inner = f.NewTimer(time.Second)
	})
	f.Advance(5 * time.Second)
	if want := epoch.Add(2 * time.Second); !sawNow.Equal(want) {
		t.Errorf("Now() inside AfterFunc = %v, want %v", sawNow, want)
	}
	// The inner timer was armed at 2s for 3s, inside the same Advance.
	if got, want := recv(t, inner.C()), epoch.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("inner timer sent %v, want %v", got, want)
	}
}

func TestFakeAfterFuncStop(t *testing.T) {
	f := NewFake(epoch)
	n := 0
	tm := f.AfterFunc(time.Second, func() { n++ })
	if tm.C() != nil {
		t.Errorf("AfterFunc timer C() = %v, want nil", tm.C())
	}
	if !tm.Stop() {
		t.Errorf("Stop() = false, want true")
	}
	f.Advance(time.Minute)
	if n != 0 {
		t.Errorf("stopped AfterFunc ran %d times, want 0", n)
	}
	tm.Reset(time.Second)
	f.Advance(time.Second)
	if n != 1 {
		t.Errorf("re-armed AfterFunc ran %d times, want 1", n)
	}
	if tm.Stop() {
		t.Errorf("Stop() after it ran = true, want false")
	}
}

func TestFakeAfterFuncZeroRunsInGoroutine(t *testing.T) {
	f := NewFake(epoch)
	done := make(chan struct{})
	f.AfterFunc(0, func() { close(done) })
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("AfterFunc(0) never ran")
	}
}

func TestFakeZeroTimerFiresAtOnce(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(-time.Second)
	if got := recv(t, tm.C()); !got.Equal(epoch) {
		t.Errorf("NewTimer(-1s) sent %v, want %v", got, epoch)
	}
	if got := f.Waiters(); got != 0 {
		t.Errorf("Waiters() = %d, want 0", got)
	}
}

func TestFakeAdvanceToNeverGoesBack(t *testing.T) {
	f := NewFake(epoch)
	f.AdvanceTo(epoch.Add(time.Hour))
	f.AdvanceTo(epoch)
	f.Advance(-time.Minute)
	if got, want := f.Now(), epoch.Add(time.Hour); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
}

func TestFakeBlockUntil(t *testing.T) {
	f := NewFake(epoch)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()

	// A worker that arms a timer, waits for it, and arms the next: the
	// shape of every loop that takes a Clock.
	const rounds = 3
	ticks := make(chan time.Time, rounds)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			tm := f.NewTimer(time.Second)
			ticks <- <-tm.C()
		}
	}()
	for i := 1; i <= rounds; i++ {
		if err := f.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("BlockUntil(1) before round %d: %v", i, err)
		}
		f.Advance(time.Second)
		if got, want := <-ticks, epoch.Add(time.Duration(i)*time.Second); !got.Equal(want) {
			t.Errorf("round %d fired at %v, want %v", i, got, want)
		}
	}
	wg.Wait()

	// Nothing will arm a timer now: BlockUntil gives up with ctx.
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if err := f.BlockUntil(short, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("BlockUntil on a cancelled ctx = %v, want %v", err, context.Canceled)
	}
	if err := f.BlockUntil(short, 0); err != nil {
		t.Errorf("BlockUntil(0) = %v, want nil", err)
	}
}

// TestFakeConcurrent exercises the Fake from many goroutines at once; it
// asserts counts, and -race checks the locking.
func TestFakeConcurrent(t *testing.T) {
	f := NewFake(epoch)
	const workers, perWorker = 8, 50
	var mu sync.Mutex
	ran := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				d := time.Duration(1+(w*perWorker+i)%10) * time.Millisecond
				f.AfterFunc(d, func() {
					mu.Lock()
					ran++
					mu.Unlock()
				})
				tm := f.NewTimer(d)
				tm.Stop()
				_ = f.Now()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			f.Advance(time.Millisecond)
		}
	}()
	wg.Wait()
	f.Advance(time.Second) // fire whatever was armed after the advancer finished
	if ran != workers*perWorker {
		t.Errorf("AfterFunc ran %d times, want %d", ran, workers*perWorker)
	}
	if got := f.Waiters(); got != 0 {
		t.Errorf("Waiters() = %d, want 0", got)
	}
}

func TestOrReal(t *testing.T) {
	if _, ok := OrReal(nil).(Real); !ok {
		t.Errorf("OrReal(nil) = %T, want Real", OrReal(nil))
	}
	f := NewFake(epoch)
	if got := OrReal(f); got != Clock(f) {
		t.Errorf("OrReal(f) = %v, want f", got)
	}
}

func TestRealClock(t *testing.T) {
	var c Clock = Real{}
	start := c.Now()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()

	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-ctx.Done():
		t.Fatal("real timer never fired")
	}
	if tm.Stop() {
		t.Errorf("Stop() after receive = true, want false")
	}

	tk := c.NewTicker(time.Millisecond)
	for range 2 {
		select {
		case <-tk.C():
		case <-ctx.Done():
			t.Fatal("real ticker never ticked")
		}
	}
	tk.Stop()

	done := make(chan struct{})
	af := c.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("real AfterFunc never ran")
	}
	if af.C() != nil {
		t.Errorf("AfterFunc C() != nil")
	}
	if got := c.Since(start); got < 3*time.Millisecond {
		t.Errorf("Since(start) = %v, want >= 3ms after three 1ms waits", got)
	}
}
