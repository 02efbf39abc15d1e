package listeners

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/h1"
	"github.com/spillway-lb/spillway/internal/gfe/httpproxy"
	"github.com/spillway-lb/spillway/internal/gfe/poller"
)

// The split at accept (docs/design.md §4, docs/listeners.md). An http or
// https listener with fast_path reads each connection's request heads itself
// and parses them with h1.Parse. An https listener's connections are
// handshaken here first (the live certificates, as net/http would): ALPN h2
// goes to net/http's server at once as the *tls.Conn it is, http/1.1 or no
// ALPN stays.
//
//   - Fast: the request goes to Options.Fast (httpproxy.ServeFast), and
//     the connection stays with the fast path for its next request.
//   - HandOff (HTTP/2's preface, upgrades, Expect, chunked bodies, ...):
//     the connection, with every byte read so far replayed first
//     (replayConn), goes to the port's current net/http server generation
//     as any connection did before, which then owns it: h2c, gRPC and
//     WebSocket behave exactly as without a fast path. That holds for a
//     later request of a kept-alive connection too.
//   - Reject: 400 and close.
//
// The listener's limits hold as on net/http: read_header_timeout from the
// connection's accept (its first request) or a request's first byte (set
// only when the head is not all in by then), idle_timeout between requests
// (at most idleSlack late: a busy connection moves its deadline once per
// slack, not once per request), a head over max_header_bytes + 4096 bytes
// (net/http's slack) 431, a Content-Length over max_request_body_bytes 413,
// both with the connection closed; request_body_timeout bounds a pause in
// a body (ServeFast). A fast connection holds its fd budget like any other
// (the accept loop's), and belongs to the generation that accepted it: a
// retired generation (settings changed, listener removed, shutdown) closes
// its idle fast connections at once and the others after their current
// answer, and whatever is left when the drain's time is up. A connection
// it hands off goes to the port's current generation. An HTTP/1.1
// connection handed off after a TLS handshake here reaches net/http as a
// replayConn, not a *tls.Conn: protect restores its requests' r.TLS.
//
// A cleartext connection reads through the shared poller
// (poller.Shared), and connections are served in the order their
// requests came. While it waits for a request (its first, or the next
// on a kept-alive connection) it holds no goroutine and no buffers: it
// parks in the poller (poller.Conn.Park; fastidle.go), its idle_timeout
// (or read_header_timeout) on the poller's deadline heap, and the poller
// hands it to a worker goroutine when bytes come, the client closes, the
// deadline passes or the drain or the fd budget's reclaim closes it —
// exactly once. 15,000 idle connections cost 1.5–2.0 KiB of RSS each
// (BENCHMARKS.md §8). A TLS connection does not park, nor read through
// the poller: tls.Conn may hold a whole record it read, which the socket
// no longer shows. A connection handed off leaves the poller.
//
// As net/http's background read cancels a request whose client left, the
// fast path's sweep notices a client that closed its connection while its
// request has been served a whole sweepInterval (FastRequest.Leave), so
// within 0.5–1.5 s; over TLS, not a client that closes with its closing
// alert, which reads as data.

// FastHandler serves the requests the fast path takes
// (httpproxy.Proxy.ServeFast).
type FastHandler interface {
	// ServeFast forwards r and writes its answer to r.Out, flushed, and
	// reports whether the connection may carry another request (then it
	// consumed exactly r's head and body from r.Client).
	ServeFast(r *httpproxy.FastRequest) bool
}

// headerSlack is what net/http's server reads beyond MaxHeaderBytes before
// it answers 431 (its initial read limit is MaxHeaderBytes + 4096).
const headerSlack = 4096

// fastServer is the fast path of one generation of an http listener. Safe
// for concurrent use.
type fastServer struct {
	// Immutable after newFastServer.
	m       *Manager
	p       *port
	spec    config.Listener
	h       FastHandler
	bufSize int
	fast    prometheus.Counter // requests served on the fast path
	handoff prometheus.Counter // connections handed to net/http
	reject  prometheus.Counter // heads rejected (400) or too large (431)
	age     prometheus.Counter // connections ended for max_connection_age
	pool    sync.Pool          // of *httpproxy.FastRequest with their buffers
	// tls, for an https listener, is the server configuration of its
	// handshakes (ALPN h2 and http/1.1); nil for http.
	tls *tls.Config
	// handoffAll, for an https listener without fast_path, hands every
	// connection to net/http once its handshake is done: the fast path
	// serves none, and counts none.
	handoffAll bool

	// wg counts the connections being served, parked ones included (a
	// parked connection has no goroutine, but its resume will end it).
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[*fastConn]struct{} // guarded by mu
	idle  idleList[*fastConn]    // guarded by mu: the idle ones of conns
	// busy lists the serving ones of conns, for sweep (which so looks at
	// the requests served, not at thousands of idle connections); guarded
	// by mu.
	busy     idleList[*fastConn]
	closing  bool   // guarded by mu
	sweeping bool   // guarded by mu: sweep runs
	sweeps   uint64 // guarded by mu: sweep's rounds so far
}

