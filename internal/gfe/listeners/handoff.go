package listeners

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/config"
)

// dispatch gives c, just accepted, to p's current generation: to its fast
// path when it has one, else to its server (handoff). It does not block on
// the fast path.
func (p *port) dispatch(c net.Conn) {
	if g := p.cur.Load(); g != nil && g.fast != nil {
		g.fast.serve(c)
		return
	}
	p.handoff(c)
}

// handoff gives c to p's current generation's server, or closes it when p
// has none: an HTTP/1.x connection as a strictRequests (strict.go).
func (p *port) handoff(c net.Conn) {
	for {
		g := p.cur.Load()
		if g == nil {
			c.Close()
			return
		}
		if g.ln.offer(strictFor(c, g.spec, p.malformed)) {
			return
		}
		if p.cur.Load() == g {
			// Retired without a successor: the port is closing.
			c.Close()
			return
		}
	}
}

// handoffListener is the net.Listener a generation's server accepts from:
// its port's accept loop offers it connections. Closing it closes only the
// handoff, never the socket, so that the next generation takes over
// without a gap. Safe for concurrent use.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// offer hands c to a pending Accept; it returns false when h is closed.
func (h *handoffListener) offer(c net.Conn) bool {
	select {
	case h.conns <- c:
		return true
	case <-h.done:
		return false
	}
}

// Accept implements net.Listener.
func (h *handoffListener) Accept() (net.Conn, error) {
	select {
	case <-h.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (h *handoffListener) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

// Addr implements net.Listener.
func (h *handoffListener) Addr() net.Addr { return h.addr }

// limitBody returns next with request bodies limited to max bytes (0: no
// limit). A request that declares a longer body gets 413 at once. A body
// that turns out longer while it is forwarded (chunked, or HTTP/2 without
// a length) is cut at max; the request then fails upstream, and the error
// answer the proxy writes for it (5xx) becomes a 413.
func limitBody(next http.Handler, max int64) http.Handler {
	if max <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			w.Header().Set("Connection", "close")
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		body := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, max)}
		r.Body = body
		next.ServeHTTP(&limitedWriter{ResponseWriter: w, body: body}, r)
	})
}

// limitedBody is a request body under http.MaxBytesReader that remembers
// whether the limit was hit.
type limitedBody struct {
	io.ReadCloser
	exceeded atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if mbe := (*http.MaxBytesError)(nil); err != nil && errors.As(err, &mbe) {
		b.exceeded.Store(true)
	}
	return n, err
}

// limitedWriter turns the 5xx answer to a request whose body hit the limit
// into a 413. Unwrap gives http.ResponseController (and so ReverseProxy's
// flushes and upgrades) the underlying writer.
type limitedWriter struct {
	http.ResponseWriter
	body *limitedBody
}

func (w *limitedWriter) WriteHeader(code int) {
	if code >= 500 && w.body.exceeded.Load() {
		h := w.Header()
		h.Del("Content-Length")
		h.Set("Connection", "close")
		code = http.StatusRequestEntityTooLarge
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *limitedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// strictFor returns c as the server of listener l is to read it: a
// strictRequests when c speaks HTTP/1.x in the clear — an http listener's
// connection, or one the fast path handed off (replayConn, after its TLS
// handshake if any) — and c itself otherwise (a *tls.Conn that chose h2
// by ALPN). It counts the heads it refuses in malformed.
func strictFor(c net.Conn, l config.Listener, malformed prometheus.Counter) net.Conn {
	s := &strictRequests{Conn: c, limit: l.MaxHeaderBytes + headerSlack, malformed: malformed}
	if l.MaxHeaderBytes <= 0 {
		s.limit = http.DefaultMaxHeaderBytes + headerSlack
	}
	switch c := c.(type) {
	case *replayConn:
		s.tls = c.tls
		return s
	case *tls.Conn:
		return c
	}
	if l.Protocol != config.ListenerHTTP {
		return c
	}
	return s
}
