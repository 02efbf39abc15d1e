package probe

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway-lb/spillway/lb/health"
)

// Real local backends that tests can make fail and recover.

// httpBackend is an httptest server answering every request with status.
// With hang set, it blocks until the client goes away.
type httpBackend struct {
	srv     *httptest.Server
	status  atomic.Int32
	hang    atomic.Bool
	hits    atomic.Int32
	mu      sync.Mutex
	lastReq *http.Request
	body    []byte // written after the header, if set
}

func newHTTPBackend(t *testing.T) *httpBackend {
	t.Helper()
	b := &httpBackend{}
	b.status.Store(http.StatusOK)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		b.mu.Lock()
		b.lastReq = r.Clone(context.Background())
		body := b.body
		b.mu.Unlock()
		if b.hang.Load() {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(int(b.status.Load()))
		_, _ = w.Write(body)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *httpBackend) target() health.Target {
	return health.Target{Addr: b.srv.Listener.Addr().String()}
}

func (b *httpBackend) setHealthy(ok bool) {
	if ok {
		b.status.Store(http.StatusOK)
	} else {
		b.status.Store(http.StatusInternalServerError)
	}
}

// tcpBackend is a bare TCP listener that can be closed and reopened on the
// same port.
type tcpBackend struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	ln   net.Listener // nil while closed
	wg   sync.WaitGroup
}

func newTCPBackend(t *testing.T) *tcpBackend {
	t.Helper()
	b := &tcpBackend{t: t, addr: "127.0.0.1:0"}
	b.setHealthy(true)
	t.Cleanup(func() { b.setHealthy(false) })
	return b
}

func (b *tcpBackend) target() health.Target { return health.Target{Addr: b.addr} }

// setHealthy opens (true) or closes (false) the listener.
func (b *tcpBackend) setHealthy(ok bool) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok && b.ln == nil {
		ln, err := net.Listen("tcp", b.addr)
		if err != nil {
			b.t.Fatalf("listen %s: %v", b.addr, err)
		}
		b.ln, b.addr = ln, ln.Addr().String()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	if !ok && b.ln != nil {
		b.ln.Close()
		b.wg.Wait()
		b.ln = nil
	}
}

// grpcBackend is a real gRPC server with the standard health service, which
// counts Check calls.
type grpcBackend struct {
	srv    *grpc.Server
	hs     *grpchealth.Server
	addr   string
	checks atomic.Int32
}

const testService = "spillway.test.Echo"

// newGRPCBackend starts a gRPC server. If hs is nil, the standard health
// server is registered with testService SERVING; if impl is set, it is
// registered instead; if noHealth, no health service is registered.
func newGRPCBackend(t *testing.T, impl healthpb.HealthServer, noHealth bool) *grpcBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &grpcBackend{addr: ln.Addr().String()}
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == healthpb.Health_Check_FullMethodName {
			b.checks.Add(1)
		}
		return h(ctx, req)
	}))
	switch {
	case noHealth:
	case impl != nil:
		healthpb.RegisterHealthServer(b.srv, impl)
	default:
		b.hs = grpchealth.NewServer()
		b.hs.SetServingStatus(testService, healthpb.HealthCheckResponse_SERVING)
		healthpb.RegisterHealthServer(b.srv, b.hs)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("grpc Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		b.srv.Stop()
		<-done
	})
	return b
}

func (b *grpcBackend) target() health.Target { return health.Target{Addr: b.addr} }

func (b *grpcBackend) setHealthy(ok bool) {
	s := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		s = healthpb.HealthCheckResponse_SERVING
	}
	b.hs.SetServingStatus(testService, s)
}

// hangingHealth is a health service whose Check blocks until the caller
// gives up.
type hangingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (hangingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
