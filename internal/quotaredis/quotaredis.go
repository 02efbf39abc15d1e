// Package quotaredis keeps quota counters in Redis, so that every
// control-plane replica charges the same counters (docs/design.md §7: "with
// several control planes, in Redis"). Store does exactly what lb/quota's
// in-memory Allocator does — the same modes, the same fixed Unix-minute
// windows, an operation id charged once — in one Lua script per
// allocation, which Redis runs atomically, so two replicas charging one
// consumer at once never both take its last unit.
//
// # Keys
//
// For consumer c, metric m and window w (quota.WindowOf, Unix minutes):
//
//	{spillway:quota:c}:w:m     the units charged; expires at the end of
//	                           window w+1 (EXPIREAT), a window after it is
//	                           last read
//	{spillway:quota:c}:op:id   the result of operation id, for 2 windows
//	                           (120 s), so a retry is charged once
//
// The braces are a Redis Cluster hash tag: every key one allocation
// touches is in the consumer's slot, which a script needs.
//
// # Failing fast
//
// Redis is a dependency the request path must never wait on (the
// envoyproxy/ratelimit users whose requests stalled for Redis's 1–10 s
// timeout during an outage are the counter-example). Every call is bounded
// by Config.Timeout (default 20ms; dial, pool wait, write and read
// included, no retries), and a circuit breaker (sony/gobreaker) opens
// after 5 consecutive failures: while open, calls fail at once without
// touching the network, and every OpenFor (default 250ms) up to 1000 calls
// probe Redis again; 1000 successes close the breaker, a failure reopens
// it. A failure is
// returned as ErrUnavailable, which the quota service answers with
// UNAVAILABLE and the gfes fail open on. So a dead or stalled Redis costs an
// allocation at most Timeout, and after a few failures nothing; counting
// resumes within OpenFor plus one gfe call interval of Redis's return.
//
// # Reaching Redis safely
//
// With Config.TLS (--quota-redis-tls-ca, and --quota-redis-tls-cert and
// --quota-redis-tls-key when Redis requires client certificates) every
// connection is TLS 1.2 or later, Redis's certificate checked against the
// CA bundle under the host of Addr or TLSServerName. With
// Config.PasswordFile every new connection AUTHs with the file's first
// line as it is then. Both sets of files are read again for each new
// connection, so certificates and the password rotate without a restart;
// rotating the password: change it in Redis (CONFIG SET requirepass, or
// give the ACL user both passwords for the change), then write the file.
// Open connections stay authenticated; a connection refused AUTH fails its
// call (the gfes fail open) and the next one reads the file again.
//
// Differences from the Allocator: the window is that of the replica's
// clock at each call (replicas' clocks are assumed to agree to well under
// a second); an operation repeated with a metric the configuration no
// longer knows fails with ErrUnknownMetric instead of getting its old
// result; and a Redis that loses its data (restarted without persistence)
// forgets the current window's counts, admitting up to a window's limit
// again.
package quotaredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/sony/gobreaker/v2"

	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/lb/quota"
)

// Config says how to reach Redis. Addr empty means no Redis.
type Config struct {
	// Addr is Redis's host:port (flag --quota-redis). Empty: counters stay
	// in the replica's memory.
	Addr string
	// PasswordFile, when set, names a file whose first line is the
	// password of Redis's AUTH (requirepass)
	// (--quota-redis-password-file). It is read at start (New fails if it
	// cannot be) and again for every new connection, so a password
	// rotates without a restart: write the new password to the file (a
	// rename over it, or in place), change Redis's (CONFIG SET
	// requirepass, or an ACL user with both passwords during the
	// change); connections already open stay authenticated, and every
	// new one, including those made after an AUTH failure, AUTHs with the
	// file's password. A file that cannot be read, or is empty, leaves the
	// last good password in use (logged).
	PasswordFile string
	// TLS, when TLS.CA is set, talks TLS (1.2 or later) to Redis: CA is
	// the bundle that vouches for Redis's certificate
	// (--quota-redis-tls-ca); Cert and Key, set together, the client
	// certificate Redis's tls-auth-clients asks for
	// (--quota-redis-tls-cert, --quota-redis-tls-key). The files are read
	// again for every new connection (package mtls), so they rotate
	// without a restart. Empty: plain TCP.
	TLS mtls.Files
	// TLSServerName is the name Redis's certificate must carry
	// (--quota-redis-tls-server-name). Empty: the host of Addr (an IP
	// address matches an IP SAN).
	TLSServerName string
	// Timeout bounds every call, all included (dial, pool wait, write,
	// read); a call that takes longer fails (fail open upstream). Default
	// 20ms (--quota-redis-timeout). Lower bounds the worst added latency of
	// an allocation while Redis stalls; too low and a busy Redis fails
	// calls that would have succeeded.
	Timeout time.Duration
	// OpenFor is how long the circuit breaker stays open after 5
	// consecutive failures before calls probe Redis again. Default 250ms.
	OpenFor time.Duration
}

