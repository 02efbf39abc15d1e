package tcpproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/fdlimit"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/routing"
)

// tcpHarness is a tcp proxy with a planned table, serving one tcp listener
// on a loopback port.
type tcpHarness struct {
	*gfetest.TCPServer
	p             *gfetest.Planner
	x             *Proxy
	clk           *clock.Fake
	backendErrors prometheus.Counter
}

// drainTimeout is the drain of the harness's listener (the gfe's default).
const drainTimeout = 10 * time.Second

// startTCP applies cfg (nyc measures us-east at 5 ms, eu-west at 80 ms),
// plans once and serves cfg's listener "db". The test's cleanup stops it.
func startTCP(t *testing.T, cfg *config.Config) *tcpHarness {
	t.Helper()
	return startTCPWith(t, cfg, nil)
}

// startTCPWith is startTCP with a hook that may change the Proxy before it
// serves.
func startTCPWith(t *testing.T, cfg *config.Config, hook func(*Proxy)) *tcpHarness {
	t.Helper()
	// Connections are picked concurrently: a seeded SplitMix64 sequence
	// that is safe for concurrent use.
	p := gfetest.NewPlanner(gfetest.Rand())
	backendErrors := prometheus.NewCounter(prometheus.CounterOpts{Name: "backend_errors"})
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	x, err := New(Config{DrainTimeout: drainTimeout, DemandSmoothing: time.Second}, Options{
		State: p, Clock: p.Clock, Rand: p.Rand, Dial: dialer.DialContext,
		PickErrors:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pick_errors"}, []string{"service", "error"}),
		BackendErrors: backendErrors,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Demand = x.Demand
	p.Apply(snapshot.FromConfig("v1", cfg))
	p.Step()
	if hook != nil {
		hook(x)
	}
	l, ok := cfg.Listener("db")
	if !ok {
		t.Fatal("no listener db")
	}
	srv := gfetest.ServeTCP(t, p.Clock, drainTimeout, l, x.Serve)
	return &tcpHarness{TCPServer: srv, p: p, x: x, clk: p.Clock, backendErrors: backendErrors}
}

// metricValue returns the value of a gauge or counter.
func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

// refused returns spillway_gfe_tcp_refused_total of listener db for reason.
func (h *tcpHarness) refused(reason string) float64 {
	return metricValue(h.x.metrics.refused.WithLabelValues("db", reason))
}

// admitted returns the connections the listener counts for client ip.
func (h *tcpHarness) admitted(ip string) int {
	return h.x.admittedFrom(netip.MustParseAddr(ip))
}

// waitFor polls cond (state another goroutine changes) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(gfetest.TCPTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition, not a delay the test relies on
	}
}

func (h *tcpHarness) counter(name string, labels ...string) float64 {
	switch name {
	case "open":
		return metricValue(h.x.metrics.open.WithLabelValues(labels...))
	case "closed":
		return metricValue(h.x.metrics.closed.WithLabelValues(labels...))
	case "accepted":
		return metricValue(h.x.metrics.accepted.WithLabelValues(labels...))
	}
	panic(name)
}

