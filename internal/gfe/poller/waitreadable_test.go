//go:build linux

package poller

import (
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitReadable: WaitReadable returns once bytes come (leaving them
// for the Read that follows), when the read deadline passes (with the
// timeout Read would report) and when the peer closes, with the Group on
// and off; and it allocates nothing.
func TestWaitReadable(t *testing.T) {
	for _, on := range []bool{true, false} {
		g := testGroup(t, 1)
		g.setOn(on)
		name := map[bool]string{true: "on", false: "off"}[on]
		t.Run(name+"/bytes", func(t *testing.T) {
			a, b := pair(t)
			c := g.Wrap(b).(*Conn)
			go a.Write([]byte("hi"))
			if err := c.WaitReadable(); err != nil {
				t.Fatalf("WaitReadable = %v, want nil", err)
			}
			var buf [4]byte
			if n, err := c.Read(buf[:]); n != 2 || err != nil {
				t.Fatalf("Read after WaitReadable = %d, %v; want 2, nil", n, err)
			}
		})
		t.Run(name+"/deadline", func(t *testing.T) {
			_, b := pair(t)
			c := g.Wrap(b).(*Conn)
			c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			err := c.WaitReadable()
			if on && err == nil { // the Poller's wait returns; the read reports it
				_, err = c.Read(make([]byte, 4))
			}
			if !isTimeout(err) {
				t.Fatalf("error = %v, want a timeout", err)
			}
		})
		t.Run(name+"/eof", func(t *testing.T) {
			a, b := pair(t)
			c := g.Wrap(b).(*Conn)
			go a.Close()
			if err := c.WaitReadable(); err != nil {
				t.Fatalf("WaitReadable = %v, want nil", err)
			}
			if _, err := c.Read(make([]byte, 4)); err != io.EOF {
				t.Fatalf("Read = %v, want EOF", err)
			}
		})
		t.Run(name+"/allocs", func(t *testing.T) {
			a, b := pair(t)
			c := g.Wrap(b).(*Conn)
			buf := make([]byte, 4)
			one := []byte("x")
			n := testing.AllocsPerRun(100, func() {
				go a.Write(one)
				if err := c.WaitReadable(); err != nil {
					t.Fatal(err)
				}
				c.Read(buf)
			})
			// The go statement above is the test's own allocation.
			if n > 1 {
				t.Errorf("%.1f allocations per WaitReadable and Read, want at most the test's 1", n)
			}
		})
	}
}

// TestWaitReadableBytesAlreadyThere: bytes that came after the last read
// drained the socket but before WaitReadable began (their readiness
// already recorded by Go's poller, which RawConn.Read clears) end the wait
// at once, with the Group on and off; it does not wait for an arrival that
// has come.
func TestWaitReadableBytesAlreadyThere(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			g := testGroup(t, 1)
			g.setOn(on)
			a, b := pair(t)
			c := g.Wrap(b).(*Conn)
			buf := make([]byte, 4)
			a.Write([]byte("x"))
			if n, err := c.Read(buf); n != 1 || err != nil { // drained: 1 < 4
				t.Fatalf("Read = %d, %v; want 1, nil", n, err)
			}
			a.Write([]byte("y"))
			var fd int
			c.rc.Control(func(s uintptr) { fd = int(s) })
			waitFor(t, func() bool {
				n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
				return err == nil && n == 1
			})
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if err := c.WaitReadable(); err != nil {
				t.Fatalf("WaitReadable = %v with a byte waiting; want nil at once", err)
			}
			if n, err := c.Read(buf); n != 1 || err != nil || buf[0] != 'y' {
				t.Fatalf("Read = %d, %v, %q; want 1, nil, y", n, err, buf[:n])
			}
		})
	}
}

// TestWaitReadableIdleStaysWhenOff: turning the Group off leaves a reader
// waiting in WaitReadable where it is, registered (no wake-up and no
// system call for each of thousands of idle connections); its bytes then
// end the wait, and its socket leaves the epoll set.
func TestWaitReadableIdleStaysWhenOff(t *testing.T) {
	g := testGroup(t, 1)
	a, b := pair(t)
	c := g.Wrap(b).(*Conn)
	w := c.w
	done := make(chan error, 1)
	go func() { done <- c.WaitReadable() }()
	waitFor(t, func() bool { return w.waiting.Load() && w.idle.Load() })
	g.setOn(false)
	added := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.added
	}
	if !added() {
		t.Fatal("turning off took an idle reader's socket out of the epoll set")
	}
	a.Write([]byte("z"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitReadable = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReadable still waits 10 s after its bytes came")
	}
	if added() {
		t.Error("the socket stays in the epoll set with the Group off")
	}
	var buf [4]byte
	if n, err := c.Read(buf[:]); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v; want 1, nil", n, err)
	}
}
