package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/fdlimit"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/ewma"
	"github.com/spillway-lb/spillway/lb/routing"
)

// copyBufferSize is the size of the copy buffers of connections with an
// idle timeout, io.Copy's own.
const copyBufferSize = 32 << 10

// reapInterval is how often a tcp listener checks whether the snapshot
// changed, and if so closes the connections whose backend became
// unavailable. It bounds the delay between a health verdict reaching the gfe
// and the connections of that backend being closed.
const reapInterval = 50 * time.Millisecond

// DialFunc opens a connection to a backend (net.Dialer.DialContext).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// State is what the tcp proxy needs of the gfe. Its methods are called from
// many goroutines at once and must not block.
type State interface {
	// Table returns the routing table live now, nil before the first one.
	Table() *routing.Table
	// Snapshot returns the snapshot live now, nil before the first one.
	// It may be newer than the table's.
	Snapshot() *snapshot.Snapshot
	// RTT returns this node's RTT estimate per region, in milliseconds.
	RTT() map[string]float64
}

// Config is what an operator sets for the tcp proxy.
type Config struct {
	// DrainTimeout bounds how long a stopping listener's connections may
	// take to finish before they are closed.
	DrainTimeout time.Duration
	// DemandSmoothing is the time constant of the smoothed open
	// connections Demand reports.
	DemandSmoothing time.Duration
}

// Options are the tcp proxy's dependencies.
type Options struct {
	// State gives the live table and snapshot. Required.
	State State
	// Logger receives the proxy's logs. The zero Logger discards them.
	Logger zerolog.Logger
	// Clock drives the reaper, idle timeouts and drains; nil means the real
	// clock.
	Clock clock.Clock
	// Rand returns uniform random numbers for picks; it must be safe for
	// concurrent use. Required.
	Rand func() uint64
	// Dial opens connections to backends. Required.
	Dial DialFunc
	// Registry receives the proxy's metrics; nil registers them nowhere.
	Registry prometheus.Registerer
	// PickErrors and BackendErrors are the counters the proxy shares with
	// the HTTP proxy (httpproxy.NewPickErrors, NewBackendErrors); they are
	// registered by their owner. Required.
	PickErrors    *prometheus.CounterVec
	BackendErrors prometheus.Counter
	// Shed is the counter of connections refused at once in global
	// overload, by service and reason, shared with the HTTP proxy
	// (httpproxy.NewShed) and registered by its owner; nil counts them
	// only in spillway_gfe_tcp_connections_total{result="shed"}.
	Shed *prometheus.CounterVec
	// Budget, when set, is the process's file-descriptor budget of client
	// connections (fdlimit), shared with the http listeners: each proxied
	// connection takes ConnFDs of it from its arrival to its end, and a
	// connection it cannot cover is refused.
	Budget *fdlimit.Budget
}

// ConnFDs is what one proxied tcp connection takes from the fd budget: its
// client and its backend socket.
const ConnFDs = 2

// Proxy is the state the tcp listeners of one gfe share: the count of open
// connections per service (for the planner's demand) and the metrics. Safe
// for concurrent use; must not be copied.
type Proxy struct {
	// Immutable after New.
	cfg     Config
	state   State
	log     zerolog.Logger
	clk     clock.Clock
	rand    func() uint64
	dial    DialFunc
	metrics *tcpMetrics
	// pickErrors and backendErrors are shared with the HTTP proxy.
	pickErrors    *prometheus.CounterVec
	backendErrors prometheus.Counter
	shed          *prometheus.CounterVec // nil: not counted there
	budget        *fdlimit.Budget
	// refuseLog is log sampled to one line a second per Proxy: refusals
	// come in floods.
	refuseLog zerolog.Logger
	// bufs recycles the copy buffers of connections with an idle timeout
	// (the others splice in the kernel and need none): *[copyBufferSize]byte.
	bufs sync.Pool

	// Guarded by mu.
	mu        sync.Mutex
	open      map[string]int            // service -> its open connections
	listeners map[*tcpListener]struct{} // the listeners serving now

	// lastSweep is the clock time of the last idle/first-byte sweep of any
	// listener, in UnixNano (for tests). Accessed atomically.
	lastSweepNano atomic.Int64

	// Owned by the planner goroutine (Demand).
	smooth map[string]*ewma.Level // service -> smoothed open connections
}