// TestTCPProxyEchoAndHalfClose: connections are spread over the plan's
// group round robin, bytes go both ways, and a client's half-close reaches
// the backend while the reply still comes back.
func TestTCPProxyEchoAndHalfClose(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1, e2, w1 := gfetest.NewEchoBackend(t, "e1"), gfetest.NewEchoBackend(t, "e2"), gfetest.NewEchoBackend(t, "w1")
	h := startTCP(t, gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr(), e2.Addr()), gfetest.Instances(w1.Addr()), 0))

	// No demand yet: the idle plan sends nyc to us-east; round robin there.
	cs, by := h.Open(t, 40)
	if want := map[string]int{"e1": 20, "e2": 20}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}
	for i, c := range cs {
		if err := c.Echo(fmt.Sprintf("ping %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.counter("open", "db", e1.Addr()); got != 20 {
		t.Errorf("open connections gauge of e1 = %v, want 20", got)
	}
	if got := e1.Open.Load() + e2.Open.Load(); got != 40 {
		t.Errorf("backends hold %d connections, want 40", got)
	}

	// Half-close: the last line written before the FIN still comes back,
	// then the backend closes and the client reads EOF.
	c := cs[0]
	if _, err := io.WriteString(c.C, "last\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.C.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c.R)
	if err != nil || string(rest) != "last\n" {
		t.Fatalf("after half-close read %q, %v; want \"last\\n\", EOF", rest, err)
	}

	if err := h.Stop(t); err != nil {
		t.Fatalf("serveTCP = %v, want nil", err)
	}
	if got := h.counter("closed", "db", "client"); got != 1 {
		t.Errorf("closed{reason=client} = %v, want 1", got)
	}
	if got := h.counter("closed", "db", "drain"); got != 39 {
		t.Errorf("closed{reason=drain} = %v, want 39", got)
	}
	if got := h.counter("open", "db", e1.Addr()) + h.counter("open", "db", e2.Addr()); got != 0 {
		t.Errorf("open connections after stop = %v, want 0", got)
	}
	if got := h.p.Builder.Backend(e1.Addr()).InFlight() + h.p.Builder.Backend(e2.Addr()).InFlight(); got != 0 {
		t.Errorf("backend slots held after stop = %d, want 0", got)
	}
}

// TestTCPProxyPersistence: a plan change moves no connection; a backend
// that turns unhealthy has exactly its connections closed (both sides),
// and new connections avoid it.
func TestTCPProxyPersistence(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1, e2, w1 := gfetest.NewEchoBackend(t, "e1"), gfetest.NewEchoBackend(t, "e2"), gfetest.NewEchoBackend(t, "w1")
	cfg := gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr(), e2.Addr()), gfetest.Instances(w1.Addr()), 0)
	h := startTCP(t, cfg)
	cs, by := h.Open(t, 20)
	if want := map[string]int{"e1": 10, "e2": 10}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}

	// Another nyc gfe reports 280 connections: with this node's, nyc's
	// demand exceeds us-east's 200 and the plan spills the rest to
	// eu-west. Existing connections stay.
	h.p.SetPeer(routing.Peer{Node: "gfe-nyc-2", Site: "nyc", Demand: map[string]float64{"db": 280}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}})
	h.clk.Advance(time.Second)
	h.p.Step()
	var west float64
	for _, f := range h.p.Table().Services["db"].Plan().Row("nyc") {
		if f.Region == "eu-west" {
			west += f.Share
		}
	}
	if west < 0.25 {
		t.Fatalf("plan share of eu-west = %v, want a spill above 0.25", west)
	}
	for i, c := range cs {
		if err := c.Echo(fmt.Sprintf("still %d", i)); err != nil {
			t.Fatalf("after the plan change: %v", err)
		}
	}
	if got := e1.Accepted.Load() + e2.Accepted.Load() + w1.Accepted.Load(); got != 20 {
		t.Fatalf("backends accepted %d connections, want 20 (none re-dialled)", got)
	}

	// e1 fails its health check: its 10 connections are closed on both
	// sides; e2's stay.
	h.p.Apply(snapshot.FromConfig("v2", cfg, e1.Addr()))
	h.clk.Advance(reapInterval)
	for _, c := range cs {
		if c.Backend == "e1" {
			c.WaitClosed(t)
		}
	}
	e1.WaitClosed(t, 10)
	for i, c := range cs {
		if c.Backend == "e2" {
			if err := c.Echo(fmt.Sprintf("e2 %d", i)); err != nil {
				t.Fatalf("a connection to healthy e2 broke: %v", err)
			}
		}
	}
	if got := e2.Open.Load(); got != 10 {
		t.Errorf("e2 holds %d connections, want 10", got)
	}

	// Reconnecting clients land elsewhere, never on e1.
	h.p.Step()
	_, by = h.Open(t, 10)
	if by["e1"] != 0 || by["e2"]+by["w1"] != 10 {
		t.Errorf("reconnections by backend = %v, want none on e1", by)
	}
	if err := h.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("closed", "db", "unhealthy"); got != 10 {
		t.Errorf("closed{reason=unhealthy} = %v, want 10", got)
	}
}

