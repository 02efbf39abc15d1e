package listeners

import (
	"crypto/tls"
	"io"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/gfe/h1"
)

// Strict request heads on net/http's server.
//
// net/http's server reads request heads more leniently than the fast path
// (h1.Parse): it takes a bare LF as a line ending, joins obsolete line
// folding, keeps one of two identical Content-Length fields, and lets an
// absolute-form target's host win over a different Host field. A handler
// sees none of that (the fields come parsed, the duplicate dropped, the
// Host field deleted), so the check is made below net/http, on the bytes
// it reads: every HTTP/1.x connection net/http's server gets — those of
// an http listener without fast_path, and every one the fast path hands
// off, after a TLS handshake or not — is a strictRequests. It holds each
// request head back until the head is complete and h1.Parse has judged
// it, then lets net/http read it, or, for a head the fast path would
// answer 400, refused instead: net/http reads an invalid request line in
// its place (strictRefusal), answers 400 itself and closes the connection,
// and never calls a handler. Between heads it passes each body through by
// its Content-Length.
//
// It stops looking, passing every later byte through, where HTTP/1.x
// framing ends or no later request will be read: after HTTP/2's
// connection preface (h2c with prior knowledge), after a request with an
// Upgrade field (a tunnel follows its 101; protect closes the connection
// after any other answer to it), and after a chunked request (protect
// closes the connection after it; RFC 9112 §6.1). A head longer than
// net/http's own limit passes as well, for net/http to answer 431 and
// close.

// strictRefusal is what net/http reads in place of a refused head: a
// request line it cannot parse, so that it answers 400 Bad Request and
// closes the connection, whatever it read of the connection before.
const strictRefusal = "\x00\r\n\r\n"

// strictState is where a strictRequests is in its connection's bytes.
type strictState uint8

const (
	strictHead    strictState = iota // a request head is next
	strictBody                       // left bytes of body are next
	strictPass                       // every byte passes unchecked
	strictRefused                    // a head was refused: the refusal, then the end
)

// strictRequests is a client connection whose HTTP/1.x request heads are
// checked with h1.Parse before net/http's server reads them (see above).
// Its Read is for one goroutine at a time (net/http's connReader); its
// other methods are the connection's.
type strictRequests struct {
	net.Conn
	// limit is the longest head held back: net/http's read limit for a
	// head (MaxHeaderBytes + headerSlack).
	limit int
	// tls is the state of the TLS handshake the gfe made on the
	// connection before handing it over (nil: cleartext), for the
	// requests' r.TLS (connContext, protect).
	tls *tls.ConnectionState
	// malformed counts the heads refused (nil: none counted).
	malformed prometheus.Counter

	state strictState
	left  int64  // strictBody: body bytes still to pass
	mem   []byte // the buffer buf lives in
	buf   []byte // bytes read from Conn and not yet given to net/http
	ok    int    // of buf, how many are checked and may be given
	req   h1.Request
}

// Unwrap returns the connection c wraps.
func (c *strictRequests) Unwrap() net.Conn { return c.Conn }

// Read gives net/http the connection's bytes once they are checked: a
// head only once all of it has come and passed h1.Parse.
func (c *strictRequests) Read(p []byte) (int, error) {
	for {
		if c.ok > 0 {
			n := copy(p, c.buf[:c.ok])
			c.buf, c.ok = c.buf[n:], c.ok-n
			return n, nil
		}
		switch c.state {
		case strictRefused:
			return 0, io.EOF
		case strictPass:
			if len(c.buf) > 0 {
				c.ok = len(c.buf)
				continue
			}
			return c.Conn.Read(p)
		case strictBody:
			if len(c.buf) > 0 {
				c.ok = int(min(int64(len(c.buf)), c.left))
				c.bodyPassed(int64(c.ok))
				continue
			}
			n, err := c.Conn.Read(p[:min(int64(len(p)), c.left)])
			c.bodyPassed(int64(n))
			return n, err
		}
		if len(c.buf) > 0 && c.judge() {
			continue
		}
		if len(c.buf) >= c.limit {
			c.state = strictPass // net/http answers 431
			continue
		}
		// More of the head. An error leaves what came of it held back:
		// net/http never reads an unjudged head (a read that times out,
		// as net/http's own aborted background read does, keeps it).
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
}

// judge parses the head at the start of buf; once it is complete it
// releases it (ok) or the refusal, sets what follows, and reports true.
func (c *strictRequests) judge() bool {
	n, v, err := h1.Parse(c.buf, &c.req)
	if err != nil {
		return false // incomplete
	}
	r := &c.req
	switch {
	case v == h1.Reject:
		c.state, c.buf, c.ok = strictRefused, []byte(strictRefusal), len(strictRefusal)
		if c.malformed != nil {
			c.malformed.Inc()
		}
		return true
	case v == h1.HandOff && r.Why == h1.WhyPreface, r.Chunked, hasUpgrade(r.Fields):
		c.state = strictPass
	case r.ContentLength > 0:
		c.state, c.left = strictBody, r.ContentLength
	}
	c.ok = n
	return true
}

// bodyPassed counts n body bytes given to net/http.
func (c *strictRequests) bodyPassed(n int64) {
	if c.left -= n; c.left == 0 {
		c.state = strictHead
	}
}

// fill reads more of the connection into buf.
func (c *strictRequests) fill() error {
	if len(c.buf) == 0 {
		if c.mem == nil {
			c.mem = make([]byte, 4096)
		}
		c.buf = c.mem[:0]
	}
	if cap(c.buf)-len(c.buf) < 1024 {
		// Move what is held to the front, and grow when that is not
		// room enough (a long head).
		if len(c.buf)+4096 > len(c.mem) {
			c.mem = make([]byte, 2*len(c.mem)+4096)
		}
		c.buf = c.mem[:copy(c.mem, c.buf)]
	}
	n, err := c.Conn.Read(c.buf[len(c.buf):cap(c.buf)])
	c.buf = c.buf[:len(c.buf)+n]
	if n > 0 {
		return nil
	}
	return err
}

// hasUpgrade reports whether fields have an Upgrade field, empty or not.
func hasUpgrade(fields []h1.Field) bool {
	for _, f := range fields {
		if h1.EqualFold(f.Name, "upgrade") {
			return true
		}
	}
	return false
}
