package testbackend

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
)

// dialGRPC returns a gRPC client connection to addr whose connections come
// from localIP ("" for the system's choice).
func dialGRPC(t *testing.T, addr, localIP string) *grpc.ClientConn {
	t.Helper()
	d := &net.Dialer{Timeout: defaultTestTimeout}
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func grpcInstance(name string, c Capacity) InstanceConfig {
	ic := testInstance(name, c)
	ic.Proto = ProtoGRPC
	return ic
}

// identity is the identity metadata of the instances made by testInstance.
func identity(name string) map[string][]string {
	return map[string][]string{"x-spillway-backend": {name}, "x-spillway-region": {"us-east"}, "x-spillway-zone": {"us-east-b"}}
}

// pick returns the values of md for the keys of want, for comparison with
// want.
func pick(md metadata.MD, want map[string][]string) map[string][]string {
	got := map[string][]string{}
	for k := range want {
		if v := md.Get(k); v != nil {
			got[k] = v
		}
	}
	return got
}

// TestGRPCEcho checks the Echo service: replies, header metadata and
// trailers of unary and streaming calls, error statuses, and the counters.
func TestGRPCEcho(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{grpcInstance("g", DefaultCapacity())}}, nil)
	client := echopb.NewEchoClient(dialGRPC(t, s.Addr("g"), ""))
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	wantTrailer := map[string][]string{"x-spillway-backend": {"g"}}

	t.Run("unary", func(t *testing.T) {
		var header, trailer metadata.MD
		got, err := client.Unary(ctx, &echopb.EchoRequest{Message: "hi"}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil {
			t.Fatalf("Unary: %v", err)
		}
		want := &echopb.EchoReply{Message: "hi", Instance: "g", Region: "us-east", Zone: "us-east-b", Source: got.GetSource(), Seq: 1}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" || got.GetSource() == "" {
			t.Errorf("Unary reply mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(identity("g"), pick(header, identity("g"))); diff != "" {
			t.Errorf("header metadata mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantTrailer, pick(trailer, wantTrailer)); diff != "" {
			t.Errorf("trailer mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("unary error status", func(t *testing.T) {
		var trailer metadata.MD
		_, err := client.Unary(ctx, &echopb.EchoRequest{StatusCode: int32(codes.PermissionDenied), StatusMessage: "nope"}, grpc.Trailer(&trailer))
		if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "nope" {
			t.Errorf("Unary asking for PermissionDenied: %v, want PermissionDenied \"nope\"", err)
		}
		if diff := cmp.Diff(wantTrailer, pick(trailer, wantTrailer)); diff != "" {
			t.Errorf("trailer of a failed call mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("bidi stream", func(t *testing.T) {
		stream, err := client.Stream(ctx)
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		header, err := stream.Header()
		if err != nil {
			t.Fatalf("Stream header: %v", err)
		}
		if diff := cmp.Diff(identity("g"), pick(header, identity("g"))); diff != "" {
			t.Errorf("stream header metadata mismatch (-want +got):\n%s", diff)
		}
		for i, msg := range []string{"a", "b", "c"} {
			if err := stream.Send(&echopb.EchoRequest{Message: msg}); err != nil {
				t.Fatalf("Send %q: %v", msg, err)
			}
			got, err := stream.Recv()
			if err != nil {
				t.Fatalf("Recv after %q: %v", msg, err)
			}
			if got.GetMessage() != msg || got.GetSeq() != uint64(i+1) || got.GetInstance() != "g" {
				t.Errorf("reply %d = %v, want message %q seq %d from g", i, got, msg, i+1)
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("Recv after CloseSend: %v, want io.EOF (status OK)", err)
		}
		if diff := cmp.Diff(wantTrailer, pick(stream.Trailer(), wantTrailer)); diff != "" {
			t.Errorf("stream trailer mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("stream error status", func(t *testing.T) {
		stream, err := client.Stream(ctx)
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		if err := stream.Send(&echopb.EchoRequest{StatusCode: int32(codes.ResourceExhausted), StatusMessage: "full"}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("Recv after asking for ResourceExhausted: %v", err)
		}
		if diff := cmp.Diff(wantTrailer, pick(stream.Trailer(), wantTrailer)); diff != "" {
			t.Errorf("trailer of a failed stream mismatch (-want +got):\n%s", diff)
		}
	})

	// The slots of both streams are given back once they end.
	if err := s.instances[0].lim.waitFor(ctx, func(inFlight, _ int) bool { return inFlight == 0 }); err != nil {
		t.Fatalf("streams still hold their slots: %v", err)
	}
	st, _ := s.Stats("g")
	want := Stats{Instance: "g", Region: "us-east", Zone: "us-east-b", Proto: ProtoGRPC, Healthy: true,
		Served: 2, Streams: 2, Messages: 3, Conns: 1, OpenConns: 1, MaxInFlight: 1,
		BySource: map[string]SourceStats{"127.0.0.0/24": {Served: 2, Streams: 2}}}
	if diff := cmp.Diff(want, st, ignoreUsage); diff != "" {
		t.Errorf("stats mismatch (-want +got):\n%s", diff)
	}
}

// TestGRPCHealth checks that the grpc.health.v1 service follows the health
// toggle of the process admin, for Check and Watch, for the server and the
// Echo service.
func TestGRPCHealth(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{grpcInstance("g", DefaultCapacity())}, AdminAddr: "127.0.0.1:0"}, nil)
	hc := healthgrpc.NewHealthClient(dialGRPC(t, s.Addr("g"), ""))
	admin := newClient(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	watch, err := hc.Watch(ctx, &healthgrpc.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	const (
		serving    = healthgrpc.HealthCheckResponse_SERVING
		notServing = healthgrpc.HealthCheckResponse_NOT_SERVING
	)
	steps := []struct {
		name    string
		healthy string // "" = no toggle
		want    healthgrpc.HealthCheckResponse_ServingStatus
	}{
		{name: "healthy at start", want: serving},
		{name: "toggled unhealthy", healthy: "false", want: notServing},
		{name: "toggled healthy", healthy: "true", want: serving},
	}
	for _, st := range steps {
		if st.healthy != "" {
			r := mustDo(t, admin, http.MethodPost, "http://"+s.AdminAddr()+"/admin/health?instance=g&healthy="+st.healthy)
			if r.status != http.StatusOK {
				t.Fatalf("%s: POST /admin/health: %d %q", st.name, r.status, r.body)
			}
		}
		for _, service := range []string{"", "spillway.testing.v1.Echo"} {
			resp, err := hc.Check(ctx, &healthgrpc.HealthCheckRequest{Service: service})
			if err != nil || resp.GetStatus() != st.want {
				t.Errorf("%s: Check(%q) = %v, %v; want %v", st.name, service, resp.GetStatus(), err, st.want)
			}
		}
		got, err := watch.Recv()
		if err != nil || got.GetStatus() != st.want {
			t.Errorf("%s: Watch got %v, %v; want %v", st.name, got.GetStatus(), err, st.want)
		}
	}
	if _, err := hc.Check(ctx, &healthgrpc.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check(nope): %v, want NotFound", err)
	}
	if st, _ := s.Stats("g"); st.Probes != 7 || !st.Healthy {
		t.Errorf("stats: probes %d healthy %v, want 7 Check calls and healthy", st.Probes, st.Healthy)
	}
}

// TestGRPCCapacity checks that a stream holds its slot while open and that
// calls finding the queue full end with UNAVAILABLE and
// x-spillway-reject: queue-full in their header metadata.
func TestGRPCCapacity(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{grpcInstance("g", Capacity{MaxConcurrency: 1, Queue: 0})}}, nil)
	client := echopb.NewEchoClient(dialGRPC(t, s.Addr("g"), ""))
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	holder, err := client.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Header(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	wantReject := map[string][]string{"x-spillway-reject": {"queue-full"}, "x-spillway-backend": {"g"}}
	var header metadata.MD
	_, err = client.Unary(ctx, &echopb.EchoRequest{Message: "x"}, grpc.Header(&header))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Unary while the only slot is held: %v, want Unavailable", err)
	}
	if diff := cmp.Diff(wantReject, pick(header, wantReject)); diff != "" {
		t.Errorf("Unary rejection metadata mismatch (-want +got):\n%s", diff)
	}
	second, err := client.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("second stream: %v, want Unavailable", err)
	}
	if header, err := second.Header(); err != nil || cmp.Diff(wantReject, pick(header, wantReject)) != "" {
		t.Errorf("second stream header = %v, %v; want %v", header, err, wantReject)
	}
	if err := holder.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("first stream end: %v", err)
	}
	if _, err := client.Unary(ctx, &echopb.EchoRequest{Message: "x"}); err != nil {
		t.Errorf("Unary after the stream ended: %v", err)
	}
	st, _ := s.Stats("g")
	if st.Rejected != 2 || st.Streams != 1 || st.Served != 1 || st.MaxInFlight != 1 {
		t.Errorf("stats: rejected %d streams %d served %d max_in_flight %d; want 2, 1, 1, 1", st.Rejected, st.Streams, st.Served, st.MaxInFlight)
	}
}

// TestGRPCDelay checks on a fake clock that a stream from a far site waits
// the RTT once when it opens and then RTT + service time per reply, and a
// unary call RTT + service time.
func TestGRPCDelay(t *testing.T) {
	clk := newFakeClock()
	const rtt, serviceTime = 80 * time.Millisecond, 20 * time.Millisecond
	s := startServer(t, Config{
		Instances: []InstanceConfig{grpcInstance("g", Capacity{MaxConcurrency: 2, ServiceTime: serviceTime})},
		Delays:    []DelayRule{mustRule(t, "127.0.1.0/24=80ms")},
	}, clk)
	client := echopb.NewEchoClient(dialGRPC(t, s.Addr("g"), "127.0.1.5"))
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	stream, err := client.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	advanceExactly(ctx, t, clk, "stream open", rtt)
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&echopb.EchoRequest{Message: "m"}); err != nil {
		t.Fatal(err)
	}
	advanceExactly(ctx, t, clk, "stream message", rtt+serviceTime)
	if got, err := stream.Recv(); err != nil || got.GetMessage() != "m" || !strings.HasPrefix(got.GetSource(), "127.0.1.5:") {
		t.Fatalf("stream reply: %v, %v; want m from 127.0.1.5", got, err)
	}

	unary := make(chan error, 1)
	go func() {
		_, err := client.Unary(ctx, &echopb.EchoRequest{Message: "u"})
		unary <- err
	}()
	advanceExactly(ctx, t, clk, "unary delay", rtt)
	advanceExactly(ctx, t, clk, "unary service", serviceTime)
	if err := <-unary; err != nil {
		t.Errorf("Unary: %v", err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("stream end: %v", err)
	}
	if st, _ := s.Stats("g"); st.BySource["127.0.1.0/24"] != (SourceStats{Served: 1, Streams: 1}) {
		t.Errorf("by_source = %v, want 127.0.1.0/24 served 1 streams 1", st.BySource)
	}
}

func newFakeClock() *clock.Fake { return clock.NewFake(time.Unix(0, 0)) }

// advanceExactly moves clk by d once the server waits on one timer, and
// checks that the timer is still pending 1ms before d: the server waited
// exactly d.
func advanceExactly(ctx context.Context, t *testing.T, clk *clock.Fake, what string, d time.Duration) {
	t.Helper()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	clk.Advance(d - time.Millisecond)
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%s: %d timers pending 1ms before %v, want 1", what, n, d)
	}
	clk.Advance(time.Millisecond)
}
