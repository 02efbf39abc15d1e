package httpproxy

// FastRequest, the request the listener hands the fast path (fast.go): its
// body timer, the views routing and quota read, and Abort and Leave, which
// other goroutines call.

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/spillway-lb/spillway/internal/gfe/h1"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/reqpath"
)

// FastRequest is one request the listener's fast path took (h1.Fast) for
// Proxy.ServeFast. The listener owns it and reuses it for the next
// request of its connection.
type FastRequest struct {
	// Head is the parsed head; its slices point into Client's buffer.
	Head h1.Request
	// HeadLen is the head's length: Client's next HeadLen bytes are the
	// head, and Head.ContentLength bytes of body (if any) follow.
	HeadLen int
	// Conn is the client connection; Client reads it and Out writes it.
	Conn   net.Conn
	Client *bufio.Reader
	Out    *bufio.Writer
	// Remote and Local are the client's and the listener's addresses.
	Remote, Local netip.AddrPort
	// TLS says the client came over TLS (X-Forwarded-Proto, Secure
	// cookies).
	TLS bool
	// BodyTimeout bounds a pause in the request body
	// (request_body_timeout; 0: none).
	BodyTimeout time.Duration
	// Close ends the connection after this request's answer, which says
	// "Connection: close", whatever the client asked (the listener's
	// max_connection_age has passed).
	Close bool

	scratch [64]byte
	// isHead and idempotent are read off Head.Method when ServeFast
	// starts: Head's slices point into Client's buffer, which reading the
	// body overwrites.
	isHead, idempotent bool
	// path is the request's canonical path (lb/reqpath), set when
	// ServeFast starts; pathLen is the length of Head.Target's path (what
	// precedes '?'), and rewrite says path.Escaped differs from it, so the
	// backend gets path.Escaped and the query. path's strings may point
	// into Client's buffer (a canonical target is used as it is): valid
	// while Head is.
	path    reqpath.Path
	pathLen int
	rewrite bool

	mu      sync.Mutex
	backend net.Conn // guarded by mu: the backend connection in use
	aborted bool     // guarded by mu
	left    bool     // guarded by mu: the client left (Leave)
	// inBody is set while a body is read under bodyTimer; guarded by mu.
	inBody bool
	// bodyTimer bounds a pause in a request body (BodyTimeout) on the
	// proxy's clock, by moving Conn's read deadline to the past; made at
	// the connection's first body, nil before.
	bodyTimer clock.Timer
}

// startBody arms the body timer for a body read from fr (BodyTimeout > 0).
func (p *Proxy) startBody(fr *FastRequest) {
	fr.mu.Lock()
	fr.inBody = true
	fr.mu.Unlock()
	if fr.bodyTimer == nil {
		fr.bodyTimer = p.clk.AfterFunc(fr.BodyTimeout, fr.bodyExpired)
		return
	}
	fr.bodyTimer.Reset(fr.BodyTimeout)
}

// endBody disarms the body timer.
func (fr *FastRequest) endBody() {
	fr.mu.Lock()
	fr.inBody = false
	fr.mu.Unlock()
	fr.bodyTimer.Stop()
}

// bodyExpired ends the wait for a body that paused past BodyTimeout.
func (fr *FastRequest) bodyExpired() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.inBody {
		fr.Conn.SetReadDeadline(past)
	}
}

// readBody makes sure fr.Client has buffered body bytes, waiting at most
// BodyTimeout (on the proxy's clock) for them. It returns 0, or the status
// of the client's failure: 408 for a pause, 400 for a body cut short.
func (p *Proxy) readBody(fr *FastRequest) int {
	if fr.Client.Buffered() > 0 {
		return 0
	}
	if fr.BodyTimeout > 0 {
		fr.bodyTimer.Reset(fr.BodyTimeout) // progress so far: a new pause begins
	}
	if _, err := fr.Client.Peek(1); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return http.StatusRequestTimeout
		}
		return http.StatusBadRequest
	}
	return 0
}

// Abort ends the request being served at once, from any goroutine (the
// listener's drain, when its time is up): the wait for the backend ends as
// at a timeout. Reset clears it for the next connection.
func (fr *FastRequest) Abort() { fr.endWait(&fr.aborted) }

