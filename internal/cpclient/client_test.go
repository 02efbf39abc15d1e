package cpclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/test/bufconn"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/snapshot"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

const defaultTestTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// configYAML is a valid configuration with group g1 of two instances;
// rate sets its max_rate_per_instance so that tests can tell configs apart.
func configYAML(rate int) []byte {
	return fmt.Appendf(nil, `regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances:
              - address: 127.0.0.1:9001
              - address: 127.0.0.1:9002
services:
  - name: web
    backends:
      - group: g1
        max_rate_per_instance: %d
routes:
  - service: web
`, rate)
}

// push is a snapshot of configYAML(rate) with 9001 healthy and 9002 as
// given.
func push(version, nonce string, rate int, healthy9002 bool) *pb.Snapshot {
	return &pb.Snapshot{
		Version: version, Nonce: nonce, ConfigYaml: configYAML(rate), ConfigSource: "cp.yaml", ControlPlaneId: "cp-test",
		Health: []*pb.InstanceHealth{
			{Group: "g1", Address: "127.0.0.1:9001", Healthy: true},
			{Group: "g1", Address: "127.0.0.1:9002", Healthy: healthy9002, Detail: "refused"},
		},
	}
}

// fakeCP is a hand-written ControlPlane server: it pushes what the test
// sends on pushes and hands every request it receives to reqs.
type fakeCP struct {
	pb.UnimplementedControlPlaneServer
	pushes chan *pb.Snapshot
	reqs   chan *pb.SnapshotRequest
}

func (f *fakeCP) StreamSnapshots(stream pb.ControlPlane_StreamSnapshotsServer) error {
	ctx := stream.Context()
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case f.reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case m := <-f.pushes:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-errc:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// network holds in-memory control planes by address.
type network struct {
	t   *testing.T
	mu  sync.Mutex
	lis map[string]*bufconn.Listener
}

func newNetwork(t *testing.T) *network { return &network{t: t, lis: map[string]*bufconn.Listener{}} }

// dialer is the client's dial option for this network.
func (n *network) dialer() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		n.mu.Lock()
		l := n.lis[addr]
		n.mu.Unlock()
		if l == nil {
			return nil, fmt.Errorf("no control plane at %s", addr)
		}
		return l.DialContext(ctx)
	})
}

// serve starts a fakeCP at addr and returns it with a function that stops
// it (as a crash: connections drop).
func (n *network) serve(addr string, opts ...grpc.ServerOption) (*fakeCP, func()) {
	f := &fakeCP{pushes: make(chan *pb.Snapshot), reqs: make(chan *pb.SnapshotRequest, 16)}
	l := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	pb.RegisterControlPlaneServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	n.mu.Lock()
	n.lis[addr] = l
	n.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.lis, addr)
			n.mu.Unlock()
			srv.Stop()
			<-done
		})
	}
	n.t.Cleanup(stop)
	return f, stop
}

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// startClient runs a client for addrs until the test ends.
func startClient(t *testing.T, n *network, clk clock.Clock, apply func(*snapshot.Snapshot) error, addrs ...string) *Client {
	t.Helper()
	return startClientTLS(t, n, clk, mtls.ClientConfig{InsecurePlaintext: true}, apply, addrs...)
}

// startClientTLS is startClient with the given transport security.
func startClientTLS(t *testing.T, n *network, clk clock.Clock, tls mtls.ClientConfig, apply func(*snapshot.Snapshot) error, addrs ...string) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TLS = tls
	for _, a := range addrs {
		// passthrough: the network's dialer gets the bare name.
		cfg.Addresses = append(cfg.Addresses, "passthrough:///"+a)
	}
	cfg.Node, cfg.Site = "gfe-1", "paris"
	c, err := New(cfg, Options{
		Clock: clk, Logger: testLogger(t), Apply: apply,
		Rand:        func() uint64 { return 0 }, // start at addrs[0]; shortest backoff
		DialOptions: []grpc.DialOption{n.dialer()},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	return c
}

// next returns the next request the fake control plane received.
func next(t *testing.T, f *fakeCP) *pb.SnapshotRequest {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out waiting for a request")
		return nil
	}
}

func send(t *testing.T, f *fakeCP, m *pb.Snapshot) {
	t.Helper()
	select {
	case f.pushes <- m:
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out pushing")
	}
}

// wantAck checks that req acknowledges version/nonce.
func wantAck(t *testing.T, req *pb.SnapshotRequest, version, nonce string) {
	t.Helper()
	if req.GetVersionInfo() != version || req.GetResponseNonce() != nonce || req.GetErrorDetail() != nil {
		t.Fatalf("got %v, want ACK of %s (nonce %s)", req, version, nonce)
	}
}

// wantNack checks that req rejects nonce, keeps serving, and says why.
func wantNack(t *testing.T, req *pb.SnapshotRequest, serving, nonce, msg string) {
	t.Helper()
	d := req.GetErrorDetail()
	if req.GetVersionInfo() != serving || req.GetResponseNonce() != nonce || d == nil ||
		codes.Code(d.GetCode()) != codes.InvalidArgument || !strings.Contains(d.GetMessage(), msg) {
		t.Fatalf("got %v, want NACK of nonce %s serving %s with %q", req, nonce, serving, msg)
	}
}

