package httpproxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/h1"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/clock"
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

// maxDiscard is the most request body the fast path reads and drops to
// keep a connection whose request it refused; a longer body closes it.
const maxDiscard = 256 << 10

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
	pt.c.SetReadDeadline(past)
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
	observeOutcome(&d.pick, rejected, report, now.Sub(x.sent), now)
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
