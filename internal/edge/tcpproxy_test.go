package edge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// tcpTestTimeout bounds every blocking wait of the TCP proxy tests; it is a
// guard against hangs, never a delay the tests rely on.
const tcpTestTimeout = 10 * time.Second

// checkLeaks fails t if goroutines started during t are still running when
// every other cleanup of t has run.
func checkLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// echoBackend is a real TCP server standing in for a tcp instance, like the
// test backend's tcp mode: it writes "hello <name>\n", then echoes until its
// client closes, then closes.
type echoBackend struct {
	name     string
	ln       net.Listener
	accepted atomic.Int64
	open     atomic.Int64
	closed   chan struct{} // one value per connection that ended

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newEchoBackend(t *testing.T, name string) *echoBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &echoBackend{name: name, ln: ln, closed: make(chan struct{}, 1024), conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	t.Cleanup(b.stop)
	return b
}

func (b *echoBackend) addr() string { return b.ln.Addr().String() }

func (b *echoBackend) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.accepted.Add(1)
		b.open.Add(1)
		b.mu.Lock()
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Go(func() {
			defer func() {
				c.Close()
				b.mu.Lock()
				delete(b.conns, c)
				b.mu.Unlock()
				b.open.Add(-1)
				b.closed <- struct{}{}
			}()
			if _, err := io.WriteString(c, "hello "+b.name+"\n"); err != nil {
				return
			}
			io.Copy(c, c)
		})
	}
}

func (b *echoBackend) stop() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// waitClosed waits until n of b's connections have ended.
func (b *echoBackend) waitClosed(t *testing.T, n int) {
	t.Helper()
	timeout := time.NewTimer(tcpTestTimeout)
	defer timeout.Stop()
	for i := range n {
		select {
		case <-b.closed:
		case <-timeout.C:
			t.Fatalf("%s: %d of %d connections closed", b.name, i, n)
		}
	}
}

// tcpClient is a client connection through the proxy.
type tcpClient struct {
	c       net.Conn
	r       *bufio.Reader
	backend string // from the hello line
}

func dialTCP(t *testing.T, addr string) *tcpClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(tcpTestTimeout))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the hello through %s: %v", addr, err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "hello" {
		t.Fatalf("hello line %q", line)
	}
	return &tcpClient{c: c, r: r, backend: f[1]}
}

// echo sends msg and checks that it comes back.
func (c *tcpClient) echo(msg string) error {
	if _, err := io.WriteString(c.c, msg+"\n"); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo of %q = %q", msg, got)
	}
	return nil
}

// waitClosed reads until the proxy closes the connection (EOF or reset)
// and fails on data or a timeout.
func (c *tcpClient) waitClosed(t *testing.T) {
	t.Helper()
	b, err := c.r.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		t.Fatalf("connection to %s: read %q, want it closed", c.backend, b)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("connection to %s still open after %v", c.backend, tcpTestTimeout)
	}
}

// tcpInstance is one instance in tcpConfig.
type tcpInstance struct {
	addr           string
	maxConcurrency int
}

