package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/outlier"
)

// Retries (docs/design.md §4; config.Route.Retries).
//
// httputil.ReverseProxy sends a request once, so the proxy's Transport is a
// retryTransport: it sends each attempt through the proxy's attempt
// transport (proxy.next) to the backend picked for it, reports the result
// to outlier detection, and when an attempt failed and may safely be sent
// again, picks another backend and sends it there, up to the route's
// retries. An attempt may be sent again when
//
//   - it never reached a backend: connecting failed (refused, unreachable,
//     dial timeout), so the backend saw nothing, whatever the method; or
//   - the method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE), the
//     request has no body, and the attempt failed before any answer came
//     (connection reset or closed, for instance by a backend that died with
//     the request in flight).
//
// A request with a body is sent again only when it never reached a backend
// (its body was not read: the proxy hands each attempt a replayBody over the
// client's body, which the transport cannot close). A request whose client
// went away or whose route timeout passed is never sent again; an answer,
// even a 5xx, is never retried (the backend's 5xx counts toward its
// ejection instead). A failure of the client's body (clientbody.Error, or
// the route timeout passing while the gfe waits for that body) is the
// client's: never retried, never reported to outlier detection or the
// backend's signals.
//
// The retry's backend (routing.Service.RetryPick) is another one than every
// backend already tried, available (not full, not ejected), and chosen by
// what the failure says:
//
//   - the backend was unreachable — connecting failed, or no response
//     headers came within the route's per_try_timeout — so its whole
//     region may be cut off (a host or link down takes every zone on it):
//     another region first, leaving the plan row if it must, in the site's
//     waterfall order (the row's regions, then the site's farther regions,
//     nearest first); then another zone of a region tried; then the same
//     zone;
//   - the backend took the request and failed before answering (reset,
//     closed): another zone of the same region first, then another region
//     of the service's scope (for planned policies the site's plan row,
//     nearest region first), then the same zone.
//
// The failed backend's slot is released and the new one's taken before the
// attempt. Every attempt counts against the route's retries; the route
// timeout bounds them all, per-try timeouts included, so that a client
// waits at most the route timeout whatever happens.

// retryable reports whether an attempt of r that failed with err, whose
// context is done with ctxErr (nil if not), may be sent to another backend.
func retryable(r *http.Request, err, ctxErr error) bool {
	if ctxErr != nil {
		return false
	}
	if neverReached(err) {
		rb, ok := r.Body.(*replayBody)
		return r.Body == nil || r.Body == http.NoBody || (ok && !rb.touched())
	}
	return idempotent(r.Method) && (r.Body == nil || r.Body == http.NoBody)
}

// idempotent reports whether method is idempotent (RFC 9110 §9.2.2).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// neverReached reports whether err means the request never reached a
// backend: the connection to it could not be opened.
func neverReached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// resultOf returns the outlier result of an attempt that failed with err
// (ctxErr as in retryable), and false when the failure says nothing about
// the backend (the client went away).
func resultOf(err, ctxErr error) (outlier.Result, bool) {
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return outlier.Timeout, true
	case ctxErr != nil:
		return 0, false
	case neverReached(err):
		return outlier.ConnectFailure, true
	}
	return outlier.ServerError, true
}

// maxAttempts bounds the attempts of one request: config allows at most 5
// retries.
const maxAttempts = 6

// retryTransport is the ReverseProxy's Transport: attempts, outlier reports,
// retries and affinity cookies (see above). Safe for concurrent use; it
// allocates only to retry and to set a cookie.
type retryTransport struct{ p *Proxy }

