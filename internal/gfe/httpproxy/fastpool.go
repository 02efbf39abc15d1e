package httpproxy

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/h1"
	"github.com/spillway-lb/spillway/internal/gfe/poller"
)

// The fast path's backend connections and their pool.
//
// The reuse rule. HTTP/1.1 pairs answers with requests by order alone, so
// a byte a backend sends that no request asked for — a body on a HEAD
// response or a 304, a body longer than its Content-Length, a second
// response — would be read as the answer to the next request on its
// connection, which the pool gives to any client: that client would get
// another's response, Set-Cookie and all, and every later answer on the
// connection would be one behind. So a pooled connection carries another
// request only if
//
//   - its last response ended exactly where its framing said (relay: the
//     body copied to its framed end, the connection kept alive) and
//     nothing followed it in the read buffer (checked when the response
//     ends: the bytes came with it), and
//   - nothing has arrived on its socket since, not even an end of file:
//     one non-blocking peek (recvfrom with MSG_PEEK|MSG_DONTWAIT, quiet)
//     right before the next request's first byte is written, whatever
//     the connection's idle time (bytes that come in a later segment,
//     once the connection is back in the pool).
//
// Otherwise the connection is closed (counted in
// spillway_gfe_backend_unsolicited_total when bytes were the reason) and
// the request goes on a new one. net/http's Transport keeps the same
// rule with a goroutine per idle connection blocked in a read, which
// closes the connection when anything arrives ("Unsolicited response
// received on idle HTTP channel"); the peek costs one system call per
// reused request instead, and no goroutine.
//
// What no HTTP/1.1 client can tell apart: a stray byte that reaches the
// gfe's socket after that peek — in the instant between the peek and the
// write, or after the request left but before the backend read it — is
// indistinguishable from the start of the answer, since nothing in an
// answer names its request. net/http has the same window, wider (its
// readLoop counts the request as expected before its writeLoop writes
// it). The real answer then arrives behind the one taken for it, so the
// connection is closed when that exchange ends or at its next peek —
// unless that answer in turn reaches the socket inside the next request's
// window. Stray bytes already there when the gfe looks never shift a
// connection's answers; only such coincidences can, one answer each.
// A backend that sends unasked bytes is broken; the counter names its
// service.

// fastReadBuffer is the read buffer of a backend connection: a response
// head must fit in it.
const fastReadBuffer = 16 << 10

// fastWriteBuffer is the write buffer of a backend connection.
const fastWriteBuffer = 4 << 10

// fastIdleTimeout is how long a backend connection may wait in the pool
// (the slow path's Transport uses 90 s too).
const fastIdleTimeout = 90 * time.Second

// fastMaxIdlePerBackend bounds the idle connections kept per backend (as
// the slow path's MaxIdleConnsPerHost).
const fastMaxIdlePerBackend = 256

// backendConn is one raw HTTP/1.1 connection to a backend.
type backendConn struct {
	c         net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	resp      h1.Response
	idleSince time.Time
	// deadline is the deadline last set on c, read and write (zero:
	// none). It stays while c is idle in the pool (nothing reads c there)
	// and is replaced by the next attempt's: one timer update per request.
	deadline time.Time
	// raw is c's socket, for quiet (nil when c is not a socket); look is
	// bc.lookFD as a func value made once at dial, so that a peek does not
	// allocate, and seen what it found.
	raw     syscall.RawConn
	look    func(fd uintptr)
	seen    peekState
	peekBuf [1]byte
}

// newBackendConn returns c, a new connection to a backend, as a
// backendConn that reads through pl (nil: directly).
func newBackendConn(c net.Conn, pl *poller.Group) *backendConn {
	bc := &backendConn{}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			bc.raw = raw
			bc.look = bc.lookFD
		}
	}
	bc.c = pl.Wrap(c)
	bc.br = bufio.NewReaderSize(bc.c, fastReadBuffer)
	bc.bw = bufio.NewWriterSize(bc.c, fastWriteBuffer)
	return bc
}

// setDeadline sets bc's read and write deadline to t unless it is already
// t.
func (bc *backendConn) setDeadline(t time.Time) {
	if !t.Equal(bc.deadline) {
		bc.c.SetDeadline(t)
		bc.deadline = t
	}
}

