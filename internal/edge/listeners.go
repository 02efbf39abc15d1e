package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
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
)

// Listeners.
//
// The gfe serves its --listen address (Config.Listen) as an http listener
// with the defaults of config.DefaultListener, plus every listener of the
// control state's Config.Listeners, each on its port at the host of
// --listen. A configured listener whose port is that of --listen takes that
// socket over (its protocol and limits replace the defaults).
//
// Listeners change at runtime with the control state. The listenerManager
// reconciles on every applied snapshot, and on a slow tick:
//
//   - a new port is bound (a bind failure is logged and retried each tick);
//   - a removed port stops accepting at once (new connections are refused)
//     while its open connections finish, gracefully, within DrainTimeout;
//   - a port whose settings change (protocol, timeouts, limits) keeps its
//     socket: a new server generation takes over accepting and the old one
//     drains its connections, so no connection is refused or cut;
//   - certificates are swapped in place: every TLS handshake reads the live
//     set (certStore), so established connections keep theirs. Certificate
//     files are read again when their modification time or size changes,
//     checked on every reconcile and every CertCheckInterval.
//
// A snapshot whose certificates cannot be loaded is rejected (NACKed) and
// changes nothing; a certificate file that turns bad later is logged and
// the previous certificate keeps serving.

// listenerMetrics are the listener manager's Prometheus metrics.
type listenerMetrics struct {
	accepted      *prometheus.CounterVec
	certReloads   *prometheus.CounterVec
	bindErrors    *prometheus.CounterVec
	streamsClosed prometheus.Counter
}

func newListenerMetrics(reg prometheus.Registerer) *listenerMetrics {
	m := &listenerMetrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_listener_connections_total",
			Help: "Client connections accepted, by listener.",
		}, []string{"listener"}),
		certReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_certificate_reloads_total",
			Help: "Certificate sets loaded because their files changed, by listener and result (success, failure).",
		}, []string{"listener", "result"}),
		bindErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_listener_bind_errors_total",
			Help: "Failed attempts to bind a listener's port, by listener.",
		}, []string{"listener"}),
		streamsClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_gfe_streams_closed_total",
			Help: "Long-lived streams (gRPC calls, WebSockets) ended because their backend became unavailable.",
		}),
	}
	reg.MustRegister(m.accepted, m.certReloads, m.bindErrors, m.streamsClosed)
	return m
}

// defaultListenerName names the --listen listener in logs and metrics.
const defaultListenerName = "listen"

// listenerManager owns the gfe's client-facing sockets and their servers.
// Must not be copied.
type listenerManager struct {
	// Immutable after newListenerManager.
	e       *Edge
	log     zerolog.Logger
	metrics *listenerMetrics
	host    string // host of Config.Listen
	defPort int    // port of Config.Listen (0: any)
	errLog  *log.Logger

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
	name     string // listener name, for logs; guarded by listenerManager.mu
	accepted prometheus.Counter
	certs    certStore // https: shared by every generation of the port

	// cur is the generation new connections go to. Written under
	// listenerManager.mu, read by the accept loop.
	cur atomic.Pointer[generation]
}

// generation is one server of a port, with the settings it started with.
// A port changes settings by starting a new generation and retiring the old.
type generation struct {
	spec config.Listener
	ln   *handoffListener
	srv  *http.Server // http, https
	// tcp: ctx ends the listener's connections; cancel when done draining.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the generation's Serve returns
}

