package listeners

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/fdlimit"
)

// Admission of the connections of http and https listeners (docs/design.md §9:
// clients cannot hurt backends, nor each other). Every connection an http
// or https port accepts — whatever it turns out to speak: HTTP/1.1 on the
// fast path or on net/http, h2 over TLS, h2c — is admitted here before any
// byte of it is read:
//
//   - Per client: a client IP address holds at most its listener's
//     max_connections_per_client connections to the port at once. One more
//     is reset at once (SO_LINGER 0: no TIME_WAIT), counted in
//     spillway_gfe_listener_refused_total{reason="client_limit"} and logged
//     at most once a second; it takes none of the fd budget. This is the
//     tcp proxy's cap (tcpproxy) on http: one address cannot take the whole
//     budget of client connections and leave others waiting.
//   - The fd budget: each connection holds Options.ConnFDs of it until it
//     closes. While the budget is spent the port accepts the next client
//     (one at most, beyond the budget: the reserve covers it) and then, so
//     that a waiting client is served rather than the idle ones kept,
//     closes the connection that has been idle between requests the longest
//     (idle.go; spillway_gfe_listener_idle_reclaimed_total) and takes its
//     descriptors. With nothing idle it waits until a connection closes,
//     looking again for an idle one every reclaimRecheck; clients behind it
//     wait in the kernel's backlog.

// reclaimRecheck is how often a client waiting for the fd budget looks
// again for an idle connection to close for it.
const reclaimRecheck = 250 * time.Millisecond

// Why a connection was refused as it was accepted
// (spillway_gfe_listener_refused_total).
const refuseClient = "client_limit"

// clientConns counts the open connections of a port by client address.
// Safe for concurrent use; the zero value is ready.
type clientConns struct {
	mu sync.Mutex
	n  map[netip.Addr]int // guarded by mu; no zero entries
}

// take counts one more connection of client a, unless a holds max already.
func (cc *clientConns) take(a netip.Addr, max int) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.n[a] >= max {
		return false
	}
	if cc.n == nil {
		cc.n = map[netip.Addr]int{}
	}
	cc.n[a]++
	return true
}

// give uncounts a connection of client a taken before.
func (cc *clientConns) give(a netip.Addr) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.n[a]--; cc.n[a] <= 0 {
		delete(cc.n, a)
	}
}

// clientAddr returns the IP address of c's client (IPv4 unmapped), the
// zero address when c is not TCP.
func clientAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// maxPerClient returns l's max_connections_per_client; a listener built
// without one (not through config validation) gets the default.
func maxPerClient(l *config.Listener) int {
	if l.MaxConnectionsPerClient <= 0 {
		return config.DefaultMaxConnectionsPerClient
	}
	return l.MaxConnectionsPerClient
}

// acceptLoop accepts connections on p and hands each to p's current
// generation until p's socket is closed. While p serves http or https, it
// takes Options.ConnFDs of the fd budget before each Accept when it can, and
// admits what it accepts (admit).
func (m *Manager) acceptLoop(p *port) {
	defer m.wg.Done()
	if m.opts.Serving != nil {
		select {
		case <-m.opts.Serving:
		case <-p.stop.Done():
			return
		}
	}
	var backoff time.Duration
	budget := m.opts.Budget
	for {
		g := p.cur.Load()
		guarded := g != nil && g.spec.Protocol != config.ListenerTCP
		held := false
		if guarded && budget != nil {
			if held = budget.TryAcquire(m.connFDs()); !held {
				name := g.spec.Name
				m.metrics.fdWaits.WithLabelValues(name).Inc()
				m.budgetLog.Warn().Str("listener", name).Int64("fd_budget", budget.Size()).Msg("fd budget spent: the next client waits until a connection closes or an idle one is closed for it")
			}
		}
		c, err := p.ln.Accept()
		if err != nil {
			if held {
				budget.Release(m.connFDs())
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or the like: back off as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.log.Warn().Err(err).Str("addr", p.ln.Addr().String()).Dur("retry_in", backoff).Msg("accept")
			t := m.clk.NewTimer(backoff)
			select {
			case <-t.C():
			case <-m.hardStop.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		if g != nil {
			setKeepAlive(c, &g.spec)
		}
		if guarded {
			var ok bool
			if c, ok = m.admit(p, g, c, held); !ok {
				continue
			}
		}
		p.accepted.Inc()
		p.dispatch(c)
	}
}

// admit counts c, just accepted on http or https port p while generation
// g served it, against its client's max_connections_per_client and the fd
// budget (held: its descriptors were taken before Accept). It returns c
// holding both, given back when c closes; or false when c was refused
// (reset) or p closed while c waited for the budget (c is closed).
func (m *Manager) admit(p *port, g *generation, c net.Conn, held bool) (net.Conn, bool) {
	budget := m.opts.Budget
	client := clientAddr(c)
	if max := maxPerClient(&g.spec); !p.clients.take(client, max) {
		if held {
			budget.Release(m.connFDs())
		}
		m.refuse(g, c, refuseClient, max)
		return nil, false
	}
	if budget == nil {
		return fdlimit.ReleaseOnClose(c, func() { p.clients.give(client) }), true
	}
	if !held && !m.awaitBudget(p) {
		p.clients.give(client)
		c.Close()
		return nil, false
	}
	return fdlimit.ReleaseOnClose(c, func() {
		budget.Release(m.connFDs())
		p.clients.give(client)
	}), true
}

// awaitBudget takes Options.ConnFDs of the spent fd budget for a client that
// waits: it closes the longest-idle connection of the http and https
// ports, if any, for it and takes its descriptors, else waits for a
// connection to close, looking again every reclaimRecheck. It returns
// false when p closes first.
func (m *Manager) awaitBudget(p *port) bool {
	budget := m.opts.Budget
	for {
		if budget.TryAcquire(m.connFDs()) {
			return true
		}
		if m.reclaimIdle() {
			continue // its descriptors came back as it closed
		}
		ctx, cancel := context.WithCancel(p.stop)
		t := m.clk.AfterFunc(reclaimRecheck, cancel)
		err := budget.Acquire(ctx, m.connFDs())
		t.Stop()
		cancel()
		switch {
		case err == nil:
			return true
		case p.stop.Err() != nil:
			return false
		}
	}
}

// refuse counts c, refused for reason, resets it and logs it (at most a
// line a second). It counts first, so that a client that has seen the
// reset finds it counted.
func (m *Manager) refuse(g *generation, c net.Conn, reason string, max int) {
	m.metrics.refused.WithLabelValues(g.spec.Name, reason).Inc()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
	m.budgetLog.Warn().Str("listener", g.spec.Name).Str("client", c.RemoteAddr().String()).Str("reason", reason).
		Int("max_connections_per_client", max).Msg("connection refused (one line a second at most; see spillway_gfe_listener_refused_total)")
}
