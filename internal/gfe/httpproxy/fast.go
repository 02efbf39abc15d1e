package httpproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/h1"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/reqpath"
	"github.com/spillway-lb/spillway/lb/routing"
)

// The fast path (docs/design.md §4, docs/listeners.md). The listener reads
// HTTP/1.x request heads itself (h1.Parse) and gives the plain ones — no body
// or a Content-Length body, no upgrade, no Expect — to ServeFast, which
// forwards them without net/http: the same steps before a backend as
// ServeHTTP (decide: route, quota, pick by affinity or policy), then the
// request over a pooled raw kept-alive connection to the backend (fastPool),
// and the response streamed back with strict framing (h1.ParseResponse:
// Content-Length, chunked with trailers, until close; none for HEAD, 1xx, 204
// and 304).
//
// It keeps the slow path's semantics: X-Forwarded-For (the client's
// address alone), X-Forwarded-Host and X-Forwarded-Proto set by the gfe,
// a client's Forwarded, X-Forwarded-* and X-Real-IP dropped, hop-by-hop
// fields (and those the Connection field names) removed both ways, the
// gfe's own affinity cookie stripped and Set-Cookie added, every attempt
// reported to outlier detection and counted on the backend's signals
// (observeOutcome), retries as retry.go states them (never reached a
// backend, or idempotent, bodiless and no answer yet; plus, as net/http's
// Transport does, one silent redial of a kept-alive connection the backend
// had closed, for an idempotent bodiless request), the route timeout (504)
// and per_try_timeout, the client's body failures as the client's (400,
// 408; never counted against a backend), metrics and the access log.
//
// A client that goes away mid-request is noticed by the listener, which
// looks at the connections of requests served for a while (Leave); then
// the backend's connection is closed and the request withdrawn from demand
// and counted canceled (499), as on the slow path.
//
// What differs: that notice comes within about a second, not at once, and
// not for a client over TLS that closes with its closing alert (which
// reads as data);
// response heads larger than fastReadBuffer bytes are answered 502; a
// response that ends at the backend's close ends the client's connection
// too, as does a chunked response to an HTTP/1.0 client (decoded).
//
// Backend connections read through the shared poller (poller.Shared), as
// the listener's cleartext client connections do: a read that must wait
// for the backend's answer waits there, and requests whose answers came
// first go first. Abort, Leave and the per-try timer end such a wait as
// they end one in net, by moving the socket's deadline.
//
// Socket deadlines are wall-clock time (time.Now): they are the kernel's,
// not the proxy's clock's.

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
		fr.Conn.SetReadDeadline(time.Unix(1, 0))
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
func (fr *FastRequest) Abort() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.aborted = true
	if fr.backend != nil {
		fr.backend.SetDeadline(time.Unix(1, 0))
	}
}

// Leave says that fr's client left while its request was served (the
// listener's sweep saw its connection closed: ClientGone). Like Abort, it
// ends the wait for the backend at once, from any goroutine; unlike it,
// ServeFast then counts a canceled client (clientErrors "canceled"), not
// a backend failure, and withdraws the request from demand when no answer
// had begun, as the slow path does when a request's context is canceled.
// It holds for the rest of the connection.
func (fr *FastRequest) Leave() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.left = true
	if fr.backend != nil {
		fr.backend.SetDeadline(time.Unix(1, 0))
	}
}

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

// maxDiscard is the most request body the fast path reads and drops to
// keep a connection whose request it refused; a longer body closes it.
const maxDiscard = 256 << 10

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

// attemptErr classifies how an attempt of the fast path failed.
type attemptErr uint8

const (
	attemptOK attemptErr = iota
	// attemptDial: connecting failed; the backend saw nothing.
	attemptDial
	// attemptBackend: the backend took the request and failed before a
	// valid answer (reset, closed, malformed response).
	attemptBackend
	// attemptTimeout: the route timeout passed before an answer.
	attemptTimeout
	// attemptPerTry: no answer within per_try_timeout.
	attemptPerTry
	// attemptClient: the client's body failed (clientStatus says how).
	attemptClient
	// attemptRelay: the answer's head reached the client but the rest of
	// the exchange failed; the client's connection must close.
	attemptRelay
	// attemptLeft: the client left before an answer (FastRequest.Leave).
	attemptLeft
)

