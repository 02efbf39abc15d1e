package probe

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/lb/health"
)

// GRPC calls grpc.health.v1.Health/Check for Config.GRPCService and passes
// only when the answer is SERVING. NOT_SERVING, SERVICE_UNKNOWN and UNKNOWN
// fail with ErrNotServing; an RPC error (no health service, unknown service,
// connection refused, deadline) fails with that error.
//
// Each probe dials its own ClientConn and closes it afterwards. That costs a
// TCP and HTTP/2 handshake per probe (cheap at probe rates) and in return
// checks that the backend accepts new connections and keeps no per-target
// connection state to clean up when targets go away. GRPC is immutable and
// safe for concurrent use.
type GRPC struct {
	service  string
	dialOpts []grpc.DialOption
}

var _ health.Prober = (*GRPC)(nil)

// NewGRPC returns a gRPC health prober for cfg.GRPCService.
func NewGRPC(cfg health.Config, opts Options) *GRPC {
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("spillway-health/1"),
	}
	dialOpts = append(dialOpts, opts.GRPCDialOptions...)
	return &GRPC{service: cfg.GRPCService, dialOpts: dialOpts}
}

// Probe dials t, calls Check, and closes the connection.
func (p *GRPC) Probe(ctx context.Context, t health.Target) health.Result {
	// passthrough: the address is dialled as given, with no resolver.
	conn, err := grpc.NewClient("passthrough:///"+t.Addr, p.dialOpts...)
	if err != nil {
		return failure(ctx, "grpc", t, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: p.service})
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded {
			// The server may give up on the propagated deadline a moment
			// before our ctx does: it is the same timeout.
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return failure(ctx, "grpc", t, err)
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return failure(ctx, "grpc", t, fmt.Errorf("%w: service %q is %v", ErrNotServing, p.service, s))
	}
	return health.Result{}
}
