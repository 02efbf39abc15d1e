package httpproxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/clientbody"
	"github.com/spillway-lb/spillway/internal/gfe/pending"
	"github.com/spillway-lb/spillway/internal/gfe/quotaclient"
	"github.com/spillway-lb/spillway/lb/affinity"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/reqpath"
	"github.com/spillway-lb/spillway/lb/routing"
)

// Planner is what the proxy needs of the gfe's planner. Its methods are
// called on the request path from many goroutines at once and must not
// block.
type Planner interface {
	// Table returns the routing table live now, nil before the first one.
	Table() *routing.Table
	// Wake asks for a new table soon: outlier detection ejected a backend.
	Wake()
}

// Config is what an operator sets for the proxy.
type Config struct {
	// AccessLog logs every request (off by default: it costs on the hot
	// path).
	AccessLog bool
}

// Options are the proxy's dependencies.
type Options struct {
	// Planner gives the live table. Required.
	Planner Planner
	// Logger receives the access log. The zero Logger discards it.
	Logger zerolog.Logger
	// Clock times requests and outlier reports; nil means the real clock.
	Clock clock.Clock
	// Rand returns uniform random numbers for picks; nil means
	// math/rand/v2.Uint64. It must be safe for concurrent use.
	Rand func() uint64
	// Dialer opens connections to backends; nil means a net.Dialer with a
	// 5 s timeout.
	Dialer *net.Dialer
	// Registry receives the proxy's metrics; nil registers them nowhere.
	Registry prometheus.Registerer
	// PickErrors and BackendErrors are the counters the proxy shares with
	// the tcp proxy (labels service and error for PickErrors); nil gives
	// the proxy counters of its own, registered in Registry.
	PickErrors    *prometheus.CounterVec
	BackendErrors prometheus.Counter
	// Shed is the counter of arrivals refused at once in global overload
	// (NewShed: labels service and reason), shared with the tcp proxy;
	// nil gives the proxy one of its own, registered in Registry.
	Shed *prometheus.CounterVec
	// Quota admits requests against per-consumer quota before they are
	// routed (internal/gfe/quotaclient.Enforcer); nil charges nothing.
	Quota Admitter
	// Pending is the pending queue where a request of a service with an
	// autoscaled backend group waits when it finds no free backend (see
	// await); nil: no request waits, busy is a 429 and no backend a 503
	// at once. The caller runs the queue (Queue.Run) and kicks it on every
	// new table.
	Pending *pending.Queue
}

// Admitter decides whether a request of a service is admitted by quota
// at now, without waiting on the network: a zero Verdict admits it.
type Admitter interface {
	Admit(cfg *config.Config, service string, r *http.Request, now time.Time) quotaclient.Verdict
}

// Proxy is the client-facing HTTP handler: route, pick, forward. Create it
// with New; it is safe for concurrent use.
type Proxy struct {
	// Immutable after New.
	cfg       Config
	planner   Planner
	log       zerolog.Logger
	clk       clock.Clock
	rand      func() uint64
	metrics   *metrics
	transport *http.Transport
	// next carries one attempt of a request to the backend in its URL; the
	// ReverseProxy's Transport (retryTransport) sends every attempt through
	// it. backendRoundTripper by default.
	next http.RoundTripper
	// quota is Options.Quota, nil when nothing is charged.
	quota Admitter
	// pending is Options.Pending, nil when no request waits.
	pending *pending.Queue
	rp      *httputil.ReverseProxy
	// streams tracks long-lived streams (gRPC calls, upgraded connections)
	// by backend, so that those of an unavailable backend can be ended.
	streams *streamTracker
	// h2c carries gRPC calls to backends; grpcTransport and
	// upgradeTransport are the tracked transports of transportFor.
	h2c              *http.Transport
	grpcTransport    http.RoundTripper
	upgradeTransport http.RoundTripper
	// dialer opens backend connections; fast pools the fast path's
	// (fastpool.go).
	dialer *net.Dialer
	fast   fastPool
}

type pickKey struct{}