// quiet reports whether nothing arrived on bc since its last response
// ended (the reuse rule above): no byte in its buffer or its socket, not
// even an end of file. stray says bytes did arrive (not an end of file or
// an error). A connection that is not a socket counts as quiet. It
// consumes nothing, does not block and does not allocate; no deadline of
// c's plays a part (a read with a past deadline, such as the last
// request's left on an idle connection, would not reach the socket).
func (bc *backendConn) quiet() (ok, stray bool) {
	if bc.br.Buffered() > 0 {
		return false, true
	}
	if bc.raw == nil {
		return true, false
	}
	if err := bc.raw.Control(bc.look); err != nil {
		return false, false // closed under us
	}
	return bc.seen == peekNothing, bc.seen == peekData
}

// lookFD is bc.look: a peek at fd into bc.seen.
func (bc *backendConn) lookFD(fd uintptr) { bc.seen = peekFD(fd, bc.peekBuf[:]) }

// peekState is what a look at a socket found.
type peekState uint8

const (
	peekNothing peekState = iota // open, nothing to read yet
	peekData                     // bytes waiting
	peekClosed                   // an end of file, a reset, or the connection closed
	peekUnknown                  // not a socket
)

// peekFD looks at socket fd without blocking and without consuming: one
// recvfrom(MSG_PEEK|MSG_DONTWAIT) of up to len(b) bytes into b.
func peekFD(fd uintptr, b []byte) peekState {
	n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == nil && n > 0:
		return peekData
	case err == nil:
		return peekClosed // end of file
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
		return peekNothing
	}
	return peekClosed // reset, or closed under us
}

// peek looks at c's socket as peekFD does, through RawConn.Control, so
// that no deadline of c's plays a part. It looks through wrappers that
// have Unwrap() net.Conn. It allocates (the RawConn); a backendConn's
// quiet does not.
func peek(c net.Conn) peekState {
	for {
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekUnknown
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekUnknown
	}
	st := peekNothing
	var b [1]byte
	if err := rc.Control(func(fd uintptr) { st = peekFD(fd, b[:]) }); err != nil {
		return peekClosed // the connection is closed
	}
	return st
}

// fastPool holds the idle connections to backends, by address, most
// recently used first out. Safe for concurrent use; must not be copied.
type fastPool struct {
	mu     sync.Mutex
	idle   map[string][]*backendConn // guarded by mu
	closed bool                      // guarded by mu: put closes instead
}

// get returns an idle connection to addr, or nil. The caller checks that
// it is quiet right before writing on it.
func (fp *fastPool) get(addr string, now time.Time) *backendConn {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	cs := fp.idle[addr]
	if len(cs) == 0 {
		return nil
	}
	for len(cs) > 0 {
		bc := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		cs = cs[:len(cs)-1]
		if now.Sub(bc.idleSince) < fastIdleTimeout {
			fp.idle[addr] = cs
			return bc
		}
		bc.c.Close()
	}
	fp.idle[addr] = cs
	return nil
}

// put returns bc, whose last response ended exactly at its framing with
// nothing after it in bc's buffer, to the pool.
func (fp *fastPool) put(addr string, bc *backendConn, now time.Time) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.closed || len(fp.idle[addr]) >= fastMaxIdlePerBackend {
		bc.c.Close()
		return
	}
	bc.idleSince = now
	if fp.idle == nil {
		fp.idle = map[string][]*backendConn{}
	}
	fp.idle[addr] = append(fp.idle[addr], bc)
}

// closeIdle closes every idle connection.
func (fp *fastPool) closeIdle() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for addr, cs := range fp.idle {
		for _, bc := range cs {
			bc.c.Close()
		}
		delete(fp.idle, addr)
	}
}

// dialFast opens a connection to addr, by deadline if set, and within
// perTry (> 0) on the proxy's clock: perTryExpired says that is what
// ended a failed dial.
func (p *Proxy) dialFast(addr string, deadline time.Time, perTry time.Duration) (bc *backendConn, perTryExpired bool, err error) {
	d := *p.dialer
	if !deadline.IsZero() && (d.Deadline.IsZero() || deadline.Before(d.Deadline)) {
		d.Deadline = deadline
	}
	ctx := context.Background()
	var fired atomic.Bool
	if perTry > 0 {
		// On the proxy's clock, like the wait for the answer's head.
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		t := p.clk.AfterFunc(perTry, func() {
			fired.Store(true)
			cancel()
		})
		defer t.Stop()
		ctx = dctx
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fired.Load(), err
	}
	pl, _ := poller.Shared() // nil, wrapping nothing, if it could not start
	return newBackendConn(c, pl), false, nil
}
