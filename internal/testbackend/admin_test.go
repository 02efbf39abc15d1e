package testbackend

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
)

// TestAdmin checks the routes of the process admin listener on an http
// instance: the health toggle reaches its /healthz, stats, close and the
// errors.
func TestAdmin(t *testing.T) {
	s := startServer(t, Config{
		Instances: []InstanceConfig{testInstance("a", DefaultCapacity()), tcpInstance("t", DefaultCapacity())},
		AdminAddr: "127.0.0.1:0",
	}, nil)
	c := newClient(t, "")
	steps := []struct {
		name       string
		method     string
		path       string
		wantStatus int
		wantBody   string
	}{
		{name: "health of a", method: http.MethodGet, path: "/admin/health?instance=a", wantStatus: 200, wantBody: `{"healthy":true}` + "\n"},
		{name: "make a unhealthy", method: http.MethodPost, path: "/admin/health?instance=a&healthy=false", wantStatus: 200, wantBody: `{"healthy":false}` + "\n"},
		{name: "its /healthz fails", method: http.MethodGet, path: "http://a/healthz", wantStatus: 503},
		{name: "make a healthy", method: http.MethodPost, path: "/admin/health?instance=a&healthy=true", wantStatus: 200},
		{name: "its /healthz passes", method: http.MethodGet, path: "http://a/healthz", wantStatus: 200},
		{name: "stats of t", method: http.MethodGet, path: "/admin/stats?instance=t", wantStatus: 200},
		{name: "close a", method: http.MethodPost, path: "/admin/close?instance=a", wantStatus: 200},
		{name: "no instance", method: http.MethodPost, path: "/admin/health?healthy=false", wantStatus: 400, wantBody: "want ?instance=NAME\n"},
		{name: "unknown instance", method: http.MethodGet, path: "/admin/stats?instance=nope", wantStatus: 404, wantBody: `unknown instance "nope"` + "\n"},
		{name: "bad healthy", method: http.MethodPost, path: "/admin/health?instance=t&healthy=maybe", wantStatus: 400},
		{name: "close unknown", method: http.MethodPost, path: "/admin/close?instance=nope", wantStatus: 404},
		{name: "wrong method", method: http.MethodGet, path: "/admin/close?instance=a", wantStatus: 405},
		{name: "unknown route", method: http.MethodGet, path: "/nope", wantStatus: 404},
	}
	for _, st := range steps {
		url := "http://" + s.AdminAddr() + st.path
		if path, ok := strings.CutPrefix(st.path, "http://a"); ok {
			url = "http://" + s.Addr("a") + path
		}
		r := mustDo(t, c, st.method, url)
		if r.status != st.wantStatus || (st.wantBody != "" && r.body != st.wantBody) {
			t.Errorf("%s: %s %s = %d %q, want %d %q", st.name, st.method, st.path, r.status, r.body, st.wantStatus, st.wantBody)
		}
	}

	r := mustDo(t, c, http.MethodGet, "http://"+s.AdminAddr()+"/admin/stats")
	var all []Stats
	if err := json.Unmarshal([]byte(r.body), &all); err != nil {
		t.Fatalf("GET /admin/stats: %v in %q", err, r.body)
	}
	var got []string
	for _, st := range all {
		got = append(got, st.Instance+"/"+string(st.Proto))
	}
	if diff := cmp.Diff([]string{"a/http", "t/tcp"}, got); diff != "" {
		t.Errorf("GET /admin/stats instances mismatch (-want +got):\n%s", diff)
	}
	if all[0].Probes != 2 || !all[0].Healthy {
		t.Errorf("stats of a: probes %d healthy %v, want 2, true", all[0].Probes, all[0].Healthy)
	}

	if err := s.SetHealthy("nope", false); !errors.Is(err, ErrUnknownInstance) {
		t.Errorf("SetHealthy(nope) = %v, want ErrUnknownInstance", err)
	}
	if n := s.CloseConns("nope"); n != -1 {
		t.Errorf("CloseConns(nope) = %d, want -1", n)
	}
}

