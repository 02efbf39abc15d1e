package listeners

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/fdlimit"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/testkit"
)

// admissionTimeout bounds each connection attempt of the admission tests.
const admissionTimeout = 10 * time.Second

// clientKind is a way a client speaks to an http or https listener.
type clientKind struct {
	name     string
	protocol config.ListenerProtocol
	fastPath bool
	h2       bool // h2c on http, ALPN h2 on https
}

// clientKinds are every way a client reaches a listener: HTTP/1.1 on the
// fast path and on net/http, h2c, and over TLS HTTP/1.1 (fast path) and h2.
var clientKinds = []clientKind{
	{"http, fast path", config.ListenerHTTP, true, false},
	{"http, net/http", config.ListenerHTTP, false, false},
	{"h2c", config.ListenerHTTP, true, true},
	{"https, HTTP/1.1", config.ListenerHTTPS, true, false},
	{"https, h2", config.ListenerHTTPS, true, true},
}

// listener returns the listener the kind is served by, with certificates
// from ca for https.
func (k clientKind) listener(t *testing.T, ca *testkit.CA) config.Listener {
	l := config.DefaultListener(k.protocol)
	l.FastPath = k.fastPath
	if k.protocol == config.ListenerHTTPS {
		l.Certificates = []config.Certificate{gfetest.IssueCert(t, ca, t.TempDir(), "a", 10, "a.test", "a.test")}
	}
	return l
}

// servedConn is a client connection that got one 200 and is kept open.
type servedConn struct {
	c  net.Conn
	br *bufio.Reader     // HTTP/1.1
	cc *http2.ClientConn // h2
}

func (s *servedConn) Close() error {
	if s.cc != nil {
		s.cc.Close()
	}
	return s.c.Close()
}

// get sends one GET on s and reports whether it was answered 200.
func (s *servedConn) get() bool {
	s.c.SetDeadline(time.Now().Add(admissionTimeout))
	if s.cc != nil {
		req, _ := http.NewRequest("GET", "http://a.test/", nil)
		resp, err := s.cc.RoundTrip(req)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if _, err := io.WriteString(s.c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(s.br, nil)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200
}

// open connects to addr from src as kind k and sends one GET. It returns
// the connection, still open, when the GET was answered 200, and nil when
// the connection was refused or closed without an answer.
func (k clientKind) open(t *testing.T, ca *testkit.CA, addr, src string) *servedConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: admissionTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil // reset as soon as accepted, before connect returned
	}
	c.SetDeadline(time.Now().Add(admissionTimeout))
	if k.protocol == config.ListenerHTTPS {
		alpn := "http/1.1"
		if k.h2 {
			alpn = "h2"
		}
		tc := tls.Client(c, &tls.Config{RootCAs: ca.Pool, ServerName: "a.test", NextProtos: []string{alpn}})
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil
		}
		c = tc
	}
	s := &servedConn{c: c}
	if k.h2 {
		if s.cc, err = (&http2.Transport{AllowHTTP: true}).NewClientConn(c); err != nil {
			c.Close()
			return nil
		}
	} else {
		s.br = bufio.NewReader(c)
	}
	if !s.get() {
		s.Close()
		return nil
	}
	return s
}

