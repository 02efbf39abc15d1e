package rtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/health"
	"github.com/spillway-lb/spillway/lb/health/probe"
)

// probeTimeout bounds one probe: a sample slower than this is no sample.
const probeTimeout = 2 * time.Second

// Target is the instance a region is probed on.
type Target struct {
	// Addr is the instance's host:port.
	Addr string
	// Protocol is what the instance speaks, from the health check of the
	// service that uses its group: it decides how a round trip is
	// measured (see Prober). "" and unknown values mean config.HealthHTTP.
	Protocol config.HealthProtocol
}

// Prober measures this node's round trip to every region: every Interval
// it probes one instance of each region, from the gfe's source address, by
// the protocol the instance speaks (Target.Protocol):
//
//   - http (also "" and unknown): GET Path over a kept-alive connection;
//     the time to the response headers. Any response counts.
//   - https: the same over TLS, certificates not verified (backends are
//     addressed by IP, as for config.HealthHTTPS).
//   - tcp: the time to open a fresh TCP connection (then closed at once,
//     nothing sent): one handshake round trip.
//   - grpc: a grpc.health.v1 Health/Check over a kept-alive gRPC
//     connection per target address; the time to the answer. Any status the
//     server answers counts, even NOT_SERVING or UNIMPLEMENTED (no health
//     service registered). Unavailable, DeadlineExceeded and Canceled are
//     what grpc-go reports for a lost connection or a timeout, so they are
//     no sample; the connection is then closed and the next round dials
//     afresh.
//
// The estimate is the minimum of the last rttWindow samples: a busy
// backend, a busy gfe or a scheduler hiccup only ever adds to a round trip,
// so the minimum tracks the network distance and a burst of slow samples
// cannot make a far region look near (which would flip the planner's region
// order). A real increase shows after rttWindow samples. A failed probe
// adds no sample (the region keeps its last estimate, and a region never
// answered has none, so the planner treats it as unreachable). Samples of
// all protocols go to the same window: a region whose protocol changes
// keeps its estimate. Safe for concurrent use; Run must be called at most
// once.
type Prober struct {
	// Immutable after New.
	path     string
	interval time.Duration
	clk      clock.Clock
	log      zerolog.Logger
	http     *http.Client // http targets
	https    *http.Client // https targets
	tcp      *probe.TCP
	grpcOpts []grpc.DialOption

	// kick starts a round at once (buffered, 1): the first snapshot
	// should not wait a whole interval for its first RTT estimates.
	kick chan struct{}

	// Owned by the Run goroutine.
	conns map[string]*grpc.ClientConn // grpc target address -> kept-alive connection

	mu  sync.Mutex
	rtt map[string]*windowMin // region -> recent samples in ms; guarded by mu
}

// Config is what an operator sets for the prober.
type Config struct {
	// Path is the HTTP path probed on a region's http and https instances;
	// any response counts as a sample. Ignored by tcp and grpc.
	Path string
	// Interval is how often each region is probed. Must be > 0.
	Interval time.Duration
}

// Options are the prober's dependencies.
type Options struct {
	// Clock drives the probe rounds; nil means the real clock. Round trips
	// are measured on the real clock (they are network time).
	Clock clock.Clock
	// Logger receives failed probes at debug level.
	Logger zerolog.Logger
	// Dialer opens the probe connections of every protocol (bound to the
	// gfe's source address). Nil means a default net.Dialer.
	Dialer *net.Dialer
}

// New returns a Prober; it probes once Run starts.
func New(cfg Config, opts Options) *Prober {
	dialer := opts.Dialer
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	transport := func(tlsCfg *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{
			Proxy:               nil, // never probe through HTTP_PROXY
			DialContext:         dialer.DialContext,
			TLSClientConfig:     tlsCfg,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     time.Minute,
		}}
	}
	return &Prober{
		path:     cfg.Path,
		interval: cfg.Interval,
		clk:      clock.OrReal(opts.Clock),
		log:      opts.Logger.With().Str("component", "rtt").Logger(),
		http:     transport(nil),
		https:    transport(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // documented: backends by IP, as config.HealthHTTPS
		tcp:      probe.NewTCP(probe.Options{Dialer: dialer}),
		grpcOpts: []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", addr)
			}),
			grpc.WithUserAgent("spillway-rtt/1"),
		},
		conns: map[string]*grpc.ClientConn{},
		rtt:   map[string]*windowMin{},
		kick:  make(chan struct{}, 1),
	}
}

