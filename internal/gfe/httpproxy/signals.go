package httpproxy

import (
	"net/http"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/loadreport"
)

// Local signals (DESIGN.md §3 rule 8; lb/capacity). Every attempt that a
// backend answered counts on the backend as OutcomeRejected when the
// answer refuses the request for capacity, OutcomeOK (with the time to
// the response headers) otherwise; an attempt without an answer counts as
// OutcomeFailed (retryTransport). A load report in the response
// (endpoint-load-metrics, ORCA) counts its utilization. None of it
// allocates.

// headerReject is the test backend's capacity-rejection header
// (X-Spillway-Reject: queue-full), canonical.
const headerReject = "X-Spillway-Reject"

// observeAnswer counts resp, the answer of an attempt on b after latency.
func observeAnswer(b *backend.Backend, resp *http.Response, latency time.Duration) {
	if rejected(resp) {
		b.Observe(backend.OutcomeRejected, latency)
	} else {
		b.Observe(backend.OutcomeOK, latency)
	}
	if v := resp.Header[loadreport.Header]; len(v) > 0 {
		if r, err := loadreport.Parse(v[0]); err == nil {
			b.ObserveLoad(r.Utilization())
		}
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
	if v := resp.Header["Grpc-Status"]; len(v) > 0 {
		return v[0] == "14" || v[0] == "8"
	}
	return false
}