// Validate reports every problem with c, naming its flag.
func (c Config) Validate() error {
	var errs []error
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("quota-redis-timeout: must be >= 0, got %v", c.Timeout))
	}
	if c.OpenFor < 0 {
		errs = append(errs, fmt.Errorf("quota-redis-open-for: must be >= 0, got %v", c.OpenFor))
	}
	if c.PasswordFile != "" && c.Addr == "" {
		errs = append(errs, errors.New("quota-redis-password-file: set without --quota-redis"))
	}
	tlsSet := c.TLS.CA != "" || c.TLS.Cert != "" || c.TLS.Key != "" || c.TLSServerName != ""
	if tlsSet && c.Addr == "" {
		errs = append(errs, errors.New("quota-redis-tls-ca: TLS flags set without --quota-redis"))
	}
	if tlsSet && c.TLS.CA == "" {
		errs = append(errs, errors.New("quota-redis-tls-ca: required with --quota-redis-tls-cert, --quota-redis-tls-key or --quota-redis-tls-server-name"))
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		errs = append(errs, fmt.Errorf("quota-redis-tls-cert, quota-redis-tls-key: set both or neither, got cert %q and key %q", c.TLS.Cert, c.TLS.Key))
	}
	return errors.Join(errs...)
}

// breakerFailures is how many consecutive failures open the breaker:
// enough that a busy Redis's odd slow answer does not fail every caller
// for OpenFor, few enough that a dead one costs a handful of calls.
const breakerFailures = 5

// ErrUnavailable wraps every failure to reach Redis or get its answer in
// time, and the breaker's refusals: the quota service answers it with
// UNAVAILABLE, on which the gfes fail open.
var ErrUnavailable = errors.New("quotaredis: redis unavailable")

// Store charges allocations against limits in Redis. It is safe for
// concurrent use. Create it with New; Close releases its connections.
type Store struct {
	cfg     Config
	limits  quota.Limits
	client  *redis.Client
	breaker *gobreaker.CircuitBreaker[string]

	calls   *prometheus.CounterVec // result
	seconds prometheus.Histogram
	open    prometheus.Gauge
}

// The results of Redis calls, as counted in
// spillway_controlplane_quota_redis_calls_total{result}.
const (
	resultOK      = "ok"
	resultTimeout = "timeout"
	resultError   = "error"
	resultOpen    = "breaker_open"
)

