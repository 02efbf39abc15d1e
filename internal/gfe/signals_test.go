package gfe

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
)

// orcaEcho is a gRPC Echo backend that attaches a per-call ORCA report of
// application utilization 1.5 to every call, and answers UNAVAILABLE to the
// message "reject".
type orcaEcho struct{ echopb.UnimplementedEchoServer }

func (orcaEcho) Unary(ctx context.Context, in *echopb.EchoRequest) (*echopb.EchoReply, error) {
	orca.CallMetricsRecorderFromContext(ctx).SetApplicationUtilization(1.5)
	if in.Message == "reject" {
		return nil, status.Error(codes.Unavailable, "queue full")
	}
	return &echopb.EchoReply{Message: in.Message}, nil
}

// TestGRPCLoadSignals: gRPC calls through the gfe count on their backend
// as the closed loop reads them (backend.Signals): answered calls with
// their per-call ORCA report from the trailers, UNAVAILABLE as a
// rejection.
func TestGRPCLoadSignals(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(orca.CallMetricsServerOption(nil))
	echopb.RegisterEchoServer(gs, orcaEcho{})
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	addr := ln.Addr().String()

	e := startEdge(t, edgeConfig(t, []string{addr}, ""), 5*time.Second)
	cc, err := grpc.NewClient("passthrough:///"+e.ListenAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := echopb.NewEchoClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), lnTestTimeout)
	defer cancel()
	be := e.builder.Backend(addr)
	be.TakeSignals()
	for range 4 {
		if _, err := client.Unary(ctx, &echopb.EchoRequest{Message: "hi"}); err != nil {
			t.Fatalf("Unary: %v", err)
		}
	}
	if _, err := client.Unary(ctx, &echopb.EchoRequest{Message: "reject"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Unary(reject) = %v, want Unavailable", err)
	}
	s := be.TakeSignals()
	if s.Answered != 5 || s.Rejected != 1 || s.Failed != 0 {
		t.Errorf("signals %+v, want 5 answered of which 1 rejected", s)
	}
	if s.Reports != 4 || math.Abs(s.Utilization-4*1.5) > 1e-6 {
		t.Errorf("load reports %d summing %v, want 4 summing 6 (the trailers of the answered calls)", s.Reports, s.Utilization)
	}
}
