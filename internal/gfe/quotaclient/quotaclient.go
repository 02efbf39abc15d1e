// Package quotaclient is the gfe's side of per-consumer quota (docs/design.md
// §7): it decides on the request path, from local state only, whether a
// request is admitted, and asks the control plane's Quota service for more in
// the background, at most once per second per (service, project, metric) —
// lb/quota.Lease does the arithmetic. Every lease knows its consumer's limit
// (from the configuration), so a consumer is never refused before its limit
// is used: a consumer alone on this gfe is admitted exactly its limit in
// every window, at any rate; what a lease holds ahead and does not use is
// given back to the service at its next call (AllocateQuotaRequest.returned).
//
// The answers, as docs/design.md §7 maps them:
//
//   - a body of unknown length (chunked, or HTTP/2 without
//     content-length) on a request a bytes metric charges: 411 Length
//     Required, before anything is charged or read (see below);
//   - no API key (x-api-key header, else the key query parameter) or an
//     unknown one, and anonymous requests not allowed: 401;
//   - the quota service said RESOURCE_EXHAUSTED, or the local budget is
//     spent: 429 with Retry-After;
//   - any other quota error (the service refused the request as malformed,
//     or does not know the metric): 409, until a later call succeeds;
//   - the quota service unavailable, timing out or failing internally, or
//     no control plane connected: fail open — admit, never retry the call
//     early, log (at most a line a second) and count;
//   - anything unexpected: log and admit.
//
// Error bodies say what the client can act on and nothing internal.
//
// Requests match charges by their canonical path (lb/reqpath: the HTTP
// proxy normalises r.URL before it asks), with the prefix rule routes use
// (reqpath.HasPrefix: ASCII case-insensitive, segment parameters left
// out).
//
// A bytes metric charges the declared Content-Length, which net/http and
// the fast path hold a body to (a shorter one fails, a longer one is not
// read). A body whose length is not declared is refused with 411 rather
// than counted as it streams: admission is decided before the request is
// forwarded, so a refused body never reaches a backend, where a body cut
// when it passed the quota would have delivered its first part to the
// backend and left it a truncated request to handle; the client, told
// 411, sends Content-Length (every HTTP client can for a body it holds).
// The cost: streaming uploads (chunked, gRPC) cannot be charged by bytes;
// charge them by requests.
//
// The gfe runs one Enforcer (internal/gfe: Run's "quota" component) and
// the HTTP proxy asks it about every routed request (httpproxy.Admitter).
package quotaclient

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// Allocator is the Quota service as the Enforcer calls it
// (pb.QuotaClient over the control-plane connection).
type Allocator interface {
	AllocateQuota(ctx context.Context, in *pb.AllocateQuotaRequest, opts ...grpc.CallOption) (*pb.AllocateQuotaResponse, error)
}

// Config tunes an Enforcer.
type Config struct {
	// Interval is the least time between two calls for one (service,
	// project, metric). Default 1s.
	Interval time.Duration
	// Tick is how often leases are looked at for calls to make. Default
	// 50ms.
	Tick time.Duration
	// Timeout bounds one call; a call that takes longer counts as failed
	// (fail open). Default 500ms.
	Timeout time.Duration
}

// Verdict is the Enforcer's answer for one request.
type Verdict struct {
	// Status is 0 to admit the request, else the HTTP status to answer
	// (401, 409, 411 or 429).
	Status int
	// RetryAfter is set with 429: when the client may try again.
	RetryAfter time.Duration
	// Message is the body of a refusal.
	Message string
}

// The bodies of refusals: what the client can act on, nothing internal.
const (
	msgNoKey     = "an API key is required (x-api-key header or key query parameter)\n"
	msgNoLength  = "this request is charged by payload size: send its body with a Content-Length\n"
	msgExhausted = "quota exceeded for this consumer; retry later\n"
	msgDenied    = "this request cannot be charged to this consumer's quota\n"
)