// New returns a Proxy.
func New(cfg Config, opts Options) (*Proxy, error) {
	if opts.Planner == nil {
		return nil, errors.New("httpproxy: Options.Planner is required")
	}
	dialer := opts.Dialer
	if dialer == nil {
		dialer = &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	}
	tr := &http.Transport{
		// Every response head as strict as the fast path's (strict.go).
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newStrictResponses(c), nil
		},
		MaxResponseHeaderBytes: maxResponseHead,
		MaxIdleConns:           4096,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  30 * time.Second,
		ExpectContinueTimeout:  time.Second,
	}
	p := &Proxy{
		cfg:       cfg,
		planner:   opts.Planner,
		quota:     opts.Quota,
		pending:   opts.Pending,
		log:       opts.Logger,
		clk:       clock.OrReal(opts.Clock),
		rand:      opts.Rand,
		metrics:   newMetrics(opts),
		transport: tr,
		streams:   newStreamTracker(),
		h2c:       newH2CTransport(dialer),
		dialer:    dialer,
	}
	if p.rand == nil {
		p.rand = rand.Uint64
	}
	// Attempts go by the request's protocol (transportFor: gRPC over h2c,
	// upgrades and gRPC calls tracked as streams, the rest over tr).
	p.grpcTransport = &trackingTransport{next: p.h2c, streams: p.streams}
	p.upgradeTransport = &trackingTransport{next: tr, streams: p.streams}
	p.next = backendRoundTripper{p}
	p.rp = &httputil.ReverseProxy{
		Transport:  retryTransport{p: p},
		BufferPool: &bufferPool{},
		Rewrite: func(r *httputil.ProxyRequest) {
			ph := r.In.Context().Value(pickKey{}).(*pickHolder)
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = ph.pick.Backend.Addr()
			r.Out.Host = r.In.Host
			r.SetXForwarded()
			// What the gfe vouches for is in X-Forwarded-For; a client's
			// own X-Real-IP would pass for the gfe's word.
			r.Out.Header.Del("X-Real-Ip")
			if a := ph.svc.Affinity(); a != nil && a.Type() == config.AffinityGeneratedCookie {
				// The gfe's own cookie is the gfe's business: the backend
				// never sees it (the client's other cookies pass).
				stripCookie(r.Out.Header, a.Cookie())
			}
			if ph.retries > 0 && r.Out.Body != nil && r.Out.Body != http.NoBody {
				// Keep the client's body for a retry (see replayBody).
				r.Out.Body = &replayBody{rc: r.Out.Body}
			}
		},
		ErrorHandler: p.errorHandler,
	}
	return p, nil
}

// CloseIdleConnections closes the idle connections to backends.
func (p *Proxy) CloseIdleConnections() {
	p.transport.CloseIdleConnections()
	p.h2c.CloseIdleConnections()
	p.fast.closeIdle()
}

// copyBufferSize is the size of the buffers ReverseProxy copies response
// bodies through; 32 KiB is what it allocates itself without a pool.
const copyBufferSize = 32 << 10

// bufferPool recycles ReverseProxy's copy buffers. Without it ReverseProxy
// allocates a fresh 32 KiB buffer for every response, four fifths of the
// bytes the gfe allocated per request (bench/proxy.sh), and the GC work that
// follows cost about a quarter of the proxy's CPU. Buffers are kept as array
// pointers so that Put does not allocate. Safe for concurrent use.
type bufferPool struct {
	p sync.Pool // of *[copyBufferSize]byte
}

// Get returns a buffer of copyBufferSize bytes.
func (b *bufferPool) Get() []byte {
	if a, ok := b.p.Get().(*[copyBufferSize]byte); ok {
		return a[:]
	}
	return new([copyBufferSize]byte)[:]
}

// Put recycles buf if it came from Get; other slices are dropped.
func (b *bufferPool) Put(buf []byte) {
	if len(buf) != copyBufferSize {
		return
	}
	b.p.Put((*[copyBufferSize]byte)(buf))
}

// errorHandler is the ReverseProxy's ErrorHandler: it answers a request
// whose forwarding failed. A failure of the client's side — its body was
// malformed, cut short, too large or stalled (clientbody.Error), or the
// route timeout passed while the gfe waited for that body — is answered
// with its 400, 408 or 413 and the connection closed; a client that went
// away gets nothing useful. Neither counts as a backend failure. Anything
// else is the backend's: 504 after the route timeout, 502 otherwise.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ph := r.Context().Value(pickKey{}).(*pickHolder)
	deadline := errors.Is(err, context.DeadlineExceeded) || errors.Is(r.Context().Err(), context.DeadlineExceeded)
	if ce := ph.body.Tag(err, deadline); ce != nil {
		p.metrics.clientErrors.WithLabelValues(clientErrorLabel(ce.Status)).Inc()
		w.Header().Set("Connection", "close")
		http.Error(w, http.StatusText(ce.Status), ce.Status)
		return
	}
	if !deadline && ph.clientGone() {
		p.metrics.clientErrors.WithLabelValues("canceled").Inc()
		http.Error(w, msgClientGone, statusClientClosed)
		return
	}
	ph.svc.Meters().Failures.Add(1)
	p.metrics.backendErrors.Inc()
	status := http.StatusBadGateway
	if deadline {
		status = http.StatusGatewayTimeout
	}
	http.Error(w, http.StatusText(status), status)
}