// Leave says that fr's client left while its request was served (the
// listener's sweep saw its connection closed: ClientGone). Like Abort, it
// ends the wait for the backend at once, from any goroutine; unlike it,
// ServeFast then counts a canceled client (clientErrors "canceled"), not
// a backend failure, and withdraws the request from demand when no answer
// had begun, as the slow path does when a request's context is canceled.
// It holds for the rest of the connection.
func (fr *FastRequest) Leave() { fr.endWait(&fr.left) }

// endWait sets *flag, a field fr.mu guards (aborted or left), and ends the
// wait on the backend connection in use, if any, as at a timeout.
func (fr *FastRequest) endWait(flag *bool) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	*flag = true
	if fr.backend != nil {
		fr.backend.SetDeadline(past)
	}
}

// past is a deadline long gone: set on a socket, it ends the wait of a read
// or write in progress at once, as a timeout (Abort, Leave, the body and
// per-try timers).
var past = time.Unix(1, 0)

// Left reports whether Leave was called on fr's connection.
func (fr *FastRequest) Left() bool {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return fr.left
}

// Reset readies fr for another connection.
func (fr *FastRequest) Reset() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.aborted, fr.left, fr.backend = false, false, nil
}

// useBackend records c as the backend connection in use (nil: none) and
// reports false when the request was aborted or its client left.
func (fr *FastRequest) useBackend(c net.Conn) bool {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.backend = c
	return !fr.aborted && !fr.left
}

// header implements requestView. It allocates the value it returns.
func (fr *FastRequest) header(name string) string {
	for _, f := range fr.Head.Fields {
		if foldEqual(f.Name, name) {
			return string(f.Value)
		}
	}
	return ""
}

// cookie implements requestView. It allocates the value it returns.
func (fr *FastRequest) cookie(name string) string {
	for _, f := range fr.Head.Fields {
		if !h1.EqualFold(f.Name, "cookie") {
			continue
		}
		for line := f.Value; len(line) > 0; {
			var part []byte
			part, line, _ = bytes.Cut(line, []byte{';'})
			k, v, ok := bytes.Cut(bytes.TrimSpace(part), []byte{'='})
			if !ok || string(k) != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return string(v)
		}
	}
	return ""
}

// quotaRequest implements requestView: the Admitter reads the method, the
// canonical path and the query, X-Api-Key and the length. It allocates.
func (fr *FastRequest) quotaRequest() *http.Request {
	h := &fr.Head
	u := &url.URL{Path: strings.Clone(fr.path.Decoded), RawPath: strings.Clone(fr.path.Escaped)}
	if fr.pathLen < len(h.Target) {
		u.RawQuery = string(h.Target[fr.pathLen+1:])
	}
	r := &http.Request{Method: string(h.Method), URL: u, Host: string(h.Host), Header: http.Header{},
		ContentLength: max(h.ContentLength, 0), RemoteAddr: fr.Remote.String(), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: h.Minor}
	for _, f := range h.Fields {
		if h1.EqualFold(f.Name, "x-api-key") {
			r.Header.Add("X-Api-Key", string(f.Value))
		}
	}
	return r
}

// fast implements requestView.
func (fr *FastRequest) fast() bool { return true }

// unsafeString views b as a string without copying: only for calls that do
// not keep the string past the life of b's buffer (routing, picking).
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// foldEqual reports whether b equals s, ASCII case-insensitively.
func foldEqual(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// ClientGone reports whether fr's client closed (or reset) its connection
// while its request waits in the pending queue (ClientClosed). Called from
// the queue's goroutine while the request's goroutine waits.
func (fr *FastRequest) ClientGone() bool { return ClientClosed(fr.Conn) }

// ClientClosed reports whether the peer of client connection c closed (or
// reset) it: a peek at its socket reads an end of file or an error other
// than "nothing yet". Bytes waiting (a pipelined request) or none mean the
// client is still there; nothing is consumed, so the connection's own
// goroutine may read it meanwhile. A connection that is not a socket is
// never closed; over TLS a client that closes with its closing alert is
// not noticed either, as the alert reads as data.
func ClientClosed(c net.Conn) bool { return peek(c) == peekClosed }
