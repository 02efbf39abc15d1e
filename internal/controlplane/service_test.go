package controlplane

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/health"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// svcRig serves a service over bufconn.
type svcRig struct {
	hub    *hub
	svc    *service
	m      *metrics
	cfg    *LoadedConfig
	client pb.ControlPlaneClient
}

func newSvcRig(t *testing.T) *svcRig {
	t.Helper()
	r := &svcRig{hub: newHub(), m: newMetrics(prometheus.NewRegistry()), cfg: loaded(t, manyGroups(2).yaml(), "cfghash")}
	r.svc = newService("cp-test", r.hub, clock.NewFake(epoch), testLogger(t), r.m)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterControlPlaneServer(srv, r.svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.client = pb.NewControlPlaneClient(conn)
	t.Cleanup(func() {
		conn.Close()
		r.svc.shutdown()
		srv.Stop()
		<-served
	})
	return r
}

// state stores a State of the rig's config in which the instances listed
// in down are unhealthy, and returns it.
func (r *svcRig) state(ready bool, down ...string) *State {
	var hs []InstanceHealth
	for _, ref := range r.cfg.Config.Groups() {
		for _, in := range ref.Group.Instances {
			s := health.StatusHealthy
			for _, d := range down {
				if d == in.Address {
					s = health.StatusUnhealthy
				}
			}
			hs = append(hs, InstanceHealth{Group: ref.Group.Name, Address: in.Address, Status: s, Source: "cp-test"})
		}
	}
	st := newState(r.cfg, hs, ready, epoch)
	r.hub.Store(st)
	return st
}

func (r *svcRig) open(t *testing.T, ctx context.Context, id, version string) pb.ControlPlane_StreamSnapshotsClient {
	t.Helper()
	s, err := r.client.StreamSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.SnapshotRequest{Node: &pb.Node{Id: id, Site: "paris"}, VersionInfo: version}); err != nil {
		t.Fatal(err)
	}
	return s
}

func recv(t *testing.T, s pb.ControlPlane_StreamSnapshotsClient, wantVersion, wantNonce string) *pb.Snapshot {
	t.Helper()
	m, err := s.Recv()
	if err != nil {
		t.Fatalf("Recv() = %v, want version %s", err, wantVersion)
	}
	if m.GetVersion() != wantVersion || m.GetNonce() != wantNonce {
		t.Fatalf("Recv() = version %s nonce %s, want %s and %s", m.GetVersion(), m.GetNonce(), wantVersion, wantNonce)
	}
	return m
}

func ack(t *testing.T, s pb.ControlPlane_StreamSnapshotsClient, version, nonce string) {
	t.Helper()
	if err := s.Send(&pb.SnapshotRequest{VersionInfo: version, ResponseNonce: nonce}); err != nil {
		t.Fatal(err)
	}
}

func (r *svcRig) waitNode(t *testing.T, id, what string, cond func(NodeStatus) bool) NodeStatus {
	t.Helper()
	var ns NodeStatus
	waitUntil(t, id+" "+what, func() bool {
		var ok bool
		ns, ok = r.svc.Node(id)
		return ok && cond(ns)
	})
	return ns
}