// clientErrorLabel returns the metric label of a client error's status.
func clientErrorLabel(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_body"
	case http.StatusRequestTimeout:
		return "body_timeout"
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	}
	return "other"
}

// The fixed answers to requests that get no backend; the error's text (which
// may name a backend) never reaches the client.
const (
	msgNoConfig   = "no configuration yet"
	msgNoRoute    = "gfe: no route for request"
	msgNoBackend  = "gfe: no healthy backend"
	msgAllBusy    = "gfe: every backend is at its concurrency limit"
	msgDrained    = "gfe: the service is drained; retry later"
	msgClientGone = "gfe: client closed request"
	msgNoneFreed  = "gfe: no instance became free within the pending wait"
	msgQueueFull  = "gfe: too many requests are waiting for this service"
	msgShed       = "gfe: the service is over its global capacity; retry later"
)

// statusClientClosed answers a request whose client went away before its
// answer (nginx's 499); nobody reads it.
const statusClientClosed = 499

// DrainedRetryAfter is the Retry-After of the 503 that answers a request
// for a service whose every backend group is drained (capacity_scaler 0),
// in seconds. A drain is an operator's act that lasts minutes; a client
// that comes back after half a minute finds it over or is told again.
const DrainedRetryAfter = "30"

// ServeHTTP routes r to a service, picks a backend by the service's session
// affinity and policy and forwards r to it, within the route's timeout and
// with the route's retries (retryTransport).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := p.clk.Now()
	if r.Context().Err() != nil {
		// The client reset the stream (HTTP/2) or closed its connection
		// before the gfe got to it: nobody to answer, no demand to count,
		// no backend to bother (rapid reset, CVE-2023-44487).
		return
	}
	// The one canonical path (lb/reqpath) is what the route and the quota
	// charges match and what the backend receives, or the request is
	// refused: r is replaced by a copy with the canonical URL when its
	// path was not canonical.
	esc := r.URL.EscapedPath()
	cp, err := reqpath.Normalize(esc)
	if err != nil {
		p.pathRefused(err).write(w)
		return
	}
	if cp.Escaped != esc {
		r = withPath(r, cp)
	}
	d, no := p.decide(r.Context(), (*httpView)(r), r.Host, cp.Decoded, r.Method, flowOf(r), start)
	if no.status != 0 {
		no.write(w)
		return
	}
	rt, svc, pk, ck := d.route, d.svc, d.pick, d.cookie
	defer svc.Meters().Ended()
	ph := &pickHolder{pick: pk, svc: svc, retries: rt.Retries, perTry: rt.PerTryTimeout, attempts: 1, cookie: ck, secure: r.TLS != nil,
		head: r.Method == http.MethodHead}
	defer ph.cancelAttempts()
	ph.body, _ = r.Body.(*clientbody.Body)
	// The route timeout bounds the whole request, retries included. Streams
	// are exempt, but only real ones: a gRPC call over HTTP/2 to a service
	// the config declares gRPC (grpcService) carries its own deadline, and
	// an upgraded connection (WebSocket) lives as long as its client keeps
	// it — after its backend's 101, not before: an HTTP/1.1 request that
	// only asks for an upgrade is timed until the 101 comes (its timer is
	// on the clock, stopped by retryTransport). A client cannot switch the
	// timeout off with a header.
	ctx, cancel := r.Context(), context.CancelFunc(noCancel)
	switch {
	case rt.Timeout <= 0 || (r.ProtoMajor == 2 && isGRPC(r.Header) && grpcService(svc.Config())):
	case r.ProtoMajor == 1 && isUpgrade(r.Header):
		uctx, ucancel := context.WithCancel(ctx) // own variables: a closure over cancel would move it to the heap for every request
		ctx, cancel = uctx, ucancel
		ph.upgradeTimer = p.clk.AfterFunc(rt.Timeout, func() {
			ph.timedOut.Store(true)
			ucancel()
		})
		defer ph.upgradeTimer.Stop()
	default:
		ctx, cancel = context.WithTimeout(ctx, rt.Timeout)
		if ph.body != nil {
			// A route timeout that passes while the gfe waits for the
			// client's body is the client's: 408 at the timeout.
			defer ph.body.WatchRoute(ctx)()
		}
	}
	defer cancel()
	// Under ReverseProxy's own trace, which relays interim answers: ours
	// marks where each answer begins (strict.go) and bounds them.
	ph.trace.GotConn, ph.trace.Got1xxResponse = ph.gotConn, ph.got1xx
	ph.Context = httptrace.WithClientTrace(ctx, &ph.trace)
	ph.tried[0] = pk.Backend
	defer ph.pick.Done() // the pick of the last attempt
	p.rp.ServeHTTP(w, r.WithContext(ph))
	if !ph.answered && r.Context().Err() != nil {
		// The client went away before any backend answered (an HTTP/2
		// stream reset, a closed connection): not demand.
		svc.Meters().Withdraw()
	}

	elapsed := p.clk.Since(start)
	p.metrics.latency.Observe(elapsed.Seconds())
	if p.cfg.AccessLog {
		p.log.Info().Str("service", svc.Name()).Str("backend", ph.pick.Backend.Addr()).Str("region", ph.pick.Region).
			Str("reason", ph.pick.Reason.String()).Int("attempts", ph.attempts).Str("method", r.Method).Str("path", r.URL.Path).
			Dur("duration", elapsed).Msg("request")
	}
}

