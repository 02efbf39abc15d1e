package listeners

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/fdlimit"
)

// defaultListenerName names the --listen listener in logs and metrics.
const defaultListenerName = "listen"

// TCPServer serves the connections of a tcp listener (tcpproxy.Proxy).
type TCPServer interface {
	// Serve accepts connections on ln for listener l until ctx ends or ln
	// is closed, then drains them; it returns once every connection's
	// goroutines have exited.
	Serve(ctx context.Context, ln net.Listener, l *config.Listener) error
}

// Streams ends the long-lived streams of the HTTP proxy at shutdown
// (httpproxy.Proxy): http.Server.Shutdown does not wait for hijacked
// connections.
type Streams interface {
	// EndAllStreams ends every tracked stream and returns how many.
	EndAllStreams() int
}

// Config is what an operator sets for the listeners.
type Config struct {
	// Listen is the address of the default http listener; configured
	// listeners bind its host at their own ports.
	Listen string
	// DrainTimeout bounds how long a removed or changed listener's
	// connections, and every connection at shutdown, may take to finish.
	DrainTimeout time.Duration
	// CertCheckInterval is how often certificate files are checked for
	// changes and failed binds retried. Must be > 0.
	CertCheckInterval time.Duration
	// MaxEarlyResets is the HTTP/2 reset budget of a client connection: a
	// connection whose client has reset more than this many streams before
	// their answer ended, and more than half of all its streams, is closed
	// (rapid reset, CVE-2023-44487; see protect.go). Zero means
	// DefaultMaxEarlyResets (100); negative disables the budget. A
	// legitimate client cancels a few of its streams; an attacker resets
	// nearly all of them.
	MaxEarlyResets int
	// MaxClientEarlyResets is the HTTP/2 reset budget of a client IP
	// address over all its connections (resets.go): early resets of its
	// connections that reset more than half their streams are charged to
	// it, decaying by half every ClientResetHalfLife; past this many its
	// HTTP/2 connections are closed, at their next stream, until the
	// charge has decayed below half of it. It cuts a rapid reset spread
	// over connections under MaxEarlyResets each. Zero means
	// DefaultMaxClientEarlyResets (200), at most 1000000; negative
	// disables it.
	MaxClientEarlyResets int
	// ClientResetHalfLife is how fast a client address's reset charge
	// decays: it halves every ClientResetHalfLife. Zero means
	// DefaultClientResetHalfLife (30s); in [1s, 1h] otherwise.
	ClientResetHalfLife time.Duration
	// FastPath turns on the fast path of the --listen listener
	// (config.Listener.FastPath) while no configured listener takes its
	// port.
	FastPath bool
}

// Options are the listeners' dependencies.
type Options struct {
	// HTTP handles the requests of http and https listeners. Required.
	HTTP http.Handler
	// TCP serves tcp listeners. Required when the config has any.
	TCP TCPServer
	// Streams, when set, is told to end its streams at shutdown.
	Streams Streams
	// Logger receives the listeners' logs. The zero Logger discards them.
	Logger zerolog.Logger
	// Clock drives the certificate checks and accept back-off; nil means
	// the real clock.
	Clock clock.Clock
	// Registry receives the listeners' metrics; nil registers them nowhere.
	Registry prometheus.Registerer
	// Fast serves the requests of http listeners with fast_path
	// (httpproxy.Proxy); nil serves every listener with net/http.
	Fast FastHandler
	// Budget, when set, is the file-descriptor budget of client
	// connections (fdlimit): an http or https listener takes ConnFDs of
	// it for each connection it accepts, and stops
	// accepting while it has no room (tcp listeners take theirs in the
	// tcp proxy, which refuses instead).
	Budget *fdlimit.Budget
	// ConnFDs is what one http or https client connection takes from
	// Budget: 1 or 2. Default 0: HTTPConnFDs.
	ConnFDs int
	// Serving, when set, is closed once the gfe can route (its first
	// routing table). Until then no listener accepts: connections wait in
	// the kernel's listen backlog, so a client of a gfe that has just
	// started waits for its first snapshot instead of getting a 503.
	Serving <-chan struct{}
}

// HTTPConnFDs is what one http or https client connection takes from the
// fd budget by default: its own descriptor and one for the backend
// connection it typically keeps busy. A gfe whose clients hold mostly idle
// keep-alive connections (which keep no backend connection busy) may
// count 1 (Options.ConnFDs, gfe --fd-per-http-conn): then a budget of B
// holds B connections instead of B/2, and the reserve must cover the
// backend connections of those that are busy at once.
const HTTPConnFDs = 2

