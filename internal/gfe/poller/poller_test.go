//go:build linux

package poller

import (
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spillway-lb/spillway/internal/clock"
)

// pair returns the two ends of a loopback TCP connection, closed when the
// test ends.
func pair(t testing.TB) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	a, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// idlePoller is a Poller, on, whose goroutine is not running: tests call
// ready and expire themselves.
func idlePoller(t *testing.T) *Poller {
	t.Helper()
	g := &Group{stop: make(chan struct{}), clk: clock.Real{}}
	g.on.Store(true)
	p, err := newPoller(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.file.Close() })
	return p
}

// testGroup is a Group of n Pollers, on, that never turns itself off.
func testGroup(t testing.TB, n int) *Group {
	t.Helper()
	g, err := newGroup(n)
	if err != nil {
		t.Fatal(err)
	}
	g.setOn(true)
	t.Cleanup(func() { g.Close() })
	return g
}

// TestReadyInKernelOrder: the readers of sockets that turned readable in
// the order 2, 0, 3, 1 come back from one round in that order.
func TestReadyInKernelOrder(t *testing.T) {
	p := idlePoller(t)
	var conns [4]*Conn
	var peers [4]net.Conn
	for i := range conns {
		a, b := pair(t)
		conns[i], peers[i] = p.wrap(b).(*Conn), a
	}
	if ws, _ := p.ready(); len(ws) != 0 {
		t.Fatalf("ready before any byte: %d readers, want 0", len(ws))
	}
	order := []int{2, 0, 3, 1}
	for _, i := range order {
		if _, err := peers[i].Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var ws []*waiter
	for deadline := time.Now().Add(10 * time.Second); len(ws) < len(order) && time.Now().Before(deadline); {
		got, _ := p.ready() // loopback delivers at once; a round may still split
		ws = append(ws, got...)
	}
	if len(ws) != len(order) {
		t.Fatalf("%d readers ready, want %d", len(ws), len(order))
	}
	for k, i := range order {
		if ws[k] != conns[i].w {
			t.Errorf("reader %d of the round is conn %d's, want conn %d's", k, slotOf(conns[:], ws[k]), i)
		}
	}
	// Edge-triggered: reported once per arrival.
	if ws, _ := p.ready(); len(ws) != 0 {
		t.Errorf("ready again without a new arrival: %d readers, want 0", len(ws))
	}
}

func slotOf(conns []*Conn, w *waiter) int {
	for i, c := range conns {
		if c.w == w {
			return i
		}
	}
	return -1
}

// waiting counts p's readers parked in a wait.
func waiting(p *Poller) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, w := range p.slots {
		if w != nil && w.waiting.Load() {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// echo writes back what it reads from c until a read fails.
func echo(c net.Conn) {
	var buf [64]byte
	for {
		n, err := c.Read(buf[:])
		if err != nil {
			return
		}
		c.Write(buf[:n])
	}
}

// TestEcho: 2000 request/answer exchanges through wrapped ends on both
// sides, each read waiting first; a lost wake-up would hang.
func TestEcho(t *testing.T) {
	g := testGroup(t, 2)
	a, b := pair(t)
	ca, cb := g.Wrap(a), g.Wrap(b)
	const rounds = 2000
	go echo(cb)
	msg := []byte("0123456789abcdef")
	buf := make([]byte, len(msg))
	for i := range rounds {
		if _, err := ca.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(ca, buf); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}

// TestBytesBeforeWait: bytes that came before the reader waits left it a
// wake-up.
func TestBytesBeforeWait(t *testing.T) {
	g := testGroup(t, 1)
	a, b := pair(t)
	c := g.Wrap(b)
	a.Write([]byte("x"))
	waitFor(t, func() bool { return peekable(b) })
	var buf [4]byte
	if n, err := c.Read(buf[:]); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v; want 1, nil", n, err)
	}
}

// peekable says c's socket holds bytes.
func peekable(c net.Conn) bool {
	rc, _ := c.(*net.TCPConn).SyscallConn()
	ok := false
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, _ := recvPeek(int(fd), b[:])
		ok = n > 0
	})
	return ok
}

// TestWakeOnDeadline: a deadline set while the reader waits, one that
// passes while it waits, and Close all end the wait, and the read reports
// what net does.
func TestWakeOnDeadline(t *testing.T) {
	g := testGroup(t, 1)
	cases := []struct {
		name string
		end  func(c net.Conn)
		want func(error) bool
	}{
		{"deadline moved to the past", func(c net.Conn) { c.SetReadDeadline(time.Unix(1, 0)) }, isTimeout},
		{"deadline of both moved to the past", func(c net.Conn) { c.SetDeadline(time.Unix(1, 0)) }, isTimeout},
		{"deadline passes", func(c net.Conn) { c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) }, isTimeout},
		{"closed", func(c net.Conn) { c.Close() }, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, b := pair(t)
			c := g.Wrap(b)
			w := c.(*Conn).w
			errc := make(chan error, 1)
			go func() {
				var buf [4]byte
				_, err := c.Read(buf[:])
				errc <- err
			}()
			waitFor(t, w.waiting.Load)
			tc.end(c)
			if err := <-errc; !tc.want(err) {
				t.Errorf("Read error = %v", err)
			}
		})
	}
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// TestExpire: expire wakes and unlists exactly the readers whose
// deadline passed, earliest first, and returns the earliest deadline
// still waiting; a reader taken off (its bytes came) is never woken.
func TestExpire(t *testing.T) {
	p := idlePoller(t)
	sec := func(s float64) int64 { return int64(s * 1e9) }
	mk := func(due int64) *waiter {
		_, b := pair(t)
		w := p.wrap(b).(*Conn).w
		p.enlist(w, due)
		return w
	}
	woken := func(w *waiter) bool {
		select {
		case <-w.ch:
			return true
		default:
			return false
		}
	}
	w3, w1, w2 := mk(sec(3)), mk(sec(1)), mk(sec(2))
	steps := []struct {
		now      float64
		unlist   *waiter
		wake     []*waiter
		next     int64
		anyTimed bool
	}{
		{now: 0.5, next: sec(1), anyTimed: true},
		{now: 1.5, wake: []*waiter{w1}, next: sec(2), anyTimed: true},
		{now: 1.6, unlist: w2, next: sec(3), anyTimed: true},
		{now: 2.5, next: sec(3), anyTimed: true},
		{now: 3, wake: []*waiter{w3}},
	}
	for _, st := range steps {
		if st.unlist != nil {
			p.unlist(st.unlist)
		}
		next, ok := p.expire(time.Unix(0, sec(st.now)))
		if next != st.next || ok != st.anyTimed {
			t.Errorf("at %vs: expire = %d, %v; want %d, %v", st.now, next, ok, st.next, st.anyTimed)
		}
		for _, w := range []*waiter{w1, w2, w3} {
			if want := slices.Contains(st.wake, w); woken(w) != want {
				t.Errorf("at %vs: waiter due %v woken %v, want %v", st.now, time.Duration(w.due), !want, want)
			}
		}
	}
	if len(p.timed) != 0 {
		t.Errorf("%d readers still listed, want 0", len(p.timed))
	}
}

