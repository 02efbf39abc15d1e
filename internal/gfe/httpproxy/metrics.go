package httpproxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the HTTP proxy's Prometheus metrics. Counters on the request
// path are resolved once per label set by the client library and updated
// atomically; retries, ejections and cookies are off the common path.
type metrics struct {
	unrouted      *prometheus.CounterVec // service (empty), code
	pickErrors    *prometheus.CounterVec // service, error (routing.ErrorLabel)
	backendErrors prometheus.Counter
	latency       prometheus.Histogram
	retries       *prometheus.CounterVec // service
	// perTryTimeouts counts attempts abandoned at per_try_timeout.
	perTryTimeouts *prometheus.CounterVec // service
	ejections      *prometheus.CounterVec // service
	cookies        *prometheus.CounterVec // service
	streamsClosed  prometheus.Counter
	clientErrors   *prometheus.CounterVec // reason
	// unsolicited counts fast-path backend connections closed for bytes
	// no request asked for (the reuse rule, fastpool.go).
	unsolicited *prometheus.CounterVec // service
	// shed counts arrivals refused at once in global overload.
	shed *prometheus.CounterVec // service, reason
}

// ShedOverload is the reason label of an arrival refused because the
// plan says the service's global demand exceeds its capacity (config
// overload.shed, lb/shed).
const ShedOverload = "overload"

// NewShed returns the counter of requests and connections refused at once
// by the gfe, before any pick, by service and reason (ShedOverload): never
// counted against a backend. The gfe shares one between its proxies.
func NewShed() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_gfe_shed_total",
		Help: "Requests and connections refused at once by the gfe before any backend was picked, by service and reason (overload: global demand over capacity, overload.shed).",
	}, []string{"service", "reason"})
}

// NewPickErrors returns the counter of requests and connections for which
// no backend could be picked, by service and error label
// (routing.ErrorLabel). The gfe shares one between its proxies.
func NewPickErrors() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_gfe_pick_errors_total",
		Help: "Requests and connections for which no backend could be picked, by service and error (no_backend, all_busy, other).",
	}, []string{"service", "error"})
}

// NewBackendErrors returns the counter of proxied requests and connections
// that failed at the backend. The gfe shares one between its proxies.
func NewBackendErrors() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_gfe_backend_errors_total",
		Help: "Proxied requests that failed at the backend (connect error, reset, timeout), and tcp connections whose backend could not be dialled.",
	})
}

func newMetrics(opts Options) *metrics {
	m := &metrics{
		unrouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_unrouted_requests_total",
			Help: "Requests that matched no route, by service (empty) and status.",
		}, []string{"service", "code"}),
		pickErrors:    opts.PickErrors,
		backendErrors: opts.BackendErrors,
		shed:          opts.Shed,
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "spillway_gfe_request_duration_seconds",
			Help:    "Time from request arrival to the end of the proxied response.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_retries_total",
			Help: "Requests sent again to another backend after an attempt failed (never reached a backend, or idempotent without an answer), by service.",
		}, []string{"service"}),
		perTryTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_per_try_timeouts_total",
			Help: "Attempts abandoned without response headers at their route's per_try_timeout (then retried when allowed), by service.",
		}, []string{"service"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_outlier_ejections_total",
			Help: "Backends ejected by passive outlier detection, by service.",
		}, []string{"service"}),
		cookies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_affinity_cookies_total",
			Help: "Session-affinity cookies set on responses (new clients, moved clients, refreshed or re-signed cookies), by service.",
		}, []string{"service"}),
		streamsClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_gfe_streams_closed_total",
			Help: "Long-lived streams (gRPC calls, WebSockets) ended because their backend became unavailable.",
		}),
		clientErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_client_errors_total",
			Help: "Proxied requests that failed on the client's side and never counted against a backend, by reason (bad_body 400, body_timeout 408, body_too_large 413, canceled: the client went away).",
		}, []string{"reason"}),
		unsolicited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_backend_unsolicited_total",
			Help: "Backend connections of the HTTP/1.1 fast path closed because the backend sent bytes no request asked for (past a response's framed end, or while the connection was idle), by service: a backend bug that would hand one client's response to another.",
		}, []string{"service"}),
	}
	cs := []prometheus.Collector{m.unrouted, m.latency, m.retries, m.perTryTimeouts, m.ejections, m.cookies, m.streamsClosed, m.clientErrors, m.unsolicited}
	if m.pickErrors == nil {
		m.pickErrors = NewPickErrors()
		cs = append(cs, m.pickErrors)
	}
	if m.shed == nil {
		m.shed = NewShed()
		cs = append(cs, m.shed)
	}
	if m.backendErrors == nil {
		m.backendErrors = NewBackendErrors()
		cs = append(cs, m.backendErrors)
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(cs...)
	}
	return m
}
