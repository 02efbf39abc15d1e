package gfe

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/fdlimit"
	"github.com/spillway-lb/spillway/internal/gfe/listeners"
)

// TestHTTPListenerFDBudget (the first security review, finding 4:
// SECURITY.md): an http listener whose connections have spent the fd budget
// takes no more descriptors — the wait is counted — and serves the next
// client with those of a connection that closes (here the longest-idle one,
// closed for it, or c1 closing), instead of accepting until EMFILE.
func TestHTTPListenerFDBudget(t *testing.T) {
	lim, err := fdlimit.Raise()
	if err != nil {
		t.Skip(err)
	}
	const room = 2 * listeners.HTTPConnFDs // two client connections
	b1, b2 := newHTTPBackend(t, "b1"), newHTTPBackend(t, "b2")
	e := startEdgeWith(t, edgeConfig(t, []string{b1.addr(), b2.addr()}, ""), 5*time.Second, func(c *Config) {
		c.FDReserve = int(lim.Soft) - room
	})
	if got := e.fds.Size(); got != room {
		t.Fatalf("fd budget = %d, want %d", got, room)
	}
	addr := e.ListenAddr().String()
	c1, r1 := fdRequest(t, addr)
	fdAnswer(t, r1)
	_, r2 := fdRequest(t, addr)
	fdAnswer(t, r2) // both kept alive, holding the whole budget
	waitUntil(t, "the listener to wait for the budget", func() bool { return e.counter(t, "spillway_gfe_listener_fd_budget_waits_total") == 1 })
	_, r3 := fdRequest(t, addr) // waits for descriptors
	if got := e.fds.Used(); got != room {
		t.Fatalf("budget used = %d, want %d", got, room)
	}
	c1.Close()
	fdAnswer(t, r3) // served with c1's descriptors
	// Full again with c2 and c3: the second wait.
	waitUntil(t, "the second wait", func() bool { return e.counter(t, "spillway_gfe_listener_fd_budget_waits_total") == 2 })
}

// counter returns the sum of every series of the counter or gauge name in
// the gfe's registry.
func (e *runningEdge) counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestHTTPListenerFDPerConn: with FDPerHTTPConn 1 an http connection takes
// one descriptor of the budget: a budget of 2 holds two kept-alive
// connections (at the default 2 each it holds one), and the third waits
// until one closes.
func TestHTTPListenerFDPerConn(t *testing.T) {
	lim, err := fdlimit.Raise()
	if err != nil {
		t.Skip(err)
	}
	const room = 2
	b1 := newHTTPBackend(t, "b1")
	e := startEdgeWith(t, edgeConfig(t, []string{b1.addr()}, ""), 5*time.Second, func(c *Config) {
		c.FDReserve = int(lim.Soft) - room
		c.FDPerHTTPConn = 1
	})
	addr := e.ListenAddr().String()
	c1, r1 := fdRequest(t, addr)
	fdAnswer(t, r1)
	_, r2 := fdRequest(t, addr)
	fdAnswer(t, r2) // two connections in a budget of 2
	if got := e.fds.Used(); got != room {
		t.Fatalf("budget used = %d, want %d (1 per connection)", got, room)
	}
	waitUntil(t, "the listener to wait for the budget", func() bool { return e.counter(t, "spillway_gfe_listener_fd_budget_waits_total") == 1 })
	_, r3 := fdRequest(t, addr) // waits for a descriptor
	c1.Close()
	fdAnswer(t, r3)
}

// fdRequest opens a connection to addr and sends one keep-alive request on
// it; the connection closes with the test.
func fdRequest(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// fdAnswer reads one response from r and fails the test unless it is a 200.
func fdAnswer(t *testing.T, r *bufio.Reader) {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