func newListenerManager(e *Edge, reg prometheus.Registerer) (*listenerManager, error) {
	host, p, err := net.SplitHostPort(e.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("gfe.listen: %w", err)
	}
	defPort, err := net.LookupPort("tcp", p)
	if err != nil {
		return nil, fmt.Errorf("gfe.listen: %w", err)
	}
	m := &listenerManager{
		e:       e,
		log:     e.log.With().Str("component", "listeners").Logger(),
		metrics: newListenerMetrics(reg),
		host:    host,
		defPort: defPort,
		certs:   map[string]*certSet{},
		ports:   map[int]*port{},
	}
	m.errLog = log.New(serverLogWriter{m.log}, "", 0)
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

// apply makes ls the configured listeners. It loads the certificates of
// every https listener first (reusing those whose files have not changed)
// and returns an error, changing nothing, when any cannot be loaded. Once
// the manager runs it reconciles the sockets at once.
func (m *listenerManager) apply(ls []config.Listener) error {
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

// start binds the --listen port (an error is returned) and every
// configured listener (errors are logged and retried on each tick), and
// starts serving them.
func (m *listenerManager) start() error {
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

// run re-checks certificate files and retries failed binds every
// CertCheckInterval until ctx ends.
func (m *listenerManager) run(ctx context.Context) error {
	t := m.e.clk.NewTicker(m.e.cfg.CertCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			m.tick()
		}
	}
}

// tick reloads certificates whose files changed and reconciles.
func (m *listenerManager) tick() {
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
func (m *listenerManager) desiredLocked() map[int]config.Listener {
	def := config.DefaultListener(config.ListenerHTTP)
	def.Name, def.Port = defaultListenerName, m.defPort
	want := map[int]config.Listener{m.defPort: def}
	for _, l := range m.want {
		want[l.Port] = l
	}
	return want
}

// reconcileLocked brings the ports in line with desiredLocked. Caller must
// hold m.mu.
func (m *listenerManager) reconcileLocked() {
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
func (m *listenerManager) openLocked(key int, l config.Listener) (*port, error) {
	addr := net.JoinHostPort(m.host, strconv.Itoa(key))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", l.Name, err)
	}
	p := &port{ln: ln, name: l.Name, accepted: m.metrics.accepted.WithLabelValues(l.Name)}
	m.ports[key] = p
	if l.Protocol == config.ListenerHTTPS {
		p.certs.cur.Store(m.certs[l.Name])
	}
	m.wg.Add(1)
	go m.acceptLoop(p)
	m.startGenerationLocked(p, l)
	m.log.Info().Str("listener", l.Name).Str("protocol", string(l.Protocol)).Str("addr", ln.Addr().String()).Msg("listening")
	return p, nil
}

// closePortLocked stops accepting on p (new connections are refused) and
// drains its generation. Caller must hold m.mu.
func (m *listenerManager) closePortLocked(key int, p *port) {
	delete(m.ports, key)
	p.ln.Close()
	if g := p.cur.Swap(nil); g != nil {
		m.retire(g)
	}
	m.log.Info().Str("listener", p.name).Str("addr", p.ln.Addr().String()).Msg("listener removed")
}

// startGenerationLocked starts serving l on p and retires the previous
// generation. Caller must hold m.mu.
func (m *listenerManager) startGenerationLocked(p *port, l config.Listener) {
	g := &generation{spec: l, ln: newHandoffListener(p.ln.Addr()), done: make(chan struct{})}
	switch l.Protocol {
	case config.ListenerHTTP, config.ListenerHTTPS:
		g.srv = m.newServer(p, l)
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
func (m *listenerManager) newServer(p *port, l config.Listener) *http.Server {
	srv := &http.Server{
		Handler:           limitBody(m.e.proxy, l.MaxRequestBodyBytes),
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
func (m *listenerManager) serve(g *generation) {
	defer m.wg.Done()
	defer close(g.done)
	var err error
	switch g.spec.Protocol {
	case config.ListenerHTTP:
		err = g.srv.Serve(g.ln)
	case config.ListenerHTTPS:
		err = g.srv.ServeTLS(g.ln, "", "")
	case config.ListenerTCP:
		err = m.e.serveTCP(g.ctx, g.ln, &g.spec)
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
func (m *listenerManager) retire(g *generation) {
	g.ln.Close()
	m.wg.Add(1)
	go m.drain(g)
}

// drain waits for retired generation g's connections to finish.
func (m *listenerManager) drain(g *generation) {
	defer m.wg.Done()
	ctx, cancel := context.WithTimeout(m.hardStop, m.e.cfg.DrainTimeout)
	defer cancel()
	m.drainUntil(ctx, g)
}

// drainUntil shuts g down gracefully, and forcibly when ctx ends first. It
// reports whether every connection finished in time.
func (m *listenerManager) drainUntil(ctx context.Context, g *generation) bool {
	if g.srv != nil {
		if err := g.srv.Shutdown(ctx); err != nil {
			g.srv.Close()
			return false
		}
		return true
	}
	// tcp: the listener is closed; serveTCP returns once its connections
	// are done, or when its context ends.
	g.ln.Close()
	defer g.cancel()
	select {
	case <-g.done:
		return true
	case <-ctx.Done():
		g.cancel()
		<-g.done
		return false
	}
}

// shutdown drains every listener: sockets close at once (new connections
// are refused), in-flight requests finish until ctx ends, then whatever is
// left is closed, upgraded connections included. It returns an error when
// ctx ended before every connection finished.
func (m *listenerManager) shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	var gens []*generation
	for key, p := range m.ports {
		delete(m.ports, key)
		p.ln.Close()
		if g := p.cur.Swap(nil); g != nil {
			g.ln.Close()
			gens = append(gens, g)
		}
	}
	m.mu.Unlock()

	var wg sync.WaitGroup
	var late atomic.Int32
	for _, g := range gens {
		wg.Go(func() {
			if !m.drainUntil(ctx, g) {
				late.Add(1)
			}
		})
	}
	wg.Wait()
	// Hijacked (upgraded) connections are not waited for by Shutdown: end
	// them now, and anything still draining from earlier changes.
	n := m.e.streams.endWhere(func(string) bool { return true })
	m.hardStopCancel()
	m.wg.Wait()
	if late.Load() > 0 {
		return fmt.Errorf("gfe: drain timeout: %d listeners had connections left", late.Load())
	}
	if n > 0 {
		m.log.Info().Int("streams", n).Msg("closed upgraded and streaming connections")
	}
	return nil
}

// acceptLoop accepts connections on p and hands each to p's current
// generation until p's socket is closed.
func (m *listenerManager) acceptLoop(p *port) {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or the like: back off as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.log.Warn().Err(err).Str("addr", p.ln.Addr().String()).Dur("retry_in", backoff).Msg("accept")
			t := m.e.clk.NewTimer(backoff)
			select {
			case <-t.C():
			case <-m.hardStop.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		p.accepted.Inc()
		p.handoff(c)
	}
}

// handoff gives c to p's current generation, or closes it when p has none.
func (p *port) handoff(c net.Conn) {
	for {
		g := p.cur.Load()
		if g == nil {
			c.Close()
			return
		}
		if g.ln.offer(c) {
			return
		}
		if p.cur.Load() == g {
			// Retired without a successor: the port is closing.
			c.Close()
			return
		}
	}
}

// handoffListener is the net.Listener a generation's server accepts from:
// its port's accept loop offers it connections. Closing it closes only the
// handoff, never the socket, so that the next generation takes over
// without a gap. Safe for concurrent use.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// offer hands c to a pending Accept; it returns false when h is closed.
func (h *handoffListener) offer(c net.Conn) bool {
	select {
	case h.conns <- c:
		return true
	case <-h.done:
		return false
	}
}

// Accept implements net.Listener.
func (h *handoffListener) Accept() (net.Conn, error) {
	select {
	case <-h.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (h *handoffListener) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

// Addr implements net.Listener.
func (h *handoffListener) Addr() net.Addr { return h.addr }

// limitBody returns next with request bodies limited to max bytes (0: no
// limit). A request that declares a longer body gets 413 at once. A body
// that turns out longer while it is forwarded (chunked, or HTTP/2 without
// a length) is cut at max; the request then fails upstream, and the error
// answer the proxy writes for it (5xx) becomes a 413.
func limitBody(next http.Handler, max int64) http.Handler {
	if max <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			w.Header().Set("Connection", "close")
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		body := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, max)}
		r.Body = body
		next.ServeHTTP(&limitedWriter{ResponseWriter: w, body: body}, r)
	})
}

// limitedBody is a request body under http.MaxBytesReader that remembers
// whether the limit was hit.
type limitedBody struct {
	io.ReadCloser
	exceeded atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if mbe := (*http.MaxBytesError)(nil); err != nil && errors.As(err, &mbe) {
		b.exceeded.Store(true)
	}
	return n, err
}

// limitedWriter turns the 5xx answer to a request whose body hit the limit
// into a 413. Unwrap gives http.ResponseController (and so ReverseProxy's
// flushes and upgrades) the underlying writer.
type limitedWriter struct {
	http.ResponseWriter
	body *limitedBody
}

func (w *limitedWriter) WriteHeader(code int) {
	if code >= 500 && w.body.exceeded.Load() {
		h := w.Header()
		h.Del("Content-Length")
		h.Set("Connection", "close")
		code = http.StatusRequestEntityTooLarge
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *limitedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// addr returns the bound address of the port with key, or nil.
func (m *listenerManager) addr(key int) net.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.ports[key]; p != nil {
		return p.ln.Addr()
	}
	return nil
}
