// Package probe holds the real health.Prober implementations: HTTP (GET and
// a status check), TCP (connect) and gRPC (grpc.health.v1 Check).
//
// This package does network I/O and imports gRPC, which lb/ packages
// normally must not (STYLE.md §2). It is the one justified exception: a
// gRPC backend can only be health-checked by speaking the gRPC health
// protocol. Keeping the probers here lets lb/health stay pure (state machine
// and scheduling only) while the control plane wires the two together:
//
//	p, err := probe.New(cfg, probe.Options{})
//	if err != nil { ... }
//	checker, err := health.NewChecker(cfg, p, health.Options{...})
//
// Every prober is safe for concurrent use, honours ctx (the Checker's
// per-probe timeout), and opens a fresh connection per probe, so a probe
// measures whether the backend accepts new connections now and leaves no
// idle connections or goroutines behind. Failures come back as Result.Err,
// wrapping ErrStatus, ErrNotServing, the dial error, or ctx.Err() (so
// errors.Is(err, context.DeadlineExceeded) tells a timeout).
package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"google.golang.org/grpc"

	"github.com/spillway-lb/spillway/lb/health"
)

// Errors that failed Results wrap; test with errors.Is.
var (
	// ErrStatus: an HTTP probe got a status code outside ExpectedStatus.
	ErrStatus = errors.New("unexpected http status")
	// ErrNotServing: a gRPC probe got a health status other than SERVING.
	ErrNotServing = errors.New("grpc health status not serving")
)

// DefaultMaxBodyBytes is how much of an HTTP response body a probe reads
// when Options.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 64 << 10

// Options holds the probers' dependencies. The zero value is ready to use.
type Options struct {
	// Transport carries HTTP probes. Nil means a dedicated transport that
	// ignores proxy environment variables and disables keep-alives (one
	// connection per probe).
	Transport http.RoundTripper
	// MaxBodyBytes bounds how much of an HTTP response body is read (and
	// discarded) before the connection is closed. Zero means
	// DefaultMaxBodyBytes. The body's content never decides the result.
	MaxBodyBytes int64
	// Dialer dials TCP probes. Nil means a zero net.Dialer; the timeout
	// comes from ctx either way.
	Dialer *net.Dialer
	// GRPCDialOptions are appended to the gRPC prober's dial options, after
	// insecure transport credentials, so a grpc.WithTransportCredentials
	// here replaces them (for TLS or mTLS backends).
	GRPCDialOptions []grpc.DialOption
}

// New returns the prober for cfg.Protocol, after validating cfg.
func New(cfg health.Config, opts Options) (health.Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("probe: invalid config: %w", err)
	}
	switch cfg.Protocol {
	case health.ProtocolHTTP:
		return NewHTTP(cfg, opts), nil
	case health.ProtocolTCP:
		return NewTCP(opts), nil
	case health.ProtocolGRPC:
		return NewGRPC(cfg, opts), nil
	}
	return nil, fmt.Errorf("probe: protocol %q has no prober", cfg.Protocol)
}

// failure builds a failed Result for a probe of kind (http, tcp, grpc) on t.
// A timeout always wraps context.DeadlineExceeded, whichever layer noticed
// it first: ctx itself, or a socket deadline that net set from ctx's
// deadline (which can fire a moment before ctx is marked done).
func failure(ctx context.Context, kind string, t health.Target, err error) health.Result {
	cause := ctx.Err()
	var ne net.Error
	if cause == nil && errors.As(err, &ne) && ne.Timeout() {
		cause = context.DeadlineExceeded
	}
	if cause != nil && !errors.Is(err, cause) {
		return health.Result{Err: fmt.Errorf("probe %s %s: %w: %w", kind, t, cause, err)}
	}
	return health.Result{Err: fmt.Errorf("probe %s %s: %w", kind, t, err)}
}
