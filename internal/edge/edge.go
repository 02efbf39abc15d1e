package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// Config is what an operator sets for one gfe. Start from DefaultConfig.
type Config struct {
	// Node is this gfe's name, unique among gfes (its gossip name).
	Node string
	// Site is the edge location this gfe serves. Required.
	Site string
	// Listen is the address of the client-facing HTTP listener (HTTP/1.1
	// and h2c, with the defaults of config.DefaultListener). The listeners
	// of the control state's config bind the host of this address at their
	// own ports; one whose port is this one takes this socket over.
	// Default 127.0.0.1:8080.
	Listen string
	// Admin is the address of the admin listener (/metrics, /healthz,
	// /readyz, /status, /debug/pprof). Default 127.0.0.1:9090; keep it on
	// loopback.
	Admin string
	// SourceIP, when valid, is the local address of every connection this
	// gfe opens to a backend (proxied requests and RTT probes), so that
	// backends can tell sites apart. Zero lets the kernel choose.
	SourceIP netip.Addr
	// PlanInterval is how often the node re-plans from gossip and publishes
	// its own state. Default 500ms. Lower reacts faster at the cost of CPU
	// and gossip traffic.
	PlanInterval time.Duration
	// Damping is the fraction of the way each plan moves toward the
	// planner's newest output per PlanInterval (waterfall.Damp). Default
	// 0.5; 1 disables damping.
	Damping float64
	// DemandSmoothing is the time constant of the demand and load rate
	// estimates this node publishes (ewma.Rate.Tau). Default 1s. Longer
	// rides out noise at the cost of slower reaction to real changes.
	DemandSmoothing time.Duration
	// RTTInterval is how often each region is probed. Default 1s.
	RTTInterval time.Duration
	// RTTPath is the HTTP path probed for RTT on a region's instances; any
	// response counts as a sample. Default "/rtt".
	RTTPath string
	// DrainTimeout bounds how long shutdown waits for in-flight requests,
	// and how long a removed or changed listener's connections may take to
	// finish. Default 10s.
	DrainTimeout time.Duration
	// CertCheckInterval is how often the certificate files of https
	// listeners are checked for changes (modification time or size) and
	// reloaded, and failed listener binds retried. Default 10s. Files are
	// also checked on every applied snapshot.
	CertCheckInterval time.Duration
	// AccessLog logs every request (off by default: it costs on the hot
	// path).
	AccessLog bool
}

// DefaultConfig returns a Config with every default filled in; Node and Site
// are left for the caller.
func DefaultConfig() Config {
	return Config{
		Listen:          "127.0.0.1:8080",
		Admin:           "127.0.0.1:9090",
		PlanInterval:    500 * time.Millisecond,
		Damping:         0.5,
		DemandSmoothing: time.Second,
		RTTInterval:     time.Second,
		RTTPath:         "/rtt",
		DrainTimeout:    10 * time.Second,

		CertCheckInterval: 10 * time.Second,
	}
}

// Validate reports every problem with c, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if c.Site == "" {
		errs = append(errs, errors.New("gfe.site: required"))
	}
	if c.Node == "" {
		errs = append(errs, errors.New("gfe.node: required"))
	}
	if c.PlanInterval <= 0 {
		errs = append(errs, fmt.Errorf("gfe.plan_interval: must be > 0, got %v", c.PlanInterval))
	}
	if c.DemandSmoothing <= 0 {
		errs = append(errs, fmt.Errorf("gfe.demand_smoothing: must be > 0, got %v", c.DemandSmoothing))
	}
	if c.RTTInterval <= 0 {
		errs = append(errs, fmt.Errorf("gfe.rtt_interval: must be > 0, got %v", c.RTTInterval))
	}
	if !(c.Damping > 0 && c.Damping <= 1) {
		errs = append(errs, fmt.Errorf("gfe.damping: must be in (0,1], got %v", c.Damping))
	}
	if c.CertCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("gfe.cert_check_interval: must be > 0, got %v", c.CertCheckInterval))
	}
	if c.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("gfe.drain_timeout: must be >= 0, got %v", c.DrainTimeout))
	}
	for _, a := range []struct{ name, v string }{{"gfe.listen", c.Listen}, {"gfe.admin", c.Admin}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.name, err))
		}
	}
	return errors.Join(errs...)
}