// TestExpireHeapOrder: 500 readers listed with random deadlines, 150 of
// them taken off again at random, are woken in deadline order, each
// once, and none of those taken off.
func TestExpireHeapOrder(t *testing.T) {
	p := idlePoller(t)
	rng := rand.New(rand.NewPCG(1, 2))
	ws := make([]*waiter, 500)
	for i := range ws {
		ws[i] = &waiter{p: p, ch: make(chan struct{}, 1), at: -1}
		p.enlist(ws[i], 1+rng.Int64N(1e6))
	}
	off := map[*waiter]bool{}
	for _, i := range rng.Perm(len(ws))[:150] {
		p.unlist(ws[i])
		off[ws[i]] = true
	}
	var last int64
	woken := 0
	for now := int64(0); now <= 1e6; now += 1000 {
		p.expire(time.Unix(0, now))
		for _, w := range ws {
			select {
			case <-w.ch:
				if off[w] {
					t.Fatalf("a reader taken off was woken (due %d)", w.due)
				}
				if w.due > now || w.due <= now-1000 || w.due < last-1000 {
					t.Fatalf("reader due %d woken at %d", w.due, now)
				}
				last = max(last, w.due)
				woken++
			default:
			}
		}
	}
	if woken != 350 {
		t.Errorf("%d readers woken, want 350", woken)
	}
}