// TestClientConnectionCap: one address opening many keep-alive connections
// to an http or https listener — HTTP/1.1 on the fast path or net/http,
// h2c, TLS with HTTP/1.1 or h2 — gets max_connections_per_client of them
// served and the rest reset as they arrive (counted), so it cannot spend
// the fd budget: another client is served on its first try. A connection
// the address closes gives its place back.
func TestClientConnectionCap(t *testing.T) {
	const (
		perClient = 20
		attempts  = 60
		room      = 30 // connections the fd budget has room for
	)
	ca := testkit.NewCA(t)
	for _, k := range clientKinds {
		t.Run(k.name, func(t *testing.T) {
			l := k.listener(t, ca)
			l.MaxConnectionsPerClient = perClient
			reg := prometheus.NewRegistry()
			m, addr := startManager(t, l, Options{Fast: &fakeFast{}, Budget: fdlimit.NewBudget(room * HTTPConnFDs), Registry: reg})
			var held []*servedConn
			t.Cleanup(func() {
				for _, s := range held {
					s.Close()
				}
			})
			for range attempts {
				if s := k.open(t, ca, addr, "127.0.0.1"); s != nil {
					held = append(held, s)
				}
			}
			refused := testutil.ToFloat64(m.metrics.refused.WithLabelValues("web", refuseClient))
			t.Logf("%d connections from one address: %d served, %d refused", attempts, len(held), int(refused))
			if len(held) != perClient || refused != attempts-perClient {
				t.Errorf("one address opened %d connections: %d served, %v refused; want %d served (max_connections_per_client), %d refused",
					attempts, len(held), refused, perClient, attempts-perClient)
			}
			tries := 1
			for ; tries <= 3; tries++ {
				if s := k.open(t, ca, addr, "127.0.0.2"); s != nil {
					s.Close()
					break
				}
			}
			if tries != 1 {
				t.Errorf("another client was served at its try %d (4: not in 3), want its first", tries)
			}
			// A closed connection gives its place back: the address is
			// served again once the listener has seen the close.
			held[0].Close()
			held = held[1:]
			waitFor(t, "the first address to be served again after closing a connection", func() bool {
				if s := k.open(t, ca, addr, "127.0.0.1"); s != nil {
					held = append(held, s)
					return true
				}
				return false
			})
			// Refused connections gave theirs back at once, closed ones as
			// the listener sees them close; the accept loop holds the next
			// connection's in advance.
			want := int64((len(held) + 1) * HTTPConnFDs)
			waitFor(t, "the fd budget to hold the open connections' descriptors only", func() bool { return m.opts.Budget.Used() == want })
		})
	}
}

// idleConns returns how many connections of m's current generations are
// idle (between requests, or HTTP/2 without a stream).
func idleConns(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, p := range m.ports {
		g := p.cur.Load()
		if g == nil || g.conns == nil {
			continue
		}
		g.conns.mu.Lock()
		for e := g.conns.idle.head; e != nil; e = e.next {
			n++
		}
		g.conns.mu.Unlock()
		if g.fast != nil {
			g.fast.mu.Lock()
			for e := g.fast.idle.head; e != nil; e = e.next {
				n++
			}
			g.fast.mu.Unlock()
		}
	}
	return n
}

// TestIdleConnectionsClosedFirst: when idle keep-alive connections hold
// the whole fd budget, a new client is served at once: the connection idle
// the longest is closed for it (counted), and the other idle ones are
// kept. Before, the new client waited in the backlog until an idle one
// reached its idle_timeout (90 s).
func TestIdleConnectionsClosedFirst(t *testing.T) {
	const room = 4
	ca := testkit.NewCA(t)
	for _, k := range clientKinds {
		t.Run(k.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, addr := startManager(t, k.listener(t, ca), Options{Fast: &fakeFast{}, Budget: fdlimit.NewBudget(room * HTTPConnFDs), Registry: reg})
			var held []*servedConn
			t.Cleanup(func() {
				for _, s := range held {
					s.Close()
				}
			})
			for i := range room {
				s := k.open(t, ca, addr, "127.0.0.1")
				if s == nil {
					t.Fatalf("connection %d of %d was not served", i+1, room)
				}
				held = append(held, s)
				// Each idle before the next opens: the first is the
				// longest idle.
				waitFor(t, "the connection to be idle", func() bool { return idleConns(m) == i+1 })
			}
			late := k.open(t, ca, addr, "127.0.0.2")
			if late == nil {
				t.Fatal("a new client was not served while idle connections held the fd budget")
			}
			defer late.Close()
			if n := testutil.ToFloat64(m.metrics.idleReclaimed.WithLabelValues("web")); n != 1 {
				t.Errorf("idle connections closed for the new client = %v, want 1", n)
			}
			// The longest idle was closed; the others still serve.
			if held[0].get() {
				t.Error("the longest-idle connection still serves, want it closed for the new client")
			}
			for i, s := range held[1:] {
				if !s.get() {
					t.Errorf("idle connection %d was closed too, want only the longest idle", i+2)
				}
			}
		})
	}
}

// waitFor polls cond until it holds, failing t after admissionTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(admissionTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, not a delay the test relies on
	}
}