// Gossip is the part of the gossip node the gfe uses. *gossip.Node
// implements it. Both methods may be called from any goroutine.
type Gossip interface {
	Publish(gossip.NodeState) (uint64, error)
	Snapshot() *gossip.Snapshot
}

// Options are the gfe's dependencies.
type Options struct {
	// Logger receives the node's logs. The zero Logger discards them.
	Logger zerolog.Logger
	// Clock drives the planner and prober loops; nil means the real clock.
	Clock clock.Clock
	// Gossip shares state with the other nodes. Required.
	Gossip Gossip
	// Registerer receives the node's Prometheus metrics; nil means a new
	// registry of its own (served on /metrics).
	Registry *prometheus.Registry
	// Rand returns uniform random numbers for picks; nil means
	// math/rand/v2.Uint64.
	Rand func() uint64
}

// ControlState is one control-plane snapshot as the gfe uses it.
type ControlState struct {
	// Version is the snapshot's version, reported on /status.
	Version string
	// Config is the validated operator configuration.
	Config *config.Config
	// Unhealthy holds the addresses of instances that fail health checks.
	// Instances not in it count as healthy.
	Unhealthy map[string]bool
}

// Edge is one running gfe. Create it with New and start it with Run.
type Edge struct {
	// Immutable after New.
	cfg     Config
	log     zerolog.Logger
	clk     clock.Clock
	gossip  Gossip
	rand    func() uint64
	reg     *prometheus.Registry
	metrics *metrics
	rtt     *rttProber
	proxy   *proxy
	tcp     *tcpProxy // state shared by the tcp listeners (tcpproxy.go)
	// listeners serves the client-facing sockets.
	listeners *listenerManager
	// streams tracks long-lived streams (gRPC calls, upgraded connections)
	// by backend, so that those of an unavailable backend can be ended.
	streams *streamTracker
	// h2c carries gRPC calls to backends; grpcTransport and
	// upgradeTransport are the tracked transports of transportFor.
	h2c              *http.Transport
	grpcTransport    http.RoundTripper
	upgradeTransport http.RoundTripper

	// Accessed atomically.
	table    atomic.Pointer[table]
	control  atomic.Pointer[ControlState]
	draining atomic.Bool

	// kick wakes the planner when a snapshot arrives (buffered, 1).
	kick chan struct{}

	// Owned by the planner goroutine.
	planner *planner
}