// ProbeSoon asks for a round now. It never blocks.
func (p *Prober) ProbeSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Snapshot returns a copy of the RTT estimate per region, in milliseconds.
func (p *Prober) Snapshot() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]float64, len(p.rtt))
	for r, v := range p.rtt {
		if x, ok := v.min(); ok {
			out[r] = x
		}
	}
	return out
}

// Run probes the regions targets returns (region -> the instance to probe)
// every interval, and at once after ProbeSoon, until ctx ends. Probes of
// one round run in parallel. After a round, a region targets no longer
// returns has lost its estimate, and the gRPC connection of an address no
// longer a grpc target is closed. When Run returns, every connection it
// opened is closed.
func (p *Prober) Run(ctx context.Context, targets func() map[string]Target) error {
	defer p.closeAll()
	t := p.clk.NewTicker(p.interval)
	defer t.Stop()
	p.round(ctx, targets())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			p.round(ctx, targets())
		case <-p.kick:
			p.round(ctx, targets())
		}
	}
}

// round probes every target once, in parallel, and folds the samples in.
// Called only from the Run goroutine.
func (p *Prober) round(ctx context.Context, targets map[string]Target) {
	p.syncConns(targets)
	failed := make([]string, len(targets)) // grpc addresses whose probe failed
	var wg sync.WaitGroup
	i := 0
	for region, tg := range targets {
		slot := &failed[i]
		i++
		wg.Go(func() {
			ms, err := p.probe(ctx, tg)
			if err != nil {
				p.log.Debug().Err(err).Str("region", region).Str("backend", tg.Addr).Msg("rtt probe failed")
				if protocol(tg) == config.HealthGRPC {
					*slot = tg.Addr
				}
				return
			}
			p.mu.Lock()
			v := p.rtt[region]
			if v == nil {
				v = &windowMin{}
				p.rtt[region] = v
			}
			v.add(ms)
			p.mu.Unlock()
		})
	}
	wg.Wait()
	for _, addr := range failed {
		if c, ok := p.conns[addr]; ok {
			c.Close()
			delete(p.conns, addr)
		}
	}
	p.mu.Lock()
	maps.DeleteFunc(p.rtt, func(r string, _ *windowMin) bool { _, ok := targets[r]; return !ok })
	p.mu.Unlock()
}

// syncConns makes p.conns hold a connection for every grpc target address
// and none other. grpc.NewClient does not dial: the first Check does.
// Called only from the Run goroutine.
func (p *Prober) syncConns(targets map[string]Target) {
	want := map[string]bool{}
	for _, tg := range targets {
		if protocol(tg) == config.HealthGRPC {
			want[tg.Addr] = true
		}
	}
	for addr, c := range p.conns {
		if !want[addr] {
			c.Close()
			delete(p.conns, addr)
		}
	}
	for addr := range want {
		if _, ok := p.conns[addr]; ok {
			continue
		}
		// passthrough: the address is dialled as given, with no resolver.
		c, err := grpc.NewClient("passthrough:///"+addr, p.grpcOpts...)
		if err != nil {
			p.log.Debug().Err(err).Str("backend", addr).Msg("rtt grpc client")
			continue
		}
		p.conns[addr] = c
	}
}

// closeAll closes every connection the prober keeps. Called only from the
// Run goroutine, as it returns.
func (p *Prober) closeAll() {
	p.http.CloseIdleConnections()
	p.https.CloseIdleConnections()
	for addr, c := range p.conns {
		c.Close()
		delete(p.conns, addr)
	}
}