// fastExchange is the state of one request on the fast path. It lives on
// ServeFast's stack.
type fastExchange struct {
	fr       *FastRequest
	d        decision  // by value: a pointer to ServeFast's would escape
	deadline time.Time // the route timeout's, zero for none
	// bodyRead says reading the client's body began, bodyDone that all of
	// it was read; headGone that Client no longer holds the head.
	bodyRead, bodyDone, headGone bool
	clientStatus                 int // with attemptClient: 400 or 408
	// keep says the client connection may carry another request.
	keep bool
	// sent is when the current attempt was sent; now when it was answered.
	sent time.Time
}

// ServeFast forwards fr, a request the listener's fast path took, and
// writes its answer to fr.Out, flushed. It returns whether the client
// connection may carry another request: then it has consumed exactly the
// request (head and body) from fr.Client. It does not allocate on the
// common path (BenchmarkFastPath) beyond the backend connections it
// opens.
func (p *Proxy) ServeFast(fr *FastRequest) (keep bool) {
	start := p.clk.Now()
	h := &fr.Head
	fr.isHead = string(h.Method) == http.MethodHead
	fr.idempotent = idempotent(unsafeString(h.Method))
	target := h.Target
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	// The one canonical path, as on net/http's path (ServeHTTP): routed,
	// charged and forwarded, or refused.
	cp, perr := reqpath.Normalize(unsafeString(target))
	if perr != nil {
		return p.fastRefuse(fr, p.pathRefused(perr))
	}
	fr.path, fr.pathLen, fr.rewrite = cp, len(target), cp.Escaped != unsafeString(target)
	path := cp.Decoded
	var method, logPath string
	if p.cfg.AccessLog {
		method, logPath = string(h.Method), strings.Clone(path)
	}
	k := routing.Flow{Src: unmap(fr.Remote), Dst: unmap(fr.Local)}
	dec, no := p.decide(context.Background(), fr, unsafeString(h.Host), path, unsafeString(h.Method), k, start)
	if no.status != 0 {
		return p.fastRefuse(fr, no)
	}
	defer dec.svc.Meters().Ended()
	x := fastExchange{fr: fr, d: dec, keep: !h.Close && !fr.Close}
	d := &x.d
	if d.route.Timeout > 0 {
		x.deadline = time.Now().Add(d.route.Timeout)
	}
	var tried [maxAttempts]*backend.Backend
	tried[0] = d.pick.Backend
	attempts := 1
	var err attemptErr
	x.sent = start
	for {
		err = p.fastAttempt(&x)
		if err == attemptOK || err == attemptRelay || err == attemptClient {
			break
		}
		if fr.Left() {
			err = attemptLeft // not the backend's failure
			break
		}
		now := p.clk.Now()
		d.pick.Backend.Observe(backend.OutcomeFailed, 0)
		unreachable := false
		switch err {
		case attemptDial:
			p.reportPick(d.svc, &d.pick, outlier.ConnectFailure, now)
			unreachable = true
		case attemptTimeout:
			p.reportPick(d.svc, &d.pick, outlier.Timeout, now)
		case attemptPerTry:
			p.metrics.perTryTimeouts.WithLabelValues(d.svc.Name()).Inc()
			p.reportPick(d.svc, &d.pick, outlier.Timeout, now)
			unreachable = true
		default:
			p.reportPick(d.svc, &d.pick, outlier.ServerError, now)
		}
		retry := err != attemptTimeout && attempts <= d.route.Retries && attempts < maxAttempts &&
			((err == attemptDial && !x.bodyRead) || (fr.idempotent && h.ContentLength <= 0))
		if !retry {
			break
		}
		np, ok := d.svc.RetryPick(&d.pick, tried[:attempts], unreachable, p.rand(), now)
		if !ok {
			break
		}
		d.pick.Done()
		d.pick = np
		tried[attempts] = np.Backend
		attempts++
		p.metrics.retries.WithLabelValues(d.svc.Name()).Inc()
		x.sent = now
	}
	defer d.pick.Done() // the pick of the last attempt
	fr.useBackend(nil)
	switch err {
	case attemptOK:
	case attemptRelay:
		x.keep = false
	case attemptClient:
		p.metrics.clientErrors.WithLabelValues(clientErrorLabel(x.clientStatus)).Inc()
		p.fastAnswer(fr, x.clientStatus, http.StatusText(x.clientStatus), "", true)
		x.keep = false
	case attemptLeft:
		d.svc.Meters().Withdraw() // not demand, as on the slow path
		p.metrics.clientErrors.WithLabelValues("canceled").Inc()
		p.fastAnswer(fr, statusClientClosed, msgClientGone, "", true) // nobody reads it
		x.keep = false
	default:
		d.svc.Meters().Failures.Add(1)
		p.metrics.backendErrors.Inc()
		status := http.StatusBadGateway
		if err == attemptTimeout {
			status = http.StatusGatewayTimeout
		}
		if h.ContentLength > 0 && !x.bodyDone {
			x.keep = false // the body, or some of it, is still on the connection
		}
		x.keep = p.fastAnswer(fr, status, http.StatusText(status), "", !x.keep) && x.keep
	}
	if x.keep && !x.headGone {
		fr.Client.Discard(fr.HeadLen)
	}
	if err := fr.Out.Flush(); err != nil {
		x.keep = false
	}
	elapsed := p.clk.Since(start)
	p.metrics.latency.Observe(elapsed.Seconds())
	if p.cfg.AccessLog {
		p.log.Info().Str("service", d.svc.Name()).Str("backend", d.pick.Backend.Addr()).Str("region", d.pick.Region).
			Str("reason", d.pick.Reason.String()).Int("attempts", attempts).Str("method", method).Str("path", logPath).
			Bool("fast", true).Dur("duration", elapsed).Msg("request")
	}
	return x.keep
}