// fastConn is one client connection on the fast path.
type fastConn struct {
	c  net.Conn
	fr *httpproxy.FastRequest // its request state, for Abort
	// Guarded by fastServer.mu.
	idle   bool // waiting for the next request's first byte
	closed bool // closed by the server's drain, or for a waiting client
	// node is its place in fastServer.idle while idle, busyNode in
	// fastServer.busy while serving.
	node, busyNode idleNode[*fastConn]
	// serving says a request is being read or served: set by
	// setIdle(false), from the connection's first request on (after any
	// TLS handshake), and busySince is fastServer.sweeps at that moment.
	serving   bool
	busySince uint64
	// state is an https connection's TLS state after its handshake.
	state *tls.ConnectionState
	// endAt is when it reaches max_connection_age (zero: never).
	endAt time.Time
	aged  bool // its age was reached and counted
	// rd is the read deadline last set on c (zero: none), and headerSet
	// says it bounds the current request head (read_header_timeout).
	// Only the goroutine serving fc uses them and the fields below it
	// (serveConn's, then after each park resume's: the poller's hand-off
	// orders them).
	rd        time.Time
	headerSet bool
	// wake is resume for fc, made at its first park (Park takes a
	// pointer to it, so that parking allocates nothing); parkedFirst
	// says the park was before fc's first request.
	wake        func()
	parkedFirst bool
}

// setReadDeadline sets fc's read deadline to t.
func (fc *fastConn) setReadDeadline(t time.Time) {
	fc.c.SetReadDeadline(t)
	fc.rd = t
}

// idleSlack is how much later than idle_timeout an idle connection may be
// closed. Between requests the read deadline is moved only when it would
// fall short of idle_timeout, and then to idle_timeout + idleSlack(it), so
// that a busy connection sets it about once per slack instead of once per
// request (each set is a timer update in the runtime).
func idleSlack(idle time.Duration) time.Duration { return min(idle/16, time.Second) }

// awaitIdle arms fc's idle deadline: its read deadline becomes at least
// now + idle_timeout, at most idleSlack later.
func (fs *fastServer) awaitIdle(fc *fastConn) {
	idle := fs.spec.IdleTimeout
	now := time.Now()
	if fc.rd.IsZero() || fc.headerSet || fc.rd.Sub(now) < idle {
		fc.setReadDeadline(now.Add(idle + idleSlack(idle)))
	}
	fc.headerSet = false
}

func (m *Manager) newFastServer(p *port, l config.Listener) *fastServer {
	fs := &fastServer{m: m, p: p, spec: l, h: m.opts.Fast, bufSize: l.MaxHeaderBytes + headerSlack, conns: map[*fastConn]struct{}{}}
	fs.fast = m.metrics.fastPath.WithLabelValues(l.Name, "fast")
	fs.handoff = m.metrics.fastPath.WithLabelValues(l.Name, "handoff")
	fs.reject = m.metrics.fastPath.WithLabelValues(l.Name, "reject")
	fs.age = m.metrics.ageClosed.WithLabelValues(l.Name)
	return fs
}

// serve takes c, just accepted, onto the fast path in a goroutine of its
// own. It does not block.
func (fs *fastServer) serve(c net.Conn) {
	if fs.tls == nil { // a TLS connection's reads wait in tls.Conn
		pl, _ := poller.Shared() // nil, wrapping nothing, if it could not start
		c = pl.Wrap(c)
	}
	fc := &fastConn{c: c, fr: fs.getRequest(c), endAt: fs.m.connectionEnd(fs.spec)}
	fc.node.v, fc.busyNode.v = fc, fc
	fs.mu.Lock()
	if fs.closing {
		fs.mu.Unlock()
		fs.putRequest(fc.fr)
		fs.p.dispatch(unpolled(c)) // a newer generation takes it, or the port is closing
		return
	}
	fs.conns[fc] = struct{}{}
	fs.wg.Add(1)
	fs.mu.Unlock()
	go fs.serveConn(fc)
}

