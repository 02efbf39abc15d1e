package rtt

import (
	"context"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/config"
)

// testTimeout bounds every blocking wait; it is a guard against hangs,
// never a delay the tests rely on.
const testTimeout = 10 * time.Second

// distance is the user-space delay that stands in for a far region: the
// servers below answer this long after a request arrives.
const distance = 30 * time.Millisecond

// slack is how far above distance an estimate may be on a busy machine.
const slack = time.Second

// newTestProber returns a Prober whose rounds the test drives by calling
// round itself (the test goroutine is the Run goroutine); its connections
// are closed when the test ends.
func newTestProber(t *testing.T) *Prober {
	t.Helper()
	p := New(Config{Path: "/rtt", Interval: time.Hour}, Options{})
	t.Cleanup(p.closeAll)
	return p
}

// countingListener counts the connections it accepted that are still open
// on the server side.
type countingListener struct {
	net.Listener
	open atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// listen returns a counting listener on 127.0.0.1, closed when the test ends.
func listen(t *testing.T) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &countingListener{Listener: ln}
}

// tcpServer is a TCP-only instance: it accepts and closes, speaking nothing.
func tcpServer(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// grpcOpts says how grpcServer serves.
type grpcOpts struct {
	health     bool // register grpc.health.v1 (else every Check is UNIMPLEMENTED)
	notServing bool // the health service answers NOT_SERVING
	delay      time.Duration
}

// grpcServer is a gRPC instance; every call is answered after o.delay.
func grpcServer(t *testing.T, o grpcOpts) *countingListener {
	t.Helper()
	ln := listen(t)
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		time.Sleep(o.delay) // the emulated distance
		return h(ctx, req)
	})}
	if o.delay > 0 && !o.health {
		// Interceptors do not see calls of unregistered services; this
		// answers them as grpc-go would (UNIMPLEMENTED), after the delay.
		opts = append(opts, grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			time.Sleep(o.delay) // the emulated distance
			return status.Error(codes.Unimplemented, "unknown service")
		}))
	}
	s := grpc.NewServer(opts...)
	if o.health {
		hs := health.NewServer()
		if o.notServing {
			hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		}
		healthpb.RegisterHealthServer(s, hs)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(ln) })
	t.Cleanup(func() { s.Stop(); wg.Wait() })
	return ln
}

// httpServer is an HTTP (or HTTPS) instance answering after delay.
func httpServer(t *testing.T, tls bool, delay time.Duration) string {
	t.Helper()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		time.Sleep(delay) // the emulated distance
	})
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestProtocols(t *testing.T) {
	tests := []struct {
		name   string
		target func(t *testing.T) Target
		want   bool // whether the region gets an estimate
	}{
		{"http", func(t *testing.T) Target { return Target{httpServer(t, false, 0), config.HealthHTTP} }, true},
		{"empty protocol is http", func(t *testing.T) Target { return Target{httpServer(t, false, 0), ""} }, true},
		{"https", func(t *testing.T) Target { return Target{httpServer(t, true, 0), config.HealthHTTPS} }, true},
		{"tcp only", func(t *testing.T) Target { return Target{tcpServer(t), config.HealthTCP} }, true},
		{"grpc serving", func(t *testing.T) Target {
			return Target{grpcServer(t, grpcOpts{health: true}).Addr().String(), config.HealthGRPC}
		}, true},
		{"grpc not serving", func(t *testing.T) Target {
			return Target{grpcServer(t, grpcOpts{health: true, notServing: true}).Addr().String(), config.HealthGRPC}
		}, true},
		{"grpc without health service", func(t *testing.T) Target {
			return Target{grpcServer(t, grpcOpts{}).Addr().String(), config.HealthGRPC}
		}, true},
		{"tcp-only instance probed as http", func(t *testing.T) Target { return Target{tcpServer(t), config.HealthHTTP} }, false},
		{"tcp-only instance probed as grpc", func(t *testing.T) Target { return Target{tcpServer(t), config.HealthGRPC} }, false},
		{"tcp, nothing listening", func(t *testing.T) Target { return Target{closedAddr(t), config.HealthTCP} }, false},
		{"grpc, nothing listening", func(t *testing.T) Target { return Target{closedAddr(t), config.HealthGRPC} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProber(t)
			tg := tt.target(t)
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			for range 2 { // the second round reuses kept-alive connections
				p.round(ctx, map[string]Target{"r": tg})
			}
			ms, ok := p.Snapshot()["r"]
			if ok != tt.want {
				t.Fatalf("Snapshot()[r] = %v, %v after probing %+v; want an estimate: %v", ms, ok, tg, tt.want)
			}
			if ok && (ms < 0 || ms >= float64(slack.Milliseconds())) {
				t.Errorf("estimate of a local %s target = %v ms, want in [0, %v)", tg.Protocol, ms, slack)
			}
			if tt.want || protocol(tg) != config.HealthGRPC {
				return
			}
			if n := len(p.conns); n != 0 {
				t.Errorf("after a failed grpc probe the prober keeps %d connections, want 0 (the next round dials afresh)", n)
			}
		})
	}
}