// unmap returns ap with an IPv4-mapped IPv6 address as IPv4.
func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// fastAttempt sends one attempt of x's request to its pick and, once a
// valid answer's head came, relays the answer to the client.
func (p *Proxy) fastAttempt(x *fastExchange) attemptErr {
	fr, d := x.fr, &x.d
	h := &fr.Head
	addr := d.pick.Backend.Addr()
	bodyless := h.ContentLength <= 0
	mayRedial := bodyless && fr.idempotent
	bc := p.fast.get(addr, x.sent) // the pool's idle times are on the proxy's clock
	reused := bc != nil
	var perTry time.Duration // bounds the attempt, dial included, when it may be sent again
	if mayRedial {
		perTry = d.route.PerTryTimeout
	}
	for {
		if bc == nil {
			bc2, dialExpired, err := p.dialFast(addr, x.deadline, perTry)
			if err != nil {
				switch {
				case !x.deadline.IsZero() && !time.Now().Before(x.deadline):
					return attemptTimeout
				case dialExpired:
					// A host that drops SYNs (its link is down) answers
					// nothing: leave it at per_try_timeout, as net/http's
					// path does (retryTransport).
					return attemptPerTry
				}
				return attemptDial
			}
			bc = bc2
		}
		if !fr.useBackend(bc.c) {
			bc.c.Close()
			return attemptTimeout
		}
		// The route timeout is the socket's deadline; per_try_timeout, on
		// the proxy's clock, ends the wait for the answer's head of an
		// attempt that may be sent again.
		bc.setDeadline(x.deadline)
		var pt *perTryTimer
		if perTry > 0 {
			pt = &perTryTimer{c: bc.c}
			pt.t = p.clk.AfterFunc(perTry, pt.fire)
		}
		if reused {
			// The reuse rule (fastpool.go), as late as it can be: anything
			// the backend sent since its last response closes the
			// connection, which a new one replaces.
			if ok, stray := bc.quiet(); !ok {
				if pt != nil {
					pt.stop()
				}
				bc.c.Close()
				if stray {
					p.metrics.unsolicited.WithLabelValues(d.svc.Name()).Inc()
				}
				bc, reused = nil, false
				continue
			}
		}
		writeRequestHead(bc.bw, fr, d, addr)
		if !bodyless {
			if err := p.sendBody(x, bc); err != attemptOK {
				bc.c.Close()
				return err
			}
		}
		err := bc.bw.Flush()
		var n int
		if err == nil {
			n, err = readResponseHead(bc, fr.isHead)
		}
		expired := pt != nil && pt.stop()
		if err != nil {
			bc.c.Close()
			var ne net.Error
			switch {
			case errors.Is(err, h1.ErrBadResponse):
				return attemptBackend
			case expired && (x.deadline.IsZero() || time.Now().Before(x.deadline)):
				return attemptPerTry
			case errors.As(err, &ne) && ne.Timeout():
				return attemptTimeout
			case reused && mayRedial && bc.br.Buffered() == 0:
				// A kept-alive connection the backend had closed: send
				// again on a new one (net/http's Transport does too).
				bc, reused = nil, false
				continue
			}
			return attemptBackend
		}
		if pt != nil {
			bc.c.SetReadDeadline(x.deadline) // the timer may have moved it
		}
		return p.relay(x, bc, n)
	}
}

