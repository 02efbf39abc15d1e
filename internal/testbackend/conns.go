package testbackend

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// connTracker remembers every client connection an instance accepted until
// the connection is closed, so that Stats can count them and the process
// admin can close them all (POST /admin/close). It tracks the raw TCP
// connections of every protocol, under TLS and gRPC alike, and hijacked
// ones (WebSocket) too. It must not be copied.
type connTracker struct {
	// Accessed atomically.
	accepted atomic.Uint64

	// Guarded by mu.
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newConnTracker() *connTracker {
	return &connTracker{conns: map[*trackedConn]struct{}{}}
}

// wrap returns ln whose accepted connections t tracks.
func (t *connTracker) wrap(ln net.Listener) net.Listener {
	return &trackedListener{Listener: ln, t: t}
}

// open returns the number of tracked connections not yet closed.
func (t *connTracker) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// closeAll closes every tracked connection and returns how many it closed.
// Servers using them see read and write errors, as after a network failure.
func (t *connTracker) closeAll() int {
	t.mu.Lock()
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}

type trackedListener struct {
	net.Listener
	t *connTracker
}

// Accept accepts a connection and tracks it until it is closed.
func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: l.t}
	l.t.accepted.Add(1)
	l.t.mu.Lock()
	l.t.conns[tc] = struct{}{}
	l.t.mu.Unlock()
	return tc, nil
}

// trackedConn is a connection tracked by a connTracker. It must not be
// copied.
type trackedConn struct {
	net.Conn
	t    *connTracker
	once sync.Once
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseWrite half-closes a TCP connection, as net/http does before closing
// one it answered with an error; other connections are closed whole.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// sessionGroup counts the goroutines that serve long-lived sessions of an
// instance (WebSocket handlers, gRPC stream receivers, TCP echo
// connections), which no server's graceful shutdown waits for, so that
// shutdown can. Unlike a sync.WaitGroup it refuses new sessions once
// shutdown has begun waiting, so that no session starts after the wait. It
// must not be copied.
type sessionGroup struct {
	// Guarded by mu.
	mu      sync.Mutex
	n       int
	closing bool
	idle    chan struct{} // closed when n drops to 0 while closing
}

// enter counts one session in and reports true, or reports false once wait
// has been called; the caller must then not start the session. A true
// enter must be followed by exactly one leave.
func (g *sessionGroup) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.n++
	return true
}

// leave counts one session out.
func (g *sessionGroup) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// goSession runs f in a new goroutine counted as a session, or reports false
// without running it once wait has been called.
func (g *sessionGroup) goSession(f func()) bool {
	if !g.enter() {
		return false
	}
	go func() {
		defer g.leave()
		f()
	}()
	return true
}

// wait refuses new sessions from now on and blocks until every running one
// has left or ctx is done, returning ctx.Err() in that case. It may be
// called again, for example with a longer deadline after closing the
// sessions' connections.
func (g *sessionGroup) wait(ctx context.Context) error {
	g.mu.Lock()
	g.closing = true
	if g.n == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
