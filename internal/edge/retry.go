package edge

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/outlier"
)

// Retries (DESIGN.md §4; config.Route.Retries).
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
// ejection instead).
//
// The retry's backend (service.retryPick) is another one than every backend
// already tried, available (not full, not ejected), and chosen in this order
// of preference: another zone of the same region, then another region of
// the service's scope (for planned policies the site's plan row, nearest
// region first), then another backend of the same zone (after several
// attempts: a zone not tried of a region tried, a region not tried, a zone
// tried). The failed backend's slot is released and the new one's taken
// before the attempt.

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
type retryTransport struct{ p *proxy }

// RoundTrip implements http.RoundTripper.
func (t retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ph, ok := req.Context().Value(pickKey{}).(*pickHolder)
	if !ok {
		return t.p.next.RoundTrip(req)
	}
	e := t.p.e
	for {
		resp, err := t.p.next.RoundTrip(req)
		now := e.clk.Now()
		if err == nil {
			ph.report(outlier.FromStatus(resp.StatusCode), now)
			if ph.cookie.value != "" {
				v, exp := ph.svc.aff.cookieFor(&ph.cookie, ph.backend.Addr(), now)
				resp.Header.Add("Set-Cookie", ph.svc.aff.setCookie(v, exp, ph.secure))
				t.p.sm.cookies.WithLabelValues(ph.svc.name).Inc()
			}
			return resp, nil
		}
		ctxErr := req.Context().Err()
		if r, ok := resultOf(err, ctxErr); ok {
			ph.report(r, now)
		}
		if ph.attempts > ph.retries || ph.attempts >= maxAttempts || !retryable(req, err, ctxErr) {
			return nil, err
		}
		np, ok := ph.svc.retryPick(&ph.pick, ph.tried[:ph.attempts], e.rand(), now)
		if !ok {
			return nil, err
		}
		ph.pick.done()
		ph.pick = np
		ph.tried[ph.attempts] = np.backend
		ph.attempts++
		t.p.sm.retries.WithLabelValues(ph.svc.name).Inc()
		req = retryRequest(req, np.backend.Addr())
	}
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

// retryTier returns the preference tier of m as the backend of a retry
// after attempts on the backends tried (members of s's scope): 0 another
// zone of a region tried, 1 a region not tried, 2 a zone tried. After one
// attempt: another zone of its region, another region, its zone.
func (s *service) retryTier(m *member, tried []*backend.Backend) int {
	regionTried, zoneTried := false, false
	for _, b := range tried {
		i, ok := s.byBackend[b]
		if !ok {
			continue
		}
		t := &s.scope[i]
		if t.region == m.region {
			regionTried = true
			zoneTried = zoneTried || t.zone == m.zone
		}
	}
	switch {
	case zoneTried:
		return 2
	case regionTried:
		return 0
	}
	return 1
}

// retryPick picks the backend of another attempt of a request whose
// attempts went to tried (the last one, failed, included), among the
// service's scope minus tried: an available backend of the best tier
// (retryTier) — in tier 1, of the nearest region, the one whose backends
// come first in the scope — the first found from a position drawn from rnd,
// so that retries spread. The returned pick holds a slot and keeps failed's
// reason. It returns false when no backend is available. It does not
// allocate.
func (s *service) retryPick(failed *pick, tried []*backend.Backend, rnd uint64, now time.Time) (pick, bool) {
	n := len(s.scope)
	if n == 0 {
		return pick{}, false
	}
	start := int(rnd % uint64(n))
	// A concurrent pick may take the chosen slot; look again a few times.
	for range 3 {
		best, bestKey := -1, math.MaxInt
		for j := range n {
			i := (start + j) % n
			m := &s.scope[i]
			if m.b == failed.backend || containsBackend(tried, m.b) || m.b.Full() || (m.host != nil && m.host.Ejected(now)) {
				continue
			}
			tier := s.retryTier(m, tried)
			key := tier * (n + 1)
			if tier == 1 {
				key += m.rank
			}
			if key < bestKey {
				best, bestKey = i, key
			}
		}
		if best < 0 {
			return pick{}, false
		}
		m := &s.scope[best]
		if m.b.TryAcquire() {
			return pickOf(m, failed.reason), true
		}
	}
	return pick{}, false
}

func containsBackend(bs []*backend.Backend, b *backend.Backend) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}

// sessionMetrics count retries, ejections and affinity cookies. Updated off
// the common path only (a retry, an ejection, a cookie issued).
type sessionMetrics struct {
	retries   *prometheus.CounterVec
	ejections *prometheus.CounterVec
	ejected   *prometheus.GaugeVec
	cookies   *prometheus.CounterVec
}

func newSessionMetrics(reg prometheus.Registerer) *sessionMetrics {
	m := &sessionMetrics{
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_retries_total",
			Help: "Requests sent again to another backend after an attempt failed (never reached a backend, or idempotent without an answer), by service.",
		}, []string{"service"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_outlier_ejections_total",
			Help: "Backends ejected by passive outlier detection, by service.",
		}, []string{"service"}),
		ejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_outlier_ejected",
			Help: "Backends ejected by passive outlier detection at the last plan, by service.",
		}, []string{"service"}),
		cookies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_affinity_cookies_total",
			Help: "Session-affinity cookies set on responses (new clients, moved clients, refreshed or re-signed cookies), by service.",
		}, []string{"service"}),
	}
	reg.MustRegister(m.retries, m.ejections, m.ejected, m.cookies)
	return m
}