func TestClientAcksAndNacks(t *testing.T) {
	n := newNetwork(t)
	cp, _ := n.serve("cp-a")
	apply := func(s *snapshot.Snapshot) error {
		if strings.HasPrefix(s.Version, "bad") {
			return errors.New("the gfe cannot serve this")
		}
		return nil
	}
	c := startClient(t, n, clock.NewFake(epoch), apply, "cp-a")

	hello := next(t, cp)
	if hello.GetNode().GetId() != "gfe-1" || hello.GetNode().GetSite() != "paris" || hello.GetVersionInfo() != "" || hello.GetResponseNonce() != "" {
		t.Fatalf("hello = %v, want node gfe-1 at paris serving nothing", hello)
	}
	if got, want := hello.GetNode().GetConfigFields(), config.Fields(); !slices.Equal(got, want) {
		t.Errorf("hello states %d config fields, want this build's %d (config.Fields)", len(got), len(want))
	}
	if c.Current() != nil {
		t.Fatalf("Current() = %v before any push, want nil", c.Current())
	}

	send(t, cp, push("v1", "1", 100, false))
	wantAck(t, next(t, cp), "v1", "1")
	cur := c.Current()
	if cur.Version != "v1" || cur.Healthy("127.0.0.1:9002") || !cur.Healthy("127.0.0.1:9001") || cur.Healthy("10.0.0.1:1") {
		t.Fatalf("Current() = %+v, want v1 with only 9001 healthy", cur)
	}
	select {
	case <-c.Changes():
	default:
		t.Error("Changes() did not fire after v1")
	}

	bad := push("v2", "2", 100, true)
	bad.ConfigYaml = []byte("regions: []\nservices: []\nroutes: []\n")
	tests := []struct {
		name string
		m    *pb.Snapshot
		want string
	}{
		{name: "invalid config", m: bad, want: "snapshot.config_yaml: cp.yaml: regions: at least one region is required"},
		{name: "refused by apply", m: push("bad-3", "3", 50, true), want: "apply snapshot bad-3: the gfe cannot serve this"},
		{name: "unknown instance", m: func() *pb.Snapshot {
			m := push("v4", "4", 50, true)
			m.Health[1].Address = "127.0.0.1:9999"
			return m
		}(), want: `snapshot.health[1].address: "127.0.0.1:9999" is not an instance of group "g1"`},
		{name: "no nonce", m: push("v5", "", 50, true), want: "snapshot.nonce: required"},
	}
	for i, tt := range tests {
		send(t, cp, tt.m)
		wantNack(t, next(t, cp), "v1", tt.m.GetNonce(), tt.want)
		if c.Current() != cur {
			t.Fatalf("%s: Current() changed to %s, want v1 kept", tt.name, c.Current().Version)
		}
		// Refusals in a row are counted, so that the gfe shows it
		// stopped following the control plane.
		if st := c.Status(); st.NacksInARow != uint64(i+1) || !strings.Contains(st.LastNack, tt.want) || !st.LastNackAt.Equal(epoch) {
			t.Errorf("%s: Status() = %d NACKs in a row, last %q at %v; want %d, %q at %v", tt.name, st.NacksInARow, st.LastNack, st.LastNackAt, i+1, tt.want, epoch)
		}
	}
	select {
	case <-c.Changes():
		t.Error("Changes() fired for rejected snapshots")
	default:
	}

	send(t, cp, push("v6", "6", 50, true))
	wantAck(t, next(t, cp), "v6", "6")
	if cur := c.Current(); cur.Version != "v6" || cur.Config.Services[0].Backends[0].MaxRatePerInstance != 50 || !cur.Healthy("127.0.0.1:9002") {
		t.Errorf("Current() = %+v, want v6 with rate 50 and 9002 healthy", cur)
	}
	// The same version again is acknowledged without being applied.
	send(t, cp, push("v6", "7", 50, true))
	wantAck(t, next(t, cp), "v6", "7")
	st := c.Status()
	want := Status{Connected: "passthrough:///cp-a", Version: "v6", Pushes: 7, Acks: 3, Nacks: 4, Connects: 1,
		LastError: "snapshot.nonce: required", NacksInARow: 0, LastNack: "snapshot.nonce: required", LastNackAt: epoch}
	if st != want {
		t.Errorf("Status() = %+v, want %+v", st, want)
	}
}

