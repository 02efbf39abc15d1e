package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/ewma"
)

// The TCP proxy (DESIGN.md §4): a tcp listener terminates each client TCP
// connection, picks one backend of its CONNECTION-mode service with the
// service's table entry, opens its own connection to it from the gfe's
// SourceIP and copies bytes both ways until both sides are done.
//
// Guarantees:
//
//   - Connection persistence. A proxied connection keeps its backend for its
//     whole life. It is never re-dialled elsewhere: when its backend becomes
//     unavailable (the control state marks it unhealthy, or the service no
//     longer has it) both of its sides are closed, with a reset, so that the
//     client reconnects and the new connection is picked afresh. Plan changes
//     and spill move only new connections.
//   - A connection holds one concurrency slot of its backend (the slot the
//     pick took) until it ends, so an instance's max_concurrency caps its
//     open connections.
//   - A dial failure, which happens before any byte was relayed, is retried
//     once on another backend.
//   - Half-close: when one side finishes sending (EOF), the other side's
//     write half is closed and the opposite direction goes on; the
//     connection ends when both directions have. A read or write error on
//     either side closes both.
//   - The listener's IdleTimeout, when positive, closes a connection that
//     carried no byte in either direction for that long.
//   - Drain: when serveTCP's ctx ends (or its listener is closed) it stops
//     accepting; open connections may finish within DrainTimeout, after
//     which they are closed (at once, if ctx ends while a closed listener
//     drains).
//
// For the planner, a service that a tcp listener serves counts its demand
// in open connections (smoothed over
// DemandSmoothing), the unit of CONNECTION-mode capacity (observe).

// reapInterval is how often a tcp listener checks whether the control state
// changed, and if so closes the connections whose backend became
// unavailable. It bounds the delay between a health verdict reaching the gfe
// and the connections of that backend being closed.
const reapInterval = 50 * time.Millisecond

// dialFunc opens a connection to a backend (net.Dialer.DialContext).
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// tcpProxy is the state the tcp listeners of one Edge share: the count of
// open connections per service (for the planner's demand) and the metrics. Must not be copied.
type tcpProxy struct {
	// Immutable after newTCPProxy.
	e       *Edge
	dial    dialFunc
	metrics *tcpMetrics
	// bufs recycles the copy buffers of connections with an idle timeout
	// (the others splice in the kernel and need none).
	bufs bufferPool

	// Guarded by mu.
	mu   sync.Mutex
	open map[string]int // service -> its open connections

	// Owned by the planner goroutine (observe).
	smooth map[string]*ewma.Level // service -> smoothed open connections
}

func newTCPProxy(e *Edge, dial dialFunc) *tcpProxy {
	return &tcpProxy{
		e:       e,
		dial:    dial,
		metrics: newTCPMetrics(e.reg),
		open:    map[string]int{},
		smooth:  map[string]*ewma.Level{},
	}
}

// tcpMetrics are the TCP proxy's Prometheus metrics.
type tcpMetrics struct {
	open     *prometheus.GaugeVec   // service, backend
	accepted *prometheus.CounterVec // service, result
	closed   *prometheus.CounterVec // service, reason
	bytes    *prometheus.CounterVec // service, direction
}

func newTCPMetrics(reg prometheus.Registerer) *tcpMetrics {
	m := &tcpMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_tcp_open_connections",
			Help: "Client TCP connections proxied now by the tcp listeners, by service and backend address.",
		}, []string{"service", "backend"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_tcp_connections_total",
			Help: "Client TCP connections accepted by the tcp listeners, by service and result (proxied, no_service, no_backend, busy, dial_error, draining).",
		}, []string{"service", "result"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_tcp_closed_total",
			Help: "Proxied TCP connections that ended, by service and reason (client or backend: that side finished or failed first; unhealthy: the backend became unavailable; idle: the listener's idle timeout; drain: shutdown).",
		}, []string{"service", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_tcp_bytes_total",
			Help: "Bytes relayed by the tcp listeners, by service and direction (to_backend, to_client), counted when each direction of a connection ends.",
		}, []string{"service", "direction"}),
	}
	reg.MustRegister(m.open, m.accepted, m.closed, m.bytes)
	return m
}

