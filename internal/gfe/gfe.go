package gfe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/cpclient"
	"github.com/spillway-lb/spillway/internal/fdlimit"
	"github.com/spillway-lb/spillway/internal/gfe/httpproxy"
	"github.com/spillway-lb/spillway/internal/gfe/listeners"
	"github.com/spillway-lb/spillway/internal/gfe/pending"
	"github.com/spillway-lb/spillway/internal/gfe/poller"
	"github.com/spillway-lb/spillway/internal/gfe/prequalprobe"
	"github.com/spillway-lb/spillway/internal/gfe/quotaclient"
	"github.com/spillway-lb/spillway/internal/gfe/rtt"
	"github.com/spillway-lb/spillway/internal/gfe/tcpproxy"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/routing"
)

// Config is what an operator sets for one gfe. Start from DefaultConfig.
type Config struct {
	// Node is this gfe's name, unique among gfes (its gossip name).
	Node string
	// Site is the edge location this gfe serves. Required.
	Site string
	// Listen is the address of the client-facing HTTP listener (HTTP/1.1
	// and h2c, with the defaults of config.DefaultListener). The listeners
	// of the snapshot's config bind the host of this address at their
	// own ports; one whose port is this one takes this socket over.
	// Default 127.0.0.1:8080.
	Listen string
	// Admin is the address of the admin listener (/metrics, /healthz,
	// /readyz, /status, and /debug/pprof with Pprof). Default
	// 127.0.0.1:9090; keep it on loopback.
	Admin string
	// AdminTokenFile, when set, names a file holding a bearer token that
	// every admin request but /healthz and /readyz must carry
	// (adminhttp.Guard; re-read at each request). Default "": no token.
	AdminTokenFile string
	// Pprof mounts the Go profiler under /debug/pprof/ on the admin
	// listener (never /debug/pprof/cmdline). Default false.
	Pprof bool
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
	// estimates this node publishes (ewma.Rate.Tau). Default
	// routing.DefaultDemandSmoothing, 2s. Longer
	// rides out noise at the cost of slower reaction to real changes. It
	// slows only decreases: a step up in demand beyond the noise shows in
	// the plan after one PlanInterval (ewma.Rate.FastAttack).
	DemandSmoothing time.Duration
	// RTTInterval is how often each region is probed. Default 1s.
	RTTInterval time.Duration
	// RTTPath is the HTTP path probed for RTT on a region's instances; any
	// response counts as a sample. Default "/rtt".
	RTTPath string
	// DrainTimeout bounds how long shutdown waits for in-flight requests,
	// and how long a removed or changed listener's connections may take to
	// finish; what is still busy then is closed (the stop still succeeds).
	// Default 10s.
	DrainTimeout time.Duration
	// CertCheckInterval is how often the certificate files of https
	// listeners are checked for changes (modification time or size) and
	// reloaded, and failed listener binds retried. Default 10s. Files are
	// also checked on every applied snapshot.
	CertCheckInterval time.Duration
	// AccessLog logs every request (off by default: it costs on the hot
	// path).
	AccessLog bool
	// FastPath serves the plain HTTP/1.1 requests of the --listen listener
	// on the gfe's fast path (config.Listener.FastPath; configured
	// listeners set their own). DefaultConfig turns it on.
	FastPath bool
	// Poller says when the fast path's cleartext sockets wait in the
	// process's epoll poller (poller.Shared): Auto (the default) while
	// goroutines queue for a CPU.
	Poller poller.Mode
	// FDReserve is how many file descriptors are kept out of the budget
	// of client connections, for what must keep working when clients
	// open all they can: the admin listener, gossip, the control-plane
	// stream, RTT probes, logs. New raises the soft RLIMIT_NOFILE to the
	// hard limit; the budget is that limit minus FDReserve, and client
	// connections beyond it are refused (tcp listeners) or wait in the
	// kernel's backlog (http, https). Default 0: fdlimit.DefaultReserve,
	// a tenth of the limit, at least 256 and at most half.
	FDReserve int
	// FDPerHTTPConn is what one http or https client connection takes from
	// the fd budget (listeners.Options.ConnFDs): 2 (the default, 0) counts
	// a backend connection for each, 1 only the client's own, for a gfe
	// whose clients hold mostly idle keep-alive connections.
	FDPerHTTPConn int
	// GossipBounds are the plausibility limits on the RTT and demand other
	// gfes gossip (routing.Bounds): values beyond them are clamped,
	// counted in spillway_gfe_gossip_clamped_total and logged (at most a
	// line a minute). Default routing.DefaultBounds(): RTT at most 10 s, a
	// peer's demand at most twice the service's declared capacity, rising
	// by at most the declared capacity per second.
	GossipBounds routing.Bounds
	// PendingPoll is how often the requests waiting in the pending queue
	// (services with an autoscaled group) retry their pick while some
	// wait; they also retry at once on every new routing table. Default
	// 5ms: a freed slot is taken at most that late, at the cost of a pick
	// per waiting service per poll, and nothing while none waits.
	PendingPoll time.Duration
	// CapacityInterval is the least time between two capacity requests
	// (RequestCapacity) for one service and group while its requests wait.
	// Default 1s.
	CapacityInterval time.Duration
	// PendingMax bounds the requests waiting in the pending queue, all
	// services together (each service's line is bounded by its
	// max_pending_requests too); a request beyond it is answered 429 at
	// once. Default pending.DefaultMaxWaiting (10000), in
	// 1..pending.MaxMaxWaiting.
	PendingMax int
}