// unpolled returns c out of the poller, for another owner.
func unpolled(c net.Conn) net.Conn {
	if pc, ok := c.(*poller.Conn); ok {
		return pc.Release()
	}
	return c
}

// forget stops tracking fc.
func (fs *fastServer) forget(fc *fastConn) {
	fs.mu.Lock()
	delete(fs.conns, fc)
	fs.idle.remove(&fc.node)
	fs.busy.remove(&fc.busyNode)
	fs.mu.Unlock()
}

// setIdle marks fc idle (waiting for a request) or busy (reading or
// serving one). It reports false when fc must close instead: the drain
// closed it, or it would become idle while the server drains.
func (fs *fastServer) setIdle(fc *fastConn, idle bool) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fc.closed || (idle && fs.closing) {
		return false
	}
	fc.idle = idle
	fc.serving = !idle
	now := time.Now()
	if idle {
		fs.idle.push(&fc.node, now)
		fs.busy.remove(&fc.busyNode)
	} else {
		fs.idle.remove(&fc.node)
		fs.busy.push(&fc.busyNode, now)
	}
	if !idle {
		fc.busySince = fs.sweeps
		if !fs.sweeping {
			fs.sweeping = true
			go fs.sweep()
		}
	}
	return true
}

// sweepInterval is how often the fast path looks for clients that left
// while their request was served.
const sweepInterval = 500 * time.Millisecond

// sweep looks, every sweepInterval, at the connections whose request has
// been served for a whole interval or more, and tells the request of one
// whose client has closed it (FastRequest.ClientGone: a peek at the
// socket) that its client left (Leave): so a backend's slow answer that
// nobody will read stops holding the backend, and the request does not
// count as demand, as on the slow path, where net/http's background read
// cancels the request's context. It stops when no request is served (the
// next one starts it again), so an idle server runs none.
func (fs *fastServer) sweep() {
	t := fs.m.clk.NewTicker(sweepInterval)
	defer t.Stop()
	for range t.C() {
		if !fs.sweepOnce() {
			return
		}
	}
}

// sweepOnce is one round of sweep; it reports false, and marks the sweep
// stopped, when no request is served. The peeks (httpproxy.ClientClosed,
// a non-blocking syscall each) run outside fs.mu, so that requests
// starting meanwhile do not wait for them; a connection found closed is
// told so under fs.mu, and only while it is still tracked, which keeps
// its FastRequest its own (it goes back to the pool only after forget).
// It looks at the serving connections alone (fs.busy): under fs.mu, a walk
// of 15,000 idle ones twice a second held up every request's setIdle.
func (fs *fastServer) sweepOnce() bool {
	fs.mu.Lock()
	fs.sweeps++
	busy := false
	var long []*fastConn
	for n := fs.busy.head; n != nil; n = n.next {
		fc := n.v
		if !fc.serving || fc.closed {
			continue
		}
		busy = true
		if fs.sweeps-fc.busySince >= 2 {
			long = append(long, fc)
		}
	}
	if !busy {
		fs.sweeping = false
	}
	fs.mu.Unlock()
	for _, fc := range long {
		if !httpproxy.ClientClosed(fc.c) {
			continue
		}
		fs.mu.Lock()
		if _, ok := fs.conns[fc]; ok && fc.serving {
			fc.fr.Leave() // counted by the proxy, as a canceled client
		}
		fs.mu.Unlock()
	}
	return busy
}

func (fs *fastServer) getRequest(c net.Conn) *httpproxy.FastRequest {
	fr, _ := fs.pool.Get().(*httpproxy.FastRequest)
	if fr == nil {
		fr = &httpproxy.FastRequest{Client: bufio.NewReaderSize(nil, fs.bufSize), Out: bufio.NewWriterSize(nil, 4<<10)}
	}
	fr.Client.Reset(c)
	fr.Out.Reset(c)
	fr.Conn = c
	fr.Remote, fr.Local = addrPort(c.RemoteAddr()), addrPort(c.LocalAddr())
	fr.BodyTimeout = fs.spec.RequestBodyTimeout
	fr.TLS = false
	fr.Close = false
	fr.Reset()
	return fr
}

