package tcpproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/lb/routing"
)

// closeReset closes c with a reset (SO_LINGER 0) instead of a FIN, so that
// its peer sees the connection fail rather than end cleanly.
func closeReset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// tcpConn is one proxied connection. Must not be copied.
type tcpConn struct {
	// Immutable after handle creates it.
	x       *Proxy
	service string
	pick    routing.Pick // holds a slot of pick.Backend until untrack
	client  net.Conn
	backend net.Conn
	idle    time.Duration // 0: no idle timeout
	// firstByte is the time the client has, from accepted, to send its
	// first byte; 0: no limit.
	firstByte time.Duration
	accepted  time.Time

	// Accessed atomically.
	why        atomic.Int32 // closeReason: the first of abort's reason and the side that ended first
	lastRead   atomic.Int64 // clock time of the last byte read, in UnixNano (idle timeout only)
	clientSent atomic.Bool  // the client sent a byte (first-byte timeout only)
}

// watched reports whether c has an idle or first-byte timeout, which its
// listener's sweep enforces: its bytes are then copied in user space, so
// that reads are seen.
func (c *tcpConn) watched() bool { return c.idle > 0 || c.firstByte > 0 }

// reason returns why c ended: what came first of an abort (its reason)
// and one side ending (closeClient, closeBackend).
func (c *tcpConn) reason() closeReason { return closeReason(c.why.Load()) }

// abort closes both sides of c at once, with a reset, recording r as the
// reason unless c has one already. Safe to call from any goroutine, any
// number of times.
func (c *tcpConn) abort(r closeReason) {
	c.why.CompareAndSwap(int32(closeNone), int32(r))
	closeReset(c.client)
	closeReset(c.backend)
}

// run relays bytes both ways until both directions are done, then closes
// both sides. It runs on the connection's goroutine.
func (c *tcpConn) run() {
	var up sync.WaitGroup
	up.Go(c.copyClientToBackend)
	c.copyBackendToClient()
	up.Wait()
	c.client.Close()
	c.backend.Close()
}

// copyClientToBackend is the client-to-backend direction of run.
func (c *tcpConn) copyClientToBackend() {
	c.pipe(c.backend, c.client, closeClient, "to_backend")
}

// copyBackendToClient is the backend-to-client direction of run.
func (c *tcpConn) copyBackendToClient() {
	c.pipe(c.client, c.backend, closeBackend, "to_client")
}

// pipe copies src to dst until src's EOF, then closes dst's write half; on
// any error it closes both sides of c. side names src.
func (c *tcpConn) pipe(dst, src net.Conn, side closeReason, direction string) {
	var n int64
	var err error
	if c.watched() {
		n, err = c.copyNoting(dst, src)
	} else {
		// Both are *net.TCPConn: dst.ReadFrom(src) splices in the kernel.
		n, err = io.Copy(dst, src)
	}
	c.why.CompareAndSwap(int32(closeNone), int32(side))
	c.x.metrics.bytes.WithLabelValues(c.service, direction).Add(float64(n))
	if err != nil {
		c.client.Close()
		c.backend.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	c.client.Close()
	c.backend.Close()
}

// copyNoting copies like io.Copy, recording the time of every read in
// c.lastRead for the idle timeout, and the client's first byte.
func (c *tcpConn) copyNoting(dst, src net.Conn) (int64, error) {
	buf, ok := c.x.bufs.Get().(*[copyBufferSize]byte)
	if !ok {
		buf = new([copyBufferSize]byte)
	}
	defer c.x.bufs.Put(buf)
	var n int64
	for {
		nr, rerr := src.Read(buf[:])
		if nr > 0 {
			c.lastRead.Store(c.x.clk.Now().UnixNano())
			if src == c.client {
				c.clientSent.Store(true)
			}
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// expired returns why c must end at now, or closeNone: no byte from the
// client within firstByte of its arrival (closeFirstByte), or no byte
// either way for idle (closeIdle).
func (c *tcpConn) expired(now time.Time) closeReason {
	if c.firstByte > 0 && !c.clientSent.Load() && now.Sub(c.accepted) >= c.firstByte {
		return closeFirstByte
	}
	if c.idle > 0 && now.Sub(time.Unix(0, c.lastRead.Load())) >= c.idle {
		return closeIdle
	}
	return closeNone
}
