package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/routing"
)

// closeReason says why a proxied connection ended.
type closeReason int32

const (
	closeNone      closeReason = iota
	closeClient                // the client finished or failed first
	closeBackend               // the backend finished or failed first
	closeUnhealthy             // the backend became unavailable
	closeIdle                  // no byte for the listener's IdleTimeout
	closeDrain                 // the listener drained past DrainTimeout
	closeFirstByte             // no client byte within the listener's FirstByteTimeout
)

var closeReasonNames = [...]string{"none", "client", "backend", "unhealthy", "idle", "drain", "first_byte"}

// Why a connection was refused as it arrived (spillway_gfe_tcp_refused_total).
const (
	refuseListener = "listener_limit"
	refuseClient   = "client_limit"
	refuseBudget   = "fd_budget"
)

func (r closeReason) String() string { return closeReasonNames[r] }

// Serve accepts connections on ln, the socket of tcp listener l, and
// proxies each to a backend of l's service, until ctx ends or ln is closed.
// Then it stops accepting and drains: open connections get up to
// DrainTimeout to finish, after which the rest are closed. When ln was
// closed first (a retired listener), ctx ending during the drain closes
// the rest at once (the caller's hard stop). Serve returns once every
// connection's goroutines have exited: nil, or the error of an Accept that
// failed for another reason than ln being closed.
//
// Each new connection uses the table live when it arrives, and the entry of
// l's name in that table's config (so a reload that changes the listener's
// service or idle timeout applies to new connections); l is the fallback
// when the config has no such entry.
func (x *Proxy) Serve(ctx context.Context, ln net.Listener, l *config.Listener) error {
	tl := &tcpListener{x: x, def: l, conns: map[*tcpConn]struct{}{}, byClient: map[netip.Addr]int{}}
	x.mu.Lock()
	x.listeners[tl] = struct{}{}
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.listeners, tl)
		x.mu.Unlock()
	}()
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
	// Immutable after Serve starts.
	x   *Proxy
	def *config.Listener

	// Guarded by mu.
	mu       sync.Mutex
	conns    map[*tcpConn]struct{}
	draining bool
	// admitted counts the connections admitted and not yet ended (dialling
	// ones included), in all and by client address, against the
	// listener's MaxConnections and MaxConnectionsPerClient.
	admitted int
	byClient map[netip.Addr]int

	// handlers counts the goroutines of accepted connections.
	handlers sync.WaitGroup
}

// watch closes ln when ctx ends, and until stop is closed (through the
// drain too), every reapInterval, reaps the connections whose backend
// became unavailable when the snapshot changed, and sweeps the
// connections past their idle or first-byte timeout. One ticker serves
// every connection of the listener: a timeout fires within reapInterval
// of its deadline.
func (tl *tcpListener) watch(ctx context.Context, ln net.Listener, stop <-chan struct{}) {
	x := tl.x
	t := x.clk.NewTicker(reapInterval)
	defer t.Stop()
	last := x.state.Snapshot()
	done := ctx.Done()
	for {
		select {
		case <-done:
			ln.Close()
			done = nil
		case <-stop:
			return
		case <-t.C():
			if cs := x.state.Snapshot(); cs != last {
				last = cs
				tl.reap(cs)
			}
			tl.sweep(x.clk.Now())
		}
	}
}

// acceptLoop accepts until ln is closed, and then returns nil. Transient
// accept errors (a full file table, an aborted handshake) are logged and
// retried after a growing pause, as net/http does; any other error is
// returned.
func (tl *tcpListener) acceptLoop(ctx context.Context, ln net.Listener) error {
	x := tl.x
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
			x.log.Warn().Err(err).Str("listener", tl.def.Name).Dur("retry_in", pause).Msg("tcp accept")
			t := x.clk.NewTimer(pause)
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
	x := tl.x
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
		x.log.Info().Str("listener", tl.def.Name).Int("connections", n).Dur("drain_timeout", x.cfg.DrainTimeout).Msg("tcp listener draining")
	}
	t := x.clk.NewTimer(x.cfg.DrainTimeout)
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
		x.log.Info().Str("listener", tl.def.Name).Int("connections", len(left)).Msg("tcp drain over: closed the remaining connections")
	}
	<-done
}

// sweep closes every connection of tl past its idle or first-byte
// timeout at now.
func (tl *tcpListener) sweep(now time.Time) {
	type expiry struct {
		c *tcpConn
		r closeReason
	}
	var dead []expiry
	tl.mu.Lock()
	for c := range tl.conns {
		if r := c.expired(now); r != closeNone {
			dead = append(dead, expiry{c, r})
		}
	}
	tl.mu.Unlock()
	for _, e := range dead {
		e.c.abort(e.r)
	}
	tl.x.lastSweepNano.Store(now.UnixNano())
}

// available is routing.Available on cs's Fleet: whether backend addr may
// keep the connections of service. A nil cs (no snapshot yet) keeps
// everything.
func available(cs *snapshot.Snapshot, service, addr string) bool {
	return cs == nil || routing.Available(&cs.Fleet, service, addr)
}

// reap closes every connection of tl whose backend is no longer available
// in cs.
func (tl *tcpListener) reap(cs *snapshot.Snapshot) {
	tl.mu.Lock()
	var dead []*tcpConn
	for c := range tl.conns {
		if !available(cs, c.service, c.pick.Backend.Addr()) {
			dead = append(dead, c)
		}
	}
	tl.mu.Unlock()
	byBackend := map[string]int{}
	for _, c := range dead {
		c.abort(closeUnhealthy)
		byBackend[c.pick.Backend.Addr()]++
	}
	for b, n := range byBackend {
		tl.x.log.Info().Str("listener", tl.def.Name).Str("backend", b).Int("connections", n).Msg("backend unavailable: closed its tcp connections")
	}
}