// perTryTimer ends the wait for an answer's head at per_try_timeout, by
// moving its connection's read deadline to the past.
type perTryTimer struct {
	c     net.Conn
	t     clock.Timer
	fired atomic.Bool
}

func (pt *perTryTimer) fire() {
	pt.fired.Store(true)
	pt.c.SetReadDeadline(time.Unix(1, 0))
}

// stop stops the timer and reports whether it fired.
func (pt *perTryTimer) stop() bool {
	pt.t.Stop()
	return pt.fired.Load()
}

// sendBody copies the request's body from the client to bc. A read error
// is the client's (400, 408); a write error the backend's. The route
// timeout bounds the reads too (the client connection's read deadline,
// while the body is read): one that passes while the gfe waits for the
// client's body is the client's, 408, as on the slow path
// (clientbody.RouteTimedOut).
func (p *Proxy) sendBody(x *fastExchange, bc *backendConn) attemptErr {
	fr := x.fr
	if !x.headGone {
		fr.Client.Discard(fr.HeadLen)
		x.headGone = true
	}
	x.bodyRead = true
	if err := bc.bw.Flush(); err != nil {
		return attemptBackend
	}
	if !x.deadline.IsZero() {
		// Registered before endBody's defer, so run after it: once the
		// body timer can no longer move the deadline, the listener's
		// "no deadline while serving a body" is put back.
		fr.Conn.SetReadDeadline(x.deadline)
		defer fr.Conn.SetReadDeadline(time.Time{})
	}
	if fr.BodyTimeout > 0 {
		p.startBody(fr)
		defer fr.endBody()
	}
	left := fr.Head.ContentLength
	for left > 0 {
		if status := p.readBody(fr); status != 0 {
			x.clientStatus = status
			return attemptClient
		}
		b, _ := fr.Client.Peek(int(min(int64(fr.Client.Buffered()), left)))
		if _, err := bc.bw.Write(b); err != nil {
			return attemptBackend
		}
		fr.Client.Discard(len(b))
		left -= int64(len(b))
	}
	x.bodyDone = true
	return attemptOK
}