// RoundTrip implements http.RoundTripper.
func (t retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ph, ok := req.Context().Value(pickKey{}).(*pickHolder)
	if !ok {
		return t.p.next.RoundTrip(req)
	}
	p := t.p
	for {
		sent := p.clk.Now()
		resp, err, expired := t.attempt(ph, req)
		now := p.clk.Now()
		if err == nil {
			ph.answered = true
			if resp.StatusCode == http.StatusSwitchingProtocols && ph.upgradeTimer != nil {
				// A real upgrade: the tunnel lives as long as its client
				// keeps it, past the route timeout.
				ph.upgradeTimer.Stop()
			}
			observeAnswer(&ph.pick, resp, now.Sub(sent), now)
			p.report(ph, outlier.FromStatus(resp.StatusCode), now)
			if ph.cookie.Value != "" {
				a := ph.svc.Affinity()
				v, exp := a.CookieFor(&ph.cookie, ph.pick.Backend.Addr(), now)
				resp.Header.Add("Set-Cookie", setCookie(a, v, exp, ph.secure))
				p.metrics.cookies.WithLabelValues(ph.svc.Name()).Inc()
			}
			return resp, nil
		}
		ctxErr := req.Context().Err()
		if ce := ph.body.Tag(err, errors.Is(ctxErr, context.DeadlineExceeded)); ce != nil {
			// The client's body failed (or stalled past the route
			// timeout): not the backend's failure, not worth another
			// attempt. ErrorHandler answers it.
			return nil, ce
		}
		if expired {
			// No headers within per_try_timeout: the backend's timeout.
			ph.pick.Backend.Observe(backend.OutcomeFailed, 0)
			p.report(ph, outlier.Timeout, now)
		} else if r, ok := resultOf(err, ctxErr); ok {
			ph.pick.Backend.Observe(backend.OutcomeFailed, 0)
			p.report(ph, r, now)
		}
		if ph.attempts > ph.retries || ph.attempts >= maxAttempts || !retryable(req, err, ctxErr) {
			return nil, err
		}
		unreachable := expired || neverReached(err)
		np, ok := ph.svc.RetryPick(&ph.pick, ph.tried[:ph.attempts], unreachable, p.rand(), now)
		if !ok {
			return nil, err
		}
		ph.pick.Done()
		ph.pick = np
		ph.tried[ph.attempts] = np.Backend
		ph.attempts++
		p.metrics.retries.WithLabelValues(ph.svc.Name()).Inc()
		req = retryRequest(req, np.Backend.Addr())
	}
}

// attempt sends one attempt of req. When the route has a per_try_timeout
// and req may be sent again after reaching a backend (idempotent, no
// body), the attempt runs under a context of its own that the timeout
// cancels unless response headers came first; expired reports that it
// did. The attempt's context then lives as long as its response body and
// is released with the request (pickHolder.cancelAttempts).
func (t retryTransport) attempt(ph *pickHolder, req *http.Request) (resp *http.Response, err error, expired bool) {
	p := t.p
	if ph.perTry <= 0 || !idempotent(req.Method) || (req.Body != nil && req.Body != http.NoBody) {
		resp, err = p.next.RoundTrip(req)
		return resp, err, false
	}
	ctx, cancel := context.WithCancel(req.Context())
	ph.cancels = append(ph.cancels, cancel)
	var fired atomic.Bool
	timer := p.clk.AfterFunc(ph.perTry, func() {
		fired.Store(true)
		cancel()
	})
	resp, err = p.next.RoundTrip(req.WithContext(ctx))
	timer.Stop()
	if err != nil && fired.Load() && req.Context().Err() == nil {
		p.metrics.perTryTimeouts.WithLabelValues(ph.svc.Name()).Inc()
		return nil, fmt.Errorf("no response headers within per_try_timeout %v: %w", ph.perTry, err), true
	}
	return resp, err, false
}

// retryRequest returns a copy of req, an attempt that failed, addressed to
// addr.
func retryRequest(req *http.Request, addr string) *http.Request {
	r := req.WithContext(req.Context())
	u := *req.URL
	u.Host = addr
	r.URL = &u
	if rb, ok := req.Body.(*replayBody); ok {
		r.Body = &replayBody{rc: rb.rc}
	}
	return r
}

// replayBody is the body of one attempt of a request with a body: it
// passes reads through, records whether any happened, and ignores Close
// (the transport closes a request's body when an attempt fails; the client's
// body must survive for the next attempt; ReverseProxy closes it at the
// end). Used by one attempt at a time.
type replayBody struct {
	rc      io.ReadCloser
	started bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.started = true
	return b.rc.Read(p)
}

func (b *replayBody) Close() error { return nil }

// touched reports whether the attempt read from the body.
func (b *replayBody) touched() bool { return b.started }