// admit counts client connection c against the listener's caps (l's
// MaxConnections and MaxConnectionsPerClient; 0 or less is no cap) and
// ConnFDs of the fd budget. It returns "" and the function that gives them
// back, or the reason c is refused.
func (tl *tcpListener) admit(c net.Conn, l *config.Listener) (refused string, release func()) {
	client := tcpFlow(c).Src.Addr()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	switch {
	case l.MaxConnections > 0 && tl.admitted >= l.MaxConnections:
		return refuseListener, nil
	case l.MaxConnectionsPerClient > 0 && tl.byClient[client] >= l.MaxConnectionsPerClient:
		return refuseClient, nil
	case !tl.x.budget.TryAcquire(ConnFDs):
		return refuseBudget, nil
	}
	tl.admitted++
	tl.byClient[client]++
	return "", func() {
		tl.x.budget.Release(ConnFDs)
		tl.mu.Lock()
		tl.admitted--
		if tl.byClient[client]--; tl.byClient[client] <= 0 {
			delete(tl.byClient, client)
		}
		tl.mu.Unlock()
	}
}

// refuse counts c, closes it at once with a reset (no TIME_WAIT is left
// behind) and logs it (at most a line a second). It counts first, so that
// a client that has seen the reset finds it counted.
func (tl *tcpListener) refuse(c net.Conn, l *config.Listener, reason string) {
	x := tl.x
	x.metrics.refused.WithLabelValues(l.Name, reason).Inc()
	closeReset(c)
	x.refuseLog.Warn().Str("listener", l.Name).Str("client", c.RemoteAddr().String()).Str("reason", reason).
		Int("max_connections", l.MaxConnections).Int("max_connections_per_client", l.MaxConnectionsPerClient).
		Int64("fd_budget", x.budget.Size()).Int64("fd_used", x.budget.Used()).
		Msg("tcp connection refused (one line a second at most; see spillway_gfe_tcp_refused_total)")
}

// handle proxies client connection c: it admits it (or refuses it at once),
// picks and dials a backend, then relays bytes until both sides are done.
func (tl *tcpListener) handle(ctx context.Context, c net.Conn) {
	defer tl.handlers.Done()
	x := tl.x
	accepted := x.clk.Now()
	t := x.state.Table()
	l := tl.def
	if t != nil {
		if cur, ok := t.Config.Listener(l.Name); ok && cur.Protocol == config.ListenerTCP {
			l = cur
		}
	}
	reason, release := tl.admit(c, l)
	if reason != "" {
		tl.refuse(c, l, reason)
		return
	}
	defer release()
	var svc *routing.Service
	if t != nil {
		svc = t.Services[l.Service]
	}
	if svc == nil {
		x.metrics.accepted.WithLabelValues(l.Service, "no_service").Inc()
		c.Close()
		return
	}
	if rule := svc.Shed(); rule.Fraction() > 0 && !rule.Admit(x.rand()) {
		// Global overload (config overload.shed): refused at once, before
		// any pick, against no backend.
		if x.shed != nil {
			x.shed.WithLabelValues(svc.Name(), "overload").Inc()
		}
		x.metrics.accepted.WithLabelValues(svc.Name(), "shed").Inc()
		c.Close()
		return
	}
	// Dialling is bounded by the dialer's timeout, not by ctx: a connection
	// accepted before the drain began is served.
	pk, up, err := x.connect(context.WithoutCancel(ctx), svc, tcpFlow(c))
	if err != nil {
		result := "dial_error"
		switch {
		case errors.Is(err, routing.ErrNoBackend):
			result = "no_backend"
			x.pickErrors.WithLabelValues(svc.Name(), routing.ErrorLabel(err)).Inc()
		case errors.Is(err, routing.ErrAllBusy):
			result = "busy"
			x.pickErrors.WithLabelValues(svc.Name(), routing.ErrorLabel(err)).Inc()
		default:
			x.log.Debug().Err(err).Str("service", svc.Name()).Msg("tcp connection: no backend could be dialled")
		}
		svc.Meters().Failures.Add(1)
		x.metrics.accepted.WithLabelValues(svc.Name(), result).Inc()
		closeReset(c)
		return
	}
	pc := &tcpConn{x: x, service: svc.Name(), pick: pk, client: c, backend: up, idle: l.IdleTimeout, firstByte: l.FirstByteTimeout, accepted: accepted}
	pc.lastRead.Store(x.clk.Now().UnixNano())
	if !tl.track(pc) {
		x.metrics.accepted.WithLabelValues(svc.Name(), "draining").Inc()
		pk.Done()
		closeReset(up)
		closeReset(c)
		return
	}
	svc.Meters().Decisions[pk.Reason].Add(1)
	x.metrics.accepted.WithLabelValues(svc.Name(), "proxied").Inc()
	// The reaper may have looked before this connection was tracked.
	if !available(x.state.Snapshot(), pc.service, pk.Backend.Addr()) {
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
	c.pick.Done()
	tl.x.metrics.closed.WithLabelValues(c.service, c.reason().String()).Inc()
}

// tcpFlow returns the flow key (client and listener address) of c.
func tcpFlow(c net.Conn) routing.Flow {
	var k routing.Flow
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		k.Src = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		k.Dst = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return k
}