// TestClientAcksFieldsOfANewerRelease: a snapshot from a control plane
// one release ahead, with configuration fields this build does not know,
// is ACKed and applied — its health followed — with the fields named in
// Current's UnknownFields; it is not refused as an operator file would be.
func TestClientAcksFieldsOfANewerRelease(t *testing.T) {
	n := newNetwork(t)
	cp, _ := n.serve("cp-a")
	c := startClient(t, n, clock.NewFake(epoch), nil, "cp-a")
	next(t, cp) // hello
	for i, healthy := range []bool{false, true} {
		m := push(fmt.Sprintf("v%d", i+1), fmt.Sprint(i+1), 100, healthy)
		m.ConfigYaml = append(m.ConfigYaml, "  - service: web\n    host: a.example\n    mirror: {service: web, fraction: 0.1}\n"...)
		send(t, cp, m)
		wantAck(t, next(t, cp), m.GetVersion(), m.GetNonce())
		cur := c.Current()
		if cur.Version != m.GetVersion() || cur.Healthy("127.0.0.1:9002") != healthy {
			t.Errorf("Current() = %s with 9002 healthy %v, want %s with %v", cur.Version, cur.Healthy("127.0.0.1:9002"), m.GetVersion(), healthy)
		}
		if want := []string{"routes[1].mirror"}; !slices.Equal(cur.UnknownFields, want) {
			t.Errorf("UnknownFields = %q, want %q", cur.UnknownFields, want)
		}
	}
	if st := c.Status(); st.Acks != 2 || st.Nacks != 0 || st.NacksInARow != 0 {
		t.Errorf("Status() = %+v, want 2 ACKs and no NACK", st)
	}
}

// advanceUntil advances clk by step each time the client waits on its
// backoff timer, until a request reaches f, and returns it.
func advanceUntil(t *testing.T, clk *clock.Fake, step time.Duration, f *fakeCP) *pb.SnapshotRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		armed := make(chan error, 1)
		bctx, bcancel := context.WithCancel(ctx)
		go func() { armed <- clk.BlockUntil(bctx, 1) }()
		select {
		case r := <-f.reqs:
			bcancel()
			<-armed
			return r
		case err := <-armed:
			bcancel()
			if err != nil {
				t.Fatal("timed out waiting for the client to reconnect")
			}
			clk.Advance(step)
		}
	}
}

func TestClientStaticStabilityAndFailover(t *testing.T) {
	n := newNetwork(t)
	a, stopA := n.serve("cp-a")
	b, stopB := n.serve("cp-b")
	clk := clock.NewFake(epoch)
	c := startClient(t, n, clk, nil, "cp-a", "cp-b")

	next(t, a) // hello
	send(t, a, push("v1", "1", 100, true))
	wantAck(t, next(t, a), "v1", "1")

	// cp-a dies: the client keeps v1 and, after its backoff, moves to cp-b,
	// telling it what it serves.
	stopA()
	hello := advanceUntil(t, clk, DefaultConfig().BackoffMax, b)
	if hello.GetVersionInfo() != "v1" {
		t.Errorf("hello to cp-b says it serves %q, want v1", hello.GetVersionInfo())
	}
	if c.Current().Version != "v1" {
		t.Errorf("Current() = %s during failover, want v1", c.Current().Version)
	}
	send(t, b, push("v2", "1", 60, true))
	wantAck(t, next(t, b), "v2", "1")

	// Every control plane gone: v2 stays; the client keeps trying, and
	// picks up the config of the first one that comes back.
	stopB()
	waitConnected(t, c, "")
	for range 5 {
		bctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		if err := clk.BlockUntil(bctx, 1); err != nil {
			t.Fatal(err)
		}
		cancel()
		clk.Advance(DefaultConfig().BackoffMax)
	}
	if cur := c.Current(); cur.Version != "v2" {
		t.Fatalf("Current() = %s with no control plane, want v2", cur.Version)
	}
	if st := c.Status(); st.Failures < 6 || st.Connected != "" {
		t.Errorf("Status() = %+v, want >= 6 failures and no connection", st)
	}
	a2, _ := n.serve("cp-a")
	if hello := advanceUntil(t, clk, DefaultConfig().BackoffMax, a2); hello.GetVersionInfo() != "v2" {
		t.Errorf("hello to the returning cp-a says %q, want v2", hello.GetVersionInfo())
	}
	send(t, a2, push("v3", "1", 70, true))
	wantAck(t, next(t, a2), "v3", "1")
	if cur := c.Current(); cur.Version != "v3" || cur.Config.Services[0].Backends[0].MaxRatePerInstance != 70 {
		t.Errorf("Current() = %+v, want v3 with rate 70", cur)
	}
}

func waitConnected(t *testing.T, c *Client, addr string) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for c.Status().Connected != addr {
		if time.Now().After(deadline) {
			t.Fatalf("Status().Connected = %q, want %q", c.Status().Connected, addr)
		}
		<-tick.C
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{Addresses: []string{""}}
	err := c.Validate()
	for _, want := range []string{"control_planes[0]: empty address", "node: required", "site: required",
		"backoff_min: must be > 0", "keepalive_time: must be > 0", "keepalive_timeout: must be > 0",
		"no transport security configured: set --tls-ca, --tls-cert and --tls-key"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
	good := DefaultConfig()
	good.Addresses, good.Node, good.Site = []string{"x:1"}, "n", "s"
	good.TLS.InsecurePlaintext = true
	if err := good.Validate(); err != nil {
		t.Errorf("Validate() = %v for a good config", err)
	}
}