// closeReason says why a proxied connection ended.
type closeReason int32

const (
	closeNone      closeReason = iota
	closeClient                // the client finished or failed first
	closeBackend               // the backend finished or failed first
	closeUnhealthy             // the backend became unavailable
	closeIdle                  // no byte for the listener's IdleTimeout
	closeDrain                 // the listener drained past DrainTimeout
)

var closeReasonNames = [...]string{"none", "client", "backend", "unhealthy", "idle", "drain"}

func (r closeReason) String() string { return closeReasonNames[r] }

// serveTCP accepts connections on ln, the socket of tcp listener l, and
// proxies each to a backend of l's service, until ctx ends or ln is closed.
// Then it stops accepting and drains: open connections get up to
// DrainTimeout to finish, after which the rest are closed. When ln was
// closed first (a retired listener), ctx ending during the drain closes
// the rest at once (the caller's hard stop). serveTCP returns once every
// connection's goroutines have exited: nil, or the error of an Accept that
// failed for another reason than ln being closed.
//
// Each new connection uses the table live when it arrives, and the entry of
// l's name in that table's config (so a reload that changes the listener's
// service or idle timeout applies to new connections); l is the fallback
// when the config has no such entry.
func (e *Edge) serveTCP(ctx context.Context, ln net.Listener, l *config.Listener) error {
	tl := &tcpListener{x: e.tcp, def: l, conns: map[*tcpConn]struct{}{}}
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() { tl.watch(ctx, ln, stop) })

	err := tl.acceptLoop(ctx, ln)
	ln.Close()
	var hardStop <-chan struct{}
	if ctx.Err() == nil {
		hardStop = ctx.Done()
	}
	tl.drain(hardStop)
	close(stop)
	watch.Wait()
	return err
}

// tcpListener is one running tcp listener. Must not be copied.
type tcpListener struct {
	// Immutable after serveTCP starts.
	x   *tcpProxy
	def *config.Listener

	// Guarded by mu.
	mu       sync.Mutex
	conns    map[*tcpConn]struct{}
	draining bool

	// handlers counts the goroutines of accepted connections.
	handlers sync.WaitGroup
}

// watch closes ln when ctx ends, and until stop is closed (through the
// drain too) reaps the connections whose backend became unavailable each
// time the control state changes.
func (tl *tcpListener) watch(ctx context.Context, ln net.Listener, stop <-chan struct{}) {
	e := tl.x.e
	t := e.clk.NewTicker(reapInterval)
	defer t.Stop()
	last := e.control.Load()
	done := ctx.Done()
	for {
		select {
		case <-done:
			ln.Close()
			done = nil
		case <-stop:
			return
		case <-t.C():
			if cs := e.control.Load(); cs != last {
				last = cs
				tl.reap(cs)
			}
		}
	}
}

// acceptLoop accepts until ln is closed, and then returns nil. Transient
// accept errors (a full file table, an aborted handshake) are logged and
// retried after a growing pause, as net/http does; any other error is
// returned.
func (tl *tcpListener) acceptLoop(ctx context.Context, ln net.Listener) error {
	e := tl.x.e
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !transientAcceptError(err) {
				return fmt.Errorf("tcp listener %s: accept: %w", tl.def.Name, err)
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			e.log.Warn().Err(err).Str("listener", tl.def.Name).Dur("retry_in", pause).Msg("tcp accept")
			t := e.clk.NewTimer(pause)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return nil
			}
			continue
		}
		pause = 0
		tl.handlers.Add(1)
		go tl.handle(ctx, c)
	}
}

// transientAcceptError reports whether an Accept error is worth retrying.
func transientAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNABORTED, syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EINTR} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// drain waits up to DrainTimeout, or until hardStop is closed, for the
// open connections to end, then closes the rest and waits for every
// connection goroutine to exit. New connections are refused from the start
// of drain.
func (tl *tcpListener) drain(hardStop <-chan struct{}) {
	e := tl.x.e
	tl.mu.Lock()
	tl.draining = true
	n := len(tl.conns)
	tl.mu.Unlock()
	done := make(chan struct{})
	go func() {
		tl.handlers.Wait()
		close(done)
	}()
	if n > 0 {
		e.log.Info().Str("listener", tl.def.Name).Int("connections", n).Dur("drain_timeout", e.cfg.DrainTimeout).Msg("tcp listener draining")
	}
	t := e.clk.NewTimer(e.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C():
	case <-hardStop:
	}
	tl.mu.Lock()
	left := make([]*tcpConn, 0, len(tl.conns))
	for c := range tl.conns {
		left = append(left, c)
	}
	tl.mu.Unlock()
	for _, c := range left {
		c.abort(closeDrain)
	}
	if len(left) > 0 {
		e.log.Info().Str("listener", tl.def.Name).Int("connections", len(left)).Msg("tcp drain over: closed the remaining connections")
	}
	<-done
}

