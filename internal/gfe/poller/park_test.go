//go:build linux

package poller

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// parked is one Park under test: the number of times its function ran,
// and what the Read the function made returned.
type parked struct {
	runs atomic.Int32
	fn   func()
	read chan readResult
}

type readResult struct {
	n   int
	err error
}

// parkRead parks c with a function that counts its runs and reads once
// into a 4-byte buffer, as the fast path's resume does.
func parkRead(c *Conn) (*parked, bool) {
	pk := &parked{read: make(chan readResult, 4)}
	pk.fn = func() {
		pk.runs.Add(1)
		var buf [4]byte
		n, err := c.Read(buf[:])
		pk.read <- readResult{n, err}
	}
	return pk, c.Park(&pk.fn)
}

// result waits for the parked function's read.
func (pk *parked) result(t *testing.T) readResult {
	t.Helper()
	select {
	case r := <-pk.read:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the parked function did not run within 10 s")
		return readResult{}
	}
}

// drained reads what a wrapped c has, so that its last read drained it
// (Park parks only then, as WaitReadable waits only then).
func drained(t *testing.T, a net.Conn, c *Conn) {
	t.Helper()
	a.Write([]byte("0"))
	var buf [4]byte
	if n, err := c.Read(buf[:]); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v; want 1, nil", n, err)
	}
}

func (c *Conn) inEpoll() bool {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.w.added
}

// TestPark: a parked connection's function runs, once, in a goroutine of
// its own, when bytes come, the read deadline passes, the peer closes or
// the connection is closed, with the Group on and off; its Read then
// returns what it would have (the bytes, a timeout, EOF, net.ErrClosed).
// While parked the socket is in the epoll set, on or off, and it stays
// there after (parking again costs no system call), unless closed. Bytes already there when Park is called end the
// wait at once (false) or run the function (their report had not come).
func TestPark(t *testing.T) {
	tests := []struct {
		name  string
		event func(a net.Conn, c *Conn)
		// before, when set, happens before Park, which then reports false.
		before bool
		check  func(r readResult) bool
	}{
		{"bytes", func(a net.Conn, _ *Conn) { a.Write([]byte("hi")) }, false,
			func(r readResult) bool { return r.n == 2 && r.err == nil }},
		{"deadline", func(_ net.Conn, c *Conn) { c.SetReadDeadline(time.Now().Add(500 * time.Millisecond)) }, false,
			func(r readResult) bool { return isTimeout(r.err) }},
		{"eof", func(a net.Conn, _ *Conn) { a.Close() }, false,
			func(r readResult) bool { return r.err == io.EOF }},
		{"close", func(_ net.Conn, c *Conn) { c.Close() }, false,
			func(r readResult) bool { return errors.Is(r.err, net.ErrClosed) }},
		{"bytes already there", func(a net.Conn, _ *Conn) { a.Write([]byte("hi")) }, true, nil},
	}
	for _, on := range []bool{true, false} {
		g := testGroup(t, 1)
		g.setOn(on)
		for _, tt := range tests {
			t.Run(map[bool]string{true: "on/", false: "off/"}[on]+tt.name, func(t *testing.T) {
				a, b := pair(t)
				c := g.Wrap(b).(*Conn)
				drained(t, a, c)
				if tt.name == "deadline" { // set before Park, as the fast path does
					tt.event(a, c)
				}
				if tt.before {
					tt.event(a, c)
					waitFor(t, func() bool { return c.peekNow() })
					pk, ok := parkRead(c)
					if ok { // the report had not come yet: it runs the function
						if r := pk.result(t); r.n != 2 || r.err != nil {
							t.Fatalf("Read in the parked function = %d, %v; want 2, nil", r.n, r.err)
						}
						return
					}
					var buf [4]byte
					if n, err := c.Read(buf[:]); n != 2 || err != nil {
						t.Fatalf("Read after Park = %d, %v; want 2, nil", n, err)
					}
					return
				}
				pk, ok := parkRead(c)
				if !ok {
					t.Fatal("Park = false on a drained socket; want true")
				}
				if tt.name != "close" && !c.inEpoll() {
					t.Fatal("a parked socket is not in the epoll set")
				}
				if tt.name != "deadline" {
					tt.event(a, c)
				}
				if r := pk.result(t); !tt.check(r) {
					t.Fatalf("Read in the parked function = %d, %v", r.n, r.err)
				}
				if n := pk.runs.Load(); n != 1 || c.w.parked.Load() != nil {
					t.Fatalf("ran %d times, armed %v after; want once, nothing armed", n, c.w.parked.Load() != nil)
				}
				if gone := tt.name == "close"; c.inEpoll() == gone {
					t.Errorf("after its park the socket is in the epoll set: %v, want %v (it parks again without a system call, unless closed)", !gone, gone)
				}
				if c.w.at >= 0 || c.w.idle.Load() {
					t.Errorf("after its park: on the deadline heap %v, idle %v; want neither", c.w.at >= 0, c.w.idle.Load())
				}
			})
		}
	}
}

// TestParkStaysWhenTurnedOff: turning the Group off leaves a parked
// connection registered (it has no reader to move to Go's poller); its
// bytes then run its function, whose Read reads in Go's poller; turning
// the Group off again while it is served takes it out of the epoll set.
func TestParkStaysWhenTurnedOff(t *testing.T) {
	g := testGroup(t, 1)
	a, b := pair(t)
	c := g.Wrap(b).(*Conn)
	drained(t, a, c)
	pk, ok := parkRead(c)
	if !ok {
		t.Fatal("Park = false on a drained socket; want true")
	}
	g.setOn(false)
	if !c.inEpoll() {
		t.Fatal("turning off took a parked socket out of the epoll set")
	}
	a.Write([]byte("z"))
	if r := pk.result(t); r.n != 1 || r.err != nil {
		t.Fatalf("Read = %d, %v; want 1, nil", r.n, r.err)
	}
	g.setOn(false)
	if c.inEpoll() {
		t.Error("turning off left a served socket in the epoll set")
	}
	a.Write([]byte("w"))
	var buf [4]byte
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(buf[:]); n != 1 || err != nil {
		t.Fatalf("Read in Go's poller = %d, %v; want 1, nil", n, err)
	}
}