func TestStreamAckNack(t *testing.T) {
	r := newSvcRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	v1 := r.state(true)
	s := r.open(t, ctx, "gfe-1", "")

	// The current state is pushed on connect, complete.
	m := recv(t, s, v1.Version, "1")
	want := &pb.Snapshot{
		Version: v1.Version, Nonce: "1", ConfigYaml: r.cfg.YAML, ConfigSource: "test.yaml",
		Health: v1.pbHealth, GeneratedAt: m.GetGeneratedAt(), ControlPlaneId: "cp-test",
	}
	if diff := cmp.Diff(want, m, protocmp.Transform()); diff != "" {
		t.Errorf("first push mismatch (-want +got):\n%s", diff)
	}
	if len(m.GetHealth()) != 4 {
		t.Errorf("first push has %d instances, want 4", len(m.GetHealth()))
	}
	ack(t, s, v1.Version, "1")
	r.waitNode(t, "gfe-1", "acked v1", func(n NodeStatus) bool { return n.Acked == v1.Version && n.Acks == 1 })

	// A health change is a new version; the gfe NACKs it.
	v2 := r.state(true, "127.0.0.1:20001")
	recv(t, s, v2.Version, "2")
	nack := &pb.SnapshotRequest{VersionInfo: v1.Version, ResponseNonce: "2",
		ErrorDetail: &spb.Status{Code: int32(codes.InvalidArgument), Message: "test.yaml: services[0].policy: nope"}}
	if err := s.Send(nack); err != nil {
		t.Fatal(err)
	}
	ns := r.waitNode(t, "gfe-1", "nacked v2", func(n NodeStatus) bool { return n.Nacks == 1 })
	wantNack := &Nack{Version: v2.Version, Serving: v1.Version, Code: codes.InvalidArgument, Error: "test.yaml: services[0].policy: nope", At: epoch}
	if diff := cmp.Diff(wantNack, ns.LastNack); diff != "" || ns.Acked != v1.Version {
		t.Errorf("after NACK: acked %s, last nack mismatch (-want +got):\n%s", ns.Acked, diff)
	}

	// The same version again (only At differs) is not pushed; a NACK does
	// not stop the next push.
	r.hub.Store(newState(r.cfg, v2.Health, true, epoch.Add(1)))
	v3 := r.state(true)
	recv(t, s, v3.Version, "3")
	if v3.Version != v1.Version {
		t.Errorf("v3 %s has v1's content but not its version %s", v3.Version, v1.Version)
	}

	// Two pushes before an answer: the answer to the older is ignored.
	v4 := r.state(true, "127.0.0.1:20000")
	recv(t, s, v4.Version, "4")
	v5 := r.state(true, "127.0.0.1:20002")
	recv(t, s, v5.Version, "5")
	ack(t, s, v3.Version, "3")
	ack(t, s, v4.Version, "4")
	ack(t, s, v5.Version, "5")
	ns = r.waitNode(t, "gfe-1", "acked v5", func(n NodeStatus) bool { return n.Acked == v5.Version })
	if ns.Acks != 2 || ns.Nacks != 1 || ns.Pushed != v5.Version || ns.Streams != 1 {
		t.Errorf("node status %+v, want 2 acks (v1, v5), 1 nack, pushed v5, 1 stream", ns)
	}
	for name, tt := range map[string]struct {
		c    prometheus.Collector
		want float64
	}{
		"pushes": {r.m.pushes, 5}, "acks": {r.m.acks, 2}, "nacks": {r.m.nacks, 1}, "connected": {r.m.connected, 1},
	} {
		if got := metricValue(t, tt.c); got != tt.want {
			t.Errorf("%s = %v, want %v", name, got, tt.want)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv() after CloseSend = %v, want a clean end", err)
	}
	r.waitNode(t, "gfe-1", "disconnected", func(n NodeStatus) bool { return n.Streams == 0 })
	if got := metricValue(t, r.m.connected); got != 0 {
		t.Errorf("connected = %v after the stream ended, want 0", got)
	}
}

func TestStreamSkipsVersionTheGFEServes(t *testing.T) {
	r := newSvcRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	v1 := r.state(true)
	s := r.open(t, ctx, "gfe-2", v1.Version)
	r.waitNode(t, "gfe-2", "recorded as serving v1", func(n NodeStatus) bool { return n.Acked == v1.Version })
	v2 := r.state(true, "127.0.0.1:20003")
	recv(t, s, v2.Version, "1") // the first push on this stream is v2
}

func TestStreamWaitsUntilReady(t *testing.T) {
	r := newSvcRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	r.state(false)
	s := r.open(t, ctx, "gfe-3", "")
	r.waitNode(t, "gfe-3", "connected", func(n NodeStatus) bool { return n.Streams == 1 })
	v := r.state(true, "127.0.0.1:20000")
	recv(t, s, v.Version, "1")
}

func TestStreamErrors(t *testing.T) {
	r := newSvcRig(t)
	r.state(true)
	tests := []struct {
		name     string
		hello    *pb.SnapshotRequest
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "no node", hello: &pb.SnapshotRequest{}, wantCode: codes.InvalidArgument, wantMsg: "node.id: required; node.site: required"},
		{name: "no site", hello: &pb.SnapshotRequest{Node: &pb.Node{Id: "x"}}, wantCode: codes.InvalidArgument, wantMsg: "node.site: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			s, err := r.client.StreamSnapshots(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(tt.hello); err != nil {
				t.Fatal(err)
			}
			_, err = s.Recv()
			if status.Code(err) != tt.wantCode || !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Errorf("Recv() = %v, want %v with %q", err, tt.wantCode, tt.wantMsg)
			}
		})
	}
	t.Run("shutdown", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		s := r.open(t, ctx, "gfe-4", "")
		recv(t, s, r.mustCurrent().Version, "1")
		r.svc.shutdown()
		if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("Recv() after shutdown = %v, want Unavailable", err)
		}
	})
}

