package testbackend

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"

	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
)

// Metadata keys of the grpc protocol: the identity headers' names in lower
// case, as gRPC metadata keys are.
const (
	metadataBackend = "x-spillway-backend"
	metadataRegion  = "x-spillway-region"
	metadataZone    = "x-spillway-zone"
	metadataReject  = "x-spillway-reject"
)

// grpcFrontend puts an instance of protocol grpc on the network. It must not
// be copied.
type grpcFrontend struct {
	// Immutable after newGRPCFrontend.
	in     *instance
	ln     net.Listener
	srv    *grpc.Server
	health *health.Server
}

func newGRPCFrontend(in *instance, ln net.Listener) *grpcFrontend {
	var opts []grpc.ServerOption
	if !in.cfg.NoLoadReports {
		// Per-call reports: Echo handlers fill the recorder this option
		// puts in their context (recordCallLoad).
		opts = append(opts, orca.CallMetricsServerOption(nil))
	}
	f := &grpcFrontend{in: in, ln: ln, srv: grpc.NewServer(opts...), health: health.NewServer()}
	f.setStatus(healthgrpc.HealthCheckResponse_SERVING)
	healthgrpc.RegisterHealthServer(f.srv, &healthService{Server: f.health, in: in})
	echopb.RegisterEchoServer(f.srv, &echoService{in: in})
	if !in.cfg.NoLoadReports {
		v3orcaservicegrpc.RegisterOpenRcaServiceServer(f.srv, &orcaService{in: in, minInterval: in.orcaMinInterval})
	}
	reflection.Register(f.srv)
	in.onHealth = func(healthy bool) error {
		st := healthgrpc.HealthCheckResponse_SERVING
		if !healthy {
			st = healthgrpc.HealthCheckResponse_NOT_SERVING
		}
		f.setStatus(st)
		return nil
	}
	return f
}

// setStatus sets the health of the server ("") and of the Echo service.
func (f *grpcFrontend) setStatus(st healthgrpc.HealthCheckResponse_ServingStatus) {
	f.health.SetServingStatus("", st)
	f.health.SetServingStatus(echopb.Echo_ServiceDesc.ServiceName, st)
}

func (f *grpcFrontend) serve() error {
	if err := f.srv.Serve(f.ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// shutdown reports NOT_SERVING to health watchers, asks open streams to
// end after their current message, and stops the server gracefully, or at
// once when ctx ends first.
func (f *grpcFrontend) shutdown(ctx context.Context) {
	f.health.Shutdown()
	f.in.stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.srv.GracefulStop()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		f.in.logger.Warn().Msg("graceful shutdown timed out; closing connections")
		f.srv.Stop()
		<-done
	}
	// Every stream has ended, so their receivers are ending too.
	_ = f.in.sessions.wait(context.Background())
}

func (f *grpcFrontend) close() error {
	f.in.stop()
	return f.ln.Close()
}

// peerSource returns the caller's address of an RPC and its host:port
// string.
func peerSource(ctx context.Context) (netip.Addr, string) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, ""
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return netip.Addr{}, p.Addr.String()
	}
	return ap.Addr().Unmap(), p.Addr.String()
}

// identityMD returns the identity header metadata of the instance.
func (in *instance) identityMD() metadata.MD {
	return metadata.Pairs(metadataBackend, in.cfg.Name, metadataRegion, in.cfg.Region, metadataZone, in.cfg.Zone)
}

// trailerMD returns the trailer metadata of every Echo RPC.
func (in *instance) trailerMD() metadata.MD {
	return metadata.Pairs(metadataBackend, in.cfg.Name)
}

// rpcError turns the error of a wait (sleep, admit) into a gRPC status.
func rpcError(err error) error {
	if errors.Is(err, ErrQueueFull) {
		return status.Error(codes.Unavailable, "testbackend: queue full")
	}
	return status.FromContextError(err).Err()
}

// healthService is grpc.health.v1.Health: grpc-go's implementation, whose
// status follows the instance's health, with Check delayed by the emulated
// RTT and counted as a probe, and Watch ended when the instance stops.
type healthService struct {
	*health.Server
	in *instance
}

// Check answers the health of the server ("") or of
// spillway.testing.v1.Echo after the emulated RTT.
func (h *healthService) Check(ctx context.Context, req *healthgrpc.HealthCheckRequest) (*healthgrpc.HealthCheckResponse, error) {
	_ = grpc.SetHeader(ctx, h.in.identityMD())
	src, _ := peerSource(ctx)
	if err := sleep(ctx, h.in.clock, h.in.delays.Lookup(src)); err != nil {
		return nil, rpcError(err)
	}
	h.in.probes.Add(1)
	return h.Server.Check(ctx, req)
}

// Watch streams health changes until the client cancels or the instance
// stops (then with UNAVAILABLE, after sending NOT_SERVING), so that a
// graceful stop does not wait for watchers.
func (h *healthService) Watch(req *healthgrpc.HealthCheckRequest, stream healthgrpc.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stopWatching := context.AfterFunc(h.in.stopCtx, cancel)
	defer stopWatching()
	err := h.Server.Watch(req, stoppableStream{stream, ctx})
	if h.in.stopCtx.Err() != nil && stream.Context().Err() == nil {
		return status.Error(codes.Unavailable, "testbackend: instance stopping")
	}
	return err
}

