package listeners

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/clientbody"
)

// Client protections of http and https listeners (docs/design.md §9: clients
// cannot hurt backends), applied to every request before the proxy sees
// it:
//
//   - The request body is a clientbody.Body: its read errors are the
//     client's (the proxy answers them 400, 408 or 413 and never counts
//     them against a backend), and a pause longer than the listener's
//     request_body_timeout ends it — except in a gRPC call over HTTP/2,
//     whose stream of messages may pause as long as the call lives.
//   - An HTTP/1.x request with a Transfer-Encoding is served and its
//     connection closed after the response. RFC 9112 §6.1: a server that
//     receives both Content-Length and Transfer-Encoding MUST close the
//     connection after responding, so that a request smuggled behind it on
//     the same connection (a desync between two parsers of the framing)
//     is never served. net/http drops the Content-Length of such a request
//     before any handler sees it, so the gfe cannot tell the two apart and
//     closes after every HTTP/1.x request with a Transfer-Encoding: a
//     chunked upload costs its client one new connection.
//   - An HTTP/1.x request with an Upgrade field closes its connection after
//     any answer but the 101 of an upgrade: strictRequests reads no later
//     head of that connection (strict.go).
//   - An HTTP/2 request with two Content-Length fields, or with a Host
//     field that names another authority than :authority, is answered 400
//     before the proxy sees it, as the fast path answers their HTTP/1.1
//     forms (strictHTTP2).
//   - HTTP/2 rapid reset (CVE-2023-44487): a connection whose client resets
//     more than MaxEarlyResets streams before their answer ended, and more
//     than half of all its streams, is closed. net/http bounds the handlers
//     of a connection to its stream limit and closes a connection whose
//     queue of reset-before-start streams passes four times that
//     (ENHANCE_YOUR_CALM); this budget bounds the streams that did start,
//     each of which costs a routing decision and perhaps a backend request.
//   - HTTP/2 rapid reset spread over connections: the early resets of a
//     connection that resets more than half its streams are charged to its
//     client's address too, against a decaying budget over all its
//     connections (resets.go); an address over it has its HTTP/2
//     connections closed at their next stream, which is not served.

// DefaultMaxEarlyResets is the number of early-reset streams an HTTP/2
// connection may have before the budget applies (Config.MaxEarlyResets).
const DefaultMaxEarlyResets = 100

// connKey is the context key of a connection's *connGuard.
type connKey struct{}

// connGuard is the reset accounting and the age limit of one client
// connection. Safe for concurrent use (the connection's handlers run
// concurrently); must not be copied.
type connGuard struct {
	conn   net.Conn
	client netip.Addr // the client's address, for its reset budget
	// endAt is when the connection reaches its max_connection_age (zero:
	// never). Immutable.
	endAt time.Time
	aged  atomic.Bool // a request found it past endAt
	// tls is the TLS state of a connection the gfe handshook and handed
	// over (strictRequests), nil otherwise: its requests' r.TLS.
	tls *tls.ConnectionState
	// Accessed atomically.
	streams atomic.Int64 // HTTP/2 requests whose handler ran
	resets  atomic.Int64 // of those, reset by the client before they ended
	closed  atomic.Bool
}

// connContext returns the http.Server.ConnContext of listener l: it
// attaches a connGuard to each connection's context, with the connection's
// own age limit drawn in [0.9, 1.1] × l.MaxConnectionAge and the TLS state
// of an HTTP/1.1 connection the gfe handshook and handed over.
func (m *Manager) connContext(l config.Listener) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		g := &connGuard{conn: c, client: clientAddr(c)}
		if sc, ok := c.(*strictRequests); ok {
			g.tls = sc.tls
		}
		g.endAt = m.connectionEnd(l)
		return context.WithValue(ctx, connKey{}, g)
	}
}

// connectionEnd returns when a connection of listener l accepted now
// reaches its max_connection_age, drawn in [0.9, 1.1] × MaxConnectionAge so
// that connections opened together do not end together; zero when l has
// none.
func (m *Manager) connectionEnd(l config.Listener) time.Time {
	if l.MaxConnectionAge <= 0 {
		return time.Time{}
	}
	return m.clk.Now().Add(time.Duration(float64(l.MaxConnectionAge) * (0.9 + 0.2*rand.Float64())))
}

// end counts the end of an HTTP/2 stream, reset early or not, and reports
// whether the connection just went over the reset budget max (> 0).
func (g *connGuard) end(reset bool, max int64) bool {
	streams := g.streams.Add(1)
	if !reset {
		return false
	}
	resets := g.resets.Add(1)
	return resets > max && 2*resets > streams && g.closed.CompareAndSwap(false, true)
}

// mostlyResets reports whether more than half of the connection's ended
// streams were reset early: its resets are charged to its client.
func (g *connGuard) mostlyResets() bool { return 2*g.resets.Load() > g.streams.Load() }

// close closes the connection's socket at once (under TLS too: a TLS
// close_notify could block on a client that does not read).
func (g *connGuard) close() { closeSocket(g.conn) }