// New returns a Proxy.
func New(cfg Config, opts Options) (*Proxy, error) {
	if opts.State == nil || opts.Rand == nil || opts.Dial == nil || opts.PickErrors == nil || opts.BackendErrors == nil {
		return nil, errors.New("tcpproxy: Options.State, Rand, Dial, PickErrors and BackendErrors are required")
	}
	return &Proxy{
		cfg:           cfg,
		state:         opts.State,
		log:           opts.Logger,
		clk:           clock.OrReal(opts.Clock),
		rand:          opts.Rand,
		dial:          opts.Dial,
		metrics:       newTCPMetrics(opts.Registry),
		pickErrors:    opts.PickErrors,
		backendErrors: opts.BackendErrors,
		shed:          opts.Shed,
		budget:        opts.Budget,
		refuseLog:     opts.Logger.Sample(&zerolog.BurstSampler{Burst: 1, Period: time.Second}),
		open:          map[string]int{},
		listeners:     map[*tcpListener]struct{}{},
		smooth:        map[string]*ewma.Level{},
	}, nil
}

// tcpMetrics are the TCP proxy's Prometheus metrics.
type tcpMetrics struct {
	open     *prometheus.GaugeVec   // service, backend
	accepted *prometheus.CounterVec // service, result
	closed   *prometheus.CounterVec // service, reason
	bytes    *prometheus.CounterVec // service, direction
	refused  *prometheus.CounterVec // listener, reason
}

func newTCPMetrics(reg prometheus.Registerer) *tcpMetrics {
	m := &tcpMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_tcp_open_connections",
			Help: "Client TCP connections proxied now by the tcp listeners, by service and backend address.",
		}, []string{"service", "backend"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_tcp_connections_total",
			Help: "Client TCP connections accepted by the tcp listeners, by service and result (proxied, no_service, shed, no_backend, busy, dial_error, draining).",
		}, []string{"service", "result"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_tcp_closed_total",
			Help: "Proxied TCP connections that ended, by service and reason (client or backend: that side finished or failed first; unhealthy: the backend became unavailable; idle: the listener's idle_timeout; first_byte: the client sent nothing within first_byte_timeout; drain: shutdown).",
		}, []string{"service", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_tcp_bytes_total",
			Help: "Bytes relayed by the tcp listeners, by service and direction (to_backend, to_client), counted when each direction of a connection ends.",
		}, []string{"service", "direction"}),
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_gfe_tcp_refused_total",
		Help: "Client TCP connections closed (reset) as they arrived, before any backend was dialled, by listener and reason (listener_limit: the listener's max_connections; client_limit: the client address's max_connections_per_client; fd_budget: the process's file-descriptor budget).",
	}, []string{"listener", "reason"})
	if reg != nil {
		reg.MustRegister(m.open, m.accepted, m.closed, m.bytes, m.refused)
	}
	return m
}

// count adds d to the open connections of c's service and backend.
func (x *Proxy) count(c *tcpConn, d int) {
	x.mu.Lock()
	x.open[c.service] += d
	x.mu.Unlock()
	x.metrics.open.WithLabelValues(c.service, c.pick.Backend.Addr()).Add(float64(d))
}