// TestTCPProxySpillsWhenBusy: each connection holds a slot of its backend,
// so max_concurrency caps an instance's connections; once the plan's
// groups are full, new connections spill to the nearest free backend.
func TestTCPProxySpillsWhenBusy(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1, e2, w1 := gfetest.NewEchoBackend(t, "e1"), gfetest.NewEchoBackend(t, "e2"), gfetest.NewEchoBackend(t, "w1")
	east := []gfetest.TCPInstance{{Addr: e1.Addr(), MaxConcurrency: 3}, {Addr: e2.Addr(), MaxConcurrency: 3}}
	h := startTCP(t, gfetest.TCPConfig(t, "waterfall", east, gfetest.Instances(w1.Addr()), 0))
	_, by := h.Open(t, 8)
	if want := map[string]int{"e1": 3, "e2": 3, "w1": 2}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}
	svc := h.p.Table().Services["db"]
	if got := svc.Meters().Decisions[routing.ReasonSpillCapacity].Load(); got != 2 {
		t.Errorf("spill_capacity decisions = %d, want 2", got)
	}
	if got := h.p.Builder.Backend(e1.Addr()).InFlight(); got != 3 {
		t.Errorf("e1 slots in use = %d, want 3", got)
	}
}

// TestTCPProxyHashIsNotSpilled: a baseline policy keeps its own behaviour:
// a full hashed backend refuses the connection instead of spilling.
func TestTCPProxyHashIsNotSpilled(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfig(t, "hash2", []gfetest.TCPInstance{{Addr: e1.Addr(), MaxConcurrency: 1}}, nil, 0))
	first := gfetest.DialTCP(t, h.Addr)
	if first.Backend != "e1" {
		t.Fatalf("backend %q, want e1", first.Backend)
	}
	// The second connection is reset by the gfe, which may happen before
	// Dial returns.
	if c, err := net.Dial("tcp", h.Addr); err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(gfetest.TCPTestTimeout))
		second := &gfetest.TCPClient{C: c, R: bufio.NewReader(c), Backend: "(refused)"}
		second.WaitClosed(t)
	}
	if err := h.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("accepted", "db", "busy"); got != 1 {
		t.Errorf("accepted{result=busy} = %v, want 1", got)
	}
}

// TestTCPProxyDialRetry: a backend that refuses connections costs each
// client one retry on another backend, never a failed connection.
func TestTCPProxyDialRetry(t *testing.T) {
	gfetest.CheckLeaks(t)
	e2 := gfetest.NewEchoBackend(t, "e2")
	dead := gfetest.NewEchoBackend(t, "dead")
	dead.Stop() // its port now refuses connections
	var deadDials atomic.Int64
	h := startTCPWith(t, gfetest.TCPConfig(t, "waterfall", gfetest.Instances(dead.Addr(), e2.Addr()), nil, 0), func(x *Proxy) {
		dial := x.dial
		x.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == dead.Addr() {
				deadDials.Add(1)
			}
			return dial(ctx, network, addr)
		}
	})
	_, by := h.Open(t, 10)
	if want := map[string]int{"e2": 10}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}
	n := deadDials.Load()
	if n == 0 {
		t.Fatal("no connection was first sent to the dead backend; the retry is untested")
	}
	if got := metricValue(h.backendErrors); got != float64(n) {
		t.Errorf("backend errors = %v, want %d (one per dial of the dead backend)", got, n)
	}
	if got := h.p.Builder.Backend(dead.Addr()).InFlight(); got != 0 {
		t.Errorf("the dead backend holds %d slots, want 0", got)
	}
	// The closed loop counts each failed dial on the dead backend and each
	// connect on the live one.
	if s := h.p.Builder.Backend(dead.Addr()).TakeSignals(); s.Failed != n || s.Answered != 0 {
		t.Errorf("dead backend's signals %+v, want %d failed", s, n)
	}
	if s := h.p.Builder.Backend(e2.Addr()).TakeSignals(); s.Answered != 10 || s.Latency <= 0 {
		t.Errorf("live backend's signals %+v, want 10 answered with their connect time", s)
	}
}