// protect returns next with the client protections above for listener l,
// and ends connections past their max_connection_age. resetClosed counts
// the connections closed over their reset budget, clientClosed those
// closed over their client's, ageClosed those ended for their age, and
// malformed the HTTP/2 requests refused by strictHTTP2.
func (m *Manager) protect(next http.Handler, l config.Listener, resetClosed, clientClosed, ageClosed, malformed prometheus.Counter) http.Handler {
	maxResets := int64(m.cfg.MaxEarlyResets)
	if maxResets == 0 {
		maxResets = DefaultMaxEarlyResets
	}
	lim := clientbody.Limits{IdleTimeout: l.RequestBodyTimeout}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && !strictHTTP2(r) {
			malformed.Inc()
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		if r.ProtoMajor == 1 && len(r.Header["Upgrade"]) > 0 {
			// strictRequests reads no later head of the connection.
			w = &closeUnlessSwitched{ResponseWriter: w}
		}
		if r.TLS == nil && r.ProtoMajor == 1 {
			if g, _ := r.Context().Value(connKey{}).(*connGuard); g != nil && g.tls != nil {
				r.TLS = g.tls // handshook by the fast path (replayConn)
			}
		}
		if r.Body != nil && r.Body != http.NoBody {
			l := lim
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				// A gRPC call's messages may pause as long as the call
				// lives (a quiet bidi stream); its deadline is its own.
				l.IdleTimeout = 0
			}
			r.Body = clientbody.Wrap(w, r, l, m.clk)
		}
		g, _ := r.Context().Value(connKey{}).(*connGuard)
		if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		if g != nil && !g.endAt.IsZero() && !m.clk.Now().Before(g.endAt) {
			// Past max_connection_age: HTTP/1.1 closes after this
			// response, HTTP/2 sends a GOAWAY (net/http reads the header
			// so, and does not send it on an HTTP/2 response).
			if g.aged.CompareAndSwap(false, true) {
				ageClosed.Inc()
			}
			w.Header().Set("Connection", "close")
		}
		if r.ProtoMajor != 2 || maxResets < 0 || g == nil {
			next.ServeHTTP(w, r)
			return
		}
		if m.resets != nil && m.resets.blocked(g.client) {
			// Its address is over its reset budget: not served.
			m.closeOverClientBudget(g, l, clientClosed)
			panic(http.ErrAbortHandler) // reset the stream; no answer
		}
		next.ServeHTTP(w, r)
		reset := r.Context().Err() != nil
		switch {
		case g.end(reset, maxResets):
			resetClosed.Inc()
			m.log.Warn().Str("listener", l.Name).Str("client", r.RemoteAddr).Int64("streams", g.streams.Load()).Int64("resets", g.resets.Load()).
				Msg("closing an HTTP/2 connection over its reset budget (rapid reset)")
			g.close()
		case reset && m.resets != nil && g.mostlyResets() && m.resets.charge(g.client):
			m.closeOverClientBudget(g, l, clientClosed)
		}
	})
}

// strictHTTP2 reports whether HTTP/2 request r is one the fast path's
// rules let through: at most one Content-Length (net/http's HTTP/2 server
// uses the first and keeps both for the backend), and no Host field
// naming another authority than :authority (RFC 9113 §8.3.1; net/http
// routes by :authority and keeps the Host field). An HTTP/2 field cannot
// hold a bare LF or a fold: x/net/http2 refuses a control character in a
// value.
func strictHTTP2(r *http.Request) bool {
	if len(r.Header["Content-Length"]) > 1 {
		return false
	}
	for _, h := range r.Header["Host"] {
		if !strings.EqualFold(h, r.Host) {
			return false
		}
	}
	return true
}

// closeUnlessSwitched is the ResponseWriter of an HTTP/1.x request with an
// Upgrade field: any final answer closes the connection after it. The
// 101 of an upgrade does not come through it (ReverseProxy writes it on
// the hijacked connection, which becomes a tunnel); strictRequests checks
// no head after such a request, so none may follow on the connection.
type closeUnlessSwitched struct {
	http.ResponseWriter
	wrote bool
}

func (w *closeUnlessSwitched) WriteHeader(code int) {
	if code >= 200 && !w.wrote {
		w.wrote = true
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeUnlessSwitched) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController (ReverseProxy's flushes and
// hijack) the underlying writer.
func (w *closeUnlessSwitched) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// closeOverClientBudget closes connection g, whose client address is over
// its reset budget, and counts it (once) in clientClosed.
func (m *Manager) closeOverClientBudget(g *connGuard, l config.Listener, clientClosed prometheus.Counter) {
	if g.closed.CompareAndSwap(false, true) {
		clientClosed.Inc()
		m.budgetLog.Warn().Str("listener", l.Name).Str("client", g.client.String()).
			Msg("closing an HTTP/2 connection: its client address is over its reset budget across connections (rapid reset; one line a second at most)")
	}
	g.close()
}