func noCancel() {}

// grpcService reports whether service sc serves gRPC, as its config
// declares it: its health check is a gRPC one (health_check.protocol
// grpc). Only a gRPC call to such a service may outlive its route's
// timeout; anything else that says it is gRPC is timed like any request.
func grpcService(sc *config.Service) bool {
	return sc != nil && sc.HealthCheck.Protocol == config.HealthGRPC
}

// requestView is what the steps every request takes before a backend
// (decide) read of it, whichever path carries it: net/http's (httpView)
// or the fast path's (FastRequest).
type requestView interface {
	// header returns the first value of the canonical header field name,
	// or "".
	header(name string) string
	// cookie returns the value of the first cookie called name, or "".
	cookie(name string) string
	// quotaRequest returns the request as net/http's, for the Admitter.
	quotaRequest() *http.Request
	// fast reports whether the request came by the fast path, which asks
	// the Admitter only when the config charges something (building its
	// *http.Request costs allocations; the Admitter admits everything
	// when nothing is charged).
	fast() bool
}

// httpView is a net/http request as a requestView. It does not allocate.
type httpView http.Request

func (v *httpView) header(name string) string {
	if vs := v.Header[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}
func (v *httpView) cookie(name string) string   { return cookieValue(v.Header, name) }
func (v *httpView) quotaRequest() *http.Request { return (*http.Request)(v) }
func (v *httpView) fast() bool                  { return false }

// refusal is an answer the gfe gives a request itself, without a backend.
// The zero refusal (status 0) is none.
type refusal struct {
	status     int
	msg        string
	retryAfter string // Retry-After, "" for none
	close      bool   // close the client connection after it
}

// write answers w with the refusal.
func (no refusal) write(w http.ResponseWriter) {
	if no.retryAfter != "" {
		w.Header().Set("Retry-After", no.retryAfter)
	}
	if no.close {
		w.Header().Set("Connection", "close")
	}
	http.Error(w, no.msg, no.status)
}

// decision is a request routed to a service, admitted and picked.
type decision struct {
	route  *config.Route
	svc    *routing.Service
	pick   routing.Pick
	cookie routing.Cookie
}

// withPath returns a shallow copy of r whose URL has path cp (the copy's
// own URL; the query and the rest kept).
func withPath(r *http.Request, cp reqpath.Path) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = cp.Decoded, cp.Escaped
	r2.URL = &u
	return r2
}

// pathRefused counts and returns the answer to a request whose path
// lb/reqpath refused with err: 400 with the reason, and the connection
// closed (only an attack sends such a path: clients resolve dot segments
// and send one slash).
func (p *Proxy) pathRefused(err error) refusal {
	p.metrics.unrouted.WithLabelValues("", "400").Inc()
	return refusal{status: http.StatusBadRequest, msg: "gfe: " + err.Error(), close: true}
}