// reap closes every connection of tl whose backend is no longer available
// in cs.
func (tl *tcpListener) reap(cs *ControlState) {
	tl.mu.Lock()
	var dead []*tcpConn
	for c := range tl.conns {
		if !available(cs, c.service, c.pick.backend.Addr()) {
			dead = append(dead, c)
		}
	}
	tl.mu.Unlock()
	byBackend := map[string]int{}
	for _, c := range dead {
		c.abort(closeUnhealthy)
		byBackend[c.pick.backend.Addr()]++
	}
	for b, n := range byBackend {
		tl.x.e.log.Info().Str("listener", tl.def.Name).Str("backend", b).Int("connections", n).Msg("backend unavailable: closed its tcp connections")
	}
}

// available reports whether backend addr may keep the connections of
// service in cs: it is one of the service's instances and not unhealthy. A
// nil cs (no control state yet) keeps everything.
func available(cs *ControlState, service, addr string) bool {
	if cs == nil {
		return true
	}
	if cs.Unhealthy[addr] {
		return false
	}
	sc, ok := cs.Config.Service(service)
	if !ok {
		return false
	}
	for _, b := range sc.Backends {
		ref, ok := cs.Config.Group(b.Group)
		if !ok {
			continue
		}
		for _, in := range ref.Group.Instances {
			if in.Address == addr {
				return true
			}
		}
	}
	return false
}

// handle proxies client connection c: it picks and dials a backend, then
// relays bytes until both sides are done.
func (tl *tcpListener) handle(ctx context.Context, c net.Conn) {
	defer tl.handlers.Done()
	x := tl.x
	e := x.e
	t := e.table.Load()
	l := tl.def
	if t != nil {
		if cur, ok := t.cfg.Listener(l.Name); ok && cur.Protocol == config.ListenerTCP {
			l = cur
		}
	}
	var svc *service
	if t != nil {
		svc = t.services[l.Service]
	}
	if svc == nil {
		x.metrics.accepted.WithLabelValues(l.Service, "no_service").Inc()
		c.Close()
		return
	}
	// Dialling is bounded by the dialer's timeout, not by ctx: a connection
	// accepted before the drain began is served.
	pk, up, err := x.connect(context.WithoutCancel(ctx), svc, tcpFlow(c))
	if err != nil {
		result := "dial_error"
		switch {
		case errors.Is(err, errNoBackend):
			result = "no_backend"
			e.metrics.pickErrors.WithLabelValues(svc.name, errNoBackend.Error()).Inc()
		case errors.Is(err, errAllBusy):
			result = "busy"
			e.metrics.pickErrors.WithLabelValues(svc.name, errAllBusy.Error()).Inc()
		default:
			e.log.Debug().Err(err).Str("service", svc.name).Msg("tcp connection: no backend could be dialled")
		}
		svc.meters.failures.Add(1)
		x.metrics.accepted.WithLabelValues(svc.name, result).Inc()
		closeReset(c)
		return
	}
	pc := &tcpConn{x: x, service: svc.name, pick: pk, client: c, backend: up, idle: l.IdleTimeout}
	if !tl.track(pc) {
		x.metrics.accepted.WithLabelValues(svc.name, "draining").Inc()
		pk.done()
		closeReset(up)
		closeReset(c)
		return
	}
	svc.meters.decisions[pk.reason].Add(1)
	x.metrics.accepted.WithLabelValues(svc.name, "proxied").Inc()
	// The reaper may have looked before this connection was tracked.
	if !available(e.control.Load(), pc.service, pk.backend.Addr()) {
		pc.abort(closeUnhealthy)
	}
	pc.run()
	tl.untrack(pc)
}