// stoppableStream is a health watch stream with its own context.
type stoppableStream struct {
	healthgrpc.Health_WatchServer
	ctx context.Context
}

func (s stoppableStream) Context() context.Context { return s.ctx }

// echoService is spillway.testing.v1.Echo.
type echoService struct {
	echopb.UnimplementedEchoServer
	in *instance
}

// Unary answers one request like a normal HTTP request: after the emulated
// RTT and admission, holding a slot for the service time, with the load
// report in its trailer when it is served or rejected.
func (e *echoService) Unary(ctx context.Context, req *echopb.EchoRequest) (*echopb.EchoReply, error) {
	in := e.in
	_ = grpc.SetTrailer(ctx, in.trailerMD())
	md := in.identityMD()
	src, source := peerSource(ctx)
	if err := sleep(ctx, in.clock, in.delays.Lookup(src)); err != nil {
		_ = grpc.SetHeader(ctx, md)
		in.canceled.Add(1)
		return nil, rpcError(err)
	}
	if err := in.admit(ctx, src); err != nil {
		if errors.Is(err, ErrQueueFull) {
			md.Set(metadataReject, "queue-full")
			in.recordCallLoad(ctx)
		}
		_ = grpc.SetHeader(ctx, md)
		return nil, rpcError(err)
	}
	_ = grpc.SetHeader(ctx, md)
	cpu, st := in.serviceCost()
	burnCPU(cpu)
	err := sleep(ctx, in.clock, st)
	in.lim.release()
	if err != nil {
		in.canceled.Add(1)
		return nil, rpcError(err)
	}
	in.served.Add(1)
	in.countSource(src, func(c *SourceStats) { c.Served++ })
	in.recordCallLoad(ctx) // after release: the load this call leaves behind
	if req.GetStatusCode() != 0 {
		return nil, status.Error(codes.Code(req.GetStatusCode()), req.GetStatusMessage())
	}
	return in.echoReply(req, source, 1), nil
}

// Stream is admitted once, after the emulated RTT, and holds its slot until
// it ends; it sends its header metadata at once, then answers each request
// after the emulated RTT plus the service time. It ends with OK when the
// client closes its side, with the status a request asks for, or with
// UNAVAILABLE after the current message when the instance stops. Its
// trailer carries the load report made as it ends.
func (e *echoService) Stream(stream echopb.Echo_StreamServer) error {
	in := e.in
	ctx := stream.Context()
	stream.SetTrailer(in.trailerMD())
	md := in.identityMD()
	src, source := peerSource(ctx)
	rtt := in.delays.Lookup(src)
	if err := sleep(ctx, in.clock, rtt); err != nil {
		_ = stream.SetHeader(md)
		in.canceled.Add(1)
		return rpcError(err)
	}
	if err := in.admit(ctx, src); err != nil {
		if errors.Is(err, ErrQueueFull) {
			md.Set(metadataReject, "queue-full")
			in.recordCallLoad(ctx)
		}
		_ = stream.SetHeader(md)
		return rpcError(err)
	}
	// Deferred first, so run last: the report in the trailer is the load
	// the stream leaves behind when it ends.
	defer in.recordCallLoad(ctx)
	defer in.lim.release()
	in.startStream(src)
	if err := stream.SendHeader(md); err != nil {
		return err
	}

	reqs := make(chan *echopb.EchoRequest)
	recvErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	if !in.sessions.goSession(func() { receiveEchoRequests(stream, reqs, recvErr, done) }) {
		return status.Error(codes.Unavailable, "testbackend: instance stopping")
	}
	for seq := uint64(1); ; seq++ {
		var req *echopb.EchoRequest
		select {
		case req = <-reqs:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-in.stopCtx.Done():
			return status.Error(codes.Unavailable, "testbackend: instance stopping")
		}
		if req.GetStatusCode() != 0 {
			return status.Error(codes.Code(req.GetStatusCode()), req.GetStatusMessage())
		}
		_, st := in.serviceCost() // stream messages burn no CPU; an antagonist slows them
		if err := sleep(ctx, in.clock, rtt+st); err != nil {
			return rpcError(err)
		}
		in.messages.Add(1) // before the send, so that a reader sees it counted
		if err := stream.Send(in.echoReply(req, source, seq)); err != nil {
			return err
		}
	}
}

// receiveEchoRequests receives the requests of stream into reqs until the
// stream fails or ends (the error, io.EOF at the client's end, goes to
// errc) or done is closed. It lets Stream wait for a request and for the
// instance to stop at once.
func receiveEchoRequests(stream echopb.Echo_StreamServer, reqs chan<- *echopb.EchoRequest, errc chan<- error, done <-chan struct{}) {
	for {
		req, err := stream.Recv()
		if err != nil {
			errc <- err // buffered, the only send
			return
		}
		select {
		case reqs <- req:
		case <-done:
			return
		}
	}
}

func (in *instance) echoReply(req *echopb.EchoRequest, source string, seq uint64) *echopb.EchoReply {
	return &echopb.EchoReply{
		Message:  req.GetMessage(),
		Instance: in.cfg.Name,
		Region:   in.cfg.Region,
		Zone:     in.cfg.Zone,
		Source:   source,
		Seq:      seq,
	}
}