func (r *svcRig) mustCurrent() *State {
	st, _ := r.hub.Load()
	return st
}

func TestGetHealth(t *testing.T) {
	r := newSvcRig(t)
	st := r.state(true, "127.0.0.1:20002")
	ctx := context.Background()
	resp, err := r.client.GetHealth(ctx, &pb.GetHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVersion() != st.Version || len(resp.GetInstances()) != 4 || resp.GetInstances()[2].GetHealthy() {
		t.Errorf("GetHealth() = %v, want version %s and 4 instances, the third unhealthy", resp, st.Version)
	}
	if _, err := r.client.GetHealth(ctx, &pb.GetHealthRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetHealth(nope) = %v, want NotFound", err)
	}
	resp, err = r.client.GetHealth(ctx, &pb.GetHealthRequest{Service: "web"})
	if err != nil || len(resp.GetInstances()) != 4 {
		t.Errorf("GetHealth(web) = %v, %v; want 4 instances", resp, err)
	}
}

func TestRequestCapacity(t *testing.T) {
	r := newSvcRig(t)
	r.state(true)
	valid := func() *pb.CapacityRequest {
		return &pb.CapacityRequest{NodeId: "gfe-1", Site: "paris", Service: "web", Group: "g00",
			Want: &pb.CapacityRequest_WantedInstances{WantedInstances: 3}, Reason: pb.CapacityReason_CAPACITY_REASON_NO_INSTANCE}
	}
	tests := []struct {
		name     string
		mutate   func(*pb.CapacityRequest)
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "valid: refused, no autoscaler", wantCode: codes.OK},
		{name: "extra rps", mutate: func(r *pb.CapacityRequest) { r.Want = &pb.CapacityRequest_ExtraRps{ExtraRps: 12.5} }, wantCode: codes.OK},
		{name: "empty", mutate: func(r *pb.CapacityRequest) { *r = pb.CapacityRequest{} }, wantCode: codes.InvalidArgument,
			wantMsg: "node_id: required; site: required; service: required; group: required; want: exactly one of wanted_instances, extra_rps is required"},
		{name: "zero instances", mutate: func(r *pb.CapacityRequest) { r.Want = &pb.CapacityRequest_WantedInstances{} }, wantCode: codes.InvalidArgument,
			wantMsg: "wanted_instances: must be >= 1, got 0"},
		{name: "negative rps", mutate: func(r *pb.CapacityRequest) { r.Want = &pb.CapacityRequest_ExtraRps{ExtraRps: -1} }, wantCode: codes.InvalidArgument,
			wantMsg: "extra_rps: must be finite and > 0, got -1"},
		{name: "unknown service", mutate: func(r *pb.CapacityRequest) { r.Service = "api" }, wantCode: codes.NotFound, wantMsg: `service: "api" not found`},
		{name: "group not a backend", mutate: func(r *pb.CapacityRequest) { r.Group = "g07" }, wantCode: codes.NotFound, wantMsg: `has no backend group "g07"`},
	}
	var ok, bad float64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := valid()
			if tt.mutate != nil {
				tt.mutate(req)
			}
			resp, err := r.client.RequestCapacity(context.Background(), req)
			if status.Code(err) != tt.wantCode || !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Fatalf("RequestCapacity() = %v, want %v with %q", err, tt.wantCode, tt.wantMsg)
			}
			if err == nil {
				ok++
				if resp.GetGranted() || resp.GetMessage() != noAutoscaler {
					t.Errorf("RequestCapacity() = %v, want refused with %q", resp, noAutoscaler)
				}
			} else {
				bad++
			}
		})
	}
	if got := metricValue(t, r.m.capacityRequests.WithLabelValues(resultRefused)); got != ok {
		t.Errorf("capacity_requests_total{result=refused} = %v, want %v", got, ok)
	}
	if got := metricValue(t, r.m.capacityRequests.WithLabelValues(resultInvalid)); got != bad {
		t.Errorf("capacity_requests_total{result=invalid} = %v, want %v", got, bad)
	}
}
