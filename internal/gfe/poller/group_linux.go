//go:build linux

package poller

import (
	"errors"
	"net"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/lb/clock"
)

// Group is a set of Pollers; Wrap spreads connections over them in turn.
// A nil *Group wraps nothing. Safe for concurrent use.
//
// Its Pollers are on only while the process's goroutines queue for a P
// (see Busy): then Go's poller returns many sockets per poll, and their
// order matters. Otherwise waking a reader from a Poller's goroutine costs
// a goroutine switch that Go's poller does not, and with idle Ps a thread
// woken to spin, for no gain: reads then wait in Go's poller alone, and
// the Pollers hold no socket.
type Group struct {
	ps   []*Poller
	next atomic.Uint32
	on   atomic.Bool // readers wait in the Pollers
	// turns counts the times the Pollers turned on or off.
	turns atomic.Uint64
	// pinned says SetMode fixed on; sample leaves it.
	pinned atomic.Bool
	// switching serialises setOn.
	switching sync.Mutex
	stop      chan struct{}
	done      chan struct{} // sample has returned (nil: not started)
	// clk is the clock of read deadlines (Real but in tests).
	clk clock.Clock
	// work hands a parked connection's function to a spare worker
	// (dispatch); spare counts the workers waiting on it.
	work  chan job
	spare atomic.Int32
	// started counts the workers started.
	started atomic.Uint64
}

// NewGroup starts n Pollers (at least one) and the goroutine that turns
// them on and off (Busy, every SampleEvery).
func NewGroup(n int) (*Group, error) {
	g, err := newGroup(n)
	if err != nil {
		return nil, err
	}
	g.done = make(chan struct{})
	go g.sample()
	return g, nil
}

// newGroup starts n Pollers, off, and no sampling.
func newGroup(n int) (*Group, error) { return newGroupClock(n, clock.Real{}) }

// newGroupClock is newGroup with deadlines read on clk.
func newGroupClock(n int, clk clock.Clock) (*Group, error) {
	g := &Group{stop: make(chan struct{}), clk: clk, work: make(chan job)}
	for range max(n, 1) {
		p, err := newPoller(g)
		if err != nil {
			g.Close()
			return nil, err
		}
		go p.run()
		go p.expireLoop()
		g.ps = append(g.ps, p)
	}
	return g, nil
}

// SampleEvery is how often a Group looks at the scheduler's latencies.
const SampleEvery = 100 * time.Millisecond

// sample turns g's Pollers on and off by Busy, every SampleEvery, until
// Close.
func (g *Group) sample() {
	defer close(g.done)
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	s := []metrics.Sample{{Name: schedLatencies}}
	var prev []uint64
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindFloat64Histogram {
			return // not this runtime's metric: stay off
		}
		h := s[0].Value.Float64Histogram()
		if prev != nil && !g.pinned.Load() {
			if on := Busy(prev, h.Counts, h.Buckets, g.on.Load()); on != g.on.Load() {
				g.setOn(on)
			}
		}
		prev = append(prev[:0], h.Counts...)
	}
}

// SetMode sets how g's Pollers turn on: by Busy (Auto, a new Group's
// mode), or always on or off.
func (g *Group) SetMode(m Mode) {
	if g == nil {
		return
	}
	g.pinned.Store(m != Auto)
	if m != Auto {
		g.setOn(m == On)
	}
}

// On reports whether g's Pollers are on; false for a nil Group.
func (g *Group) On() bool { return g != nil && g.on.Load() }

// Turns returns how many times g's Pollers turned on or off.
func (g *Group) Turns() uint64 {
	if g == nil {
		return 0
	}
	return g.turns.Load()
}

// setOn turns g's Pollers on (every socket registered, edge-triggered,
// which reports those with bytes waiting at once) or off (every socket
// out of its epoll set, its waiting reader woken to read in Go's poller,
// but for a reader waiting in WaitReadable: its socket leaves the epoll
// set once its bytes come).
func (g *Group) setOn(on bool) {
	g.switching.Lock()
	defer g.switching.Unlock()
	if g.on.Swap(on) != on {
		g.turns.Add(1)
	}
	for _, p := range g.ps {
		for _, w := range p.live() {
			switch {
			case on:
				w.register()
			case w.idle.Load():
				// Waiting for a connection's next request (WaitReadable):
				// it stays where it is, registered, until its bytes come.
				// Moving thousands of idle connections to Go's poller at
				// every turn was a storm of wake-ups and system calls.
			default:
				w.unregister()
				if w.waiting.Load() {
					w.wake()
				}
			}
		}
	}
}

var (
	sharedOnce sync.Once
	shared     *Group
	sharedErr  error
)

// Shared returns the process's Group, started on first use with one Poller
// per GOMAXPROCS, and the error that kept it from starting; then it is nil
// and wraps nothing. Like Go's own poller it lives as long as the process.
// Call it at startup: starting takes a file descriptor per Poller.
func Shared() (*Group, error) {
	sharedOnce.Do(func() {
		shared, sharedErr = NewGroup(runtime.GOMAXPROCS(0))
	})
	return shared, sharedErr
}

// Wrap returns c as a *Conn whose reads wait in one of g's Pollers, or c
// itself when g is nil or c is not a socket (looking through wrappers that
// have Unwrap() net.Conn).
func (g *Group) Wrap(c net.Conn) net.Conn {
	if g == nil || len(g.ps) == 0 {
		return c
	}
	return g.ps[int(g.next.Add(1))%len(g.ps)].wrap(c)
}

// Close stops g's Pollers. Readers waiting in them are not woken: close
// their connections first.
func (g *Group) Close() error {
	close(g.stop)
	if g.done != nil {
		<-g.done
	}
	var errs []error
	for _, p := range g.ps {
		errs = append(errs, p.file.Close())
	}
	return errors.Join(errs...)
}