// adminMaxConns caps the admin listener's open connections (they come from
// operators and scrapers on loopback), so that a flood of them cannot eat
// the fd reserve; adminIdleTimeout closes its idle keep-alive connections.
const (
	adminMaxConns    = 64
	adminIdleTimeout = 30 * time.Second
)

// DefaultConfig returns a Config with every default filled in; Node and Site
// are left for the caller.
func DefaultConfig() Config {
	return Config{
		Listen:          "127.0.0.1:8080",
		Admin:           "127.0.0.1:9090",
		PlanInterval:    500 * time.Millisecond,
		Damping:         0.5,
		DemandSmoothing: routing.DefaultDemandSmoothing,
		RTTInterval:     time.Second,
		RTTPath:         "/rtt",
		DrainTimeout:    10 * time.Second,
		FastPath:        true,

		CertCheckInterval: 10 * time.Second,
		GossipBounds:      routing.DefaultBounds(),
		PendingPoll:       pending.DefaultPoll,
		CapacityInterval:  time.Second,
		PendingMax:        pending.DefaultMaxWaiting,
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
	if c.PendingPoll <= 0 {
		errs = append(errs, fmt.Errorf("gfe.pending_poll: must be > 0, got %v", c.PendingPoll))
	}
	if c.PendingMax < 1 || c.PendingMax > pending.MaxMaxWaiting {
		errs = append(errs, fmt.Errorf("gfe.pending_max: must be in 1..%d, got %d", pending.MaxMaxWaiting, c.PendingMax))
	}
	if c.CapacityInterval <= 0 {
		errs = append(errs, fmt.Errorf("gfe.capacity_interval: must be > 0, got %v", c.CapacityInterval))
	}
	if c.FDPerHTTPConn < 0 || c.FDPerHTTPConn > 2 {
		errs = append(errs, fmt.Errorf("gfe.fd_per_http_conn: must be 1 or 2 (0 = 2), got %d", c.FDPerHTTPConn))
	}
	if c.FDReserve < 0 {
		errs = append(errs, fmt.Errorf("gfe.fd_reserve: must be >= 0 (0 = automatic), got %d", c.FDReserve))
	}
	for _, b := range []struct {
		name string
		v    float64
	}{
		{"gfe.gossip_bounds.max_rtt", c.GossipBounds.MaxRTT},
		{"gfe.gossip_bounds.max_demand", c.GossipBounds.MaxDemand},
		{"gfe.gossip_bounds.max_demand_rise", c.GossipBounds.MaxDemandRise},
	} {
		if !(b.v >= 0 && !math.IsInf(b.v, 1)) {
			errs = append(errs, fmt.Errorf("%s: must be finite and >= 0 (0: no limit), got %v", b.name, b.v))
		}
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
	// Quota returns the Quota service of the control plane the node is
	// connected to, or nil when none is (quota then fails open). Nil: no
	// control plane, every quota call fails open.
	Quota func() quotaclient.Allocator
	// Capacity returns the client of the control plane the node is
	// connected to, for capacity requests while requests wait in the
	// pending queue (pb.ControlPlaneClient implements it), or nil when
	// none is (nothing is asked then). Nil: nothing is ever asked.
	Capacity func() pending.Requester
	// Stream returns the state of the snapshot stream from the control
	// planes (cpclient.Client.Status), shown on /status and /readyz and in
	// the spillway_gfe_snapshot_* metrics. Nil: the node has no control
	// plane (a local config file only).
	Stream func() cpclient.Status
}

// Daemon is one running gfe: it wires the planner loop (a routing.Builder
// fed by the snapshot, gossip and the RTT prober), the HTTP and tcp
// proxies, the listeners and the admin server. Create it with New and start
// it with Run.
type Daemon struct {
	// Immutable after New.
	cfg     Config
	log     zerolog.Logger
	clk     clock.Clock
	gossip  Gossip
	stream  func() cpclient.Status // nil without a control plane
	quota   *quotaclient.Enforcer
	reg     *prometheus.Registry
	metrics *metrics
	rtt     *rtt.Prober
	// probes sends the probes of services with policy prequal.
	probes *prequalprobe.Sender
	// lastFactors are the own capacity factors of the last step (planner
	// goroutine only).
	lastFactors map[string]map[string]float64
	// lastHerd is, by service, whether the last step's plan was made by
	// the herd guard (planner goroutine only).
	lastHerd map[string]bool
	proxy    *httpproxy.Proxy
	tcp      *tcpproxy.Proxy
	// pending is the queue where requests of autoscaled services wait for
	// a free backend (run by Run, kicked by every new table).
	pending *pending.Queue
	// load accumulates the in-flight samples of each group between two
	// publishes (planner goroutine only).
	load loadMeter
	// published is the node state of the last gossip publish (its demand
	// and group loads), for capacityTarget's rate-sized requests; nil
	// before the first.
	published atomic.Pointer[gossip.NodeState]
	listeners *listeners.Manager
	// fds is the file-descriptor budget of client connections (nil:
	// unlimited), from limits.
	fds    *fdlimit.Budget
	limits fdlimit.Limits
	// serving is closed when the first routing table is stored; the
	// listeners accept nothing before (listeners.Options.Serving).
	serving     chan struct{}
	servingOnce sync.Once

	// clampLog rate-limits the log of clamped gossip values (planner
	// goroutine only).
	clampLog clampLog

	// Accessed atomically.
	table   atomic.Pointer[routing.Table]
	control atomic.Pointer[snapshot.Snapshot]
	// seen tracks when each instance first appeared in a snapshot and
	// whether it has been healthy since: what tells a starting instance
	// from a failed one (capacityTarget).
	seen     seenInstances
	draining atomic.Bool

	// admin serves the admin listener (built by New).
	admin http.Handler

	// kick wakes the planner when a snapshot arrives or a backend is
	// ejected (buffered, 1).
	kick chan struct{}

	// Owned by the planner goroutine.
	builder *routing.Builder
}

// New returns a Daemon for cfg. It does not listen until Run.
func New(cfg Config, opts Options) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Gossip == nil {
		return nil, errors.New("gfe: Options.Gossip is required")
	}
	d := &Daemon{
		cfg:     cfg,
		serving: make(chan struct{}),
		log:     opts.Logger.With().Str("component", "gfe").Str("site", cfg.Site).Logger(),
		clk:     clock.OrReal(opts.Clock),
		gossip:  opts.Gossip,
		stream:  opts.Stream,
		reg:     opts.Registry,
		kick:    make(chan struct{}, 1),
	}
	var err error
	rnd := opts.Rand
	if rnd == nil {
		rnd = rand.Uint64
	}
	if d.reg == nil {
		d.reg = prometheus.NewRegistry()
		d.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	d.metrics = newMetrics(d.reg, d.Table)
	d.reg.MustRegister(snapshotCollectors(d.Snapshot, d.stream)...)
	if c, ok := opts.Gossip.(interface {
		Collector(prefix string) prometheus.Collector
	}); ok {
		d.reg.MustRegister(c.Collector("spillway_gfe")) // *gossip.Node: seal refusals
	}
	if d.limits, err = fdlimit.Raise(); err != nil {
		d.log.Warn().Err(err).Msg("cannot read RLIMIT_NOFILE: no fd budget for client connections")
	} else {
		d.fds = fdlimit.FromLimit(d.limits.Soft, uint64(cfg.FDReserve))
	}
	d.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_gfe_fd_budget",
			Help: "File descriptors client connections may hold: RLIMIT_NOFILE less the reserve (0: unlimited).",
		}, func() float64 { return float64(d.fds.Size()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_gfe_fd_budget_used",
			Help: "File descriptors client connections hold now (tcp: 2 per connection; http, https: 2 per connection).",
		}, func() float64 { return float64(d.fds.Used()) }),
	)
	admin, err := d.adminHandler()
	if err != nil {
		return nil, fmt.Errorf("gfe: %w", err)
	}
	d.admin = admin
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if cfg.SourceIP.IsValid() {
		dialer.LocalAddr = &net.TCPAddr{IP: cfg.SourceIP.AsSlice()}
	}
	d.probes, err = prequalprobe.New(prequalprobe.Options{Transport: proxyTransport{d}, Clock: d.clk, Registry: d.reg, Logger: d.log})
	if err != nil {
		return nil, fmt.Errorf("gfe: %w", err)
	}
	d.builder = routing.NewBuilder(routing.Config{Node: cfg.Node, Site: cfg.Site, Damping: cfg.Damping, DemandSmoothing: cfg.DemandSmoothing, HerdWindow: routing.DefaultHerdWindow, Bounds: cfg.GossipBounds},
		routing.Options{Now: d.clk.Now, Rand: rnd, Prober: d.probes})
	d.rtt = rtt.New(rtt.Config{Path: cfg.RTTPath, Interval: cfg.RTTInterval}, rtt.Options{Clock: d.clk, Logger: d.log, Dialer: dialer})
	d.quota = quotaclient.New(quotaclient.Config{}, d.clk, opts.Quota, d.log, d.reg)
	asker := pending.NewAsker(pending.AskConfig{Node: cfg.Node, Site: cfg.Site, Interval: cfg.CapacityInterval},
		pending.AskOptions{Clock: d.clk, Logger: d.log, Client: opts.Capacity, Target: d.capacityTarget, Registry: d.reg})
	d.pending = pending.New(pending.Config{Poll: cfg.PendingPoll, MaxWaiting: cfg.PendingMax}, pending.Options{Clock: d.clk, Registry: d.reg, Asker: asker})
	pl, err := poller.Shared() // taken now, before clients can hold every descriptor
	if err != nil {
		d.log.Warn().Err(err).Msg("no epoll poller: the fast path's sockets wait in Go's poller alone")
	}
	pl.SetMode(cfg.Poller)
	d.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_gfe_poller_on",
			Help: "1 while the fast path's cleartext sockets wait in the gfe's own poller (goroutines queue for a CPU), 0 while they wait in Go's.",
		}, func() float64 {
			if pl.On() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_gfe_poller_turns_total",
			Help: "Times the gfe's poller turned on or off.",
		}, func() float64 { return float64(pl.Turns()) }),
	)
	d.proxy, err = httpproxy.New(httpproxy.Config{AccessLog: cfg.AccessLog}, httpproxy.Options{
		Planner: d, Logger: d.log, Clock: d.clk, Rand: rnd, Dialer: dialer, Registry: d.reg, Quota: d.quota,
		PickErrors: d.metrics.pickErrors, BackendErrors: d.metrics.backendErrors, Shed: d.metrics.shed, Pending: d.pending,
	})
	if err != nil {
		return nil, err
	}
	d.tcp, err = tcpproxy.New(tcpproxy.Config{DrainTimeout: cfg.DrainTimeout, DemandSmoothing: cfg.DemandSmoothing}, tcpproxy.Options{
		State: d, Logger: d.log, Clock: d.clk, Rand: rnd, Dial: dialer.DialContext, Registry: d.reg,
		PickErrors: d.metrics.pickErrors, BackendErrors: d.metrics.backendErrors, Shed: d.metrics.shed, Budget: d.fds,
	})
	if err != nil {
		return nil, err
	}
	d.listeners, err = listeners.New(listeners.Config{Listen: cfg.Listen, DrainTimeout: cfg.DrainTimeout, CertCheckInterval: cfg.CertCheckInterval, FastPath: cfg.FastPath},
		listeners.Options{HTTP: d.proxy, Fast: d.proxy, TCP: d.tcp, Streams: d.proxy, Logger: d.log, Clock: d.clk, Registry: d.reg, Budget: d.fds, ConnFDs: cfg.FDPerHTTPConn, Serving: d.serving})
	if err != nil {
		return nil, fmt.Errorf("gfe.listen: %w", err)
	}
	return d, nil
}