// Enforcer admits requests against quota. Create it with New; Run makes
// the calls. Admit is safe for concurrent use and never waits on another
// goroutine: it takes no lock but on the first request of a new (service,
// project, metric), which adds its lease; it reads the leases' map with an
// atomic load, and each lease admits with atomic operations
// (quota.Lease). A goroutine in Admit can still be descheduled by the Go
// or the OS scheduler; nothing in Admit makes it wait for another.
type Enforcer struct {
	cfg  Config
	clk  clock.Clock
	conn func() Allocator
	log  zerolog.Logger

	logMu   sync.Mutex
	logged  time.Time // last fail-open log line, under logMu
	dropped int       // fail-open lines not logged since, under logMu

	decisions *prometheus.CounterVec // result
	calls     *prometheus.CounterVec // result
	// admitTime is how long Admit took (real time): the whole of what
	// quota adds to a request, network never included.
	admitTime prometheus.Histogram
	// decided holds decisions' counters, resolved once: the request path
	// neither looks them up nor allocates.
	decided map[string]prometheus.Counter

	// spawn runs a call; `go f()` but in tests.
	spawn func(f func())
	// wake asks Run to look at the leases now, not at the next Tick: a
	// lease without a grant in its window has demand waiting.
	wake chan struct{}

	// wakePending is set while a wake is sent and Run has not taken it:
	// the requests of a lease waiting for its first grant send at most one
	// wake between them, instead of each taking the channel's lock.
	wakePending atomic.Bool

	// leases is an immutable map, replaced whole (under mu) when a lease is
	// added: the request path reads it with one atomic load and never
	// waits, and each lease admits lock-free (quota.Lease). A new
	// (service, project, metric) is the only request that takes mu.
	leases atomic.Pointer[map[key]*lease]
	mu     sync.Mutex
}

type key struct{ service, project, metric string }

// lease is a Lease and the key it charges (immutable).
type lease struct {
	key key
	quota.Lease
	// cfg is the configuration the Lease's limit was read from: a
	// request under another one sets it again.
	cfg atomic.Pointer[config.Config]
}

// limitFrom gives l the consumer's limit in cfg, unless it has it from cfg
// already (one pointer comparison on the request path).
func (l *lease) limitFrom(cfg *config.Config) {
	if l.cfg.Load() == cfg {
		return
	}
	if limit, _, ok := cfg.QuotaLimit(l.key.project, l.key.metric); ok {
		l.SetLimit(limit)
	}
	l.cfg.Store(cfg)
}

// New returns an Enforcer that calls the Quota service over conn (nil, or
// a nil result, when no control plane is connected: calls fail open).
func New(cfg Config, clk clock.Clock, conn func() Allocator, log zerolog.Logger, reg prometheus.Registerer) *Enforcer {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 50 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	e := &Enforcer{
		cfg: cfg, clk: clock.OrReal(clk), conn: conn,
		log:   log.With().Str("component", "quota").Logger(),
		spawn: func(f func()) { go f() },
		wake:  make(chan struct{}, 1),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spillway", Subsystem: "gfe", Name: "quota_decisions_total",
			Help: "Requests charged to quota, by result: admitted, exhausted (429), denied (409), unidentified (401), length_required (411: a bytes charge and a body of unknown length), fail_open (admitted while the quota service fails).",
		}, []string{"result"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spillway", Subsystem: "gfe", Name: "quota_calls_total",
			Help: "AllocateQuota calls by result: ok, exhausted, denied (an error that is not the service's fault: 409 until a call succeeds), failed (fail open), unexpected (logged, fail open).",
		}, []string{"result"}),
	}
	e.admitTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "spillway", Subsystem: "gfe", Name: "quota_admit_seconds",
		Help:    "Time a request spent in quota admission (local: leases, never the network), charged or not.",
		Buckets: []float64{1e-6, 5e-6, 10e-6, 50e-6, 100e-6, 500e-6, 1e-3, 10e-3},
	})
	e.leases.Store(&map[key]*lease{})
	e.decided = map[string]prometheus.Counter{}
	for _, r := range []string{"admitted", "exhausted", "denied", "unidentified", "length_required", "fail_open"} {
		e.decided[r] = e.decisions.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "exhausted", "denied", "failed", "unexpected"} {
		e.calls.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(e.decisions, e.calls, e.admitTime)
	}
	return e
}

// APIKey returns the request's API key: the x-api-key header, else the
// key query parameter (its first value, as r.URL.Query().Get("key") gives
// it). Neither allocates, unless the key in the query is percent-encoded.
func APIKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" { // canonical: no allocation
		return k
	}
	return queryKey(r.URL.RawQuery)
}

// maxQueryParams is net/url's limit on query parameters (its default; the
// urlmaxqueryparams GODEBUG setting is not followed): a query with more
// parses to nothing.
const maxQueryParams = 10000

