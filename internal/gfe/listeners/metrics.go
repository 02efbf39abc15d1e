package listeners

import "github.com/prometheus/client_golang/prometheus"

// listenerMetrics are the listener manager's Prometheus metrics.
type listenerMetrics struct {
	accepted    *prometheus.CounterVec
	certReloads *prometheus.CounterVec
	bindErrors  *prometheus.CounterVec
	fdWaits     *prometheus.CounterVec
	resetClosed *prometheus.CounterVec
	ageClosed   *prometheus.CounterVec
	fastPath    *prometheus.CounterVec
	// refused counts the connections reset as they were accepted, by
	// listener and reason (client_limit).
	refused *prometheus.CounterVec
	// idleReclaimed counts the idle keep-alive connections closed to make
	// room in a spent fd budget for a client that waited.
	idleReclaimed *prometheus.CounterVec
	// clientResetClosed counts the HTTP/2 connections closed because
	// their client address went over its reset budget (resets.go).
	clientResetClosed *prometheus.CounterVec
	// drainCut counts the connections closed at shutdown because they were
	// still busy when the drain's time was up.
	drainCut *prometheus.CounterVec
	// malformed counts the requests refused before any handler because
	// net/http would have read them more leniently than the fast path.
	malformed *prometheus.CounterVec
}

func newListenerMetrics(reg prometheus.Registerer) *listenerMetrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &listenerMetrics{
		accepted: counter("spillway_gfe_listener_connections_total",
			"Client connections accepted, by listener.", "listener"),
		certReloads: counter("spillway_gfe_certificate_reloads_total",
			"Certificate sets loaded because their files changed, by listener and result (success, failure).", "listener", "result"),
		bindErrors: counter("spillway_gfe_listener_bind_errors_total",
			"Failed attempts to bind a listener's port, by listener.", "listener"),
		fdWaits: counter("spillway_gfe_listener_fd_budget_waits_total",
			"Times an http or https listener found the file-descriptor budget of client connections spent before it accepted (the next client waits until a connection closes, or an idle one is closed for it), by listener.", "listener"),
		resetClosed: counter("spillway_gfe_http2_reset_budget_closes_total",
			"HTTP/2 client connections closed because their client reset too many streams before their answer (rapid reset, CVE-2023-44487), by listener.", "listener"),
		ageClosed: counter("spillway_gfe_connection_age_closes_total",
			"Client connections ended because they reached the listener's max_connection_age (HTTP/1.1: closed after the response; HTTP/2: GOAWAY), by listener.", "listener"),
		fastPath: counter("spillway_gfe_fast_path_total",
			"Request heads read by the HTTP/1.1 fast path of http listeners with fast_path, by listener and verdict (fast: served on the fast path; handoff: the connection went to net/http; reject: answered 400 or 431).", "listener", "verdict"),
		refused: counter("spillway_gfe_listener_refused_total",
			"Client connections of http and https listeners closed (reset) as they were accepted, before any request was read, by listener and reason (client_limit: the client address already held max_connections_per_client).", "listener", "reason"),
		idleReclaimed: counter("spillway_gfe_listener_idle_reclaimed_total",
			"Idle keep-alive client connections closed, the longest idle first, because the file-descriptor budget was spent and another client waited to be accepted, by the listener of the closed connection.", "listener"),
		clientResetClosed: counter("spillway_gfe_http2_client_reset_budget_closes_total",
			"HTTP/2 client connections closed because their client address, over all its connections, reset too many streams before their answer (rapid reset spread over connections), by listener.", "listener"),
		drainCut: counter("spillway_gfe_drain_cut_connections_total",
			"Client connections of http and https listeners closed at shutdown or after a listener change because they were still busy when the drain timeout passed, by listener.", "listener"),
		malformed: counter("spillway_gfe_malformed_requests_total",
			"Requests on connections net/http serves (listeners without fast_path, connections the fast path handed off, HTTP/2) answered 400 before any handler because net/http would have read them more leniently than the fast path: bare LF, obsolete line folding, two Content-Lengths, an absolute-form target whose host differs from Host, or an HTTP/2 Host differing from :authority; by listener.", "listener"),
	}
	if reg != nil {
		reg.MustRegister(m.accepted, m.certReloads, m.bindErrors, m.fdWaits, m.resetClosed, m.ageClosed, m.fastPath,
			m.refused, m.idleReclaimed, m.clientResetClosed, m.drainCut, m.malformed)
	}
	return m
}