// connFDs returns Options.ConnFDs or its default.
func (m *Manager) connFDs() int64 {
	if m.opts.ConnFDs > 0 {
		return int64(m.opts.ConnFDs)
	}
	return HTTPConnFDs
}

// Manager owns the gfe's client-facing sockets and their servers. Its
// methods are safe for concurrent use. Must not be copied.
type Manager struct {
	// Immutable after New.
	cfg     Config
	opts    Options
	clk     clock.Clock
	log     zerolog.Logger
	metrics *listenerMetrics
	// resets is the client reset budget; nil when disabled.
	resets  *clientResets
	host    string // host of Config.Listen
	defPort int    // port of Config.Listen (0: any)
	errLog  *log.Logger
	// budgetLog is log sampled to one line a second, for the fd budget.
	budgetLog zerolog.Logger

	// wg counts the goroutines the manager started: accept loops, servers,
	// and servers draining after a change. shutdown waits for them.
	wg sync.WaitGroup
	// hardStop ends whatever is still draining when shutdown's deadline
	// passes (or the manager never started).
	hardStop       context.Context
	hardStopCancel context.CancelFunc

	mu sync.Mutex
	// Guarded by mu.
	want     []config.Listener   // configured listeners of the last applied config
	certs    map[string]*certSet // by listener name: the loaded certificates of want
	ports    map[int]*port       // by configured port (the default listener: defPort)
	started  bool
	stopping bool
}

// port is one bound socket and the server generation that serves it.
type port struct {
	ln       net.Listener
	name     string // listener name, for logs; guarded by Manager.mu
	accepted prometheus.Counter
	certs    certStore // https: shared by every generation of the port
	// clients counts the open http and https connections by client
	// address, over the port's generations (accept.go).
	clients clientConns
	// malformed counts the HTTP/1.x heads strictRequests refused.
	malformed prometheus.Counter

	// cur is the generation new connections go to. Written under
	// Manager.mu, read by the accept loop.
	cur atomic.Pointer[generation]

	// stop ends when the port is closed (or at the manager's hard stop),
	// releasing an accept loop that waits for fd budget.
	stop   context.Context
	cancel context.CancelFunc
}

// generation is one server of a port, with the settings it started with.
// A port changes settings by starting a new generation and retiring the old.
type generation struct {
	spec config.Listener
	ln   *handoffListener
	srv  *http.Server // http, https
	// conns tracks srv's connections (idle ones, how many are open).
	conns *httpConns
	// fast is the fast path of an http listener with fast_path, nil
	// otherwise.
	fast *fastServer
	// tcp: ctx ends the listener's connections; cancel when done draining.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the generation's Serve returns
}

// New returns a Manager for cfg. It binds nothing until Start.
func New(cfg Config, opts Options) (*Manager, error) {
	if opts.HTTP == nil {
		return nil, errors.New("listeners: Options.HTTP is required")
	}
	host, p, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", cfg.Listen, err)
	}
	defPort, err := net.LookupPort("tcp", p)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", cfg.Listen, err)
	}
	if cfg.MaxClientEarlyResets > maxClientEarlyResets {
		return nil, fmt.Errorf("listeners: MaxClientEarlyResets must be at most %d, got %d", maxClientEarlyResets, cfg.MaxClientEarlyResets)
	}
	if h := cfg.ClientResetHalfLife; h != 0 && (h < time.Second || h > time.Hour) {
		return nil, fmt.Errorf("listeners: ClientResetHalfLife must be 0 (default) or in [1s, 1h], got %v", h)
	}
	m := &Manager{
		cfg:     cfg,
		opts:    opts,
		clk:     clock.OrReal(opts.Clock),
		log:     opts.Logger.With().Str("component", "listeners").Logger(),
		metrics: newListenerMetrics(opts.Registry),
		host:    host,
		defPort: defPort,
		certs:   map[string]*certSet{},
		ports:   map[int]*port{},
	}
	if cfg.MaxClientEarlyResets >= 0 {
		max, half := cfg.MaxClientEarlyResets, cfg.ClientResetHalfLife
		if max == 0 {
			max = DefaultMaxClientEarlyResets
		}
		if half == 0 {
			half = DefaultClientResetHalfLife
		}
		m.resets = newClientResets(max, half, m.clk)
	}
	m.errLog = log.New(serverLogWriter{m.log}, "", 0)
	m.budgetLog = m.log.Sample(&zerolog.BurstSampler{Burst: 1, Period: time.Second})
	m.hardStop, m.hardStopCancel = context.WithCancel(context.Background())
	return m, nil
}