// tcpConfig is a CONNECTION-mode service "db" over groups east (us-east)
// and west (eu-west; left out when west is empty), 100 connections per
// instance, served by tcp listener "db" with the given idle timeout.
func tcpConfig(t *testing.T, policy string, east, west []tcpInstance, idle time.Duration) *config.Config {
	t.Helper()
	inst := func(is []tcpInstance) string {
		var b strings.Builder
		for _, in := range is {
			fmt.Fprintf(&b, "              - {address: %s, max_concurrency: %d}\n", in.addr, in.maxConcurrency)
		}
		return b.String()
	}
	westRegion, westBackend := "", ""
	if len(west) > 0 {
		westRegion = "  - name: eu-west\n    zones:\n      - name: eu-west-b\n        groups:\n          - name: west\n            instances:\n" + inst(west)
		westBackend = "      - {group: west, max_connections_per_instance: 100}\n"
	}
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
%s%sservices:
  - name: db
    policy: %s
    balancing_mode: CONNECTION
    backends:
      - {group: east, max_connections_per_instance: 100}
%s    health_check: {protocol: tcp}
routes:
  - {host: "*", path_prefix: /, service: db}
listeners:
  - {name: db, protocol: tcp, port: 5432, service: db, idle_timeout: %v}
`, inst(east), westRegion, policy, westBackend, idle)
	c, err := config.Parse([]byte(y), "tcp.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, y)
	}
	return c
}

func instances(bs ...*echoBackend) []tcpInstance {
	out := make([]tcpInstance, len(bs))
	for i, b := range bs {
		out[i] = tcpInstance{addr: b.addr()}
	}
	return out
}

// tcpHarness is an Edge with a planned table and one tcp listener served by
// serveTCP on a loopback port.
type tcpHarness struct {
	e      *Edge
	g      *fakeGossip
	clk    *clock.Fake
	cfg    *config.Config
	ln     net.Listener // the tcp listener
	addr   string       // its address
	cancel context.CancelFunc
	done   chan error // serveTCP's result
}

// startTCP applies cfg (nyc measures us-east at 5 ms, eu-west at 80 ms),
// plans once and serves cfg's listener "db". The test's cleanup stops it.
func startTCP(t *testing.T, cfg *config.Config) *tcpHarness {
	t.Helper()
	return startTCPWith(t, cfg, nil)
}

// startTCPWith is startTCP with a hook that may change the Edge before it
// serves.
func startTCPWith(t *testing.T, cfg *config.Config, hook func(*Edge)) *tcpHarness {
	t.Helper()
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	ecfg := DefaultConfig()
	ecfg.Node, ecfg.Site = "gfe-nyc", "nyc"
	ecfg.Damping = 1
	// Connections are picked concurrently: a seeded SplitMix64 sequence
	// that is safe for concurrent use.
	var seed atomic.Uint64
	e, err := New(ecfg, Options{Gossip: g, Clock: clk, Rand: func() uint64 { return mix64(seed.Add(0x9e3779b97f4a7c15)) }})
	if err != nil {
		t.Fatal(err)
	}
	e.rtt.set("us-east", 5)
	e.rtt.set("eu-west", 80)
	if err := e.ApplySnapshot(ControlState{Version: "v1", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	e.planner.step(clk.Now())
	if hook != nil {
		hook(e)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, ok := cfg.Listener("db")
	if !ok {
		t.Fatal("no listener db")
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &tcpHarness{e: e, g: g, clk: clk, cfg: cfg, ln: ln, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- e.serveTCP(ctx, ln, l) }()
	t.Cleanup(func() {
		select {
		case <-h.done: // the test stopped it
		default:
			h.stop(t)
		}
	})
	// The control-state watcher's ticker is armed before any test step
	// advances the clock.
	h.blockUntil(t, 1)
	return h
}

func (h *tcpHarness) blockUntil(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tcpTestTimeout)
	defer cancel()
	if err := h.clk.BlockUntil(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers: %v (have %d)", n, err, h.clk.Waiters())
	}
}

// stop cancels serveTCP, runs its drain out and returns its result.
func (h *tcpHarness) stop(t *testing.T) error {
	t.Helper()
	h.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), tcpTestTimeout)
	defer cancel()
	// Either every connection ends and serveTCP returns at once, or the
	// drain timer gets armed next to the watcher's ticker.
	armed := make(chan error, 1)
	go func() { armed <- h.clk.BlockUntil(ctx, 2) }()
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return err
	case err := <-armed:
		if err != nil {
			t.Fatalf("serveTCP neither returned nor armed its drain timer: %v", err)
		}
	}
	h.clk.Advance(h.e.cfg.DrainTimeout)
	select {
	case err := <-h.done:
		h.done <- err
		return err
	case <-ctx.Done():
		t.Fatal("serveTCP did not return")
		return nil
	}
}

func (h *tcpHarness) open(t *testing.T, n int) ([]*tcpClient, map[string]int) {
	t.Helper()
	cs := make([]*tcpClient, n)
	by := map[string]int{}
	for i := range cs {
		cs[i] = dialTCP(t, h.addr)
		by[cs[i].backend]++
	}
	return cs, by
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

func (h *tcpHarness) counter(name string, labels ...string) float64 {
	switch name {
	case "open":
		return metricValue(h.e.tcp.metrics.open.WithLabelValues(labels...))
	case "closed":
		return metricValue(h.e.tcp.metrics.closed.WithLabelValues(labels...))
	case "accepted":
		return metricValue(h.e.tcp.metrics.accepted.WithLabelValues(labels...))
	}
	panic(name)
}

// TestTCPProxyEchoAndHalfClose: connections are spread over the plan's
// group round robin, bytes go both ways, and a client's half-close reaches
// the backend while the reply still comes back.
func TestTCPProxyEchoAndHalfClose(t *testing.T) {
	checkLeaks(t)
	e1, e2, w1 := newEchoBackend(t, "e1"), newEchoBackend(t, "e2"), newEchoBackend(t, "w1")
	h := startTCP(t, tcpConfig(t, "waterfall", instances(e1, e2), instances(w1), 0))

	// No demand yet: the idle plan sends nyc to us-east; round robin there.
	cs, by := h.open(t, 40)
	if want := map[string]int{"e1": 20, "e2": 20}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}
	for i, c := range cs {
		if err := c.echo(fmt.Sprintf("ping %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.counter("open", "db", e1.addr()); got != 20 {
		t.Errorf("open connections gauge of e1 = %v, want 20", got)
	}
	if got := e1.open.Load() + e2.open.Load(); got != 40 {
		t.Errorf("backends hold %d connections, want 40", got)
	}

	// Half-close: the last line written before the FIN still comes back,
	// then the backend closes and the client reads EOF.
	c := cs[0]
	if _, err := io.WriteString(c.c, "last\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c.r)
	if err != nil || string(rest) != "last\n" {
		t.Fatalf("after half-close read %q, %v; want \"last\\n\", EOF", rest, err)
	}

	if err := h.stop(t); err != nil {
		t.Fatalf("serveTCP = %v, want nil", err)
	}
	if got := h.counter("closed", "db", "client"); got != 1 {
		t.Errorf("closed{reason=client} = %v, want 1", got)
	}
	if got := h.counter("closed", "db", "drain"); got != 39 {
		t.Errorf("closed{reason=drain} = %v, want 39", got)
	}
	if got := h.counter("open", "db", e1.addr()) + h.counter("open", "db", e2.addr()); got != 0 {
		t.Errorf("open connections after stop = %v, want 0", got)
	}
	if got := h.e.planner.backends[e1.addr()].InFlight() + h.e.planner.backends[e2.addr()].InFlight(); got != 0 {
		t.Errorf("backend slots held after stop = %d, want 0", got)
	}
}

// TestTCPProxyPersistence: a plan change moves no connection; a backend
// that turns unhealthy has exactly its connections closed (both sides),
// and new connections avoid it.
func TestTCPProxyPersistence(t *testing.T) {
	checkLeaks(t)
	e1, e2, w1 := newEchoBackend(t, "e1"), newEchoBackend(t, "e2"), newEchoBackend(t, "w1")
	cfg := tcpConfig(t, "waterfall", instances(e1, e2), instances(w1), 0)
	h := startTCP(t, cfg)
	cs, by := h.open(t, 20)
	if want := map[string]int{"e1": 10, "e2": 10}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}

	// Another nyc gfe reports 280 connections: with this node's, nyc's
	// demand exceeds us-east's 200 and the plan spills the rest to
	// eu-west. Existing connections stay.
	h.g.set(gossip.NodeState{Node: "gfe-nyc-2", Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"db": 280}, RTT: map[string]float64{"us-east": 5, "eu-west": 80}})
	h.clk.Advance(time.Second)
	h.e.planner.step(h.clk.Now())
	var west float64
	for _, f := range h.e.table.Load().services["db"].plan.Row("nyc") {
		if f.Region == "eu-west" {
			west += f.Share
		}
	}
	if west < 0.25 {
		t.Fatalf("plan share of eu-west = %v, want a spill above 0.25", west)
	}
	for i, c := range cs {
		if err := c.echo(fmt.Sprintf("still %d", i)); err != nil {
			t.Fatalf("after the plan change: %v", err)
		}
	}
	if got := e1.accepted.Load() + e2.accepted.Load() + w1.accepted.Load(); got != 20 {
		t.Fatalf("backends accepted %d connections, want 20 (none re-dialled)", got)
	}

	// e1 fails its health check: its 10 connections are closed on both
	// sides; e2's stay.
	if err := h.e.ApplySnapshot(ControlState{Version: "v2", Config: cfg, Unhealthy: map[string]bool{e1.addr(): true}}); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(reapInterval)
	for _, c := range cs {
		if c.backend == "e1" {
			c.waitClosed(t)
		}
	}
	e1.waitClosed(t, 10)
	for i, c := range cs {
		if c.backend == "e2" {
			if err := c.echo(fmt.Sprintf("e2 %d", i)); err != nil {
				t.Fatalf("a connection to healthy e2 broke: %v", err)
			}
		}
	}
	if got := e2.open.Load(); got != 10 {
		t.Errorf("e2 holds %d connections, want 10", got)
	}

	// Reconnecting clients land elsewhere, never on e1.
	h.e.planner.step(h.clk.Now())
	_, by = h.open(t, 10)
	if by["e1"] != 0 || by["e2"]+by["w1"] != 10 {
		t.Errorf("reconnections by backend = %v, want none on e1", by)
	}
	if err := h.stop(t); err != nil {
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
	checkLeaks(t)
	e1, e2, w1 := newEchoBackend(t, "e1"), newEchoBackend(t, "e2"), newEchoBackend(t, "w1")
	east := []tcpInstance{{e1.addr(), 3}, {e2.addr(), 3}}
	h := startTCP(t, tcpConfig(t, "waterfall", east, instances(w1), 0))
	_, by := h.open(t, 8)
	if want := map[string]int{"e1": 3, "e2": 3, "w1": 2}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}
	svc := h.e.table.Load().services["db"]
	if got := svc.meters.decisions[reasonSpillCapacity].Load(); got != 2 {
		t.Errorf("spill_capacity decisions = %d, want 2", got)
	}
	if got := h.e.planner.backends[e1.addr()].InFlight(); got != 3 {
		t.Errorf("e1 slots in use = %d, want 3", got)
	}
}

// TestTCPProxyHashIsNotSpilled: a baseline policy keeps its own behaviour:
// a full hashed backend refuses the connection instead of spilling.
func TestTCPProxyHashIsNotSpilled(t *testing.T) {
	checkLeaks(t)
	e1 := newEchoBackend(t, "e1")
	h := startTCP(t, tcpConfig(t, "hash2", []tcpInstance{{e1.addr(), 1}}, nil, 0))
	first := dialTCP(t, h.addr)
	if first.backend != "e1" {
		t.Fatalf("backend %q, want e1", first.backend)
	}
	// The second connection is reset by the gfe, which may happen before
	// Dial returns.
	if c, err := net.Dial("tcp", h.addr); err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(tcpTestTimeout))
		second := &tcpClient{c: c, r: bufio.NewReader(c), backend: "(refused)"}
		second.waitClosed(t)
	}
	if err := h.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("accepted", "db", "busy"); got != 1 {
		t.Errorf("accepted{result=busy} = %v, want 1", got)
	}
}

// TestTCPProxyDialRetry: a backend that refuses connections costs each
// client one retry on another backend, never a failed connection.
func TestTCPProxyDialRetry(t *testing.T) {
	checkLeaks(t)
	e2 := newEchoBackend(t, "e2")
	dead := newEchoBackend(t, "dead")
	dead.stop() // its port now refuses connections
	var deadDials atomic.Int64
	h := startTCPWith(t, tcpConfig(t, "waterfall", instances(dead, e2), nil, 0), func(e *Edge) {
		dial := e.tcp.dial
		e.tcp.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == dead.addr() {
				deadDials.Add(1)
			}
			return dial(ctx, network, addr)
		}
	})
	_, by := h.open(t, 10)
	if want := map[string]int{"e2": 10}; !cmp.Equal(want, by) {
		t.Fatalf("connections by backend = %v, want %v", by, want)
	}
	n := deadDials.Load()
	if n == 0 {
		t.Fatal("no connection was first sent to the dead backend; the retry is untested")
	}
	if got := metricValue(h.e.metrics.backendErrors); got != float64(n) {
		t.Errorf("backend errors = %v, want %d (one per dial of the dead backend)", got, n)
	}
	if got := h.e.planner.backends[dead.addr()].InFlight(); got != 0 {
		t.Errorf("the dead backend holds %d slots, want 0", got)
	}
}

// TestTCPProxyIdleTimeout: a connection is closed after IdleTimeout without
// a byte either way; traffic in between resets the wait.
func TestTCPProxyIdleTimeout(t *testing.T) {
	checkLeaks(t)
	e1 := newEchoBackend(t, "e1")
	h := startTCP(t, tcpConfig(t, "waterfall", instances(e1), nil, 10*time.Second))
	c := dialTCP(t, h.addr)
	if err := c.echo("a"); err != nil {
		t.Fatal(err)
	}
	h.blockUntil(t, 2) // watcher ticker + idle timer
	h.clk.Advance(6 * time.Second)
	if err := c.echo("b"); err != nil { // activity at 6 s
		t.Fatal(err)
	}
	// At 10 s the timer finds 4 s of quiet and re-arms itself instead of
	// closing.
	h.clk.Advance(6 * time.Second)
	h.blockUntil(t, 2)
	h.clk.Advance(10 * time.Second) // 16 s of quiet by now
	c.waitClosed(t)
	if err := h.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("closed", "db", "idle"); got != 1 {
		t.Errorf("closed{reason=idle} = %v, want 1", got)
	}
}

// TestTCPProxyDrain: after ctx ends no connection is accepted, open ones
// keep working until DrainTimeout, then they are closed and serveTCP
// returns nil.
func TestTCPProxyDrain(t *testing.T) {
	checkLeaks(t)
	e1 := newEchoBackend(t, "e1")
	h := startTCP(t, tcpConfig(t, "waterfall", instances(e1), nil, 0))
	cs, _ := h.open(t, 2)
	h.cancel()
	h.blockUntil(t, 2) // the drain timer is armed: the listener is closed
	// A new connection is refused (or, should another socket have taken
	// the port meanwhile, not proxied: checked below).
	if c, err := net.Dial("tcp", h.addr); err == nil {
		c.Close()
	}
	for _, c := range cs {
		if err := c.echo("draining"); err != nil {
			t.Fatalf("an open connection broke at drain start: %v", err)
		}
	}
	cs[0].c.Close()
	e1.waitClosed(t, 1)
	h.clk.Advance(h.e.cfg.DrainTimeout)
	cs[1].waitClosed(t)
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatalf("serveTCP = %v, want nil", err)
		}
	case <-time.After(tcpTestTimeout):
		t.Fatal("serveTCP did not return")
	}
	if got := h.counter("closed", "db", "drain"); got != 1 {
		t.Errorf("closed{reason=drain} = %v, want 1", got)
	}
	if got := h.counter("accepted", "db", "proxied"); got != 2 || e1.accepted.Load() != 2 {
		t.Errorf("proxied %v connections, backend accepted %d; want 2 and 2 (none while draining)", got, e1.accepted.Load())
	}
}

// TestTCPProxyRetiredListener: when its socket is closed under it (the
// listener was removed or changed), serveTCP stops accepting but lets open
// connections go on, until ctx ends: then it closes them at once.
func TestTCPProxyRetiredListener(t *testing.T) {
	checkLeaks(t)
	e1 := newEchoBackend(t, "e1")
	h := startTCP(t, tcpConfig(t, "waterfall", instances(e1), nil, 0))
	cs, _ := h.open(t, 1)
	h.ln.Close()
	h.blockUntil(t, 2) // draining: the drain timer is armed
	if err := cs[0].echo("still here"); err != nil {
		t.Fatalf("an open connection broke when its listener closed: %v", err)
	}
	h.cancel() // hard stop, well before DrainTimeout
	cs[0].waitClosed(t)
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatalf("serveTCP = %v, want nil", err)
		}
	case <-time.After(tcpTestTimeout):
		t.Fatal("serveTCP did not return")
	}
	if got := h.counter("closed", "db", "drain"); got != 1 {
		t.Errorf("closed{reason=drain} = %v, want 1", got)
	}
}

// TestTCPDemandIsOpenConnections: the planner publishes and plans a tcp
// listener's service with its open connections as demand,
// smoothed with time constant DemandSmoothing (1 s).
func TestTCPDemandIsOpenConnections(t *testing.T) {
	checkLeaks(t)
	e1, w1 := newEchoBackend(t, "e1"), newEchoBackend(t, "w1")
	h := startTCP(t, tcpConfig(t, "waterfall", instances(e1), instances(w1), 0))
	h.open(t, 30)
	for _, tt := range []struct {
		name string
		want float64
	}{
		{"after 1s", 30 * (1 - math.Exp(-1))},
		{"after 2s", 30 * (1 - math.Exp(-2))},
	} {
		h.clk.Advance(time.Second)
		h.e.planner.step(h.clk.Now())
		st := h.g.Snapshot().States["gfe-nyc"]
		if got := st.Demand["db"]; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: published demand = %v, want %v", tt.name, got, tt.want)
		}
		if got := h.e.Status().Services[0].DemandRPS; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: planned demand = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAvailable(t *testing.T) {
	cfg := tcpConfig(t, "waterfall", []tcpInstance{{addr: "127.0.0.1:1"}, {addr: "127.0.0.1:2"}}, []tcpInstance{{addr: "127.0.0.1:3"}}, 0)
	tests := []struct {
		name    string
		cs      *ControlState
		service string
		addr    string
		want    bool
	}{
		{"no control state yet", nil, "db", "127.0.0.1:1", true},
		{"healthy", &ControlState{Config: cfg}, "db", "127.0.0.1:3", true},
		{"unhealthy", &ControlState{Config: cfg, Unhealthy: map[string]bool{"127.0.0.1:1": true}}, "db", "127.0.0.1:1", false},
		{"another is unhealthy", &ControlState{Config: cfg, Unhealthy: map[string]bool{"127.0.0.1:1": true}}, "db", "127.0.0.1:2", true},
		{"not an instance of the service", &ControlState{Config: cfg}, "db", "127.0.0.1:9", false},
		{"service removed", &ControlState{Config: cfg}, "gone", "127.0.0.1:1", false},
	}
	for _, tt := range tests {
		if got := available(tt.cs, tt.service, tt.addr); got != tt.want {
			t.Errorf("%s: available(%q, %q) = %v, want %v", tt.name, tt.service, tt.addr, got, tt.want)
		}
	}
}

// mix64 is the SplitMix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
