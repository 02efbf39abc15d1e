package spillwayv1_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testSnapshot() *pb.Snapshot {
	return &pb.Snapshot{
		Version:      "v42",
		Nonce:        "n-7",
		ConfigYaml:   []byte("services:\n  - name: web\n"),
		ConfigSource: "configs/*.yaml@cp-1",
		Health: []*pb.InstanceHealth{
			{Group: "us-east-b", Address: "127.0.0.1:9101", Healthy: true, Since: timestamppb.New(time.Unix(1700000000, 0))},
			{Group: "us-east-b", Address: "127.0.0.1:9102", Healthy: false, Detail: "GET /healthz: status 503"},
		},
		GeneratedAt:    timestamppb.New(time.Unix(1700000100, 5)),
		ControlPlaneId: "cp-1",
	}
}

// TestRoundTrip checks that every message survives Marshal/Unmarshal
// unchanged, including the oneof and the google.rpc.Status NACK detail.
func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  proto.Message
	}{
		{name: "snapshot", msg: testSnapshot()},
		{name: "first request", msg: &pb.SnapshotRequest{Node: &pb.Node{Id: "gfe-1", Site: "nyc", BuildVersion: "dev"}, VersionInfo: "v41"}},
		{name: "ack", msg: &pb.SnapshotRequest{VersionInfo: "v42", ResponseNonce: "n-7"}},
		{name: "nack", msg: &pb.SnapshotRequest{VersionInfo: "v41", ResponseNonce: "n-7",
			ErrorDetail: status.New(codes.InvalidArgument, "configs/a.yaml: services[0].groups: must not be empty").Proto()}},
		{name: "capacity instances", msg: &pb.CapacityRequest{NodeId: "gfe-1", Site: "nyc", Service: "web", Group: "us-east-b",
			Want: &pb.CapacityRequest_WantedInstances{WantedInstances: 3}, Reason: pb.CapacityReason_CAPACITY_REASON_NO_INSTANCE}},
		{name: "capacity rps", msg: &pb.CapacityRequest{Service: "web", Group: "us-east-b",
			Want: &pb.CapacityRequest_ExtraRps{ExtraRps: 120.5}, Reason: pb.CapacityReason_CAPACITY_REASON_OVERLOAD, Detail: "spilling"}},
		{name: "capacity response", msg: &pb.CapacityResponse{Granted: true, Message: "scaling us-east-b to 3"}},
		{name: "health request", msg: &pb.GetHealthRequest{Service: "web"}},
		{name: "health response", msg: &pb.GetHealthResponse{Version: "v42", Instances: testSnapshot().GetHealth()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.msg)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			got := tt.msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(b, got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if diff := cmp.Diff(tt.msg, got, protocmp.Transform()); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeServer pushes one snapshot per stream and reports the gfe's answers.
type fakeServer struct {
	pb.UnimplementedControlPlaneServer
	answers chan *pb.SnapshotRequest
}

func (s *fakeServer) StreamSnapshots(stream grpc.BidiStreamingServer[pb.SnapshotRequest, pb.Snapshot]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	s.answers <- first
	if err := stream.Send(testSnapshot()); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		s.answers <- req
	}
}

func (s *fakeServer) RequestCapacity(_ context.Context, req *pb.CapacityRequest) (*pb.CapacityResponse, error) {
	return &pb.CapacityResponse{Granted: req.GetWantedInstances() > 0, Message: "group " + req.GetGroup()}, nil
}

// TestStreamSnapshots runs the generated client and server over bufconn
// through one xDS exchange: request, push, NACK, then the unary RPCs.
func TestStreamSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()

	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	fake := &fakeServer{answers: make(chan *pb.SnapshotRequest, 4)}
	pb.RegisterControlPlaneServer(srv, fake)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer conn.Close()
	client := pb.NewControlPlaneClient(conn)

	stream, err := client.StreamSnapshots(ctx)
	if err != nil {
		t.Fatalf("StreamSnapshots: %v", err)
	}
	first := &pb.SnapshotRequest{Node: &pb.Node{Id: "gfe-1", Site: "nyc"}}
	if err := stream.Send(first); err != nil {
		t.Fatalf("Send(first): %v", err)
	}
	snap, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if diff := cmp.Diff(testSnapshot(), snap, protocmp.Transform()); diff != "" {
		t.Errorf("pushed snapshot mismatch (-want +got):\n%s", diff)
	}
	nack := &pb.SnapshotRequest{ResponseNonce: snap.GetNonce(),
		ErrorDetail: status.New(codes.InvalidArgument, "bad config").Proto()}
	if err := stream.Send(nack); err != nil {
		t.Fatalf("Send(nack): %v", err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after CloseSend = %v, want io.EOF", err)
	}
	for i, want := range []*pb.SnapshotRequest{first, nack} {
		select {
		case got := <-fake.answers:
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("server got request %d (-want +got):\n%s", i, diff)
			}
		case <-ctx.Done():
			t.Fatalf("server got no request %d: %v", i, ctx.Err())
		}
	}
	if code := status.FromProto(nack.GetErrorDetail()).Code(); code != codes.InvalidArgument {
		t.Errorf("NACK code = %v, want %v", code, codes.InvalidArgument)
	}

	resp, err := client.RequestCapacity(ctx, &pb.CapacityRequest{Group: "us-east-b",
		Want: &pb.CapacityRequest_WantedInstances{WantedInstances: 2}})
	if err != nil {
		t.Fatalf("RequestCapacity: %v", err)
	}
	if diff := cmp.Diff(&pb.CapacityResponse{Granted: true, Message: "group us-east-b"}, resp, protocmp.Transform()); diff != "" {
		t.Errorf("RequestCapacity mismatch (-want +got):\n%s", diff)
	}
	_, err = client.GetHealth(ctx, &pb.GetHealthRequest{})
	if got := status.Code(err); got != codes.Unimplemented {
		t.Errorf("GetHealth on an unimplemented server: code %v, want %v", got, codes.Unimplemented)
	}
}