// TestTCPProxyIdleTimeout: a connection is closed after IdleTimeout without
// a byte either way; traffic in between resets the wait.
func TestTCPProxyIdleTimeout(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr()), nil, 10*time.Second))
	c := gfetest.DialTCP(t, h.Addr)
	if err := c.Echo("a"); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(6 * time.Second)
	if err := c.Echo("b"); err != nil { // activity at 6 s
		t.Fatal(err)
	}
	// At 12 s the connection has been quiet for 6 s: still open.
	h.clk.Advance(6 * time.Second)
	h.sweepAt(t, h.clk.Now())
	if err := c.Echo("c"); err != nil { // activity at 12 s
		t.Fatalf("closed after 6 s of quiet: %v", err)
	}
	h.clk.Advance(10 * time.Second) // 10 s of quiet by now
	h.advanceUntilClosed(t, c)
	if err := h.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("closed", "db", "idle"); got != 1 {
		t.Errorf("closed{reason=idle} = %v, want 1", got)
	}
}

// TestTCPProxyDefaultIdleTimeout (the first security review, finding 4): a
// tcp listener that sets no idle_timeout still closes a connection idle for
// the default 10 minutes, and counts it.
func TestTCPProxyDefaultIdleTimeout(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfigWith(t, "waterfall", gfetest.Instances(e1.Addr()), nil, ""))
	cs, _ := h.Open(t, 3)
	for _, c := range cs {
		if err := c.Echo("x"); err != nil {
			t.Fatal(err)
		}
	}
	h.clk.Advance(10*time.Minute - time.Second)
	h.sweepAt(t, h.clk.Now())
	if got := h.counter("closed", "db", "idle"); got != 0 {
		t.Fatalf("closed{reason=idle} = %v before 10 minutes, want 0", got)
	}
	h.clk.Advance(time.Second)
	for _, c := range cs {
		h.advanceUntilClosed(t, c)
	}
	waitFor(t, "3 idle closes counted", func() bool { return h.counter("closed", "db", "idle") == 3 })
}

// sweepAt waits until the listener's watcher has swept at a clock time of
// at least at: it advances the clock by reapInterval until a sweep reports
// that time (polling real time only to wait for the watcher goroutine).
func (h *tcpHarness) sweepAt(t *testing.T, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(gfetest.TCPTestTimeout)
	for h.x.lastSweep().Before(at) {
		if time.Now().After(deadline) {
			t.Fatalf("no sweep at %v (last %v)", at, h.x.lastSweep())
		}
		h.clk.Advance(reapInterval)
		time.Sleep(time.Millisecond) // lets the watcher run; the outcome does not depend on it
	}
}

// advanceUntilClosed sweeps at the clock's present time and waits for c to
// be closed.
func (h *tcpHarness) advanceUntilClosed(t *testing.T, c *gfetest.TCPClient) {
	t.Helper()
	h.sweepAt(t, h.clk.Now())
	c.WaitClosed(t)
}

