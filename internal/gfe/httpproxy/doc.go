// Package httpproxy is the gfe's HTTP reverse proxy: it routes each client
// request to a service, picks a backend from the live routing table
// (session affinity first, then the service's policy), and forwards the
// request with httputil.ReverseProxy over HTTP/1.1, h2c for gRPC, or an
// upgraded tunnel for WebSockets.
//
// Plain HTTP/1.1 requests that the listeners' fast path takes (docs/design.md
// §4, docs/listeners.md) come to ServeFast instead (fast.go): the same steps
// before a backend (decide, shared with ServeHTTP), then raw pooled
// connections to the backend and strict response framing, with the guarantees
// below; fast.go lists the few differences.
//
// The proxy needs two things of the gfe, behind the Planner interface: the
// live table (routing.Table, loaded once per request) and a way to wake the
// planner when outlier detection ejects a backend. It owns what lives on
// the request path: retries (retry.go states what may be retried and why),
// the outlier reports of every attempt, affinity cookies, the transports
// and the tracking of long-lived streams, so that the gfe can end those of
// a backend that becomes unavailable (EndStreamsTo).
//
// Guarantees:
//
//   - Every request holds one slot of its backend for its whole life (the
//     last attempt's, with retries), released when it ends.
//   - A client never sees an internal error's text: no route is a 404, no
//     backend a 503 (with Retry-After: DrainedRetryAfter when every group
//     of the service is drained) and every backend busy a 429, each with a
//     fixed message; a backend's failure is a 502 (504 for the route
//     timeout). With a pending queue (Options.Pending), a service with an
//     autoscaled group answers neither busy nor no backend at once: the
//     request waits for a slot, and only a wait that reaches the pending
//     deadline is a 429, with Retry-After (await.go).
//   - A client cannot hurt a backend (docs/design.md §9): a failure of the
//     client's body (clientbody.Error: malformed, cut short, too large or
//     stalled, or still awaited at the route timeout) is answered 400, 408
//     or 413 with the connection closed, and never reported to outlier
//     detection, the backend's signals (backend.Observe) or the backend
//     error counters; a request whose client went away before any backend
//     answered is withdrawn from the service's demand (Meters.Withdraw).
//   - The route timeout bounds every request but real streams: a gRPC
//     call over HTTP/2 to a gRPC service (health_check.protocol grpc), and
//     an upgrade after its backend's 101 (a header alone does not exempt a
//     request: content-type application/grpc to any other service is
//     timed like any request).
//   - Backends never see a client's X-Real-IP nor the gfe's own affinity
//     cookie; a path with a dot segment is refused (400) before routing.
//   - One client never gets the answer to another's request: a pooled
//     backend connection carries another request only if its last
//     response ended exactly where its framing said and nothing has
//     arrived on it since, checked right before the request is written
//     (the reuse rule, fastpool.go, which also says the one window no
//     HTTP/1.1 client can close); otherwise it is closed. An attempt
//     relays at most maxInterim interim (1xx) answers ahead of its final
//     one, on either path; a backend that sends more has failed (502).
//   - The common path does not allocate beyond net/http's own (copy
//     buffers are pooled; TestProxyBytesPerRequest); the fast path does
//     not allocate at all (TestFastPathAllocs, BenchmarkFastPath).
package httpproxy