// track registers c as open, unless tl is draining.
func (tl *tcpListener) track(c *tcpConn) bool {
	tl.mu.Lock()
	if tl.draining {
		tl.mu.Unlock()
		return false
	}
	tl.conns[c] = struct{}{}
	tl.mu.Unlock()
	tl.x.count(c, +1)
	return true
}

// untrack removes c, which has ended, and releases its backend slot.
func (tl *tcpListener) untrack(c *tcpConn) {
	tl.mu.Lock()
	delete(tl.conns, c)
	tl.mu.Unlock()
	tl.x.count(c, -1)
	c.pick.done()
	tl.x.metrics.closed.WithLabelValues(c.service, c.reason().String()).Inc()
}

// count adds d to the open connections of c's service and backend.
func (x *tcpProxy) count(c *tcpConn, d int) {
	x.mu.Lock()
	x.open[c.service] += d
	x.mu.Unlock()
	x.metrics.open.WithLabelValues(c.service, c.pick.backend.Addr()).Add(float64(d))
}

// tcpFlow returns the flow key (client and listener address) of c.
func tcpFlow(c net.Conn) flowKey {
	var k flowKey
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		k.src = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		k.dst = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return k
}

// connect picks a backend of svc for a new connection and dials it. When the
// pick finds every backend it may use busy, a planned policy spills to the
// nearest backend with a free slot (rule 4, enforced locally before the plan
// catches up). A failed dial is retried once on another backend. The
// returned pick holds a slot of its backend.
func (x *tcpProxy) connect(ctx context.Context, svc *service, k flowKey) (pick, net.Conn, error) {
	var failed string
	var lastErr error
	for range 2 {
		pk, err := x.pick(svc, k, failed)
		if err != nil {
			if lastErr != nil {
				return pick{}, nil, fmt.Errorf("dial %s: %w", failed, lastErr)
			}
			return pick{}, nil, err
		}
		addr := pk.backend.Addr()
		up, err := x.dial(ctx, "tcp", addr)
		if err == nil {
			return pk, up, nil
		}
		pk.done()
		x.e.metrics.backendErrors.Inc()
		failed, lastErr = addr, err
	}
	return pick{}, nil, fmt.Errorf("dial %s: %w", failed, lastErr)
}

// pick chooses a backend by svc's policy, avoiding the backend exclude (one
// that just failed to dial; "" for none).
func (x *tcpProxy) pick(svc *service, k flowKey, exclude string) (pick, error) {
	pk, err := svc.pick(x.e.rand(), k)
	switch {
	case err == nil && pk.backend.Addr() != exclude:
		return pk, nil
	case err == nil:
		pk.done()
		return x.nearestFree(svc, exclude, pk.reason)
	case errors.Is(err, errAllBusy) && svc.cfg.Policy.IsPlanned():
		return x.nearestFree(svc, exclude, reasonSpillCapacity)
	}
	return pick{}, err
}