// TestShutdownEndsStreams checks that Run, once its context is done, ends
// every long-lived stream: a WebSocket closes with StatusGoingAway, a gRPC
// stream and a health watch end with UNAVAILABLE, a tcp connection is
// closed, and Run returns nil.
func TestShutdownEndsStreams(t *testing.T) {
	s, err := New(Config{
		Instances: []InstanceConfig{
			testInstance("p", DefaultCapacity()), grpcInstance("g", DefaultCapacity()), tcpInstance("t", DefaultCapacity()),
		},
		AdminAddr:       "127.0.0.1:0",
		ShutdownTimeout: defaultTestTimeout,
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()

	ws, _, err := websocket.Dial(ctx, "ws://"+s.Addr("p")+"/ws", &websocket.DialOptions{HTTPClient: newClient(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ws.CloseNow() }()
	readMessage(ctx, t, ws) // hello
	cc := dialGRPC(t, s.Addr("g"), "")
	stream, err := echopb.NewEchoClient(cc).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	watch, err := healthgrpc.NewHealthClient(cc).Watch(ctx, &healthgrpc.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	tc, _ := mustDialTCP(ctx, t, s.Addr("t"))

	start := time.Now()
	stop()
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("WebSocket read during shutdown: %v, want close status GoingAway", err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC stream during shutdown: %v, want Unavailable", err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("health watch during shutdown: %v, want Unavailable", err)
			}
			break
		}
		if resp.GetStatus() != healthgrpc.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health watch during shutdown: %v, want NOT_SERVING then Unavailable", resp.GetStatus())
		}
	}
	if _, err := tc.r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("tcp connection during shutdown: %v, want EOF", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	// Nothing waits for the shutdown timeout.
	if took := time.Since(start); took > defaultTestTimeout/2 {
		t.Errorf("shutdown took %v", took)
	}
}

// TestHold checks that a hold keeps admitted requests in flight, holding
// their slots, until it is lifted, and that it is set per instance through
// both admin listeners.
func TestHold(t *testing.T) {
	capacity := DefaultCapacity()
	capacity.MaxConcurrency, capacity.Queue = 0, 100 // unlimited slots
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("a", capacity)}, AdminAddr: "127.0.0.1:0"}, nil)
	c := newClient(t, "")
	if r := mustDo(t, c, http.MethodPost, "http://"+s.AdminAddr()+"/admin/hold?instance=a&on=true"); r.status != 200 || r.body != `{"on":true}`+"\n" {
		t.Fatalf("hold on: %d %q", r.status, r.body)
	}
	const n = 5
	done := make(chan response, n)
	for range n {
		go func() { done <- do(t.Context(), c, http.MethodGet, "http://"+s.Addr("a")+"/x") }()
	}
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	for in := s.find("a"); in.stats().InFlight != n; {
		select {
		case r := <-done:
			t.Fatalf("a request finished under the hold: %d %q %v", r.status, r.body, r.err)
		case <-ctx.Done():
			t.Fatalf("%d requests in flight under the hold, want %d", in.stats().InFlight, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if r := mustDo(t, c, http.MethodPost, "http://"+s.Addr("a")+"/admin/hold?on=false"); r.status != 200 {
		t.Fatalf("hold off: %d %q", r.status, r.body)
	}
	for range n {
		if r := <-done; r.err != nil || r.status != 200 {
			t.Errorf("held request: %d %v, want 200 once the hold is lifted", r.status, r.err)
		}
	}
	if st := s.find("a").stats(); st.InFlight != 0 || st.Served != n {
		t.Errorf("after the hold: in flight %d, served %d; want 0, %d", st.InFlight, st.Served, n)
	}
	if r := mustDo(t, c, http.MethodPost, "http://"+s.Addr("a")+"/admin/hold?on=maybe"); r.status != 400 {
		t.Errorf("hold on=maybe: %d, want 400", r.status)
	}
}