func (fs *fastServer) putRequest(fr *httpproxy.FastRequest) {
	fr.Client.Reset(nil)
	fr.Out.Reset(nil)
	fr.Conn = nil
	fs.pool.Put(fr)
}

// addrPort returns a's address and port, zero when a is not TCP.
func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	return netip.AddrPort{}
}

// The fixed answers of the fast path's listener side, as net/http's server
// words them.
const (
	answer400 = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
	answer431 = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"
	answer413 = "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 23\r\nConnection: close\r\n\r\nrequest body too large\n"
)

// connEnd is how serving a connection stopped, for now or for good.
type connEnd uint8

const (
	// endClose: the connection closes.
	endClose connEnd = iota
	// endHandedOff: another owner (net/http) has it.
	endHandedOff
	// endParked: it waits for its next request parked in the poller,
	// with no goroutine (waitRequest); resume serves it again.
	endParked
)

// serveConn serves fc's requests until it closes, is handed off, or
// parks between two requests (then resume takes over).
func (fs *fastServer) serveConn(fc *fastConn) { fs.end(fc, fs.open(fc)) }

// end finishes serving fc as e says: unless it parked, fc is forgotten,
// closed unless handed off, and its FastRequest goes back to the pool.
func (fs *fastServer) end(fc *fastConn, e connEnd) {
	if e == endParked {
		return
	}
	fs.forget(fc)
	if e != endHandedOff {
		fc.c.Close()
	}
	fs.putRequest(fc.fr)
	fs.wg.Done()
}

// open starts serving fc, just accepted: the TLS handshake of an https
// listener, the wait for the first request, then its requests.
func (fs *fastServer) open(fc *fastConn) connEnd {
	c, fr := fc.c, fc.fr
	l := &fs.spec
	fc.setReadDeadline(time.Now().Add(l.ReadHeaderTimeout))
	fc.headerSet = true
	if fs.tls != nil {
		// https: the handshake within read_header_timeout (net/http bounds
		// it so too). ALPN h2 goes to net/http at once, as it is; http/1.1
		// or none stays.
		tc := tls.Server(c, fs.tls)
		c.SetDeadline(time.Now().Add(l.ReadHeaderTimeout))
		if err := tc.Handshake(); err != nil {
			fs.m.log.Debug().Err(err).Str("listener", l.Name).Str("client", fr.Remote.String()).Msg("fast path: TLS handshake")
			return endClose
		}
		c.SetDeadline(time.Time{})
		fc.rd = time.Time{}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			if !fs.handoffAll {
				fs.handoff.Inc()
			}
			fs.forget(fc)
			fs.p.handoff(tc)
			return endHandedOff
		}
		state := tc.ConnectionState()
		fc.state = &state
		if fs.handoffAll {
			fs.forget(fc)
			fs.p.handoff(&replayConn{Conn: tc, tls: fc.state})
			return endHandedOff
		}
		c = tc
		fr.Client.Reset(c)
		fr.Out.Reset(c)
		fr.Conn = c
		fr.TLS = true
		fc.setReadDeadline(time.Now().Add(l.ReadHeaderTimeout))
	} else {
		// Until its first request's bytes come, too, a connection holds
		// no request buffers nor goroutine (waitRequest): those of a
		// burst of new connections are the pool's few, not one each.
		switch fs.waitRequest(fc, true) {
		case waitParked:
			return endParked
		case waitFailed:
			return endClose
		}
	}
	return fs.requests(fc, c, true)
}

