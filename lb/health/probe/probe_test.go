package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/lb/health"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	defaultTestTimeout = 10 * time.Second
	// shortTimeout is the probe timeout in timeout tests: real time, since
	// it bounds real I/O against a backend that hangs.
	shortTimeout = 100 * time.Millisecond
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

func cfgFor(p health.Protocol) health.Config {
	cfg := health.DefaultConfig()
	cfg.Protocol = p
	if p == health.ProtocolGRPC {
		cfg.GRPCService = testService
	}
	return cfg
}

// checkResult fails the test unless r passed (wantErr nil) or failed with an
// error wrapping wantErr.
func checkResult(t *testing.T, what string, r health.Result, wantErr error) {
	t.Helper()
	switch {
	case wantErr == nil && r.Err != nil:
		t.Errorf("%s: Probe() failed with %v, want pass", what, r.Err)
	case wantErr != nil && !errors.Is(r.Err, wantErr):
		t.Errorf("%s: Probe() = %v, want error wrapping %v", what, r.Err, wantErr)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     health.Config
		want    any
		wantErr string
	}{
		{"http", cfgFor(health.ProtocolHTTP), &HTTP{}, ""},
		{"tcp", cfgFor(health.ProtocolTCP), &TCP{}, ""},
		{"grpc", cfgFor(health.ProtocolGRPC), &GRPC{}, ""},
		{"invalid", health.Config{Protocol: "udp"}, nil, `protocol: must be one of http, tcp, grpc, got "udp"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg, Options{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New() = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			if got, want := typeName(p), typeName(tt.want); got != want {
				t.Errorf("New() = %s, want %s", got, want)
			}
		})
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *HTTP:
		return "*HTTP"
	case *TCP:
		return "*TCP"
	case *GRPC:
		return "*GRPC"
	}
	return "other"
}

func TestHTTPStatus(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		expect  health.StatusRange
		wantErr error
	}{
		{"200 in default range", 200, health.StatusRange{Min: 200, Max: 299}, nil},
		{"204 in default range", 204, health.StatusRange{Min: 200, Max: 299}, nil},
		{"500 fails", 500, health.StatusRange{Min: 200, Max: 299}, ErrStatus},
		{"503 fails", 503, health.StatusRange{Min: 200, Max: 299}, ErrStatus},
		{"redirect not followed", 302, health.StatusRange{Min: 200, Max: 299}, ErrStatus},
		{"redirect allowed by range", 302, health.StatusRange{Min: 200, Max: 399}, nil},
		{"exact 418", 418, health.StatusRange{Min: 418, Max: 418}, nil},
	}
	b := newHTTPBackend(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.status.Store(int32(tt.status))
			cfg := cfgFor(health.ProtocolHTTP)
			cfg.ExpectedStatus = tt.expect
			checkResult(t, tt.name, NewHTTP(cfg, Options{}).Probe(testCtx(t), b.target()), tt.wantErr)
		})
	}
}

func TestHTTPFailsAndRecovers(t *testing.T) {
	b := newHTTPBackend(t)
	p := NewHTTP(cfgFor(health.ProtocolHTTP), Options{})
	steps := []bool{true, false, false, true, false, true, true}
	for i, healthy := range steps {
		b.setHealthy(healthy)
		var wantErr error
		if !healthy {
			wantErr = ErrStatus
		}
		checkResult(t, fmt.Sprintf("step %d", i), p.Probe(testCtx(t), b.target()), wantErr)
	}
	if got := b.hits.Load(); got != int32(len(steps)) {
		t.Errorf("backend saw %d requests, want %d (one per probe)", got, len(steps))
	}
	b.srv.Close()
	r := p.Probe(testCtx(t), b.target())
	if !errors.Is(r.Err, syscall.ECONNREFUSED) {
		t.Errorf("probe of a closed server = %v, want connection refused", r.Err)
	}
}

func TestHTTPRequest(t *testing.T) {
	b := newHTTPBackend(t)
	cfg := cfgFor(health.ProtocolHTTP)
	cfg.Path = "/healthz?full=1"
	cfg.Host = "api.example.com"
	checkResult(t, "host and path", NewHTTP(cfg, Options{}).Probe(testCtx(t), b.target()), nil)
	b.mu.Lock()
	req := b.lastReq
	b.mu.Unlock()
	if req.Method != http.MethodGet || req.Host != cfg.Host || req.URL.RequestURI() != cfg.Path ||
		req.UserAgent() != "spillway-health/1" {
		t.Errorf("backend saw %s Host=%q URI=%q UA=%q, want GET Host=%q URI=%q UA=spillway-health/1",
			req.Method, req.Host, req.URL.RequestURI(), req.UserAgent(), cfg.Host, cfg.Path)
	}
}

// countingTransport counts the response body bytes its caller reads.
type countingTransport struct {
	rt   http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func TestHTTPBodyBounded(t *testing.T) {
	tests := []struct {
		name     string
		bodySize int
		max      int64
		wantRead int64
	}{
		{"small body read whole", 100, 1024, 100},
		{"large body cut at max", 1 << 20, 1024, 1024},
		{"default max", 1 << 20, 0, DefaultMaxBodyBytes},
	}
	b := newHTTPBackend(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.mu.Lock()
			b.body = bytes.Repeat([]byte("x"), tt.bodySize)
			b.mu.Unlock()
			ct := &countingTransport{rt: &http.Transport{DisableKeepAlives: true}}
			p := NewHTTP(cfgFor(health.ProtocolHTTP), Options{Transport: ct, MaxBodyBytes: tt.max})
			checkResult(t, tt.name, p.Probe(testCtx(t), b.target()), nil)
			if got := ct.read.Load(); got != tt.wantRead {
				t.Errorf("probe read %d body bytes, want %d", got, tt.wantRead)
			}
		})
	}
}

func TestHTTPTimeout(t *testing.T) {
	b := newHTTPBackend(t)
	b.hang.Store(true)
	ctx, cancel := context.WithTimeout(testCtx(t), shortTimeout)
	defer cancel()
	start := time.Now()
	r := NewHTTP(cfgFor(health.ProtocolHTTP), Options{}).Probe(ctx, b.target())
	checkResult(t, "hanging server", r, context.DeadlineExceeded)
	if el := time.Since(start); el > 5*shortTimeout {
		t.Errorf("probe took %v with a %v timeout", el, shortTimeout)
	}
}

func TestTCPCloseReopen(t *testing.T) {
	b := newTCPBackend(t)
	p := NewTCP(Options{})
	checkResult(t, "open", p.Probe(testCtx(t), b.target()), nil)
	b.setHealthy(false)
	checkResult(t, "closed", p.Probe(testCtx(t), b.target()), syscall.ECONNREFUSED)
	b.setHealthy(true) // same port
	checkResult(t, "reopened", p.Probe(testCtx(t), b.target()), nil)
}

func TestGRPCServingToggle(t *testing.T) {
	b := newGRPCBackend(t, nil, false)
	p := NewGRPC(cfgFor(health.ProtocolGRPC), Options{})
	steps := []bool{true, false, true, false, false, true}
	for i, healthy := range steps {
		b.setHealthy(healthy)
		var wantErr error
		if !healthy {
			wantErr = ErrNotServing
		}
		checkResult(t, fmt.Sprintf("step %d", i), p.Probe(testCtx(t), b.target()), wantErr)
	}
	if got := b.checks.Load(); got != int32(len(steps)) {
		t.Errorf("server saw %d Check calls, want %d", got, len(steps))
	}
}

func TestGRPCFailures(t *testing.T) {
	tests := []struct {
		name     string
		backend  func(t *testing.T) *grpcBackend
		service  string
		timeout  time.Duration
		wantCode codes.Code
		wantErr  error
	}{
		{
			name:     "unknown service",
			backend:  func(t *testing.T) *grpcBackend { return newGRPCBackend(t, nil, false) },
			service:  "no.such.Service",
			wantCode: codes.NotFound,
		},
		{
			name:     "whole server, empty service name",
			backend:  func(t *testing.T) *grpcBackend { return newGRPCBackend(t, nil, false) },
			service:  "",
			wantCode: codes.OK, // the standard server reports "" as SERVING
		},
		{
			name:     "no health service",
			backend:  func(t *testing.T) *grpcBackend { return newGRPCBackend(t, nil, true) },
			service:  testService,
			wantCode: codes.Unimplemented,
		},
		{
			name: "server stopped",
			backend: func(t *testing.T) *grpcBackend {
				b := newGRPCBackend(t, nil, false)
				b.srv.Stop()
				return b
			},
			service:  testService,
			wantCode: codes.Unavailable,
		},
		{
			name:     "hanging Check",
			backend:  func(t *testing.T) *grpcBackend { return newGRPCBackend(t, hangingHealth{}, false) },
			service:  testService,
			timeout:  shortTimeout,
			wantCode: codes.DeadlineExceeded,
			wantErr:  context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.backend(t)
			cfg := cfgFor(health.ProtocolGRPC)
			cfg.GRPCService = tt.service
			ctx := testCtx(t)
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			r := NewGRPC(cfg, Options{}).Probe(ctx, b.target())
			if tt.wantCode == codes.OK {
				checkResult(t, tt.name, r, nil)
				return
			}
			if r.Err == nil {
				t.Fatalf("Probe() passed, want code %v", tt.wantCode)
			}
			var se interface{ GRPCStatus() *status.Status }
			if !errors.As(r.Err, &se) || se.GRPCStatus().Code() != tt.wantCode {
				t.Errorf("Probe() = %v, want gRPC code %v", r.Err, tt.wantCode)
			}
			if tt.wantErr != nil && !errors.Is(r.Err, tt.wantErr) {
				t.Errorf("Probe() = %v, want it to wrap %v", r.Err, tt.wantErr)
			}
		})
	}
}