func TestDelayedTarget(t *testing.T) {
	tests := []struct {
		name   string
		target func(t *testing.T) Target
	}{
		{"http", func(t *testing.T) Target { return Target{httpServer(t, false, distance), config.HealthHTTP} }},
		{"https", func(t *testing.T) Target { return Target{httpServer(t, true, distance), config.HealthHTTPS} }},
		{"grpc", func(t *testing.T) Target {
			return Target{grpcServer(t, grpcOpts{health: true, delay: distance}).Addr().String(), config.HealthGRPC}
		}},
		{"grpc unimplemented", func(t *testing.T) Target {
			return Target{grpcServer(t, grpcOpts{delay: distance}).Addr().String(), config.HealthGRPC}
		}},
	}
	lo, hi := float64(distance.Milliseconds()), float64((distance + slack).Milliseconds())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProber(t)
			tg := tt.target(t)
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			for range 3 {
				p.round(ctx, map[string]Target{"far": tg})
			}
			ms, ok := p.Snapshot()["far"]
			if !ok || ms < lo || ms >= hi {
				t.Fatalf("Snapshot()[far] = %v, %v for a target %v away, want an estimate in [%v, %v) ms", ms, ok, distance, lo, hi)
			}
		})
	}
}

func TestProtocolChange(t *testing.T) {
	// One instance speaks gRPC, answering after distance; tcp sees only
	// the handshake, which the kernel completes at once.
	ln := grpcServer(t, grpcOpts{health: true, delay: distance})
	addr := ln.Addr().String()
	p := newTestProber(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	lo := float64(distance.Milliseconds())
	steps := []struct {
		name      string
		protocol  config.HealthProtocol
		wantFar   bool // estimate >= distance (else < distance)
		wantConns int
	}{
		{"grpc", config.HealthGRPC, true, 1},
		{"grpc again, same connection", config.HealthGRPC, true, 1},
		{"tcp: a lower sample lowers the estimate at once; the grpc connection is closed", config.HealthTCP, false, 0},
		{"grpc again: the window keeps the tcp sample", config.HealthGRPC, false, 1},
	}
	for _, s := range steps {
		p.round(ctx, map[string]Target{"r": {addr, s.protocol}})
		ms, ok := p.Snapshot()["r"]
		if !ok || (ms >= lo) != s.wantFar {
			t.Fatalf("%s: Snapshot()[r] = %v, %v; want an estimate, >= %v ms: %v", s.name, ms, ok, lo, s.wantFar)
		}
		if n := len(p.conns); n != s.wantConns {
			t.Fatalf("%s: prober keeps %d grpc connections, want %d", s.name, n, s.wantConns)
		}
	}
}

// waitFor polls cond until it holds, failing t after testTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition, not a delay the test relies on
	}
}

func TestGRPCConnClosed(t *testing.T) {
	a, b := grpcServer(t, grpcOpts{health: true}), grpcServer(t, grpcOpts{})
	var (
		mu      sync.Mutex
		targets = map[string]Target{
			"a": {a.Addr().String(), config.HealthGRPC},
			"b": {b.Addr().String(), config.HealthGRPC},
		}
	)
	p := New(Config{Path: "/rtt", Interval: time.Hour}, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, func() map[string]Target {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(targets) // the prober never shares the test's map
		})
	}()
	waitFor(t, "estimates of a and b", func() bool { return len(p.Snapshot()) == 2 })
	if a.open.Load() != 1 || b.open.Load() != 1 {
		t.Fatalf("open connections: a %d, b %d; want one kept-alive connection each", a.open.Load(), b.open.Load())
	}

	mu.Lock()
	delete(targets, "b")
	mu.Unlock()
	p.ProbeSoon()
	waitFor(t, "b's connection closed", func() bool { return b.open.Load() == 0 })
	waitFor(t, "b's estimate dropped", func() bool { _, ok := p.Snapshot()["b"]; return !ok })
	if n := a.open.Load(); n != 1 {
		t.Fatalf("a has %d open connections after b left, want 1 (kept alive)", n)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Run did not return after cancel")
	}
	waitFor(t, "a's connection closed after Run returned", func() bool { return a.open.Load() == 0 })
}