// TestParkWokenTwice: of two wake-ups of one park (two readiness reports,
// as two arrivals make), the first runs its function and the second
// leaves a wake-up, which the next Park looks through (a peek finds
// nothing) and parks: it neither runs twice nor returns at once.
func TestParkWokenTwice(t *testing.T) {
	g := testGroup(t, 1)
	a, b := pair(t)
	c := g.Wrap(b).(*Conn)
	drained(t, a, c)
	pk, ok := parkRead(c)
	if !ok {
		t.Fatal("Park = false on a drained socket; want true")
	}
	a.Write([]byte("x"))
	c.w.wake() // the readiness report of "x" may come before or after these
	c.w.wake()
	if r := pk.result(t); r.err != nil || r.n < 0 {
		t.Fatalf("Read = %d, %v", r.n, r.err)
	} else if r.n == 0 {
		t.Fatalf("Read = 0, want x")
	}
	if n := pk.runs.Load(); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
	c.w.wake() // a late report, left for the next wait
	pk2, ok := parkRead(c)
	if !ok {
		t.Fatal("Park = false with only a stale wake-up left; want true")
	}
	if c.w.parked.Load() == nil {
		t.Fatal("the second park ran its function for the stale wake-up")
	}
	a.Write([]byte("y"))
	if r := pk2.result(t); r.n != 1 || r.err != nil {
		t.Fatalf("second park: Read = %d, %v; want 1, nil", r.n, r.err)
	}
}

// TestParkRaces: many parks, each raced by bytes arriving, the
// connection closing (as the drain closes an idle connection) and a
// readiness report coming twice, from goroutines of their own: each
// park's function runs exactly once, and its Read returns the bytes or
// net.ErrClosed. Then bytes racing Park itself (written as it is
// called): Park reports false or the function runs, never neither. Run
// it with -race.
func TestParkRaces(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			g := testGroup(t, 2)
			g.setOn(on)
			const n = 100
			for range n {
				a, b := pair(t)
				c := g.Wrap(b).(*Conn)
				drained(t, a, c)
				pk, ok := parkRead(c)
				if !ok {
					t.Fatal("Park = false on a drained socket; want true")
				}
				var wg sync.WaitGroup
				wg.Add(3)
				go func() { defer wg.Done(); a.Write([]byte("r")) }()
				go func() { defer wg.Done(); c.Close() }()
				go func() { defer wg.Done(); c.w.wake(); c.w.wake() }()
				r := pk.result(t)
				wg.Wait()
				if r.err != nil && !errors.Is(r.err, net.ErrClosed) {
					t.Fatalf("Read = %d, %v; want the byte or net.ErrClosed", r.n, r.err)
				}
				if runs := pk.runs.Load(); runs != 1 || c.w.parked.Load() != nil {
					t.Fatalf("ran %d times; want exactly once", runs)
				}
			}
			for range n {
				a, b := pair(t)
				c := g.Wrap(b).(*Conn)
				drained(t, a, c)
				wrote := make(chan struct{})
				go func() { a.Write([]byte("s")); close(wrote) }()
				pk, ok := parkRead(c)
				<-wrote
				if !ok {
					var buf [4]byte
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					if m, err := c.Read(buf[:]); m != 1 || err != nil {
						t.Fatalf("Read after Park = false: %d, %v; want 1, nil", m, err)
					}
					continue
				}
				if r := pk.result(t); r.n != 1 || r.err != nil {
					t.Fatalf("Read = %d, %v; want 1, nil", r.n, r.err)
				}
				if runs := pk.runs.Load(); runs != 1 {
					t.Fatalf("ran %d times; want exactly once", runs)
				}
			}
		})
	}
}

// TestParkWorkers: a parked connection's function runs on a spare worker
// when one waits (no goroutine started for it: the worker keeps its
// grown stack), and of 150 functions running at once, whose workers all
// then wait, at most maxSpare stay.
func TestParkWorkers(t *testing.T) {
	g := testGroup(t, 1)
	a, b := pair(t)
	c := g.Wrap(b).(*Conn)
	drained(t, a, c)
	for i := range 3 {
		pk, ok := parkRead(c)
		if !ok {
			t.Fatal("Park = false on a drained socket; want true")
		}
		a.Write([]byte("x"))
		if r := pk.result(t); r.n != 1 || r.err != nil {
			t.Fatalf("Read = %d, %v; want 1, nil", r.n, r.err)
		}
		waitFor(t, func() bool { return g.spare.Load() == 1 })
		if n := g.started.Load(); n != 1 {
			t.Fatalf("park %d: %d workers started, want the first one, reused", i, n)
		}
	}
	const n = 150
	hold := make(chan struct{})
	var ran sync.WaitGroup
	ran.Add(n)
	for range n {
		a, b := pair(t)
		c := g.Wrap(b).(*Conn)
		drained(t, a, c)
		fn := func() { ran.Done(); <-hold }
		if !c.Park(&fn) {
			t.Fatal("Park = false on a drained socket; want true")
		}
		a.Write([]byte("y"))
	}
	ran.Wait() // all n run at once: n workers
	close(hold)
	waitFor(t, func() bool { return g.spare.Load() == maxSpare })
	if s := g.started.Load(); s < n {
		t.Errorf("%d workers started for %d functions running at once", s, n)
	}
}