// ApplySnapshot validates cs and makes it the node's snapshot; the next
// plan uses it. It returns an error (the control-plane client NACKs with
// it) when cs cannot be used — no config, a service that cannot be planned
// (routing.CheckPlannable: a capacity that is not finite), or a
// certificate of an https listener that cannot be loaded — and then keeps
// the previous one, which goes on routing. It
// reconciles the listeners (when Run has started them) and ends the
// long-lived streams (gRPC calls, WebSockets) to backends that cs makes
// unavailable: unhealthy, or no longer configured. cs must not be modified
// afterwards. Safe to call from any goroutine.
func (d *Daemon) ApplySnapshot(cs *snapshot.Snapshot) error {
	if cs.Config == nil {
		return errors.New("gfe: snapshot without config")
	}
	if err := routing.CheckPlannable(&cs.Fleet); err != nil {
		return fmt.Errorf("gfe: snapshot %s cannot be planned: %w", cs.Version, err)
	}
	if err := d.listeners.Apply(cs.Config.Listeners); err != nil {
		return fmt.Errorf("gfe: snapshot %s: %w", cs.Version, err)
	}
	d.endUnavailableStreams(cs)
	d.seen.update(cs, d.clk.Now())
	if d.control.Swap(cs) == nil {
		d.rtt.ProbeSoon()
	}
	d.Wake()
	return nil
}