// protocol returns how t is probed: its Protocol, or http for "" and
// unknown protocols.
func protocol(t Target) config.HealthProtocol {
	switch t.Protocol {
	case config.HealthHTTPS, config.HealthTCP, config.HealthGRPC:
		return t.Protocol
	}
	return config.HealthHTTP
}

// probe returns one round trip to t, in ms, or why there is none. The
// conns t needs were set up by syncConns; probe only reads p.conns, so
// probes of one round may run in parallel.
func (p *Prober) probe(ctx context.Context, t Target) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var (
		d   time.Duration
		err error
	)
	switch protocol(t) {
	case config.HealthHTTPS:
		d, err = p.probeHTTP(ctx, p.https, "https://"+t.Addr+p.path)
	case config.HealthTCP:
		d, err = p.probeTCP(ctx, t.Addr)
	case config.HealthGRPC:
		d, err = p.probeGRPC(ctx, t.Addr)
	default:
		d, err = p.probeHTTP(ctx, p.http, "http://"+t.Addr+p.path)
	}
	if err != nil {
		return 0, err
	}
	return float64(d.Microseconds()) / 1000, nil
}

// probeHTTP returns the time to the response headers of a GET of url; any
// status counts.
func (p *Prober) probeHTTP(ctx context.Context, c *http.Client, url string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("rtt http: %w", err)
	}
	req.Header.Set("User-Agent", "spillway-rtt/1")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("rtt http: %w", err)
	}
	d := time.Since(t0)
	// Drain a little so the connection can be reused; a larger body is
	// cut off by Close.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return d, nil
}

// probeTCP returns the time to open (and close) a fresh TCP connection to
// addr, with the same prober the tcp health check uses.
func (p *Prober) probeTCP(ctx context.Context, addr string) (time.Duration, error) {
	t0 := time.Now()
	if r := p.tcp.Probe(ctx, health.Target{Addr: addr}); r.Err != nil {
		return 0, fmt.Errorf("rtt tcp: %w", r.Err)
	}
	return time.Since(t0), nil
}

// errNoConn: the target's gRPC client could not be created.
var errNoConn = errors.New("no grpc client")

// probeGRPC returns the round trip of one Health/Check to addr over its
// kept-alive connection. Any status the server answers counts; see
// transportFailure.
func (p *Prober) probeGRPC(ctx context.Context, addr string) (time.Duration, error) {
	c := p.conns[addr]
	if c == nil {
		return 0, fmt.Errorf("rtt grpc %s: %w", addr, errNoConn)
	}
	t0 := time.Now()
	_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
	d := time.Since(t0)
	if err != nil && (transportFailure(err) || ctx.Err() != nil) {
		return 0, fmt.Errorf("rtt grpc %s: %w", addr, err)
	}
	return d, nil
}

// transportFailure reports whether err, from a gRPC call, means no answer
// came: grpc-go reports a connection that failed or was lost as
// Unavailable, and a timeout or cancel as DeadlineExceeded or Canceled.
// Any other status (Unimplemented, NotFound, ...) was sent by the server,
// or is an HTTP/2 answer of a non-gRPC server: either proves the round
// trip.
func transportFailure(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// rttWindow is how many recent RTT samples the estimate is the minimum of.
const rttWindow = 8

// windowMin holds the last rttWindow samples. Not safe for concurrent use.
type windowMin struct {
	samples [rttWindow]float64
	n       int // samples seen, saturating at rttWindow
	next    int // where the next sample goes
}

func (w *windowMin) add(x float64) {
	w.samples[w.next] = x
	w.next = (w.next + 1) % rttWindow
	w.n = min(w.n+1, rttWindow)
}

// min returns the smallest recent sample, and false before the first one.
func (w *windowMin) min() (float64, bool) {
	if w.n == 0 {
		return 0, false
	}
	m := w.samples[0]
	for _, x := range w.samples[1:w.n] {
		m = min(m, x)
	}
	return m, true
}

// Set replaces region's estimate with one sample of ms (tests and tools
// that stand in for the probes).
func (p *Prober) Set(region string, ms float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := &windowMin{}
	w.add(ms)
	p.rtt[region] = w
}