// queryKey returns the first value of the key parameter of raw query q,
// exactly as url.ParseQuery(q) followed by Get("key") does (parameters
// separated by &, one holding a ; skipped, keys and values unescaped, one
// that fails to unescape skipped), without building the map: it allocates
// only to unescape a key or value that holds %-escapes or +.
func queryKey(q string) string {
	if q == "" || strings.Count(q, "&")+1 > maxQueryParams {
		return ""
	}
	for q != "" {
		var param string
		param, q, _ = strings.Cut(q, "&")
		if param == "" || strings.Contains(param, ";") {
			continue
		}
		k, v, _ := strings.Cut(param, "=")
		if k != "key" {
			if !strings.ContainsAny(k, "%+") {
				continue // unescaped, it stays what it is: not "key"
			}
			if uk, err := url.QueryUnescape(k); err != nil || uk != "key" {
				continue
			}
		}
		if v, err := url.QueryUnescape(v); err == nil { // no escapes: v itself
			return v
		}
	}
	return ""
}

// Admit decides on request r of service under configuration cfg at now: a
// zero Verdict admits it (also when nothing charges it). It never waits on
// the network.
func (e *Enforcer) Admit(cfg *config.Config, service string, r *http.Request, now time.Time) Verdict {
	start := time.Now() // real time, whatever clock now comes from
	defer e.observe(start)
	charged := false
	for i := range cfg.Quota.Charges {
		ch := &cfg.Quota.Charges[i]
		if !ch.Matches(service, r.Method, r.URL.Path) {
			continue
		}
		charged = true
		if r.ContentLength < 0 && metricOf(cfg, ch.Metric).Unit == config.QuotaBytes {
			e.decided["length_required"].Inc()
			return Verdict{Status: http.StatusLengthRequired, Message: msgNoLength}
		}
	}
	if !charged {
		return Verdict{}
	}
	project, ok := cfg.QuotaProject(APIKey(r))
	if !ok {
		e.decided["unidentified"].Inc()
		return Verdict{Status: http.StatusUnauthorized, Message: msgNoKey}
	}
	// Every charge must pass. A request refused by a later charge keeps
	// what earlier ones took from their budgets: requests rarely match
	// several charges, and the budgets are refilled every second.
	failOpen := false
	for i := range cfg.Quota.Charges {
		ch := &cfg.Quota.Charges[i]
		if !ch.Matches(service, r.Method, r.URL.Path) {
			continue
		}
		cost := ch.Cost
		if m := metricOf(cfg, ch.Metric); m.Unit == config.QuotaBytes {
			cost *= r.ContentLength // declared: a length-less body got 411 above
		}
		l := e.lease(cfg, key{service, project, ch.Metric})
		l.limitFrom(cfg)
		if l.Waiting(now) {
			e.wakeRun()
		}
		d := l.Decide(now, cost)
		switch {
		case d.Denied:
			e.decided["denied"].Inc()
			return Verdict{Status: http.StatusConflict, Message: msgDenied}
		case !d.OK:
			e.decided["exhausted"].Inc()
			return Verdict{Status: http.StatusTooManyRequests, RetryAfter: d.RetryAfter, Message: msgExhausted}
		}
		failOpen = failOpen || d.FailOpen
	}
	if failOpen {
		e.decided["fail_open"].Inc()
	} else {
		e.decided["admitted"].Inc()
	}
	return Verdict{}
}

