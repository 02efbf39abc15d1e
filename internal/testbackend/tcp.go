package testbackend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// tcpReadBuffer is the most one read of a tcp echo connection takes, in
// bytes: the largest chunk echoed at once.
const tcpReadBuffer = 32 << 10

// tcpFrontend puts an instance of protocol tcp on the network: a raw TCP
// echo server whose listener is open exactly while the instance is healthy,
// so that a connect-only health check follows the health toggle. It must not
// be copied.
type tcpFrontend struct {
	// Immutable after newTCPFrontend.
	in *instance
	// listen opens a listener on the instance's address when it becomes
	// healthy again.
	listen func(addr string) (net.Listener, error)

	// Guarded by mu.
	mu      sync.Mutex
	ln      net.Listener  // tracked; nil while unhealthy or stopped
	stopped bool          // shutdown or close was called
	changed chan struct{} // closed and replaced when ln or stopped changes
}

func newTCPFrontend(in *instance, ln net.Listener) *tcpFrontend {
	f := &tcpFrontend{
		in:      in,
		listen:  func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) },
		ln:      ln,
		changed: make(chan struct{}),
	}
	in.onHealth = f.setListening
	return f
}

// setListening closes the listener (false) or reopens it on the same
// address (true). Established connections are not touched. Reopening fails
// if another process took the port meanwhile.
func (f *tcpFrontend) setListening(listening bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil
	}
	if !listening {
		if f.ln != nil {
			_ = f.ln.Close()
			f.ln = nil
			f.notifyLocked()
		}
		return nil
	}
	if f.ln != nil {
		return nil
	}
	ln, err := f.listen(f.in.addr)
	if err != nil {
		return fmt.Errorf("reopen listener: %w", err)
	}
	f.ln = f.in.conns.wrap(ln)
	f.notifyLocked()
	return nil
}

// notifyLocked wakes serve. Caller must hold f.mu.
func (f *tcpFrontend) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// serve accepts on the current listener, waits while there is none
// (unhealthy), and returns nil once stopped or the error of a failed
// accept.
func (f *tcpFrontend) serve() error {
	for {
		f.mu.Lock()
		ln, stopped, changed := f.ln, f.stopped, f.changed
		f.mu.Unlock()
		if stopped {
			return nil
		}
		if ln == nil {
			<-changed
			continue
		}
		if err := f.acceptAll(ln); err != nil {
			return err
		}
	}
}

// acceptAll serves the connections of ln until it is closed (nil) or
// fails.
func (f *tcpFrontend) acceptAll(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil // closed by setListening or shutdown
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		if !f.in.sessions.goSession(func() { f.in.serveTCP(c) }) {
			_ = c.Close() // stopping
		}
	}
}

// shutdown closes the listener and every connection at once: an echo
// connection has no request in flight to finish.
func (f *tcpFrontend) shutdown(context.Context) {
	_ = f.close()
	f.in.conns.closeAll()
	_ = f.in.sessions.wait(context.Background())
}

func (f *tcpFrontend) close() error {
	f.in.stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if f.ln != nil {
		err = f.ln.Close()
		f.ln = nil
	}
	if !f.stopped {
		f.stopped = true
		f.notifyLocked()
	}
	return err
}

// serveTCP serves one echo connection: after the emulated RTT and
// admission it writes in.hello() and a newline, then echoes each chunk it
// reads after the emulated RTT plus the service time, holding its slot
// until either side closes. A connection refused because the queue is full
// is closed without a hello.
func (in *instance) serveTCP(c net.Conn) {
	defer func() { _ = c.Close() }()
	var src netip.Addr
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		src = ap.Addr().Unmap()
	}
	// A queued connection whose client leaves is noticed only once it is
	// admitted; only the instance stopping ends the wait early.
	ctx := in.stopCtx
	rtt := in.delays.Lookup(src)
	if err := sleep(ctx, in.clock, rtt); err != nil {
		in.canceled.Add(1)
		return
	}
	if err := in.admit(ctx, src); err != nil {
		return
	}
	defer in.lim.release()
	in.startStream(src)
	if _, err := c.Write([]byte(in.hello() + "\n")); err != nil {
		return
	}
	buf := make([]byte, tcpReadBuffer)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if sleep(ctx, in.clock, rtt+in.cfg.Capacity.ServiceTime) != nil {
				return
			}
			in.messages.Add(1) // before the write, so that a reader sees it counted
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed (by the client, /admin/close or shutdown)
		}
	}
}