// serverLogWriter sends net/http's server log lines (TLS handshake errors,
// panics) to zerolog at debug level: they are mostly client noise.
type serverLogWriter struct{ log zerolog.Logger }

func (w serverLogWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Apply makes ls the configured listeners. It loads the certificates of
// every https listener first (reusing those whose files have not changed)
// and returns an error, changing nothing, when any cannot be loaded. Once
// the manager runs it reconciles the sockets at once.
func (m *Manager) Apply(ls []config.Listener) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	certs := map[string]*certSet{}
	var errs []error
	for i, l := range ls {
		if l.Protocol != config.ListenerHTTPS {
			continue
		}
		set, err := loadCertSet(fmt.Sprintf("listeners[%d]", i), l.Certificates, m.certs[l.Name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		certs[l.Name] = set
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.want, m.certs = ls, certs
	if m.started && !m.stopping {
		m.reconcileLocked()
	}
	return nil
}

// Start binds the --listen port (an error is returned) and every
// configured listener (errors are logged and retried on each tick), and
// starts serving them.
func (m *Manager) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	def := m.desiredLocked()[m.defPort]
	if _, err := m.openLocked(m.defPort, def); err != nil {
		return err
	}
	m.started = true
	m.reconcileLocked()
	return nil
}

// Run re-checks certificate files and retries failed binds every
// CertCheckInterval until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	t := m.clk.NewTicker(m.cfg.CertCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			m.Check()
		}
	}
}

// Check reloads the certificates whose files changed and reconciles the
// sockets (retrying failed binds), as Run does every CertCheckInterval.
func (m *Manager) Check() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return
	}
	for i, l := range m.want {
		if l.Protocol != config.ListenerHTTPS {
			continue
		}
		old := m.certs[l.Name]
		if old != nil && !old.changed() {
			continue
		}
		set, err := loadCertSet(fmt.Sprintf("listeners[%d]", i), l.Certificates, old)
		if err != nil {
			m.metrics.certReloads.WithLabelValues(l.Name, "failure").Inc()
			m.log.Warn().Err(err).Str("listener", l.Name).Msg("certificate files changed but cannot be loaded; keeping the previous certificates")
			continue
		}
		m.metrics.certReloads.WithLabelValues(l.Name, "success").Inc()
		m.log.Info().Str("listener", l.Name).Msg("certificates reloaded")
		m.certs[l.Name] = set
	}
	m.reconcileLocked()
}

// desiredLocked returns the listener every port should serve: the default
// listener on defPort, replaced by a configured listener on the same port,
// and every configured listener. Caller must hold m.mu.
func (m *Manager) desiredLocked() map[int]config.Listener {
	def := config.DefaultListener(config.ListenerHTTP)
	def.Name, def.Port, def.FastPath = defaultListenerName, m.defPort, m.cfg.FastPath
	want := map[int]config.Listener{m.defPort: def}
	for _, l := range m.want {
		want[l.Port] = l
	}
	return want
}

// reconcileLocked brings the ports in line with desiredLocked. Caller must
// hold m.mu.
func (m *Manager) reconcileLocked() {
	want := m.desiredLocked()
	for key, p := range m.ports {
		if _, ok := want[key]; !ok {
			m.closePortLocked(key, p)
		}
	}
	for key, l := range want {
		p := m.ports[key]
		if p == nil {
			var err error
			if p, err = m.openLocked(key, l); err != nil {
				m.metrics.bindErrors.WithLabelValues(l.Name).Inc()
				m.log.Error().Err(err).Str("listener", l.Name).Msg("cannot bind listener; retrying")
			}
			continue
		}
		if l.Protocol == config.ListenerHTTPS {
			p.certs.cur.Store(m.certs[l.Name])
		}
		if g := p.cur.Load(); g == nil || !sameServing(g.spec, l) {
			m.startGenerationLocked(p, l)
		}
	}
}