// New returns an Edge for cfg. It does not listen until Run.
func New(cfg Config, opts Options) (*Edge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Gossip == nil {
		return nil, errors.New("edge: Options.Gossip is required")
	}
	e := &Edge{
		cfg:    cfg,
		log:    opts.Logger.With().Str("component", "gfe").Str("site", cfg.Site).Logger(),
		clk:    clock.OrReal(opts.Clock),
		gossip: opts.Gossip,
		rand:   opts.Rand,
		reg:    opts.Registry,
		kick:   make(chan struct{}, 1),
	}
	if e.rand == nil {
		e.rand = randUint64
	}
	if e.reg == nil {
		e.reg = prometheus.NewRegistry()
		e.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	e.metrics = newMetrics(e.reg)
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if cfg.SourceIP.IsValid() {
		dialer.LocalAddr = &net.TCPAddr{IP: cfg.SourceIP.AsSlice()}
	}
	e.rtt = newRTTProber(cfg, dialer, e.clk, e.log)
	e.proxy = newProxy(e, dialer)
	e.tcp = newTCPProxy(e, dialer.DialContext)
	e.streams = newStreamTracker()
	e.h2c = newH2CTransport(dialer)
	e.grpcTransport = &trackingTransport{next: e.h2c, streams: e.streams}
	e.upgradeTransport = &trackingTransport{next: e.proxy.transport, streams: e.streams}
	var err error
	if e.listeners, err = newListenerManager(e, e.reg); err != nil {
		return nil, err
	}
	e.planner = newPlanner(e)
	return e, nil
}

// ApplySnapshot validates cs and makes it the node's control state; the
// next plan uses it. It returns an error (the control-plane client NACKs
// with it) when cs cannot be used — no config, or a certificate of an https
// listener that cannot be loaded — and then keeps the previous state. It
// reconciles the listeners (when Run has started them) and ends the
// long-lived streams (gRPC calls, WebSockets) to backends that cs makes
// unavailable: unhealthy, or no longer configured. Safe to call from any
// goroutine.
func (e *Edge) ApplySnapshot(cs ControlState) error {
	if cs.Config == nil {
		return errors.New("edge: snapshot without config")
	}
	if err := e.listeners.apply(cs.Config.Listeners); err != nil {
		return fmt.Errorf("edge: snapshot %s: %w", cs.Version, err)
	}
	e.endUnavailableStreams(&cs)
	if e.control.Swap(&cs) == nil {
		e.rtt.probeSoon()
	}
	select {
	case e.kick <- struct{}{}:
	default:
	}
	return nil
}

// Ready reports whether the node can serve: it is not draining and its
// routing table has at least one backend to send requests to.
func (e *Edge) Ready() bool {
	if e.draining.Load() {
		return false
	}
	t := e.table.Load()
	if t == nil {
		return false
	}
	for _, s := range t.services {
		if s.healthy > 0 {
			return true
		}
	}
	return false
}

// Run serves until ctx is cancelled, then drains: readiness turns false,
// every listener stops accepting at once (new connections are refused),
// in-flight requests get up to DrainTimeout to finish, and upgraded
// connections (WebSockets) are closed. It returns nil after a clean drain,
// and an error when DrainTimeout passed with requests still in flight.
//
// Run binds Config.Listen (an error is returned when it cannot) and the
// listeners of the current control state (a bind error is logged and
// retried every CertCheckInterval), and reconciles them with every
// snapshot applied while it runs.
func (e *Edge) Run(ctx context.Context) error {
	aln, err := net.Listen("tcp", e.cfg.Admin)
	if err != nil {
		return fmt.Errorf("gfe admin listen %s: %w", e.cfg.Admin, err)
	}
	if err := e.listeners.start(); err != nil {
		aln.Close()
		return fmt.Errorf("gfe listen %s: %w", e.cfg.Listen, err)
	}
	e.log.Info().Str("listen", e.ListenAddr().String()).Str("admin", aln.Addr().String()).Msg("gfe serving")

	admin := &http.Server{Handler: e.adminHandler(), ReadHeaderTimeout: 5 * time.Second}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.planner.run(gctx) })
	g.Go(func() error { return e.rtt.run(gctx, e.regionTargets) })
	g.Go(func() error { return e.listeners.run(gctx) })
	g.Go(func() error { return serve(admin, aln) })
	g.Go(func() error {
		<-gctx.Done()
		e.draining.Store(true)
		start := time.Now()
		e.log.Info().Dur("drain_timeout", e.cfg.DrainTimeout).Msg("draining")
		dctx, cancel := context.WithTimeout(context.Background(), e.cfg.DrainTimeout)
		defer cancel()
		err := e.listeners.shutdown(dctx)
		e.proxy.transport.CloseIdleConnections()
		e.h2c.CloseIdleConnections()
		aerr := admin.Shutdown(dctx)
		e.log.Info().Dur("took", time.Since(start)).Msg("drained")
		return errors.Join(err, aerr)
	})
	err = g.Wait()
	if ctx.Err() != nil && err == nil {
		e.log.Info().Msg("gfe stopped")
	}
	return err
}

// ListenAddr returns the bound address of Config.Listen (its real port when
// Config.Listen asks for port 0), or nil before Run has bound it.
func (e *Edge) ListenAddr() net.Addr {
	return e.listeners.addr(e.listeners.defPort)
}

// endUnavailableStreams ends the tracked streams whose backend cs makes
// unavailable: unhealthy, or not an instance of cs.Config any more.
func (e *Edge) endUnavailableStreams(cs *ControlState) {
	if e.streams.len() == 0 {
		return
	}
	known := map[string]bool{}
	for _, g := range cs.Config.Groups() {
		for _, in := range g.Group.Instances {
			known[in.Address] = true
		}
	}
	n := e.streams.endWhere(func(addr string) bool { return cs.Unhealthy[addr] || !known[addr] })
	if n > 0 {
		e.listeners.metrics.streamsClosed.Add(float64(n))
		e.log.Info().Int("streams", n).Str("version", cs.Version).Msg("ended streams to unavailable backends")
	}
}

// serve runs srv on ln and treats a shutdown as a clean stop.
func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