// connect picks a backend of svc for a new connection and dials it. When the
// pick finds every backend it may use busy, a planned policy spills to the
// nearest backend with a free slot (rule 4, enforced locally before the plan
// catches up). A failed dial is retried once on another backend. The
// returned pick holds a slot of its backend. Every dial counts on its
// backend for the closed loop: its connect time, or a failure.
func (x *Proxy) connect(ctx context.Context, svc *routing.Service, k routing.Flow) (routing.Pick, net.Conn, error) {
	var failed string
	var lastErr error
	for range 2 {
		pk, err := x.pick(svc, k, failed)
		if err != nil {
			if lastErr != nil {
				return routing.Pick{}, nil, fmt.Errorf("dial %s: %w", failed, lastErr)
			}
			return routing.Pick{}, nil, err
		}
		addr := pk.Backend.Addr()
		t0 := time.Now() // network time: the real clock, as the RTT prober's
		up, err := x.dial(ctx, "tcp", addr)
		if err == nil {
			// The connect time is the answer's latency for the closed
			// loop (a backend whose accept queue fills connects slowly).
			lat := time.Since(t0)
			pk.Backend.Observe(backend.OutcomeOK, lat)
			pk.ObserveLatency(x.clk.Now(), lat)
			return pk, up, nil
		}
		if ctx.Err() == nil {
			pk.Backend.Observe(backend.OutcomeFailed, 0)
		}
		pk.Done()
		x.backendErrors.Inc()
		failed, lastErr = addr, err
	}
	return routing.Pick{}, nil, fmt.Errorf("dial %s: %w", failed, lastErr)
}

// pick chooses a backend by svc's policy, avoiding the backend exclude (one
// that just failed to dial; "" for none).
func (x *Proxy) pick(svc *routing.Service, k routing.Flow, exclude string) (routing.Pick, error) {
	pk, err := svc.Pick(x.rand(), k)
	switch {
	case err == nil && pk.Backend.Addr() != exclude:
		return pk, nil
	case err == nil:
		pk.Done()
		return svc.NearestFree(x.state.RTT(), exclude, pk.Reason)
	case errors.Is(err, routing.ErrAllBusy) && svc.Config().Policy.IsPlanned():
		return svc.NearestFree(x.state.RTT(), exclude, routing.ReasonSpillCapacity)
	}
	return routing.Pick{}, err
}

// Demand replaces, in demand, the figure of every service a tcp listener
// of cs serves: a CONNECTION-mode service's capacity counts concurrent
// connections, so its demand is this node's open connections, smoothed
// with time constant DemandSmoothing. Called only from the planner
// goroutine.
func (x *Proxy) Demand(now time.Time, cs *snapshot.Snapshot, demand map[string]float64) {
	if cs == nil {
		return
	}
	tau := x.cfg.DemandSmoothing
	served := map[string]bool{}
	for _, l := range cs.Config.Listeners {
		if l.Protocol != config.ListenerTCP || served[l.Service] {
			continue
		}
		if _, ok := cs.Config.Service(l.Service); !ok {
			continue
		}
		served[l.Service] = true
		x.mu.Lock()
		open := x.open[l.Service]
		x.mu.Unlock()
		s := x.smooth[l.Service]
		if s == nil {
			s = &ewma.Level{Tau: tau, FastAttack: true}
			x.smooth[l.Service] = s
		}
		demand[l.Service] = s.Sample(now, float64(open))
	}
	for name := range x.smooth {
		if !served[name] {
			delete(x.smooth, name)
		}
	}
}

// lastSweep returns the clock time of the last sweep of any listener.
func (x *Proxy) lastSweep() time.Time { return time.Unix(0, x.lastSweepNano.Load()) }

// admittedFrom returns the connections client holds on every listener.
func (x *Proxy) admittedFrom(client netip.Addr) int {
	x.mu.Lock()
	lns := make([]*tcpListener, 0, len(x.listeners))
	for tl := range x.listeners {
		lns = append(lns, tl)
	}
	x.mu.Unlock()
	n := 0
	for _, tl := range lns {
		tl.mu.Lock()
		n += tl.byClient[client]
		tl.mu.Unlock()
	}
	return n
}
