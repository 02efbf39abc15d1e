package listeners

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/clientbody"
)

// Client protections of http and https listeners (DESIGN.md §9: clients
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
//   - HTTP/2 rapid reset (CVE-2023-44487): a connection whose client resets
//     more than MaxEarlyResets streams before their answer ended, and more
//     than half of all its streams, is closed. net/http bounds the handlers
//     of a connection to its stream limit and closes a connection whose
//     queue of reset-before-start streams passes four times that
//     (ENHANCE_YOUR_CALM); this budget bounds the streams that did start,
//     each of which costs a routing decision and perhaps a backend request.

// DefaultMaxEarlyResets is the number of early-reset streams an HTTP/2
// connection may have before the budget applies (Config.MaxEarlyResets).
const DefaultMaxEarlyResets = 100

// connKey is the context key of a connection's *connGuard.
type connKey struct{}

// connGuard is the reset accounting of one client connection. Safe for
// concurrent use (the connection's handlers run concurrently); must not be
// copied.
type connGuard struct {
	conn net.Conn
	// tls is the TLS state of a connection the fast path handshook and
	// handed over (replayConn), nil otherwise: its requests' r.TLS.
	tls *tls.ConnectionState
	// Accessed atomically.
	streams atomic.Int64 // HTTP/2 requests whose handler ran
	resets  atomic.Int64 // of those, reset by the client before they ended
	closed  atomic.Bool
}

// connContext attaches a connGuard for c to the connection's context
// (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	g := &connGuard{conn: c}
	if rc, ok := c.(*replayConn); ok {
		g.tls = rc.tls
	}
	return context.WithValue(ctx, connKey{}, g)
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

// close closes the connection's socket at once (under TLS too: a TLS
// close_notify could block on a client that does not read).
func (g *connGuard) close() {
	c := g.conn
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	c.Close()
}

// protect returns next with the client protections above for listener l.
// resetClosed counts the connections closed over their reset budget.
func (m *Manager) protect(next http.Handler, l config.Listener, resetClosed prometheus.Counter) http.Handler {
	maxResets := int64(m.cfg.MaxEarlyResets)
	if maxResets == 0 {
		maxResets = DefaultMaxEarlyResets
	}
	lim := clientbody.Limits{IdleTimeout: l.RequestBodyTimeout}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		if r.ProtoMajor != 2 || maxResets < 0 {
			next.ServeHTTP(w, r)
			return
		}
		g, _ := r.Context().Value(connKey{}).(*connGuard)
		next.ServeHTTP(w, r)
		if g != nil && g.end(r.Context().Err() != nil, maxResets) {
			resetClosed.Inc()
			m.log.Warn().Str("listener", l.Name).Str("client", r.RemoteAddr).Int64("streams", g.streams.Load()).Int64("resets", g.resets.Load()).
				Msg("closing an HTTP/2 connection over its reset budget (rapid reset)")
			g.close()
		}
	})
}