// New returns a Store on cfg.Addr charging against limits, with its
// metrics registered on reg (nil: not registered); log receives the
// warnings about unusable password or TLS files. It does not connect:
// the first calls do, and fail open until Redis answers.
func New(cfg Config, limits quota.Limits, log zerolog.Logger, reg prometheus.Registerer) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		return nil, errors.New("quota-redis: no address")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 20 * time.Millisecond
	}
	if cfg.OpenFor == 0 {
		cfg.OpenFor = 250 * time.Millisecond
	}
	silenceOnce.Do(func() { redis.SetLogger(silent{}) })
	s := &Store{cfg: cfg, limits: limits}
	opts := &redis.Options{
		Addr: cfg.Addr,
		// Every wait is bounded by Timeout, and a failed call is not
		// retried: the caller fails open instead.
		DialTimeout:           cfg.Timeout,
		ReadTimeout:           cfg.Timeout,
		WriteTimeout:          cfg.Timeout,
		PoolTimeout:           cfg.Timeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DisableIdentity:       true, // no CLIENT SETINFO round trip on each new connection
		PoolSize:              32,
		MinIdleConns:          2,
	}
	if cfg.PasswordFile != "" {
		pw := &passwordFile{path: cfg.PasswordFile, log: log}
		if _, err := pw.read(); err != nil {
			return nil, err
		}
		opts.CredentialsProviderContext = func(context.Context) (string, string, error) { return "", pw.password(), nil }
	}
	if cfg.TLS.CA != "" {
		tc, err := mtls.NewTLSClient(cfg.TLS, cfg.TLSServerName, log.With().Str("tls", "quota-redis").Logger())
		if err != nil {
			return nil, fmt.Errorf("quota-redis-tls: %w", err)
		}
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			// Dial and handshake within Timeout, as go-redis's own dialer.
			return tc.Dial(ctx, &net.Dialer{Timeout: cfg.Timeout}, network, addr)
		}
	}
	s.client = redis.NewClient(opts)
	s.breaker = gobreaker.NewCircuitBreaker[string](gobreaker.Settings{
		Name: "quota-redis",
		// Half-open lets this many calls through and closes after as many
		// successes (any failure reopens it): after an outage every lease
		// of every gfe calls at once, and a probe refused is a lease
		// failing open for another second.
		MaxRequests: 1000,
		Timeout:     cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= breakerFailures },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				s.open.Set(1)
			} else {
				s.open.Set(0)
			}
		},
		// A caller that gave up is not Redis's failure.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	})
	s.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "spillway", Subsystem: "controlplane", Name: "quota_redis_calls_total",
		Help: "Calls to the quota counters in Redis by result: ok, timeout (over --quota-redis-timeout), error (refused, reset, script error), breaker_open (not tried: Redis failed recently).",
	}, []string{"result"})
	for _, r := range []string{resultOK, resultTimeout, resultError, resultOpen} {
		s.calls.WithLabelValues(r)
	}
	s.seconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "spillway", Subsystem: "controlplane", Name: "quota_redis_seconds",
		Help:    "Time of the calls to Redis that were tried, whatever their result.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1},
	})
	s.open = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "spillway", Subsystem: "controlplane", Name: "quota_redis_breaker_open",
		Help: "1 while the circuit breaker in front of Redis is open (calls fail at once, gfes fail open), else 0.",
	})
	if reg != nil {
		reg.MustRegister(s.calls, s.seconds, s.open)
	}
	return s, nil
}

// passwordFile is Config.PasswordFile, read for every new connection.
// Safe for concurrent use.
type passwordFile struct {
	path string         // immutable
	log  zerolog.Logger // immutable

	mu     sync.Mutex
	last   string // guarded by mu: the last password read
	failed string // guarded by mu: the last error logged, so it is logged once
}

