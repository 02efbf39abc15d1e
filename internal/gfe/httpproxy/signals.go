package httpproxy

import (
	"io"
	"net/http"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/loadreport"
	"github.com/spillway-lb/spillway/lb/routing"
)

// Local signals (docs/design.md §3 rule 8; lb/capacity). Every attempt that a
// backend answered counts on the backend as OutcomeRejected when the
// answer refuses the request for capacity, OutcomeOK (with the time to
// the response headers) otherwise; an attempt without an answer counts as
// OutcomeFailed (retryTransport). A load report in the response
// (endpoint-load-metrics, ORCA) counts its utilization. A gRPC call is
// counted when its body ends, by its trailers (grpc-status, and the
// per-call ORCA report endpoint-load-metrics-bin). A pick made by the
// load-aware choice (config load_aware) also learns from each answer: its
// latency, unless it refuses for capacity (a fast refusal would make an
// overloaded instance look fast), and the utilization of its load report
// (routing.Pick.ObserveLatency, ObserveUtilization). Nothing but the gRPC
// path allocates.

// headerReject is the test backend's capacity-rejection header
// (X-Spillway-Reject: queue-full), canonical.
const headerReject = "X-Spillway-Reject"

// observeAnswer counts resp, the answer of an attempt of pick pk after
// latency, at now. A gRPC answer with a body is counted when its body
// ends, from its trailers (grpcSignals).
func observeAnswer(pk *routing.Pick, resp *http.Response, latency time.Duration, now time.Time) {
	if isGRPC(resp.Header) && resp.Body != nil && resp.Body != http.NoBody && len(resp.Header["Grpc-Status"]) == 0 {
		resp.Body = &grpcSignals{ReadCloser: resp.Body, resp: resp, pick: *pk, latency: latency, at: now}
		return
	}
	report := ""
	if v := resp.Header[loadreport.Header]; len(v) > 0 {
		report = v[0]
	}
	observeOutcome(pk, rejected(resp), report, latency, now)
}

// observeOutcome counts an answer to pk after latency, at now: a
// rejection for capacity when rejected, else an answer; and the load
// report in report (an endpoint-load-metrics value, "" for none). Both the
// net/http path (observeAnswer) and the fast path count through it.
func observeOutcome(pk *routing.Pick, rejected bool, report string, latency time.Duration, now time.Time) {
	b := pk.Backend
	if rejected {
		b.Observe(backend.OutcomeRejected, latency)
	} else {
		b.Observe(backend.OutcomeOK, latency)
		pk.ObserveLatency(now, latency)
	}
	if report != "" {
		if r, err := loadreport.Parse(report); err == nil {
			observeReport(pk, r, now)
		}
	}
}

// observeReport counts load report r of pk's backend, received at now.
func observeReport(pk *routing.Pick, r loadreport.Report, now time.Time) {
	b := pk.Backend
	u := r.Utilization()
	b.ObserveLoad(u)
	pk.ObserveUtilization(now, u)
	if r.CPUUtilization > 0 {
		b.ObserveCPU(r.CPUUtilization)
	}
	if r.RPSFractional > 0 {
		b.ObserveRate(r.RPSFractional)
	}
}

// rejected reports whether resp refuses its request for capacity: 429 or
// 503, a gRPC status UNAVAILABLE (14) or RESOURCE_EXHAUSTED (8) in a
// trailers-only answer, or the test backend's X-Spillway-Reject header.
func rejected(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	if len(resp.Header[headerReject]) > 0 {
		return true
	}
	return grpcRefused(resp.Header)
}

// grpcRefused reports whether h (a trailers-only answer's header, or a
// call's trailers) carries grpc-status UNAVAILABLE (14) or
// RESOURCE_EXHAUSTED (8).
func grpcRefused(h http.Header) bool {
	v := h["Grpc-Status"]
	return len(v) > 0 && (v[0] == "14" || v[0] == "8")
}

// grpcTrailerReport is the canonical form of the trailer that carries a
// gRPC call's ORCA load report (loadreport.GRPCTrailer).
var grpcTrailerReport = http.CanonicalHeaderKey(loadreport.GRPCTrailer)

// grpcSignals is the body of a gRPC answer: when it ends (EOF, or Close
// before it) it counts the call on its pick by its trailers — grpc-status
// UNAVAILABLE or RESOURCE_EXHAUSTED as a rejection, anything else as an
// answer after latency (the time to the response headers, taken at at) —
// and the per-call ORCA report in endpoint-load-metrics-bin, if any. Used
// by the request's goroutine only.
type grpcSignals struct {
	io.ReadCloser
	resp    *http.Response
	pick    routing.Pick
	latency time.Duration
	at      time.Time
	done    bool
}

func (g *grpcSignals) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if err == io.EOF {
		g.observe()
	}
	return n, err
}

func (g *grpcSignals) Close() error {
	g.observe()
	return g.ReadCloser.Close()
}

func (g *grpcSignals) observe() {
	if g.done {
		return
	}
	g.done = true
	tr := g.resp.Trailer
	b := g.pick.Backend
	if grpcRefused(tr) {
		b.Observe(backend.OutcomeRejected, g.latency)
	} else {
		b.Observe(backend.OutcomeOK, g.latency)
		g.pick.ObserveLatency(g.at, g.latency)
	}
	if v := tr[grpcTrailerReport]; len(v) > 0 {
		if r, err := loadreport.Parse("BIN " + v[0]); err == nil {
			observeReport(&g.pick, r, g.at)
		}
	}
}
