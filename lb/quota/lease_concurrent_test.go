package quota

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// admitAll runs goroutines goroutines, each asking l to admit attempts
// requests of cost at the time now() returns, and returns the units
// admitted in all.
func admitAll(l *Lease, goroutines, attempts int, cost int64, now func() time.Time) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for range attempts {
				if ok, _ := l.Admit(now(), cost); ok {
					admitted.Add(cost)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted.Load()
}

// TestLeaseConcurrent: many goroutines admitting from one Lease at once
// take exactly what the Lease has to give — its credit before a grant, its
// budget after, each window's credit once — never a unit more or less
// (run it with -race: admission takes no lock).
func TestLeaseConcurrent(t *testing.T) {
	const goroutines, attempts = 64, 200 // 12,800 requests, far more than any allowance
	at := func(t time.Time) func() time.Time { return func() time.Time { return t } }
	now := t0.Add(10 * time.Second)
	for _, tt := range []struct {
		name  string
		setup func(l *Lease)
		cost  int64
		now   time.Time
		want  int64
	}{
		{"credit only", func(*Lease) {}, 1, now, 700},
		{"credit, cost 3", func(*Lease) {}, 3, now, 699}, // 233 × 3; 1 unit of credit left
		{"granted budget", func(l *Lease) {
			l.Admit(now, 700) // all the credit, owed
			l.Call(now)
			l.Granted(now, 5700, false, 0) // pays 700, budget 5000
		}, 1, now, 5000},
		{"granted budget, cost 7", func(l *Lease) {
			l.Admit(now, 700)
			l.Call(now)
			l.Granted(now, 5700, false, 0)
		}, 7, now, 4998}, // 714 × 7
		{"next window: the old budget dropped, credit again", func(l *Lease) {
			l.Admit(now, 700)
			l.Call(now)
			l.Granted(now, 1_000_000, false, 0)
		}, 1, t0.Add(Window + time.Second), 700},
		{"exhausted: nothing", func(l *Lease) {
			l.Admit(now, 700)
			l.Call(now)
			l.Granted(now, 0, true, 50*time.Second)
		}, 1, now.Add(time.Second), 0},
		{"failing open: everything", func(l *Lease) {
			l.Admit(now, 700)
			l.Call(now)
			l.Failed()
		}, 1, now, goroutines * attempts},
		{"denied: nothing", func(l *Lease) {
			l.Admit(now, 700)
			l.Call(now)
			l.Denied()
		}, 1, now, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &Lease{Credit: 700}
			tt.setup(l)
			if got := admitAll(l, goroutines, attempts, tt.cost, at(tt.now)); got != tt.want {
				t.Errorf("admitted %d units, want %d", got, tt.want)
			}
		})
	}
}

// TestLeaseConcurrentGrants: admissions of costs 1 to 3 from 32
// goroutines race with a caller that calls and is granted every second of
// a window (as the gfe's Run loop does). With no credit, every unit
// admitted comes from a grant: admitted + the budget left = granted,
// exactly.
func TestLeaseConcurrentGrants(t *testing.T) {
	l := &Lease{}
	var clock atomic.Int64 // ns since t0
	now := func() time.Time { return t0.Add(time.Duration(clock.Load())) }
	var stop atomic.Bool
	var admitted, requests atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				cost := int64(1 + (g+i)%3)
				requests.Add(1)
				if ok, _ := l.Admit(now(), cost); ok {
					admitted.Add(cost)
				}
			}
		})
	}
	var granted int64
	for sec := range 60 {
		for requests.Load() < int64(sec)*500 { // let the admitters spend the budget
			runtime.Gosched()
		}
		clock.Store(int64(time.Duration(sec) * time.Second))
		ask, ok := l.Call(now())
		for !ok { // no demand since the last call yet
			l.Want(now(), 1)
			ask, ok = l.Call(now())
		}
		g := min(ask, 997) // a stingy service: the admitters run short
		l.Granted(now(), g, false, 0)
		granted += g
	}
	stop.Store(true)
	wg.Wait()
	left := availOf(l.state.Load())
	if admitted.Load()+left != granted {
		t.Errorf("admitted %d + left %d = %d units, want exactly the %d granted", admitted.Load(), left, admitted.Load()+left, granted)
	}
	t.Logf("%d requests: granted %d units, admitted %d, left %d", requests.Load(), granted, admitted.Load(), left)
}

// TestLeaseStateWord: the packed state's limits. A grant beyond MaxBudget
// is held as MaxBudget; the window tag rolls over its 2^22 wrap like any
// other window turn; a time up to 2^21 windows back counts in the
// current window (no roll back).
func TestLeaseStateWord(t *testing.T) {
	l := &Lease{Credit: 1}
	now := t0.Add(time.Second)
	l.Admit(now, 1)
	l.Call(now)
	l.Granted(now, MaxBudget+1+5, false, 0) // pays 1
	if got := availOf(l.state.Load()); got != MaxBudget {
		t.Errorf("budget after a grant of MaxBudget+6 = %d, want MaxBudget %d", got, int64(MaxBudget))
	}
	for _, tt := range []struct {
		w, cur uint64
		want   bool
	}{
		{5, 4, true},
		{4, 5, false},
		{4, 4, false},
		{0, windowMask, true}, // the wrap
		{windowMask, 0, false},
		{1 << (windowBits - 2), 0, true},
		{1 << (windowBits - 1), 0, false}, // half the range away: taken as older
	} {
		if got := newer(tt.w, tt.cur); got != tt.want {
			t.Errorf("newer(%d, %d) = %v, want %v", tt.w, tt.cur, got, tt.want)
		}
	}
	// A Lease whose window is the last before the tag wraps: the next
	// window (tag 0) gets its credit again.
	wrapW := int64(windowMask) + 1<<windowBits*10 // a window whose tag is windowMask
	last := time.Unix(wrapW*int64(Window/time.Second), 0)
	wl := &Lease{Credit: 2}
	if ok, _ := wl.Admit(last, 2); !ok {
		t.Fatal("credit refused in the window before the wrap")
	}
	if ok, _ := wl.Admit(last.Add(Window), 2); !ok {
		t.Error("credit refused in the window after the wrap: the tag did not roll")
	}
	if tagOfState(wl.state.Load()) != 0 {
		t.Errorf("tag after the wrap = %d, want 0", tagOfState(wl.state.Load()))
	}
}