// readResponseHead reads the next response head on bc into bc.resp and
// returns its length; 1xx heads are returned like others.
func readResponseHead(bc *backendConn, head bool) (int, error) {
	for {
		buf, _ := bc.br.Peek(bc.br.Buffered())
		n, err := h1.ParseResponse(buf, head, &bc.resp)
		if err != h1.ErrIncomplete {
			return n, err
		}
		if len(buf) == fastReadBuffer {
			bc.resp.Why = "response head larger than the read buffer"
			return 0, h1.ErrBadResponse
		}
		if _, err := bc.br.Peek(len(buf) + 1); err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
}

// relay answers the client with the response whose head (n bytes) is at
// the start of bc's buffer: interim 1xx answers first, then the final one
// and its body; bc goes back to the pool when the exchange ended cleanly.
func (p *Proxy) relay(x *fastExchange, bc *backendConn, n int) attemptErr {
	fr, d := x.fr, &x.d
	h := &fr.Head
	n, err := finalHead(bc, n, fr.isHead, func(buf []byte) {
		writeResponseHead(fr.Out, buf, &bc.resp, nil, "", false, false)
	})
	if err != nil {
		bc.c.Close()
		if errors.Is(err, errInterim) {
			return attemptBackend
		}
		return attemptRelay
	}
	now := p.clk.Now()
	r := &bc.resp
	buf, _ := bc.br.Peek(n)
	// Signals and outlier detection, as observeAnswer and retryTransport.
	rejected := r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable
	report := ""
	for _, f := range r.Fields {
		switch {
		case h1.EqualFold(f.Name, "x-spillway-reject"):
			rejected = true
		case h1.EqualFold(f.Name, "endpoint-load-metrics") && report == "":
			report = unsafeString(f.Value)
		}
	}
	observeOutcome(d.pick.Backend, rejected, report, now.Sub(x.sent))
	p.reportPick(d.svc, &d.pick, outlier.FromStatus(r.Status), now)
	cookie := ""
	if d.cookie.Value != "" {
		a := d.svc.Affinity()
		v, exp := a.CookieFor(&d.cookie, d.pick.Backend.Addr(), now)
		cookie = setCookie(a, v, exp, fr.TLS)
		p.metrics.cookies.WithLabelValues(d.svc.Name()).Inc()
	}
	// The client's framing: chunked passes through to HTTP/1.1 clients and
	// is decoded for HTTP/1.0 ones, which then read until the close.
	dechunk := r.Framing == h1.Chunked && h.Minor == 0
	if r.Framing == h1.UntilClose || dechunk {
		x.keep = false
	}
	writeResponseHead(fr.Out, buf, r, fr, cookie, !x.keep, h.Minor == 0 && x.keep)
	bc.br.Discard(n)
	keep, err := copyBody(fr.Out, bc, dechunk)
	if err != nil {
		bc.c.Close()
		return attemptRelay
	}
	switch reuse, stray := reusable(bc, keep); {
	case reuse:
		p.fast.put(d.pick.Backend.Addr(), bc, p.clk.Now()) // after the body, however long
	case stray:
		bc.c.Close()
		p.metrics.unsolicited.WithLabelValues(d.svc.Name()).Inc()
	default:
		bc.c.Close()
	}
	return attemptOK
}

// maxInterim is how many interim (1xx) responses the gfe relays from an
// attempt ahead of its final one; one more is the backend's failure (502,
// and another attempt when retry.go allows one). A request that asks
// to continue gets one 100 at most, and a backend sends a 103 Early Hints
// or two besides; a bound far above that costs nothing, where none let a
// backend keep a client reading interim answers for ever (net/http's
// Transport relays every one to a ReverseProxy, which set no bound).
const maxInterim = 8

// errInterim is finalHead's refusal of a backend's interim answers: a 101
// nobody asked for (upgrades go to net/http), or more than maxInterim.
var errInterim = errors.New("interim responses refused")

// finalHead moves bc past the interim (1xx) heads at the start of its
// buffer — the first, n bytes, already parsed into bc.resp — handing each
// to interim, and returns the length of the final head after them, parsed
// into bc.resp. Its errors are errInterim (wrapped), or readResponseHead's.
func finalHead(bc *backendConn, n int, head bool, interim func(buf []byte)) (int, error) {
	for i := 0; bc.resp.Status < 200; i++ {
		switch {
		case bc.resp.Status == http.StatusSwitchingProtocols:
			return 0, fmt.Errorf("%w: 101 Switching Protocols to a request that asked for no upgrade", errInterim)
		case i == maxInterim:
			return 0, fmt.Errorf("%w: more than %d", errInterim, maxInterim)
		}
		buf, _ := bc.br.Peek(n)
		interim(buf)
		bc.br.Discard(n)
		var err error
		if n, err = readResponseHead(bc, head); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// copyBody copies the body of the response whose head (parsed into
// bc.resp) bc.br has just passed to w, to the end its framing says: as it
// came, or with its chunks decoded (dechunk). keep reports whether the
// backend keeps the connection open after it: the framing ends the body
// and the response does not say close.
func copyBody(w *bufio.Writer, bc *backendConn, dechunk bool) (keep bool, err error) {
	r := &bc.resp
	keep = !r.Close
	switch r.Framing {
	case h1.Length:
		err = copyN(w, bc.br, r.ContentLength)
	case h1.Chunked:
		err = copyChunked(w, bc.br, !dechunk)
	case h1.UntilClose:
		err = copyN(w, bc.br, -1)
		keep = false
	}
	return keep && err == nil, err
}

// reusable reports, for bc after copyBody, whether it may go back to the
// pool (the first half of the reuse rule, fastpool.go): the backend keeps
// it (keep) and nothing followed the response in its buffer. stray says
// something did.
func reusable(bc *backendConn, keep bool) (reuse, stray bool) {
	if !keep {
		return false, false
	}
	if bc.br.Buffered() > 0 {
		return false, true
	}
	return true, false
}

// writeRequestHead writes fr's head, as the gfe forwards it to backend
// addr, to w.
func writeRequestHead(w *bufio.Writer, fr *FastRequest, d *decision, addr string) {
	h := &fr.Head
	w.Write(h.Method)
	w.WriteByte(' ')
	if fr.rewrite {
		w.WriteString(fr.path.Escaped)
		w.Write(h.Target[fr.pathLen:])
	} else {
		w.Write(h.Target)
	}
	w.WriteString(" HTTP/1.1\r\n")
	strip := ""
	if a := d.svc.Affinity(); a != nil && a.Type() == config.AffinityGeneratedCookie {
		strip = a.Cookie()
	}
	conn := hasField(h.Fields, "connection")
	for _, f := range h.Fields {
		switch {
		case h1.EqualFold(f.Name, "te"):
			if hasToken(f.Value, "trailers") {
				w.WriteString("Te: trailers\r\n")
			}
			continue
		case hopByHop(f.Name), forwardedField(f.Name):
			continue
		case conn && nominated(h.Fields, f.Name):
			continue
		case strip != "" && h1.EqualFold(f.Name, "cookie"):
			writeCookieWithout(w, f.Value, strip)
			continue
		}
		writeField(w, f)
	}
	if len(h.Host) == 0 {
		w.WriteString("Host: ")
		w.WriteString(addr)
		w.WriteString("\r\n")
	}
	w.WriteString("X-Forwarded-For: ")
	w.Write(fr.Remote.Addr().Unmap().AppendTo(fr.scratch[:0]))
	w.WriteString("\r\nX-Forwarded-Host: ")
	w.Write(h.Host)
	if fr.TLS {
		w.WriteString("\r\nX-Forwarded-Proto: https\r\n\r\n")
	} else {
		w.WriteString("\r\nX-Forwarded-Proto: http\r\n\r\n")
	}
}

func writeField(w *bufio.Writer, f h1.Field) {
	w.Write(f.Name)
	w.WriteString(": ")
	w.Write(f.Value)
	w.WriteString("\r\n")
}

// writeCookieWithout writes a Cookie field with value v less every cookie
// called name; nothing when none is left.
func writeCookieWithout(w *bufio.Writer, v []byte, name string) {
	first := true
	for rest := v; len(rest) > 0; {
		var part []byte
		part, rest, _ = bytes.Cut(rest, []byte{';'})
		part = bytes.TrimSpace(part)
		if len(part) == 0 {
			continue
		}
		if k, _, _ := bytes.Cut(part, []byte{'='}); string(k) == name {
			continue
		}
		if first {
			w.WriteString("Cookie: ")
			first = false
		} else {
			w.WriteString("; ")
		}
		w.Write(part)
	}
	if !first {
		w.WriteString("\r\n")
	}
}

// hopByHop reports whether a field named name is hop-by-hop (RFC 9110
// §7.6.1; the list httputil.ReverseProxy removes).
func hopByHop(name []byte) bool {
	switch len(name) {
	case 2:
		return h1.EqualFold(name, "te")
	case 7:
		return h1.EqualFold(name, "trailer") || h1.EqualFold(name, "upgrade")
	case 10:
		return h1.EqualFold(name, "connection") || h1.EqualFold(name, "keep-alive")
	case 16:
		return h1.EqualFold(name, "proxy-connection")
	case 17:
		return h1.EqualFold(name, "transfer-encoding")
	case 18:
		return h1.EqualFold(name, "proxy-authenticate")
	case 19:
		return h1.EqualFold(name, "proxy-authorization")
	}
	return false
}

// forwardedField reports whether a client's field named name is one the
// gfe sets itself or drops: Forwarded, X-Forwarded-For, -Host, -Proto
// (ReverseProxy removes them before Rewrite) and X-Real-IP.
func forwardedField(name []byte) bool {
	switch len(name) {
	case 9:
		return h1.EqualFold(name, "forwarded") || h1.EqualFold(name, "x-real-ip")
	case 15:
		return h1.EqualFold(name, "x-forwarded-for")
	case 16:
		return h1.EqualFold(name, "x-forwarded-host")
	case 17:
		return h1.EqualFold(name, "x-forwarded-proto")
	}
	return false
}

// hasField reports whether fields has one named lower (lower-case).
func hasField(fields []h1.Field, lower string) bool {
	for _, f := range fields {
		if h1.EqualFold(f.Name, lower) {
			return true
		}
	}
	return false
}

// nominated reports whether a Connection field of fields names name.
func nominated(fields []h1.Field, name []byte) bool {
	for _, f := range fields {
		if !h1.EqualFold(f.Name, "connection") {
			continue
		}
		for tok := range h1.Tokens(f.Value) {
			if bytes.EqualFold(tok, name) {
				return true
			}
		}
	}
	return false
}

// hasToken reports whether list value v has the element tok (lower-case).
func hasToken(v []byte, tok string) bool {
	for t := range h1.Tokens(v) {
		if h1.EqualFold(t, tok) {
			return true
		}
	}
	return false
}

// writeResponseHead writes the response head in buf (parsed into r) as the
// gfe answers it: HTTP/1.1, hop-by-hop fields removed, the framing the
// client gets (chunked to an HTTP/1.1 client of fr; fr nil for a 1xx),
// setCookie if not "", and Connection: close or keep-alive.
func writeResponseHead(w *bufio.Writer, buf []byte, r *h1.Response, fr *FastRequest, setCookie string, close, keepAlive bool) {
	end := bytes.IndexByte(buf, '\r')
	w.WriteString("HTTP/1.1")
	w.Write(buf[8:end])
	w.WriteString("\r\n")
	conn := hasField(r.Fields, "connection")
	for _, f := range r.Fields {
		if h1.EqualFold(f.Name, "trailer") && r.Framing == h1.Chunked && fr != nil && fr.Head.Minor == 1 {
			writeField(w, f) // trailers pass through with the chunks
			continue
		}
		if hopByHop(f.Name) || (conn && nominated(r.Fields, f.Name)) {
			continue
		}
		writeField(w, f)
	}
	if r.Framing == h1.Chunked && fr != nil && fr.Head.Minor == 1 {
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if setCookie != "" {
		w.WriteString("Set-Cookie: ")
		w.WriteString(setCookie)
		w.WriteString("\r\n")
	}
	switch {
	case fr == nil:
	case close:
		w.WriteString("Connection: close\r\n")
	case keepAlive:
		w.WriteString("Connection: keep-alive\r\n")
	}
	w.WriteString("\r\n")
}

// copyN copies n bytes (n < 0: until EOF) from r to w, flushing w whenever
// r has nothing more buffered so that a slow body streams.
func copyN(w *bufio.Writer, r *bufio.Reader, n int64) error {
	for n != 0 {
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
			if _, err := r.Peek(1); err != nil {
				if n < 0 && err == io.EOF {
					return nil
				}
				return err
			}
		}
		m := r.Buffered()
		if n > 0 && int64(m) > n {
			m = int(n)
		}
		b, _ := r.Peek(m)
		if _, err := w.Write(b); err != nil {
			return err
		}
		r.Discard(m)
		if n > 0 {
			n -= int64(m)
		}
	}
	return nil
}

// errBadChunk is a malformed chunked body from a backend.
var errBadChunk = errors.New("malformed chunked response body")

// copyChunked copies a chunked body, validated, from r to w: verbatim with
// its trailers when raw, else only the data (trailers dropped).
func copyChunked(w *bufio.Writer, r *bufio.Reader, raw bool) error {
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		size, ok := h1.ParseChunkSize(line[:len(line)-2])
		if !ok {
			return errBadChunk
		}
		if raw {
			w.Write(line)
		}
		if size == 0 {
			break
		}
		if err := copyN(w, r, size); err != nil {
			return err
		}
		crlf, err := r.Peek(2)
		if err != nil {
			return err
		}
		if crlf[0] != '\r' || crlf[1] != '\n' {
			return errBadChunk
		}
		if raw {
			w.Write(crlf)
		}
		r.Discard(2)
	}
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		if len(line) == 2 {
			if raw {
				w.Write(line)
			}
			return nil
		}
		if _, ok := h1.ParseTrailer(line[:len(line)-2]); !ok {
			return errBadChunk
		}
		if raw {
			w.Write(line)
		}
	}
}

// readLine returns the next line of r with its CRLF (a bare LF, or a line
// longer than r's buffer, is an error). The slice is valid until r's next
// read.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err == bufio.ErrBufferFull {
			err = errBadChunk
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errBadChunk
	}
	return line, nil
}