// TestExpireOnOneTimer: a reader waiting in the Poller with a read
// deadline is woken when its deadline passes on the Group's clock (and
// not before), and 2,000 readers waiting with deadlines arm one timer in
// all, not a ticker that scans them.
func TestExpireOnOneTimer(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	g, err := newGroupClock(1, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.setOn(true)
	p := g.ps[0]
	var ws []*waiter
	for i := range 2000 {
		w := &waiter{p: p, ch: make(chan struct{}, 1), at: -1}
		w.setDeadline(clk.Now().Add(time.Hour + time.Duration(i)*time.Millisecond))
		ws = append(ws, w)
	}
	done := make(chan int, len(ws))
	for i, w := range ws {
		go func() {
			w.wait()
			done <- i
		}()
	}
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.timed) == len(ws)
	})
	waitFor(t, func() bool { return clk.Waiters() == 1 })
	clk.Advance(time.Hour - time.Millisecond)
	waitFor(t, func() bool { return clk.Waiters() == 1 }) // rearmed for the first
	if n := len(done); n != 0 {
		t.Fatalf("%d readers woken before their deadline", n)
	}
	clk.Advance(time.Millisecond) // the first one's deadline
	select {
	case i := <-done:
		if i != 0 {
			t.Fatalf("reader %d woken first, want 0", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reader not woken 10 s after its deadline passed")
	}
	waitFor(t, func() bool { return clk.Waiters() == 1 }) // rearmed for the second
	clk.Advance(time.Hour)
	for range len(ws) - 1 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("readers not woken 10 s after their deadlines passed")
		}
	}
	waitFor(t, func() bool { return clk.Waiters() == 0 }) // nothing armed once none waits
}

// TestSlotReuse: a closed connection's slot goes to the next one, which
// is woken by its own socket and not by the old one's.
func TestSlotReuse(t *testing.T) {
	g := testGroup(t, 1)
	_, b1 := pair(t)
	c1 := g.Wrap(b1)
	slot := c1.(*Conn).w.slot
	c1.Close()
	a2, b2 := pair(t)
	c2 := g.Wrap(b2)
	if s := c2.(*Conn).w.slot; s != slot {
		t.Fatalf("slot %d, want the freed %d", s, slot)
	}
	go a2.Write([]byte("y"))
	var buf [4]byte
	if n, err := c2.Read(buf[:]); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v; want 1, nil", n, err)
	}
	if _, err := c1.Read(buf[:]); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read on the closed connection = %v, want net.ErrClosed", err)
	}
}

// TestRelease: the released connection reads without the Poller.
func TestRelease(t *testing.T) {
	g := testGroup(t, 1)
	a, b := pair(t)
	c := g.Wrap(b).(*Conn)
	raw := c.Release()
	if raw != b {
		t.Fatal("Release returned another connection")
	}
	go a.Write([]byte("z"))
	var buf [4]byte
	if n, err := c.Read(buf[:]); n != 1 || err != nil { // waits nowhere: released
		t.Fatalf("Read = %d, %v; want 1, nil", n, err)
	}
}

// BenchmarkEcho is one exchange through wrapped ends: a write, and a
// read that waits in the Poller. Compare BenchmarkEchoNet.
func BenchmarkEcho(b *testing.B) {
	g := testGroup(b, 1)
	x, y := pair(b)
	benchEcho(b, g.Wrap(x), g.Wrap(y))
}

// BenchmarkEchoNet is BenchmarkEcho through net alone.
func BenchmarkEchoNet(b *testing.B) {
	x, y := pair(b)
	benchEcho(b, x, y)
}

func benchEcho(b *testing.B, x, y net.Conn) {
	go echo(y)
	msg := []byte("0123456789abcdef")
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		x.Write(msg)
		if _, err := io.ReadFull(x, buf[:len(msg)]); err != nil {
			b.Fatal(err)
		}
	}
}

