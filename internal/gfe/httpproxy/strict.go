package httpproxy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"sync"

	"github.com/spillway-lb/spillway/internal/gfe/h1"
)

// Strict response heads on the net/http path (HTTP/1.1 backends).
//
// net/http's Transport reads response heads leniently: a bare LF ends a
// header line (so "X-A: a\nSet-Cookie: s=1" is two fields, one of them a
// cookie for the client), obsolete line folding is joined into the value,
// and every interim (1xx) answer goes to ReverseProxy, which relays each to
// the client without bound. The fast path refuses all of these
// (h1.ParseResponse; maxInterim). So that a backend's answer means the same
// whichever path carries it, every connection of the proxy's HTTP/1.1
// Transport is a strictResponses: it sees the bytes the Transport reads and
// checks each response head with h1.ParseResponse before the Transport has
// the whole of it; a head the fast path would refuse, or an interim answer
// past maxInterim, fails the read instead, so that the attempt fails as a
// malformed answer does on the fast path (502, the backend's failure,
// retried as retry.go allows) and the connection is closed.
//
// The wrapper learns where a response begins from the request's
// httptrace.ClientTrace (pickHolder.gotConn): the Transport reports the
// connection a request goes on before writing it, and answers come only
// after. From then it checks heads — interim ones and the final one —
// and lets the body pass: the next head is the next request's. Bytes that
// arrive with no request expected pass unchecked to the Transport, which
// closes the connection for them itself ("Unsolicited response received
// on idle HTTP channel").
//
// gRPC calls go over HTTP/2 (h2c), whose binary fields cannot hold a bare
// LF or a fold (x/net/http2 refuses control characters in values); their
// interim answers are bounded by pickHolder.got1xx.

// maxResponseHead bounds a response head on the net/http path, in bytes
// (the Transport's MaxResponseHeaderBytes too): a longer one is refused.
const maxResponseHead = 64 << 10

// errBadResponseHead is the read error of a response head the fast path
// would refuse.
var errBadResponseHead = errors.New("malformed response head")

// strictResponses is a backend connection of the net/http path whose
// response heads are checked as the fast path checks them. Read is for the
// Transport's reading goroutine; expect may be called from any.
type strictResponses struct {
	net.Conn

	mu sync.Mutex
	// Guarded by mu.
	inHead  bool   // a response head is expected or being read
	head    bool   // the request is a HEAD
	interim int    // interim heads of the current request so far
	buf     []byte // the head read so far
	resp    h1.Response
	err     error // the refusal, for every later read
}

func newStrictResponses(c net.Conn) *strictResponses { return &strictResponses{Conn: c} }

// expect says a request is about to be written on c (head: a HEAD): the
// next bytes read begin its answer.
func (c *strictResponses) expect(head bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inHead, c.head, c.interim, c.buf = true, head, 0, c.buf[:0]
}

// Read reads from the connection, checking what belongs to response
// heads. A refused head fails the read — or the next one, when heads that
// passed come before it in this one: those are returned first — and every
// later read, with its reason; none of its bytes is returned.
func (c *strictResponses) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	for pos := 0; c.inHead && pos < n; {
		// This head's bytes start at p[pos] (pos is 0 when had > 0: it
		// began in an earlier read).
		start, had := pos, len(c.buf)
		c.buf = append(c.buf, p[pos:n]...)
		m, perr := h1.ParseResponse(c.buf, c.head, &c.resp)
		switch {
		case perr == h1.ErrIncomplete && len(c.buf) <= maxResponseHead:
			pos = n
			continue
		case perr == h1.ErrIncomplete:
			return c.refuse(start, "a response head longer than %d bytes", maxResponseHead)
		case perr != nil:
			return c.refuse(start, "%s", c.resp.Why)
		}
		pos += m - had // past the head
		c.buf = c.buf[:0]
		if c.resp.Status >= 200 || c.resp.Status == http.StatusSwitchingProtocols {
			c.inHead = false // the body, or the tunnel, follows
			break
		}
		if c.interim++; c.interim > maxInterim {
			return c.refuse(start, "more than %d interim responses", maxInterim)
		}
	}
	return n, err
}

// refuse records the refusal of the head that starts at p[ok] (0: it
// began in this read's first byte or earlier) and returns Read's result: the ok
// bytes before it, with the refusal kept for the next read, or the
// refusal. c.mu is held.
func (c *strictResponses) refuse(ok int, format string, args ...any) (int, error) {
	c.err = fmt.Errorf("backend %s: %w: %s", c.RemoteAddr(), errBadResponseHead, fmt.Sprintf(format, args...))
	if ok > 0 {
		return ok, nil
	}
	return 0, c.err
}

// errTooManyInterim fails a request whose backend sent more than
// maxInterim interim answers (pickHolder.got1xx).
var errTooManyInterim = fmt.Errorf("more than %d interim (1xx) responses", maxInterim)

// got1xx is the request's httptrace Got1xxResponse: it fails the attempt
// once the backend has sent more than maxInterim interim answers over the
// request's life. ReverseProxy's own hook, which relays each to the
// client, runs first; on HTTP/1.1 strictResponses refuses the one past the
// bound before the Transport reads it, on HTTP/2 it reaches the client and
// then the request fails.
func (h *pickHolder) got1xx(int, textproto.MIMEHeader) error {
	if h.interim.Add(1) > maxInterim {
		return errTooManyInterim
	}
	return nil
}