// fastRefuse answers fr with refusal no, and reports whether the client
// connection may carry another request: a body up to maxDiscard is read
// and dropped to keep it.
func (p *Proxy) fastRefuse(fr *FastRequest, no refusal) bool {
	keep := !no.close && !fr.Head.Close && !fr.Close
	fr.Client.Discard(fr.HeadLen)
	if cl := fr.Head.ContentLength; keep && cl > 0 {
		if cl > maxDiscard || !p.discardBody(fr, cl) {
			keep = false
		}
	}
	keep = p.fastAnswer(fr, no.status, no.msg, no.retryAfter, !keep) && keep
	return fr.Out.Flush() == nil && keep
}

// discardBody reads and drops n bytes of body from the client.
func (p *Proxy) discardBody(fr *FastRequest, n int64) bool {
	if fr.BodyTimeout > 0 {
		p.startBody(fr)
		defer fr.endBody()
	}
	for n > 0 {
		if p.readBody(fr) != 0 {
			return false
		}
		m, _ := fr.Client.Discard(int(min(n, int64(fr.Client.Buffered()))))
		n -= int64(m)
	}
	return true
}

// fastAnswer writes an answer of the gfe's own (not flushed), as
// http.Error would: status, a text/plain msg, Retry-After if set, and
// Connection: close when close. It reports false when close.
func (p *Proxy) fastAnswer(fr *FastRequest, status int, msg, retryAfter string, close bool) bool {
	w := fr.Out
	b := fr.scratch[:0]
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	w.Write(b)
	w.WriteString(http.StatusText(status))
	w.WriteString("\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: ")
	w.Write(strconv.AppendInt(fr.scratch[:0], int64(len(msg)+1), 10))
	w.WriteString("\r\n")
	if retryAfter != "" {
		w.WriteString("Retry-After: ")
		w.WriteString(retryAfter)
		w.WriteString("\r\n")
	}
	if close {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
	if !fr.isHead {
		w.WriteString(msg)
		w.WriteString("\n")
	}
	return !close
}