// sameServing reports whether a and b serve the same way apart from their
// certificates (which are swapped without a new generation).
func sameServing(a, b config.Listener) bool {
	a.Certificates, b.Certificates = nil, nil
	return reflect.DeepEqual(a, b)
}

// openLocked binds the socket for key and starts serving l on it. Caller
// must hold m.mu.
func (m *Manager) openLocked(key int, l config.Listener) (*port, error) {
	addr := net.JoinHostPort(m.host, strconv.Itoa(key))
	ln, err := listenTCP(addr)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", l.Name, err)
	}
	p := &port{ln: ln, name: l.Name, accepted: m.metrics.accepted.WithLabelValues(l.Name), malformed: m.metrics.malformed.WithLabelValues(l.Name)}
	p.stop, p.cancel = context.WithCancel(m.hardStop)
	m.ports[key] = p
	if l.Protocol == config.ListenerHTTPS {
		p.certs.cur.Store(m.certs[l.Name])
	}
	m.startGenerationLocked(p, l)
	// After the first generation is set: the accept loop reads its
	// protocol for the fd budget.
	m.wg.Add(1)
	go m.acceptLoop(p)
	m.log.Info().Str("listener", l.Name).Str("protocol", string(l.Protocol)).Str("addr", ln.Addr().String()).Msg("listening")
	return p, nil
}

// closePortLocked stops accepting on p (new connections are refused) and
// drains its generation. Caller must hold m.mu.
func (m *Manager) closePortLocked(key int, p *port) {
	delete(m.ports, key)
	p.cancel()
	p.ln.Close()
	if g := p.cur.Swap(nil); g != nil {
		m.retire(g)
	}
	m.log.Info().Str("listener", p.name).Str("addr", p.ln.Addr().String()).Msg("listener removed")
}

// startGenerationLocked starts serving l on p and retires the previous
// generation. Caller must hold m.mu.
func (m *Manager) startGenerationLocked(p *port, l config.Listener) {
	g := &generation{spec: l, ln: newHandoffListener(p.ln.Addr()), done: make(chan struct{})}
	switch l.Protocol {
	case config.ListenerHTTP, config.ListenerHTTPS:
		g.srv = m.newServer(p, l)
		g.conns = newHTTPConns()
		g.srv.ConnState = g.conns.connState
		if l.FastPath {
			if m.opts.Fast != nil {
				g.fast = m.newFastServer(p, l)
			} else {
				m.log.Warn().Err(errNoFastHandler).Str("listener", l.Name).Send()
			}
		}
		if l.Protocol == config.ListenerHTTPS {
			if g.fast == nil {
				// Without the fast path too the gfe does the handshakes,
				// so that an HTTP/1.1 connection reaches net/http in the
				// clear, for strictRequests (strict.go).
				g.fast = m.newFastServer(p, l)
				g.fast.handoffAll = true
			}
			// The fast path does the handshakes (fast.go); the server
			// gets *tls.Conn and serves h2 by their ALPN.
			g.srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
			g.fast.tls = g.srv.TLSConfig.Clone() // net/http edits its own at Serve
		}
	case config.ListenerTCP:
		g.ctx, g.cancel = context.WithCancel(m.hardStop)
	}
	old := p.cur.Swap(g)
	p.name = l.Name
	m.wg.Add(1)
	go m.serve(g)
	if old != nil {
		m.retire(old)
		m.log.Info().Str("listener", l.Name).Msg("listener settings changed; old connections drain")
	}
}