// wakeRun asks Run to look at the leases now; of the requests that ask
// before Run takes the wake, one sends it and the others return at once.
func (e *Enforcer) wakeRun() {
	if e.wakePending.CompareAndSwap(false, true) {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// observe records the time of an Admit that started at start.
func (e *Enforcer) observe(start time.Time) { e.admitTime.Observe(time.Since(start).Seconds()) }

// metricOf returns the configured metric named name (zero if none).
func metricOf(cfg *config.Config, name string) config.QuotaMetric {
	for _, m := range cfg.Quota.Metrics {
		if m.Name == name {
			return m
		}
	}
	return config.QuotaMetric{}
}

// lease returns k's lease. Its limit comes from the request's
// configuration (lease.limitFrom), so a consumer's requests before the
// window's first grant are admitted up to the limit, never waiting for a
// round trip; Credit (0.5% of the limit, at least 1) applies only to a
// metric the configuration does not know, which validation refuses.
func (e *Enforcer) lease(cfg *config.Config, k key) *lease {
	if l := (*e.leases.Load())[k]; l != nil {
		return l
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.leases.Load()
	if l := old[k]; l != nil {
		return l
	}
	limit, _, _ := cfg.QuotaLimit(k.project, k.metric)
	l := &lease{key: k, Lease: quota.Lease{Interval: e.cfg.Interval, Credit: max(1, limit/200)}}
	m := make(map[key]*lease, len(old)+1)
	maps.Copy(m, old)
	m[k] = l
	e.leases.Store(&m)
	return l
}

// Run makes the calls every Tick until ctx is done; it returns nil then.
func (e *Enforcer) Run(ctx context.Context) error {
	t := e.clk.NewTicker(e.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			e.callAll(ctx, e.clk.Now())
		case <-e.wake:
			e.wakePending.Store(false)
			e.callAll(ctx, e.clk.Now())
		}
	}
}

// callAll starts a call for every lease that wants one at now.
func (e *Enforcer) callAll(ctx context.Context, now time.Time) {
	type due struct {
		l   *lease
		ask quota.Ask
	}
	var calls []due
	for _, l := range *e.leases.Load() {
		if ask, ok := l.Next(now); ok {
			calls = append(calls, due{l, ask})
		}
	}
	for _, c := range calls {
		e.spawn(func() { e.call(ctx, c.l, c.ask) })
	}
}

// call asks for ask.Units for l, giving back ask.Return, and applies the
// answer.
func (e *Enforcer) call(ctx context.Context, l *lease, ask quota.Ask) {
	var c Allocator
	if e.conn != nil {
		c = e.conn()
	}
	var resp *pb.AllocateQuotaResponse
	err := errNoControlPlane
	if c != nil {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		req := &pb.AllocateQuotaRequest{
			Method:   l.key.service,
			Consumer: l.key.project,
			Values:   []*pb.QuotaMetricValue{{Metric: l.key.metric, Value: ask.Units}},
			Mode:     pb.QuotaMode_QUOTA_MODE_BEST_EFFORT,
		}
		if ask.Return > 0 {
			req.Returned = []*pb.QuotaMetricValue{{Metric: l.key.metric, Value: ask.Return}}
			req.ReturnedWindow = ask.Window
		}
		resp, err = c.AllocateQuota(cctx, req)
		cancel()
	}
	now := e.clk.Now()
	switch code := status.Code(err); {
	case err == nil:
		var granted, taken int64
		for _, v := range resp.GetAllocated() {
			if v.GetMetric() == l.key.metric {
				granted += v.GetValue()
			}
		}
		for _, v := range resp.GetReturned() {
			if v.GetMetric() == l.key.metric {
				taken += v.GetValue()
			}
		}
		e.calls.WithLabelValues("ok").Inc()
		// A service that does not take returns leaves the units ours.
		l.NotTaken(now, ask.Window, ask.Return-taken)
		l.Granted(now, granted, false, 0)
	case code == codes.ResourceExhausted:
		// The service takes returns before it charges: given back.
		e.calls.WithLabelValues("exhausted").Inc()
		l.Granted(now, 0, true, retryAfter(err, now))
	case code == codes.InvalidArgument || code == codes.FailedPrecondition || code == codes.PermissionDenied || code == codes.NotFound:
		// Refused before anything was charged or given back.
		e.calls.WithLabelValues("denied").Inc()
		l.NotTaken(now, ask.Window, ask.Return)
		l.Denied()
		e.logFailure(now, l.key, err, "quota call refused; its requests get 409 until a call succeeds")
	case err == errNoControlPlane:
		// Never sent.
		e.calls.WithLabelValues("failed").Inc()
		l.NotTaken(now, ask.Window, ask.Return)
		l.Failed()
		e.logFailure(now, l.key, err, "quota service failing; admitting (fail open)")
	case code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Internal || code == codes.Canceled:
		// What was given back stays given back: the service may have
		// taken it before the call failed (a timeout), and keeping it
		// twice would admit beyond the limit.
		e.calls.WithLabelValues("failed").Inc()
		l.Failed()
		e.logFailure(now, l.key, err, "quota service failing; admitting (fail open)")
	default:
		e.calls.WithLabelValues("unexpected").Inc()
		l.Failed()
		e.logFailure(now, l.key, err, "unexpected quota error; admitting (fail open)")
	}
}

// errNoControlPlane is a call's error when no control plane is connected.
var errNoControlPlane = status.Error(codes.Unavailable, "no control plane connected")

// retryAfter returns the RetryInfo delay of a RESOURCE_EXHAUSTED error, or
// the rest of now's window.
func retryAfter(err error, now time.Time) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return now.Truncate(quota.Window).Add(quota.Window).Sub(now)
}

// logFailure logs a failed call, at most a line a second, saying how many
// were not logged since.
func (e *Enforcer) logFailure(now time.Time, k key, err error, msg string) {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	if now.Sub(e.logged) < time.Second {
		e.dropped++
		return
	}
	e.log.Warn().Err(err).Str("service", k.service).Str("project", k.project).Str("metric", k.metric).
		Int("not_logged_since", e.dropped).Msg(msg)
	e.logged, e.dropped = now, 0
}