// dialRefused opens a raw connection to addr from local (nil: any) and
// checks that the proxy closes it at once, before any byte: its first read
// fails with EOF or a reset, well before the test timeout.
func dialRefused(t *testing.T, addr string, local net.Addr) {
	t.Helper()
	d := net.Dialer{LocalAddr: local}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return // refused by the kernel: closed too
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(gfetest.TCPTestTimeout))
	b := make([]byte, 1)
	n, err := c.Read(b)
	var ne net.Error
	switch {
	case n > 0:
		t.Fatalf("refused connection read %q, want it closed", b[:n])
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("over-cap connection still open after %v", gfetest.TCPTestTimeout)
	}
}

// dialFrom is gfetest.DialTCP from local address ip.
func dialFrom(t *testing.T, addr, ip string) *gfetest.TCPClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(gfetest.TCPTestTimeout))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the hello from %s: %v", ip, err)
	}
	return &gfetest.TCPClient{C: c, R: r, Backend: strings.TrimSpace(strings.TrimPrefix(line, "hello "))}
}

// TestTCPProxyClientCap (the first security review, finding 4): one client
// address opening more connections than max_connections_per_client gets the
// extra ones closed at once and counted; the backend never sees them; another
// client address is not affected; a closed connection frees its place.
func TestTCPProxyClientCap(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfigWith(t, "waterfall", gfetest.Instances(e1.Addr()), nil, "max_connections_per_client: 5"))
	cs, _ := h.Open(t, 5) // idle connections from 127.0.0.1
	for range 20 {
		dialRefused(t, h.Addr, nil)
	}
	if got := h.refused("client_limit"); got != 20 {
		t.Errorf("refused{reason=client_limit} = %v, want 20", got)
	}
	if got := e1.Accepted.Load(); got != 5 {
		t.Errorf("backend accepted %d connections, want 5 (none for the refused ones)", got)
	}
	other := dialFrom(t, h.Addr, "127.0.0.2")
	if err := other.Echo("other client"); err != nil {
		t.Fatalf("another client address was refused: %v", err)
	}
	cs[0].C.Close()
	e1.WaitClosed(t, 1)
	waitFor(t, "the closed connection's place", func() bool { return h.admitted("127.0.0.1") == 4 })
	if err := gfetest.DialTCP(t, h.Addr).Echo("again"); err != nil {
		t.Fatalf("a connection after one closed: %v", err)
	}
	if got := h.refused("client_limit"); got != 20 {
		t.Errorf("refused{reason=client_limit} = %v, want still 20", got)
	}
}

// TestTCPProxyListenerCap: the listener's max_connections caps its open
// connections whatever their clients.
func TestTCPProxyListenerCap(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfigWith(t, "waterfall", gfetest.Instances(e1.Addr()), nil, "max_connections: 4"))
	h.Open(t, 2)
	dialFrom(t, h.Addr, "127.0.0.2")
	dialFrom(t, h.Addr, "127.0.0.3")
	dialRefused(t, h.Addr, &net.TCPAddr{IP: net.ParseIP("127.0.0.4")})
	dialRefused(t, h.Addr, nil)
	if got := h.refused("listener_limit"); got != 2 {
		t.Errorf("refused{reason=listener_limit} = %v, want 2", got)
	}
	if got := e1.Accepted.Load(); got != 4 {
		t.Errorf("backend accepted %d connections, want 4", got)
	}
}

// TestTCPProxyFirstByteTimeout: a client that sends nothing within
// first_byte_timeout of its arrival is closed (the backend speaks first
// here, as MySQL's does: its greeting does not count); one that answered
// stays.
func TestTCPProxyFirstByteTimeout(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfigWith(t, "waterfall", gfetest.Instances(e1.Addr()), nil, "first_byte_timeout: 5s"))
	mute, talker := gfetest.DialTCP(t, h.Addr), gfetest.DialTCP(t, h.Addr)
	if err := talker.Echo("hi"); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(4 * time.Second)
	h.sweepAt(t, h.clk.Now())
	h.clk.Advance(time.Second)
	h.advanceUntilClosed(t, mute)
	if err := talker.Echo("still here"); err != nil {
		t.Fatalf("a client that sent a byte was closed: %v", err)
	}
	if got := h.counter("closed", "db", "first_byte"); got != 1 {
		t.Errorf("closed{reason=first_byte} = %v, want 1", got)
	}
}