// newServer returns the HTTP server of listener l on p.
func (m *Manager) newServer(p *port, l config.Listener) *http.Server {
	srv := &http.Server{
		Handler:           limitBody(m.protect(m.opts.HTTP, l, m.metrics.resetClosed.WithLabelValues(l.Name), m.metrics.clientResetClosed.WithLabelValues(l.Name), m.metrics.ageClosed.WithLabelValues(l.Name), m.metrics.malformed.WithLabelValues(l.Name)), l.MaxRequestBodyBytes),
		ConnContext:       m.connContext(l),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          m.errLog,
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	if l.Protocol == config.ListenerHTTPS {
		srv.Protocols.SetHTTP2(true)
		srv.TLSConfig = p.certs.tlsConfig()
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	return srv
}

// serve runs generation g until it is retired.
func (m *Manager) serve(g *generation) {
	defer m.wg.Done()
	defer close(g.done)
	var err error
	switch g.spec.Protocol {
	case config.ListenerHTTP:
		err = g.srv.Serve(g.ln)
	case config.ListenerHTTPS:
		if g.fast != nil {
			err = g.srv.Serve(g.ln) // the fast path handed over *tls.Conn
			break
		}
		err = g.srv.ServeTLS(g.ln, "", "")
	case config.ListenerTCP:
		if m.opts.TCP == nil {
			err = errors.New("no tcp server")
			break
		}
		err = m.opts.TCP.Serve(g.ctx, g.ln, &g.spec)
	}
	// The handoff listener is closed before the server is shut down, so
	// Serve may see it closed first.
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		m.log.Error().Err(err).Str("listener", g.spec.Name).Msg("listener stopped")
	}
}

// retire stops g from accepting and lets its connections finish within
// DrainTimeout (or until the manager's hard stop), then closes what is
// left. It does not block.
func (m *Manager) retire(g *generation) {
	g.ln.Close()
	m.wg.Add(1)
	go m.drain(g)
}

// drain waits for retired generation g's connections to finish.
func (m *Manager) drain(g *generation) {
	defer m.wg.Done()
	ctx, cancel := context.WithTimeout(m.hardStop, m.cfg.DrainTimeout)
	defer cancel()
	m.drainUntil(ctx, g)
}

// drainUntil shuts g down gracefully, and forcibly when ctx ends first:
// what is still busy then is closed (its requests end, their backend
// requests are cancelled), counted in spillway_gfe_drain_cut_connections_total.
// It returns how many http and https connections were closed so (a tcp
// listener's drain is the tcp proxy's, which logs its own).
func (m *Manager) drainUntil(ctx context.Context, g *generation) int {
	if g.srv != nil {
		fastCut := make(chan int, 1)
		if g.fast != nil {
			go func() { fastCut <- g.fast.shutdown(ctx) }()
		} else {
			fastCut <- 0
		}
		cut := 0
		if err := g.srv.Shutdown(ctx); err != nil {
			cut = g.conns.open()
			g.srv.Close()
		}
		cut += <-fastCut
		if cut > 0 {
			m.metrics.drainCut.WithLabelValues(g.spec.Name).Add(float64(cut))
			m.log.Warn().Str("listener", g.spec.Name).Int("connections", cut).Dur("drain_timeout", m.cfg.DrainTimeout).
				Msg("drain timeout passed: closed the connections still busy")
		}
		return cut
	}
	// tcp: the listener is closed; TCPServer.Serve returns once its connections
	// are done, or when its context ends.
	g.ln.Close()
	defer g.cancel()
	select {
	case <-g.done:
	case <-ctx.Done():
		g.cancel()
		<-g.done
	}
	return 0
}

// Shutdown drains every listener: sockets close at once (new connections
// are refused), in-flight requests finish until ctx ends, then whatever is
// left is closed, upgraded connections included. Closing what is left is
// the drain's bound working, not a failure: a client that holds a request
// open (a stream, a backend that never answers) delays the shutdown by at
// most ctx's time and does not make it fail. It returns once every
// connection is closed, and nil.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	var gens []*generation
	for key, p := range m.ports {
		delete(m.ports, key)
		p.cancel()
		p.ln.Close()
		if g := p.cur.Swap(nil); g != nil {
			g.ln.Close()
			gens = append(gens, g)
		}
	}
	m.mu.Unlock()

	var wg sync.WaitGroup
	for _, g := range gens {
		wg.Go(func() { m.drainUntil(ctx, g) })
	}
	wg.Wait()
	// Hijacked (upgraded) connections are not waited for by Shutdown: end
	// them now, and anything still draining from earlier changes.
	n := 0
	if m.opts.Streams != nil {
		n = m.opts.Streams.EndAllStreams()
	}
	m.hardStopCancel()
	m.wg.Wait()
	if n > 0 {
		m.log.Info().Int("streams", n).Msg("closed upgraded and streaming connections")
	}
	return nil
}

// DefaultAddr returns the bound address of Config.Listen (its real port
// when Config.Listen asks for port 0), or nil before Start has bound it.
func (m *Manager) DefaultAddr() net.Addr { return m.addr(m.defPort) }

// addr returns the bound address of the port with key, or nil.
func (m *Manager) addr(key int) net.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.ports[key]; p != nil {
		return p.ln.Addr()
	}
	return nil
}