// read reads the file's first line, trimmed; an empty one is an error.
func (p *passwordFile) read() (string, error) {
	b, err := os.ReadFile(p.path)
	if err != nil {
		return "", fmt.Errorf("quota-redis-password-file: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	if pw = strings.TrimSpace(pw); pw == "" {
		return "", fmt.Errorf("quota-redis-password-file: %s: empty first line", p.path)
	}
	p.mu.Lock()
	p.last, p.failed = pw, ""
	p.mu.Unlock()
	return pw, nil
}

// password returns the file's password now, or the last good one when it
// cannot be read (logged once per distinct error).
func (p *passwordFile) password() string {
	pw, err := p.read()
	if err == nil {
		return pw
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err.Error() != p.failed {
		p.failed = err.Error()
		p.log.Warn().Err(err).Msg("quota Redis password file unusable; keeping the last good password")
	}
	return p.last
}

// silent drops go-redis's own log lines (its logger is process-wide):
// every failure they report is counted in this package's metrics and
// answered to the caller, who logs at a bounded rate.
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

var silenceOnce sync.Once

// Close closes the connections to Redis.
func (s *Store) Close() error { return s.client.Close() }

// allocateScript charges one allocation atomically; see the package doc
// for the keys and lb/quota's Allocator for the rules it mirrors.
//
//	KEYS[1..n]  the window's counters, one per metric; KEYS[n+1] the
//	            operation's key when it has an id
//	ARGV[1]     mode: 0 NORMAL, 1 BEST_EFFORT, 2 CHECK_ONLY
//	ARGV[2]     n
//	ARGV[3]     when counters expire (Unix seconds)
//	ARGV[4]     how long an operation's result is kept (seconds)
//	ARGV[4+i]   amount of metric i; ARGV[4+n+i] its limit;
//	            ARGV[4+2n+i] its name; ARGV[4+3n+i] the units of it
//	            given back first
//	ARGV[5+4n]  1 when the request gives units back (its returned window
//	            is this one, and the mode is not CHECK_ONLY), else 0
//
// It returns "E M1 A1 .. Mn An", followed by " + B1 .. Bn" when units were
// given back: E 1 when exhausted, Ai what was (or, in CHECK_ONLY, would
// be) charged of metric Mi, Bi what was given back of it — for a repeated
// operation, its first answer, whatever it asked then. Metric names are
// configured names, which have no spaces and no '+'.
var allocateScript = redis.NewScript(`
local n = tonumber(ARGV[2])
local op = KEYS[n+1]
if op then
  local prev = redis.call('GET', op)
  if prev then return prev end
end
local mode = tonumber(ARGV[1])
local giving = ARGV[5+4*n] == '1'
if giving then
  for i = 1, n do
    local back = tonumber(ARGV[4+3*n+i])
    if back > 0 then
      local cur = tonumber(redis.call('GET', KEYS[i]) or '0')
      if cur > 0 then
        local left = cur - back
        if left < 0 then left = 0 end
        redis.call('SET', KEYS[i], left)
        redis.call('EXPIREAT', KEYS[i], ARGV[3])
      end
    end
  end
end
local fits, asked, granted = true, 0, 0
local alloc = {}
for i = 1, n do
  local v = tonumber(ARGV[4+i])
  local left = tonumber(ARGV[4+n+i]) - tonumber(redis.call('GET', KEYS[i]) or '0')
  if left < 0 then left = 0 end
  alloc[i] = v
  if v > left then
    fits = false
    if mode == 1 then alloc[i] = left end
  end
  asked = asked + v
  granted = granted + alloc[i]
end
local exhausted = 0
if mode == 1 then
  if asked > 0 and granted == 0 then exhausted = 1 end
elseif not fits then
  exhausted = 1
  for i = 1, n do alloc[i] = 0 end
end
local out = tostring(exhausted)
for i = 1, n do out = out .. ' ' .. ARGV[4+2*n+i] .. ' ' .. string.format('%d', alloc[i]) end
if giving then
  out = out .. ' +'
  for i = 1, n do out = out .. ' ' .. ARGV[4+3*n+i] end
end
if mode ~= 2 then
  for i = 1, n do
    if alloc[i] > 0 then
      redis.call('INCRBY', KEYS[i], alloc[i])
      redis.call('EXPIREAT', KEYS[i], ARGV[3])
    end
  end
  if op then redis.call('SET', op, out, 'EX', ARGV[4]) end
end
return out
`)

// counterKey is the key of consumer's counter of metric in window w.
func counterKey(consumer string, w int64, metric string) string {
	return "{spillway:quota:" + consumer + "}:" + strconv.FormatInt(w, 10) + ":" + metric
}

// opKey is the key of consumer's operation id.
func opKey(consumer, id string) string {
	return "{spillway:quota:" + consumer + "}:op:" + id
}

// Allocate charges r at now, as quota.Allocator.Allocate does. Besides
// its errors (quota.ErrInvalidRequest, quota.ErrUnknownMetric), it fails
// with ErrUnavailable when Redis does not answer within Config.Timeout or
// the breaker is open; nothing is known to be charged then.
func (s *Store) Allocate(ctx context.Context, now time.Time, r quota.Request) (quota.Result, error) {
	if err := r.Validate(); err != nil {
		return quota.Result{}, err
	}
	n := len(r.Values)
	keys := make([]string, 0, n+1)
	args := make([]any, 4, 4+4*n)
	w := quota.WindowOf(now)
	args[0], args[1] = int(r.Mode), n
	args[2] = quota.WindowEnd(w + 1).Unix()
	args[3] = int64(2 * quota.Window / time.Second)
	limits := make([]any, n)
	for i, v := range r.Values {
		l, ok := s.limits(r.Consumer, v.Metric)
		if !ok {
			return quota.Result{}, fmt.Errorf("%w %q (consumer %q)", quota.ErrUnknownMetric, v.Metric, r.Consumer)
		}
		keys = append(keys, counterKey(r.Consumer, w, v.Metric))
		args = append(args, v.Value)
		limits[i] = l
	}
	args = append(args, limits...)
	for _, v := range r.Values {
		args = append(args, v.Metric)
	}
	giving := r.Mode != quota.ModeCheckOnly && r.ReturnedWindow == w && len(r.Returned) > 0
	for _, v := range r.Values {
		var back int64
		for _, u := range r.Returned {
			if giving && u.Metric == v.Metric {
				back = u.Value
			}
		}
		args = append(args, back)
	}
	if giving {
		args = append(args, 1)
	} else {
		args = append(args, 0)
	}
	if r.OperationID != "" {
		keys = append(keys, opKey(r.Consumer, r.OperationID))
	}
	out, err := s.call(ctx, func(ctx context.Context) (string, error) {
		return allocateScript.Run(ctx, s.client, keys, args...).Text()
	})
	if err != nil {
		return quota.Result{}, err
	}
	res, back, err := parseResult(out)
	if err != nil {
		return quota.Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if back != nil {
		res.Returned = make([]quota.MetricValue, len(back))
		for i, b := range back {
			res.Returned[i] = quota.MetricValue{Metric: res.Allocated[i].Metric, Value: b}
		}
	}
	if res.Exhausted {
		res.RetryAfter = quota.RetryAfter(w, now)
	}
	return res, nil
}

// parseResult parses the script's answer "E M1 A1 .. Mn An [+ B1 .. Bn]",
// returning the Bi (nil without them) by metric index.
func parseResult(out string) (quota.Result, []int64, error) {
	head, tail, giving := strings.Cut(out, " +")
	f := strings.Fields(head)
	if len(f)%2 != 1 || (f[0] != "0" && f[0] != "1") {
		return quota.Result{}, nil, fmt.Errorf("script answered %q", out)
	}
	res := quota.Result{Exhausted: f[0] == "1", Allocated: make([]quota.MetricValue, 0, len(f)/2)}
	for i := 1; i < len(f); i += 2 {
		a, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || a < 0 {
			return quota.Result{}, nil, fmt.Errorf("script answered %q: amount %q", out, f[i+1])
		}
		res.Allocated = append(res.Allocated, quota.MetricValue{Metric: f[i], Value: a})
	}
	if !giving {
		return res, nil, nil
	}
	bf := strings.Fields(tail)
	if len(bf) != len(res.Allocated) {
		return quota.Result{}, nil, fmt.Errorf("script answered %q: %d amounts given back for %d metrics", out, len(bf), len(res.Allocated))
	}
	back := make([]int64, len(bf))
	for i, b := range bf {
		v, err := strconv.ParseInt(b, 10, 64)
		if err != nil || v < 0 {
			return quota.Result{}, nil, fmt.Errorf("script answered %q: amount given back %q", out, b)
		}
		back[i] = v
	}
	return res, back, nil
}

// Used returns what consumer has been charged of metric in the window of
// now, or ErrUnavailable.
func (s *Store) Used(ctx context.Context, now time.Time, consumer, metric string) (int64, error) {
	out, err := s.call(ctx, func(ctx context.Context) (string, error) {
		v, err := s.client.Get(ctx, counterKey(consumer, quota.WindowOf(now), metric)).Result()
		if errors.Is(err, redis.Nil) {
			return "0", nil
		}
		return v, err
	})
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: counter %q: %w", ErrUnavailable, out, err)
	}
	return n, nil
}

// call runs f through the breaker with a Timeout deadline, counts its
// result and times it, and wraps every failure in ErrUnavailable.
func (s *Store) call(ctx context.Context, f func(context.Context) (string, error)) (string, error) {
	tried := false
	var took time.Duration
	out, err := s.breaker.Execute(func() (string, error) {
		tried = true
		ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		start := time.Now()
		out, err := f(ctx)
		took = time.Since(start)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return out, err
	})
	if tried {
		s.seconds.Observe(took.Seconds())
	}
	switch {
	case err == nil:
		s.calls.WithLabelValues(resultOK).Inc()
		return out, nil
	case !tried:
		s.calls.WithLabelValues(resultOpen).Inc()
		return "", fmt.Errorf("%w: circuit breaker open after recent failures", ErrUnavailable)
	case errors.Is(err, context.DeadlineExceeded):
		s.calls.WithLabelValues(resultTimeout).Inc()
	default:
		s.calls.WithLabelValues(resultError).Inc()
	}
	return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
}