// decide takes a request, read through v, for host and path (the request's
// canonical path, decoded: reqpath.Path.Decoded, which the quota Admitter
// finds in the request too) from client flow k at now through the steps
// both the net/http path and the fast path take before a backend: the
// live table, the route, quota admission, and the pick by session affinity or the
// service's policy, waiting in the pending queue (await) when the service
// has an autoscaled group and no backend is free or some of its requests
// already wait; ctx is the client's, which ends a wait. It counts what it
// refuses in the metrics and returns the refusal's answer; otherwise the
// request is counted started on the service's meters (the caller calls
// Meters().Ended() when it ends) and its pick holds a backend slot (the
// caller releases it with Done). It does not allocate unless quota charges
// the request, it is refused, or it waits.
func (p *Proxy) decide(ctx context.Context, v requestView, host, path, method string, k routing.Flow, now time.Time) (decision, refusal) {
	t := p.planner.Table()
	if t == nil {
		return decision{}, refusal{status: http.StatusServiceUnavailable, msg: msgNoConfig}
	}
	rt, ok := t.Config.Route(host, path)
	if !ok {
		p.metrics.unrouted.WithLabelValues("", "404").Inc()
		return decision{}, refusal{status: http.StatusNotFound, msg: msgNoRoute}
	}
	svc := t.Services[rt.Service]
	if svc == nil {
		return decision{}, refusal{status: http.StatusServiceUnavailable, msg: msgNoBackend}
	}
	if p.quota != nil && (!v.fast() || len(t.Config.Quota.Charges) > 0) {
		if qv := p.quota.Admit(t.Config, rt.Service, v.quotaRequest(), now); qv.Status != 0 {
			// Refused by quota: not demand, no backend involved. Counted
			// by the Admitter (spillway_gfe_quota_decisions_total).
			no := refusal{status: qv.Status, msg: qv.Message}
			if qv.RetryAfter > 0 {
				no.retryAfter = retryAfterSeconds(qv.RetryAfter)
			}
			return decision{}, no
		}
	}
	svc.Meters().Started()
	if no, shed := p.shed(svc); shed {
		return decision{}, no
	}
	if p.pending != nil && svc.Meters().Pending.Load() > 0 {
		// Some of the service's requests wait: this one goes behind them.
		return p.await(ctx, t, rt, svc, v, k, now, nil)
	}
	var (
		pk  routing.Pick
		ck  routing.Cookie
		err error
	)
	if a := svc.Affinity(); a != nil {
		pk, ck, err = svc.PickAffinity(affinityRequest(a, v, k), now, p.rand)
	} else {
		pk, err = svc.PickAt(p.rand(), k, now)
	}
	if err != nil {
		if p.pending != nil && !errors.Is(err, routing.ErrDrained) {
			return p.await(ctx, t, rt, svc, v, k, now, err)
		}
		return decision{}, p.pickFailed(svc, err)
	}
	svc.Meters().Decisions[pk.Reason].Add(1)
	return decision{route: rt, svc: svc, pick: pk, cookie: ck}, refusal{}
}

// pickFailed counts a request of svc whose pick failed with err as ended
// and failed, and returns its answer: 429 when every backend is busy, 503
// when there is none (with Retry-After when the service is drained).
func (p *Proxy) pickFailed(svc *routing.Service, err error) refusal {
	svc.Meters().Ended()
	svc.Meters().Failures.Add(1)
	p.metrics.pickErrors.WithLabelValues(svc.Name(), routing.ErrorLabel(err)).Inc()
	switch {
	case errors.Is(err, routing.ErrAllBusy):
		return refusal{status: http.StatusTooManyRequests, msg: msgAllBusy}
	case errors.Is(err, routing.ErrDrained):
		return refusal{status: http.StatusServiceUnavailable, msg: msgDrained, retryAfter: DrainedRetryAfter}
	default:
		return refusal{status: http.StatusServiceUnavailable, msg: msgNoBackend}
	}
}