// requests serves fc's requests on c (fc.c, or its tls.Conn), from the
// one whose first byte is there (the first: first is set) until fc closes,
// is handed off or parks.
func (fs *fastServer) requests(fc *fastConn, c net.Conn, first bool) connEnd {
	l := &fs.spec
	for ; ; first = false {
		if !fs.setIdle(fc, false) { // a request begins
			return endClose
		}
		if !first {
			// Between requests it was idle_timeout until this one's first
			// byte; now read_header_timeout for its head (readHead sets it
			// when the head is not all there yet).
			fc.headerSet = false
		}
		fr := fc.fr
		n, v, ok := fs.readHead(fc)
		if !ok {
			return endClose
		}
		switch {
		case v == h1.Reject:
			fs.reject.Inc()
			fs.m.log.Debug().Str("listener", l.Name).Str("client", fr.Remote.String()).Str("why", fr.Head.Why).Msg("fast path: request head rejected")
			c.Write([]byte(answer400))
			return endClose
		case v == h1.HandOff:
			fs.handoff.Inc()
			buf, _ := fr.Client.Peek(fr.Client.Buffered())
			rc := &replayConn{Conn: unpolled(c), buf: append([]byte(nil), buf...), tls: fc.state}
			fc.setReadDeadline(time.Time{})
			fs.forget(fc)
			fs.p.handoff(rc)
			return endHandedOff
		case l.MaxRequestBodyBytes > 0 && fr.Head.ContentLength > l.MaxRequestBodyBytes:
			c.Write([]byte(answer413))
			return endClose
		}
		fs.fast.Inc()
		if !fc.endAt.IsZero() && !fs.m.clk.Now().Before(fc.endAt) {
			// Past max_connection_age: this answer closes the connection.
			fr.Close = true
			if !fc.aged {
				fc.aged = true
				fs.age.Inc()
			}
		}
		fr.HeadLen = n
		if fr.Head.ContentLength > 0 {
			// The body is bounded by request_body_timeout alone. A
			// bodiless request's connection is not read while it is
			// served, so its deadline may stay.
			fc.setReadDeadline(time.Time{})
		}
		if !fs.h.ServeFast(fr) {
			return endClose
		}
		// Between requests: idle_timeout until the next one's first
		// byte, unless it is here already (pipelined).
		if !fs.setIdle(fc, true) {
			return endClose
		}
		if fr.Client.Buffered() == 0 {
			fs.awaitIdle(fc)
			switch fs.waitRequest(fc, false) {
			case waitParked:
				return endParked
			case waitFailed:
				return endClose
			}
		}
	}
}

// readHead reads and parses the next request head of fc's connection,
// within read_header_timeout once it must wait for more of it; ok is false
// when the connection must close (read error or timeout, or a head too
// large, answered 431).
func (fs *fastServer) readHead(fc *fastConn) (n int, v h1.Verdict, ok bool) {
	fr := fc.fr
	br := fr.Client
	for {
		buf, _ := br.Peek(br.Buffered())
		n, v, err := h1.Parse(buf, &fr.Head)
		if err == nil {
			return n, v, true
		}
		if len(buf) >= fs.bufSize {
			fs.reject.Inc()
			fr.Conn.Write([]byte(answer431))
			return 0, 0, false
		}
		if !fc.headerSet {
			fc.setReadDeadline(time.Now().Add(fs.spec.ReadHeaderTimeout))
			fc.headerSet = true
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return 0, 0, false
		}
	}
}

// oldestIdle implements idleSource.
func (fs *fastServer) oldestIdle() (time.Time, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.idle.oldest()
}

// closeOldestIdle implements idleSource. The connection is closed under
// fs.mu, as the drain closes idle ones: its goroutine, waiting for the
// next request's first byte, then finds it closed (setIdle).
func (fs *fastServer) closeOldestIdle() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.idle.head
	if n == nil {
		return false
	}
	fc := n.v
	fs.idle.remove(n)
	fc.closed = true
	fc.c.Close()
	return true
}

// shutdown drains fs: idle connections close at once, busy ones after
// their current answer; when ctx ends first the rest are closed. It
// returns how many were closed so (0: every connection finished in time).
func (fs *fastServer) shutdown(ctx context.Context) int {
	fs.mu.Lock()
	fs.closing = true
	for fc := range fs.conns {
		if fc.idle {
			fc.closed = true
			fc.c.Close()
		}
	}
	fs.mu.Unlock()
	done := make(chan struct{})
	go func() {
		fs.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return 0
	case <-ctx.Done():
	}
	fs.mu.Lock()
	cut := len(fs.conns)
	for fc := range fs.conns {
		fc.closed = true
		fc.c.Close()
		if fc.fr != nil { // nil while it waits for a request (waitRequest)
			fc.fr.Abort()
		}
	}
	fs.mu.Unlock()
	<-done
	return cut
}

// replayConn is a connection handed to net/http after the fast path read
// from it: its reads return buf first, then the connection's bytes. Over
// TLS, net/http cannot see the handshake the fast path did (it looks for
// a *tls.Conn); handoff makes it a strictRequests carrying tls, which
// connContext and protect give its requests as r.TLS.
type replayConn struct {
	net.Conn
	buf []byte
	tls *tls.ConnectionState // nil for cleartext
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// errNoFastHandler is logged when a listener asks for the fast path and
// the gfe has none.
var errNoFastHandler = errors.New("fast_path is set but the gfe has no fast handler; serving with net/http")