// Table returns the routing table live now, nil before the first plan. The
// table must not be modified. Safe to call from any goroutine.
func (d *Daemon) Table() *routing.Table { return d.table.Load() }

// Snapshot returns the snapshot live now, nil before the first one. Safe
// to call from any goroutine.
func (d *Daemon) Snapshot() *snapshot.Snapshot { return d.control.Load() }

// RTT returns this node's RTT estimate per region, in milliseconds.
func (d *Daemon) RTT() map[string]float64 { return d.rtt.Snapshot() }

// Wake asks the planner for a new table at once. It never blocks.
func (d *Daemon) Wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Ready reports whether the node can serve: it is not draining and its
// routing table has at least one backend to send requests to, or a service
// with an autoscaled group, whose requests wait in the pending queue while
// the autoscaler starts an instance (a group scaled to zero has no
// healthy backend until a request asks for one).
func (d *Daemon) Ready() bool {
	if d.draining.Load() {
		return false
	}
	t := d.table.Load()
	if t == nil {
		return false
	}
	for _, s := range t.Services {
		if s.Healthy() > 0 || autoscaled(t.Config, s.Config()) {
			return true
		}
	}
	return false
}

// autoscaled reports whether service sc of cfg has a backend group with
// autoscaling enabled.
func autoscaled(cfg *config.Config, sc *config.Service) bool {
	for i := range sc.Backends {
		if g, ok := cfg.Group(sc.Backends[i].Group); ok && g.Group.Autoscaling.Enabled() {
			return true
		}
	}
	return false
}

