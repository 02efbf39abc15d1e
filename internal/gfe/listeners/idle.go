package listeners

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// Idle connections under a spent fd budget. A keep-alive connection idle
// between requests holds its descriptors until idle_timeout (90 s by
// default), and a client that sends a request a little more often keeps it
// for ever. When the budget is spent and a client waits to be accepted,
// the connection idle the longest, over every http and https port, is
// closed for it (accept.go, reclaimIdle): an idle connection's client loses
// nothing it asked for (HTTP/1.1 and HTTP/2 clients retry on a new
// connection when a server closes an idle one, RFC 9112 §9.8), the waiting
// one is served. Idle means: after a request, before the next one's first
// byte (HTTP/1.1, fast path or net/http), or no stream open (HTTP/2). A
// connection that has not sent its first request yet is not idle here;
// read_header_timeout bounds it.

// idleNode is connection v's place in an idleList.
type idleNode[T any] struct {
	prev, next *idleNode[T]
	since      time.Time // when it became idle
	listed     bool
	v          T
}

// idleList lists idle connections, the longest idle first. Not safe for
// concurrent use: its owner's lock guards it.
type idleList[T any] struct{ head, tail *idleNode[T] }

// push lists n, idle from now on, last.
func (l *idleList[T]) push(n *idleNode[T], now time.Time) {
	if n.listed {
		l.remove(n)
	}
	n.since, n.listed = now, true
	n.prev, n.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = n
	} else {
		l.head = n
	}
	l.tail = n
}

// remove unlists n; a no-op when n is not listed.
func (l *idleList[T]) remove(n *idleNode[T]) {
	if !n.listed {
		return
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next, n.listed = nil, nil, false
}

// oldest returns since when the list's first connection has been idle;
// ok is false when the list is empty.
func (l *idleList[T]) oldest() (since time.Time, ok bool) {
	if l.head == nil {
		return time.Time{}, false
	}
	return l.head.since, true
}

// idleSource is a server whose idle connections may be closed for a
// waiting client: a generation's net/http server (httpConns) or fast path.
type idleSource interface {
	// oldestIdle returns since when its longest-idle connection has been
	// idle; ok is false when none is.
	oldestIdle() (since time.Time, ok bool)
	// closeOldestIdle closes its longest-idle connection, if one still is,
	// and reports whether it did.
	closeOldestIdle() bool
}

// reclaimIdle closes the connection idle the longest of the current
// generations of every http and https port, and counts it; it reports
// false when no connection is idle.
func (m *Manager) reclaimIdle() bool {
	type source struct {
		s    idleSource
		name string
	}
	var sources []source
	m.mu.Lock()
	for _, p := range m.ports {
		g := p.cur.Load()
		if g == nil || g.conns == nil {
			continue
		}
		sources = append(sources, source{g.conns, g.spec.Name})
		if g.fast != nil {
			sources = append(sources, source{g.fast, g.spec.Name})
		}
	}
	m.mu.Unlock()
	// The one found oldest may turn busy before it is closed: look again,
	// a few times.
	for range 4 {
		var best *source
		var bestSince time.Time
		for i := range sources {
			if since, ok := sources[i].s.oldestIdle(); ok && (best == nil || since.Before(bestSince)) {
				best, bestSince = &sources[i], since
			}
		}
		if best == nil {
			return false
		}
		if best.s.closeOldestIdle() {
			m.metrics.idleReclaimed.WithLabelValues(best.name).Inc()
			return true
		}
	}
	return false
}

// closeSocket closes c's socket at once: under TLS, the connection under
// the TLS conn (a close_notify could block on a client that does not
// read).
func closeSocket(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	c.Close()
}

// httpConns tracks the connections of one generation's net/http server
// (its http.Server.ConnState): which are idle, and how many are open.
// Safe for concurrent use.
type httpConns struct {
	mu    sync.Mutex
	conns map[net.Conn]*idleNode[net.Conn] // guarded by mu: open, not hijacked
	idle  idleList[net.Conn]               // guarded by mu
}

func newHTTPConns() *httpConns { return &httpConns{conns: map[net.Conn]*idleNode[net.Conn]{}} }

// connState is the server's ConnState hook.
func (hc *httpConns) connState(c net.Conn, s http.ConnState) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	n := hc.conns[c]
	switch s {
	case http.StateNew:
		if n == nil {
			hc.conns[c] = &idleNode[net.Conn]{v: c}
		}
	case http.StateIdle:
		if n != nil {
			hc.idle.push(n, time.Now())
		}
	case http.StateActive:
		if n != nil {
			hc.idle.remove(n)
		}
	case http.StateHijacked, http.StateClosed:
		if n != nil {
			hc.idle.remove(n)
			delete(hc.conns, c)
		}
	}
}

// open returns how many connections the server has open (hijacked ones
// aside).
func (hc *httpConns) open() int {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return len(hc.conns)
}

func (hc *httpConns) oldestIdle() (time.Time, bool) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.idle.oldest()
}

func (hc *httpConns) closeOldestIdle() bool {
	hc.mu.Lock()
	n := hc.idle.head
	if n == nil {
		hc.mu.Unlock()
		return false
	}
	hc.idle.remove(n)
	c := n.v
	hc.mu.Unlock()
	// net/http's read of the next request fails, and the server forgets
	// the connection (StateClosed).
	closeSocket(c)
	return true
}
