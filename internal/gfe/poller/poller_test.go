//go:build linux

package poller

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// idlePoller is a Poller whose goroutine is not running: tests call
// ready and expire themselves.
func idlePoller(t *testing.T) *Poller {
	t.Helper()
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.file.Close() })
	return p
}

func newGroup(t testing.TB, n int) *Group {
	t.Helper()
	g, err := NewGroup(n)
	if err != nil {
		t.Fatal(err)
	}
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

// TestEcho: 2000 request/answer exchanges through wrapped ends on both
// sides, each read waiting first; a lost wake-up would hang.
func TestEcho(t *testing.T) {
	g := newGroup(t, 2)
	a, b := pair(t)
	ca, cb := g.Wrap(a), g.Wrap(b)
	const rounds = 2000
	go func() {
		var buf [64]byte
		for {
			n, err := cb.Read(buf[:])
			if err != nil {
				return
			}
			cb.Write(buf[:n])
		}
	}()
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
	g := newGroup(t, 1)
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
	g := newGroup(t, 1)
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

// TestExpire: expire wakes only the readers whose deadline passed, and
// reports whether any reader waits with a deadline.
func TestExpire(t *testing.T) {
	p := idlePoller(t)
	now := time.Unix(1000, 0)
	mk := func(dl time.Time) *waiter {
		_, b := pair(t)
		w := p.wrap(b).(*Conn).w
		w.setDeadline(dl)
		w.waiting.Store(true)
		return w
	}
	past, future, none := mk(now.Add(-time.Second)), mk(now.Add(time.Second)), mk(time.Time{})
	if !p.expire(now) {
		t.Fatal("expire reports no reader waiting with a deadline")
	}
	woken := func(w *waiter) bool {
		select {
		case <-w.ch:
			return true
		default:
			return false
		}
	}
	if !woken(past) || woken(future) || woken(none) {
		t.Error("expire woke the wrong readers: want only the one past its deadline")
	}
	past.waiting.Store(false)
	future.waiting.Store(false)
	if p.expire(now) {
		t.Error("expire reports a reader waiting with a deadline; the only waiting one has none")
	}
}

// TestSlotReuse: a closed connection's slot goes to the next one, which
// is woken by its own socket and not by the old one's.
func TestSlotReuse(t *testing.T) {
	g := newGroup(t, 1)
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
	g := newGroup(t, 1)
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
	g := newGroup(b, 1)
	x, y := pair(b)
	benchEcho(b, g.Wrap(x), g.Wrap(y))
}

// BenchmarkEchoNet is BenchmarkEcho through net alone.
func BenchmarkEchoNet(b *testing.B) {
	x, y := pair(b)
	benchEcho(b, x, y)
}

func benchEcho(b *testing.B, x, y net.Conn) {
	go func() {
		var buf [64]byte
		for {
			n, err := y.Read(buf[:])
			if err != nil {
				return
			}
			y.Write(buf[:n])
		}
	}()
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