// nearestFree takes a slot on the healthy backend of svc, other than
// exclude, in the region with the lowest RTT (regions without an RTT last)
// and with the fewest connections in flight there (ties: pool order).
func (x *tcpProxy) nearestFree(svc *service, exclude string, r reason) (pick, error) {
	rtt := x.e.rtt.snapshot()
	rttOf := func(region string) float64 {
		if v, ok := rtt[region]; ok {
			return v
		}
		return math.Inf(1)
	}
	others := 0
	// A concurrent pick may take the chosen slot: look again a few times.
	for range 4 {
		best := -1
		others = 0
		for i, m := range svc.pool {
			if m.b.Addr() == exclude {
				continue
			}
			others++
			if m.b.Full() {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			bm := svc.pool[best]
			if d := rttOf(m.region) - rttOf(bm.region); d < 0 || (d == 0 && m.b.InFlight() < bm.b.InFlight()) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		m := svc.pool[best]
		if m.b.TryAcquire() {
			return pick{backend: m.b, group: m.group, region: m.region, reason: r}, nil
		}
	}
	if others == 0 {
		return pick{}, errNoBackend
	}
	return pick{}, errAllBusy
}

// closeReset closes c with a reset (SO_LINGER 0) instead of a FIN, so that
// its peer sees the connection fail rather than end cleanly.
func closeReset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// tcpConn is one proxied connection. Must not be copied.
type tcpConn struct {
	// Immutable after handle creates it.
	x       *tcpProxy
	service string
	pick    pick // holds a slot of pick.backend until untrack
	client  net.Conn
	backend net.Conn
	idle    time.Duration // 0: no idle timeout

	// Accessed atomically.
	why      atomic.Int32 // closeReason: the first of abort's reason and the side that ended first
	lastRead atomic.Int64 // clock time of the last byte read, in UnixNano (idle timeout only)
}

// reason returns why c ended: what came first of an abort (its reason)
// and one side ending (closeClient, closeBackend).
func (c *tcpConn) reason() closeReason { return closeReason(c.why.Load()) }

// abort closes both sides of c at once, with a reset, recording r as the
// reason unless c has one already. Safe to call from any goroutine, any
// number of times.
func (c *tcpConn) abort(r closeReason) {
	c.why.CompareAndSwap(int32(closeNone), int32(r))
	closeReset(c.client)
	closeReset(c.backend)
}

// run relays bytes both ways until both directions are done, then closes
// both sides. It runs on the connection's goroutine.
func (c *tcpConn) run() {
	var up sync.WaitGroup
	up.Go(c.copyClientToBackend)
	var stopIdle func()
	if c.idle > 0 {
		c.lastRead.Store(c.x.e.clk.Now().UnixNano())
		stopIdle = c.watchIdle()
	}
	c.copyBackendToClient()
	up.Wait()
	if stopIdle != nil {
		stopIdle()
	}
	c.client.Close()
	c.backend.Close()
}

// copyClientToBackend is the client-to-backend direction of run.
func (c *tcpConn) copyClientToBackend() {
	c.pipe(c.backend, c.client, closeClient, "to_backend")
}

// copyBackendToClient is the backend-to-client direction of run.
func (c *tcpConn) copyBackendToClient() {
	c.pipe(c.client, c.backend, closeBackend, "to_client")
}

// pipe copies src to dst until src's EOF, then closes dst's write half; on
// any error it closes both sides of c. side names src.
func (c *tcpConn) pipe(dst, src net.Conn, side closeReason, direction string) {
	var n int64
	var err error
	if c.idle > 0 {
		n, err = c.copyNoting(dst, src)
	} else {
		// Both are *net.TCPConn: dst.ReadFrom(src) splices in the kernel.
		n, err = io.Copy(dst, src)
	}
	c.why.CompareAndSwap(int32(closeNone), int32(side))
	c.x.metrics.bytes.WithLabelValues(c.service, direction).Add(float64(n))
	if err != nil {
		c.client.Close()
		c.backend.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	c.client.Close()
	c.backend.Close()
}

// copyNoting copies like io.Copy, recording the time of every read in
// c.lastRead for the idle timeout.
func (c *tcpConn) copyNoting(dst, src net.Conn) (int64, error) {
	buf := c.x.bufs.Get()
	defer c.x.bufs.Put(buf)
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			c.lastRead.Store(c.x.e.clk.Now().UnixNano())
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// watchIdle starts the idle watchdog of c: a goroutine that aborts c once
// no byte was read from either side for c.idle. It returns the function
// that stops the watchdog and waits for it.
func (c *tcpConn) watchIdle() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	t := c.x.e.clk.NewTimer(c.idle)
	wg.Go(func() {
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C():
				quiet := now.Sub(time.Unix(0, c.lastRead.Load()))
				if quiet >= c.idle {
					c.abort(closeIdle)
					return
				}
				t.Reset(c.idle - quiet)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// observe replaces, in demand, the figure of every service a tcp listener
// of cs serves: a CONNECTION-mode service's capacity counts concurrent
// connections, so its demand is this node's open connections, smoothed
// with time constant DemandSmoothing. Called only from the planner
// goroutine.
func (x *tcpProxy) observe(now time.Time, cs *ControlState, demand map[string]float64) {
	if cs == nil {
		return
	}
	tau := x.e.cfg.DemandSmoothing
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
			s = &ewma.Level{Tau: tau}
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