// pickHolder is the context of a proxied request: the route's deadline,
// and the pick of its current attempt, which Rewrite, retryTransport and
// ErrorHandler find under pickKey. Being the context itself saves the
// allocation of a context.WithValue. Used by the request's goroutine only
// (ReverseProxy calls them all synchronously).
type pickHolder struct {
	context.Context
	pick routing.Pick
	svc  *routing.Service
	// retries is how many more attempts the route allows after the first,
	// and perTry the route's per_try_timeout (0: none).
	retries int
	perTry  time.Duration
	// cancels holds the cancel functions of attempts whose per-try
	// context outlives RoundTrip (its response body is read under it);
	// ServeHTTP calls them when the request ends.
	cancels []context.CancelFunc
	// attempts made so far, and their backends.
	attempts int
	tried    [maxAttempts]*backend.Backend
	// cookie is the affinity cookie to set on the response (Value "" for
	// none), and secure whether the client came over TLS.
	cookie routing.Cookie
	secure bool
	// body is the client's request body (nil without one, or when no
	// listener wrapped it).
	body *clientbody.Body
	// answered is whether a backend answered an attempt.
	answered bool
	// upgradeTimer ends an HTTP/1.1 upgrade request at the route timeout
	// unless retryTransport stops it at the backend's 101; timedOut is set
	// when it fired (read by Err from any goroutine).
	upgradeTimer clock.Timer
	timedOut     atomic.Bool
	// trace is the request's httptrace hooks (gotConn, got1xx); head says
	// the request is a HEAD, and interim counts its interim answers (in
	// the Transport's goroutines, an abandoned attempt's among them).
	trace   httptrace.ClientTrace
	head    bool
	interim atomic.Int32
}

// gotConn is the request's httptrace GotConn: an attempt is about to be
// written on info.Conn, whose next bytes begin its answer.
func (h *pickHolder) gotConn(info httptrace.GotConnInfo) {
	if c, ok := info.Conn.(*strictResponses); ok {
		c.expect(h.head)
	}
}

// cancelAttempts releases the per-try contexts of the request's attempts.
func (h *pickHolder) cancelAttempts() {
	for _, c := range h.cancels {
		c()
	}
}

// Value returns the holder itself for pickKey, and otherwise the route
// context's value.
func (h *pickHolder) Value(key any) any {
	if _, ok := key.(pickKey); ok {
		return h
	}
	return h.Context.Value(key)
}

// Err returns context.DeadlineExceeded once an upgrade request's route
// timer fired, and the route context's error otherwise.
func (h *pickHolder) Err() error {
	if h.timedOut.Load() {
		return context.DeadlineExceeded
	}
	return h.Context.Err()
}

// clientGone reports whether the request's context ended for another
// reason than the route timeout: its client went away.
func (h *pickHolder) clientGone() bool {
	return h.Err() != nil && !errors.Is(h.Err(), context.DeadlineExceeded)
}

// report records the result of the current attempt with outlier detection
// at now; an ejection is counted and wakes the planner, so that the next
// table, built at once, leaves the host out.
func (p *Proxy) report(h *pickHolder, r outlier.Result, now time.Time) {
	p.reportPick(h.svc, &h.pick, r, now)
}

// reportPick records result r of an attempt on pk, of service svc, with
// outlier detection at now (see report).
func (p *Proxy) reportPick(svc *routing.Service, pk *routing.Pick, r outlier.Result, now time.Time) {
	if pk.Host != nil && pk.Host.Report(r, now) {
		p.metrics.ejections.WithLabelValues(svc.Name()).Inc()
		p.planner.Wake()
	}
}

// flowOf returns the request's client and listener addresses.
func flowOf(r *http.Request) routing.Flow {
	var k routing.Flow
	k.Src, _ = netip.ParseAddrPort(r.RemoteAddr)
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		ap := la.AddrPort()
		k.Dst = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return k
}

// affinityRequest returns what affinity a looks at in r, whose flow is k.
// It does not allocate for net/http's requests.
func affinityRequest(a *routing.Affinity, r requestView, k routing.Flow) affinity.Request {
	req := affinity.Request{
		ClientIP:   k.Src.Addr(),
		ClientPort: k.Src.Port(),
		DestIP:     k.Dst.Addr(),
		DestPort:   k.Dst.Port(),
		Protocol:   protoTCP,
	}
	switch {
	case a.Cookie() != "":
		req.Cookie = r.cookie(a.Cookie())
	case a.Header() != "":
		req.Header = r.header(a.Header())
	}
	return req
}

// protoTCP is the IANA protocol number of TCP, the transport of every
// HTTP/1.1 and h2 client connection.
const protoTCP = 6
