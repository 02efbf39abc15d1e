package testkit

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// FirstPush opens a snapshot stream to the control plane at addr with
// creds, as gfe "attacker" of site nyc, and returns the first snapshot
// pushed, or the error that ended the attempt (a refused handshake, a
// closed stream, or timeout passing). It fails the test only when the
// client cannot be made.
func FirstPush(t testing.TB, addr string, creds credentials.TransportCredentials, timeout time.Duration) (*pb.Snapshot, error) {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stream, err := pb.NewControlPlaneClient(cc).StreamSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&pb.SnapshotRequest{Node: &pb.Node{Id: "attacker", Site: "nyc"}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return stream.Recv()
}