// TestTCPProxyFDBudget: a connection the process's fd budget cannot cover
// is refused at once and counted; a connection that ends gives its
// descriptors back.
func TestTCPProxyFDBudget(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	budget := fdlimit.NewBudget(3 * ConnFDs)
	h := startTCPWith(t, gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr()), nil, 0), func(x *Proxy) { x.budget = budget })
	cs, _ := h.Open(t, 3)
	dialRefused(t, h.Addr, nil)
	if got := h.refused("fd_budget"); got != 1 {
		t.Errorf("refused{reason=fd_budget} = %v, want 1", got)
	}
	if got := budget.Used(); got != 3*ConnFDs {
		t.Errorf("budget used = %d, want %d", got, 3*ConnFDs)
	}
	cs[0].C.Close()
	e1.WaitClosed(t, 1)
	waitFor(t, "the budget given back", func() bool { return budget.Used() == 2*ConnFDs })
	if err := gfetest.DialTCP(t, h.Addr).Echo("room again"); err != nil {
		t.Fatal(err)
	}
}

// TestTCPProxyDrain: after ctx ends no connection is accepted, open ones
// keep working until DrainTimeout, then they are closed and serveTCP
// returns nil.
func TestTCPProxyDrain(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr()), nil, 0))
	cs, _ := h.Open(t, 2)
	h.Cancel()
	h.BlockUntil(t, 2) // the drain timer is armed: the listener is closed
	// A new connection is refused (or, should another socket have taken
	// the port meanwhile, not proxied: checked below).
	if c, err := net.Dial("tcp", h.Addr); err == nil {
		c.Close()
	}
	for _, c := range cs {
		if err := c.Echo("draining"); err != nil {
			t.Fatalf("an open connection broke at drain start: %v", err)
		}
	}
	cs[0].C.Close()
	e1.WaitClosed(t, 1)
	h.clk.Advance(drainTimeout)
	cs[1].WaitClosed(t)
	select {
	case err := <-h.Done:
		h.Done <- err
		if err != nil {
			t.Fatalf("serveTCP = %v, want nil", err)
		}
	case <-time.After(gfetest.TCPTestTimeout):
		t.Fatal("serveTCP did not return")
	}
	if got := h.counter("closed", "db", "drain"); got != 1 {
		t.Errorf("closed{reason=drain} = %v, want 1", got)
	}
	if got := h.counter("accepted", "db", "proxied"); got != 2 || e1.Accepted.Load() != 2 {
		t.Errorf("proxied %v connections, backend accepted %d; want 2 and 2 (none while draining)", got, e1.Accepted.Load())
	}
}

// TestTCPProxyRetiredListener: when its socket is closed under it (the
// listener was removed or changed), serveTCP stops accepting but lets open
// connections go on, until ctx ends: then it closes them at once.
func TestTCPProxyRetiredListener(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	h := startTCP(t, gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr()), nil, 0))
	cs, _ := h.Open(t, 1)
	h.Ln.Close()
	h.BlockUntil(t, 2) // draining: the drain timer is armed
	if err := cs[0].Echo("still here"); err != nil {
		t.Fatalf("an open connection broke when its listener closed: %v", err)
	}
	h.Cancel() // hard stop, well before DrainTimeout
	cs[0].WaitClosed(t)
	select {
	case err := <-h.Done:
		h.Done <- err
		if err != nil {
			t.Fatalf("serveTCP = %v, want nil", err)
		}
	case <-time.After(gfetest.TCPTestTimeout):
		t.Fatal("serveTCP did not return")
	}
	if got := h.counter("closed", "db", "drain"); got != 1 {
		t.Errorf("closed{reason=drain} = %v, want 1", got)
	}
}