// recvPeek peeks at socket fd without blocking.
func recvPeek(fd int, b []byte) (int, unix.Sockaddr, error) {
	return unix.Recvfrom(fd, b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
}

// TestBusy: the Pollers turn on when the median scheduling latency of an
// interval reaches 50 µs, and off again only below 10 µs.
func TestBusy(t *testing.T) {
	// Buckets: [0,1µs) [1,10µs) [10,50µs) [50,100µs) [100µs,1ms) [1ms,inf)
	buckets := []float64{0, 1e-6, 10e-6, 50e-6, 100e-6, 1e-3, math.Inf(1)}
	prev := []uint64{100, 100, 100, 100, 100, 100}
	add := func(d ...uint64) []uint64 {
		cur := slices.Clone(prev)
		for i := range d {
			cur[i] += d[i]
		}
		return cur
	}
	cases := []struct {
		name      string
		cur       []uint64
		was, want bool
	}{
		{"idle: median under 1 µs", add(90, 10, 0, 0, 0, 0), false, false},
		{"idle, was on", add(90, 10, 0, 0, 0, 0), true, false},
		{"saturated: median 100 µs–1 ms", add(5, 5, 10, 10, 60, 10), false, true},
		{"saturated, was on", add(5, 5, 10, 10, 60, 10), true, true},
		{"between: median 10–50 µs, was off", add(10, 20, 60, 10, 0, 0), false, false},
		{"between: median 10–50 µs, was on", add(10, 20, 60, 10, 0, 0), true, true},
		{"half under 50 µs, half over: not yet", add(0, 0, 50, 50, 0, 0), false, false},
		{"just over half at 50 µs or more", add(0, 0, 49, 51, 0, 0), false, true},
		{"too few samples keep off", add(0, 0, 0, 0, 10, 0), false, false},
		{"too few samples keep on", add(10, 0, 0, 0, 0, 0), true, true},
		{"histogram of another shape", []uint64{1, 2}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Busy(prev, tc.cur, buckets, tc.was); got != tc.want {
				t.Errorf("Busy = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTurnOff: turning the Group off wakes a reader waiting in a Poller,
// which then reads through Go's poller, and takes its socket out of the
// epoll set; turning it on again registers it, bytes already there
// reported at once.
func TestTurnOff(t *testing.T) {
	g := testGroup(t, 1)
	a, b := pair(t)
	c := g.Wrap(b).(*Conn)
	got := make(chan string, 1)
	go func() {
		var buf [8]byte
		n, err := c.Read(buf[:])
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	waitFor(t, c.w.waiting.Load)
	g.setOn(false)
	waitFor(t, func() bool { return !c.w.waiting.Load() }) // now in Go's poller
	a.Write([]byte("after"))
	if s := <-got; s != "after" {
		t.Fatalf("read %q, want \"after\"", s)
	}
	if c.w.added {
		t.Error("the socket is still in the epoll set while off")
	}
	// Off: an arrival reaches no Poller.
	a.Write([]byte("x"))
	waitFor(t, func() bool { return peekable(b) })
	g.setOn(true)
	if !c.w.added {
		t.Fatal("the socket is not in the epoll set once on")
	}
	var buf [8]byte
	if n, err := c.Read(buf[:]); n != 1 || err != nil { // its wake-up came with the registration
		t.Fatalf("Read = %d, %v; want 1, nil", n, err)
	}
}

// TestEndAfterBytes: bytes and the peer's close that come together are
// one report; the read after the bytes finds the end of file at once
// instead of waiting for an arrival that will not come.
func TestEndAfterBytes(t *testing.T) {
	g := testGroup(t, 1)
	for i := range 50 {
		a, b := pair(t)
		c := g.Wrap(b)
		a.Write([]byte("last"))
		a.Close()
		if i%2 == 0 { // both in before the first read, or racing it
			waitFor(t, func() bool { return peekable(b) })
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "last" {
			t.Fatalf("round %d: ReadAll = %q, %v; want \"last\", nil (a timeout means the end of file was not reported)", i, got, err)
		}
	}
}