// component is one long-lived part of the daemon, run by Run under its
// errgroup.
type component struct {
	name string
	run  func(ctx context.Context) error
}

// Run serves until ctx is cancelled, then drains: readiness turns false,
// every listener stops accepting at once (new connections are refused),
// in-flight requests get up to DrainTimeout to finish, then whatever is
// still busy is closed (counted in spillway_gfe_drain_cut_connections_total
// and logged), and upgraded connections (WebSockets) are closed. The drain
// takes at most DrainTimeout and returns nil either way: a client holding
// a request open cannot make the gfe's stop fail.
//
// Run binds Config.Listen (an error is returned when it cannot) and the
// listeners of the current snapshot (a bind error is logged and
// retried every CertCheckInterval), and reconciles them with every
// snapshot applied while it runs. Its components — planner, rtt,
// listeners, admin and drain — run under one errgroup.
func (d *Daemon) Run(ctx context.Context) error {
	aln, err := net.Listen("tcp", d.cfg.Admin)
	if err != nil {
		return fmt.Errorf("gfe admin listen %s: %w", d.cfg.Admin, err)
	}
	if err := d.listeners.Start(); err != nil {
		aln.Close()
		return fmt.Errorf("gfe listen %s: %w", d.cfg.Listen, err)
	}
	d.log.Info().Str("listen", d.ListenAddr().String()).Str("admin", aln.Addr().String()).
		Uint64("rlimit_nofile", d.limits.Soft).Int64("fd_budget", d.fds.Size()).Msg("gfe serving")
	aln = netutil.LimitListener(aln, adminMaxConns)
	admin := &http.Server{Handler: d.admin, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: adminIdleTimeout}

	components := []component{
		{name: "planner", run: d.plan},
		{name: "rtt", run: func(ctx context.Context) error { return d.rtt.Run(ctx, d.regionTargets) }},
		{name: "prequal probes", run: d.probes.Run},
		{name: "quota", run: d.quota.Run},
		{name: "pending", run: d.pending.Run},
		{name: "listeners", run: d.listeners.Run},
		{name: "admin", run: func(context.Context) error { return serve(admin, aln) }},
		{name: "drain", run: func(ctx context.Context) error { return d.drain(ctx, admin) }},
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range components {
		g.Go(func() error {
			if err := c.run(gctx); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			return nil
		})
	}
	err = g.Wait()
	if ctx.Err() != nil && err == nil {
		d.log.Info().Msg("gfe stopped")
	}
	return err
}

// drain waits for ctx to end, then drains the listeners and stops the
// admin server.
func (d *Daemon) drain(ctx context.Context, admin *http.Server) error {
	<-ctx.Done()
	d.draining.Store(true)
	start := time.Now()
	d.log.Info().Dur("drain_timeout", d.cfg.DrainTimeout).Msg("draining")
	dctx, cancel := context.WithTimeout(context.Background(), d.cfg.DrainTimeout)
	defer cancel()
	err := d.listeners.Shutdown(dctx)
	d.proxy.CloseIdleConnections()
	if aerr := admin.Shutdown(dctx); aerr != nil {
		// An admin request outlived the drain (a long profile, a slow
		// scrape): cut it, as the listeners cut theirs.
		admin.Close()
		if !errors.Is(aerr, context.DeadlineExceeded) {
			err = errors.Join(err, fmt.Errorf("admin shutdown: %w", aerr))
		}
	}
	d.log.Info().Dur("took", time.Since(start)).Msg("drained")
	return err
}

// ListenAddr returns the bound address of Config.Listen (its real port when
// Config.Listen asks for port 0), or nil before Run has bound it.
func (d *Daemon) ListenAddr() net.Addr { return d.listeners.DefaultAddr() }

// endUnavailableStreams ends the tracked streams whose backend cs makes
// unavailable: unhealthy, or not an instance of cs.Config any more.
func (d *Daemon) endUnavailableStreams(cs *snapshot.Snapshot) {
	if d.proxy.OpenStreams() == 0 {
		return
	}
	known := map[string]bool{}
	for _, g := range cs.Config.Groups() {
		for _, in := range g.Group.Instances {
			known[in.Address] = true
		}
	}
	if n := d.proxy.EndStreamsTo(func(addr string) bool { return !cs.Healthy(addr) || !known[addr] }); n > 0 {
		d.log.Info().Int("streams", n).Str("version", cs.Version).Msg("ended streams to unavailable backends")
	}
}

// regionTargets returns, for every region of the current config, the
// instance to probe and the protocol it speaks. The instance is the first
// healthy one (in config order); a region with no healthy instance is
// probed on its first instance, so it keeps an RTT estimate. The protocol
// is that of the health check of the first service (in config order) whose
// backends list the instance's group, config.HealthHTTP for a group no
// service uses.
func (d *Daemon) regionTargets() map[string]rtt.Target {
	cs := d.control.Load()
	if cs == nil {
		return nil
	}
	proto := map[string]config.HealthProtocol{} // group -> protocol of its first service
	for _, s := range cs.Config.Services {
		for _, b := range s.Backends {
			if _, ok := proto[b.Group]; !ok {
				proto[b.Group] = s.HealthCheck.Protocol
			}
		}
	}
	out := map[string]rtt.Target{}
	for _, g := range cs.Config.Groups() {
		r := g.Region.Name
		p := proto[g.Group.Name]
		if p == "" {
			p = config.HealthHTTP
		}
		for _, in := range g.Group.Instances {
			cur, ok := out[r]
			if !ok || cs.Healthy(in.Address) && !cs.Healthy(cur.Addr) {
				out[r] = rtt.Target{Addr: in.Address, Protocol: p}
			}
		}
	}
	return out
}

// serve runs srv on ln and treats a shutdown as a clean stop.
func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// proxyTransport carries prequal probes over the HTTP proxy's backend
// transport (httpproxy.Proxy.BackendTransport). The proxy is made after
// the routing builder that needs the probe sender, and before any table
// asks for a probe.
type proxyTransport struct{ d *Daemon }

// RoundTrip implements http.RoundTripper.
func (t proxyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.d.proxy.BackendTransport().RoundTrip(r)
}
