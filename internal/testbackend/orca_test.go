package testbackend

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
	"github.com/spillway-lb/spillway/lb/loadreport"
)

// approx compares reports and utilizations computed in floating point.
var approx = cmpopts.EquateApprox(0, 1e-9)

// reportOf parses the load report header of an HTTP answer.
func reportOf(t *testing.T, r response) loadreport.Report {
	t.Helper()
	h := r.header.Get(loadreport.Header)
	if h == "" {
		t.Fatalf("answer %d has no %s header", r.status, loadreport.Header)
	}
	rep, err := loadreport.Parse(h)
	if err != nil {
		t.Fatalf("answer %d: %s %q: %v", r.status, loadreport.Header, h, err)
	}
	return rep
}

// trailerReport decodes the per-call ORCA report of a gRPC trailer, as
// grpc-go's orca package does on the client.
func trailerReport(t *testing.T, md metadata.MD) loadreport.Report {
	t.Helper()
	vs := md.Get(loadreport.GRPCTrailer)
	if len(vs) != 1 {
		t.Fatalf("trailer %v: want one %s", md, loadreport.GRPCTrailer)
	}
	var m v3orcapb.OrcaLoadReport
	if err := proto.Unmarshal([]byte(vs[0]), &m); err != nil {
		t.Fatalf("trailer %s: %v", loadreport.GRPCTrailer, err)
	}
	return loadreport.FromProto(&m)
}

// wantLoad is the report an instance sends for utilization u, rps arrivals
// per second and q queued, without Config.CPUs.
func wantLoad(u, rps, q float64) loadreport.Report {
	return loadreport.Report{ApplicationUtilization: u, CPUUtilization: u, RPSFractional: rps, Queue: q}
}

func TestUtilization(t *testing.T) {
	tests := []struct {
		name             string
		c                Capacity
		inFlight, queued int
		rps              float64
		want             float64
	}{
		{name: "no limits", c: Capacity{}, inFlight: 9, rps: 1000, want: 0},
		{name: "slots half used", c: Capacity{MaxConcurrency: 4}, inFlight: 2, rps: 1000, want: 0.5},
		{name: "slots full, no queue", c: Capacity{MaxConcurrency: 4}, inFlight: 4, want: 1},
		{name: "slots full, queue", c: Capacity{MaxConcurrency: 4}, inFlight: 4, queued: 2, want: 1.5},
		{name: "queue during a slot hand-over", c: Capacity{MaxConcurrency: 4}, inFlight: 3, queued: 1, want: 1.25},
		{name: "rate below the limit", c: Capacity{MaxRPS: 100}, rps: 50, want: 0.5},
		{name: "rate above the limit, no queue", c: Capacity{MaxRPS: 100}, rps: 150, want: 1.5},
		{name: "rate limit, queue while below the rate", c: Capacity{MaxRPS: 10}, queued: 1, rps: 2, want: 1.1},
		{name: "rate above the limit and a queue", c: Capacity{MaxRPS: 100}, queued: 5, rps: 150, want: 1.55},
		{name: "both limits: the larger term", c: Capacity{MaxConcurrency: 4, MaxRPS: 100}, inFlight: 1, rps: 80, want: 0.8},
		{name: "both limits: queue over slots", c: Capacity{MaxConcurrency: 4, MaxRPS: 100}, inFlight: 4, queued: 2, rps: 120, want: 1.7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := utilization(tt.c, tt.inFlight, tt.queued, tt.rps); !cmp.Equal(got, tt.want, approx) {
				t.Errorf("utilization(%+v, %d, %d, %v) = %v, want %v", tt.c, tt.inFlight, tt.queued, tt.rps, got, tt.want)
			}
		})
	}
}

func TestRateWindow(t *testing.T) {
	at := func(d time.Duration) time.Time { return time.Unix(0, 0).Add(d) }
	const ms = time.Millisecond
	tests := []struct {
		name   string
		events []time.Duration // since the epoch
		now    time.Duration
		want   float64
	}{
		{name: "empty", now: 0, want: 0},
		{name: "burst now", events: []time.Duration{0, 0, 0}, now: 0, want: 3},
		{name: "within the second", events: []time.Duration{50 * ms, 420 * ms, 999 * ms}, now: 999 * ms, want: 3},
		// At 1.05s the second began at 0.05s, half-way through the oldest
		// bucket [0, 0.1s): half of its 4 events count.
		{name: "oldest bucket in part", events: []time.Duration{10 * ms, 20 * ms, 30 * ms, 40 * ms, 500 * ms}, now: 1050 * ms, want: 3},
		{name: "all older than a second", events: []time.Duration{10 * ms, 90 * ms}, now: 1100 * ms, want: 0},
		// Bucket 11 reuses the slot of bucket 0.
		{name: "stale slot reset", events: []time.Duration{10 * ms, 20 * ms, 1150 * ms}, now: 1150 * ms, want: 1},
		{name: "before 1970", events: []time.Duration{-350 * ms, -50 * ms}, now: -10 * ms, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w rateWindow
			for _, e := range tt.events {
				w.add(at(e))
			}
			if got := w.rate(at(tt.now)); !cmp.Equal(got, tt.want, approx) {
				t.Errorf("rate at %v after events at %v = %v, want %v", tt.now, tt.events, got, tt.want)
			}
		})
	}
}

// TestLoadReportHTTP drives an instance limited to 100 requests/s on the
// fake clock: below the limit its reports give the arrival rate and
// U = rate/max_rps; driven above it, with a standing queue, U > 1 and
// named_metrics.queue is the queue's length; once the queue drains and a
// quiet second passes, the load is back to one request's.
func TestLoadReportHTTP(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	const (
		maxRPS = 100
		queue  = 5
	)
	s := startServer(t, Config{Instances: []InstanceConfig{
		testInstance("a", Capacity{MaxRPS: maxRPS, Burst: 1, Queue: queue}),
	}}, clk)
	base := "http://" + s.Addr("a")
	c := newClient(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	// Below the limit: 50 requests/s, one every 20ms for 2s, 5ms into
	// each 20ms. Once the first second has passed, the rate is 50 within
	// the estimate's tolerance, the arrivals of one 100ms bucket (5), so
	// U = 0.5 ± 0.05.
	const rate, tolerance = 50.0, 5.0
	clk.Advance(5 * time.Millisecond)
	for i := range 100 {
		r := mustDo(t, c, http.MethodGet, base+"/")
		if r.status != http.StatusOK {
			t.Fatalf("request %d below the limit: status %d, want 200", i, r.status)
		}
		rep := reportOf(t, r)
		if want := wantLoad(rep.RPSFractional/maxRPS, rep.RPSFractional, 0); !cmp.Equal(rep, want, approx) {
			t.Errorf("request %d below the limit: report %+v, want U = rps/max_rps and no queue", i, rep)
		}
		if i >= 50 && math.Abs(rep.RPSFractional-rate) > tolerance {
			t.Errorf("request %d after the first second: rps_fractional %v, want %v ± %v", i, rep.RPSFractional, rate, tolerance)
		}
		clk.Advance(20 * time.Millisecond)
	}

	// Above the limit: 6 requests at once. One starts; 5 queue for their
	// tokens, 10ms apart.
	queued := make(chan response, queue+1)
	for range queue + 1 {
		go func() { queued <- do(ctx, c, http.MethodGet, base+"/") }()
	}
	if err := clk.BlockUntil(ctx, queue); err != nil {
		t.Fatal(err)
	}
	if r := <-queued; r.err != nil || r.status != http.StatusOK {
		t.Fatalf("the request that found a token: %d, %v; want 200", r.status, r.err)
	}
	// While the queue stands, every rejection reports it: U > 1, and one
	// more arrival each, until arrivals over the last second outrun
	// max_rps too.
	var prev loadreport.Report
	for k := range 60 {
		r := mustDo(t, c, http.MethodGet, base+"/")
		if r.status != http.StatusServiceUnavailable || r.header.Get(HeaderReject) != "queue-full" {
			t.Fatalf("rejection %d: status %d, %s %q; want 503 queue-full", k, r.status, HeaderReject, r.header.Get(HeaderReject))
		}
		rep := reportOf(t, r)
		want := wantLoad(max(rep.RPSFractional/maxRPS, 1)+float64(queue)/maxRPS, rep.RPSFractional, queue)
		if !cmp.Equal(rep, want, approx) || rep.ApplicationUtilization <= 1 {
			t.Errorf("rejection %d: report %+v, want %+v (U > 1, queue %d)", k, rep, want, queue)
		}
		if k > 0 && rep.RPSFractional != prev.RPSFractional+1 {
			t.Errorf("rejection %d: rps_fractional %v, want %v (one more arrival)", k, rep.RPSFractional, prev.RPSFractional+1)
		}
		prev = rep
	}
	if prev.RPSFractional <= maxRPS {
		t.Errorf("after the rejections: rps_fractional %v, want above max_rps %d", prev.RPSFractional, maxRPS)
	}
	// The queue drains one token (10ms) at a time; each served request
	// reports the queue it leaves behind.
	for left := queue - 1; left >= 0; left-- {
		clk.Advance(10 * time.Millisecond)
		r := <-queued
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("queued request: %d, %v; want 200", r.status, r.err)
		}
		rep := reportOf(t, r)
		if rep.Queue != float64(left) || (left > 0 && rep.ApplicationUtilization <= 1) {
			t.Errorf("queued request served with %d left: report %+v, want queue %d and U > 1 while it is not 0", left, rep, left)
		}
	}
	// A quiet second later: one arrival, nothing queued.
	clk.Advance(2 * time.Second)
	r := mustDo(t, c, http.MethodGet, base+"/")
	if diff := cmp.Diff(wantLoad(1.0/maxRPS, 1, 0), reportOf(t, r), approx); diff != "" {
		t.Errorf("after a quiet second: report mismatch (-want +got):\n%s", diff)
	}
}

// TestLoadReportWhere checks which HTTP answers carry a load report: those
// to normal requests (served, faulted) and WebSocket handshakes, not
// probes or admin routes, and none from an instance with NoLoadReports.
func TestLoadReportWhere(t *testing.T) {
	off := testInstance("off", DefaultCapacity())
	off.NoLoadReports = true
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("on", DefaultCapacity()), off}}, nil)
	c := newClient(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	tests := []struct {
		name, instance, method, path string
		want                         bool
	}{
		{name: "served", instance: "on", method: http.MethodGet, path: "/hello", want: true},
		{name: "healthz", instance: "on", method: http.MethodGet, path: "/healthz"},
		{name: "rtt", instance: "on", method: http.MethodGet, path: "/rtt"},
		{name: "admin", instance: "on", method: http.MethodGet, path: "/admin/stats"},
		{name: "off: served", instance: "off", method: http.MethodGet, path: "/hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustDo(t, c, tt.method, "http://"+s.Addr(tt.instance)+tt.path)
			if got := r.header.Get(loadreport.Header) != ""; got != tt.want {
				t.Errorf("%s %s on %s: %s %q, want one: %v", tt.method, tt.path, tt.instance, loadreport.Header, r.header.Get(loadreport.Header), tt.want)
			}
		})
	}
	t.Run("faulted", func(t *testing.T) {
		s.find("on").setFault(http.StatusInternalServerError)
		defer s.find("on").setFault(0)
		r := mustDo(t, c, http.MethodGet, "http://"+s.Addr("on")+"/hello")
		if r.status != http.StatusInternalServerError || r.header.Get(loadreport.Header) == "" {
			t.Errorf("faulted answer: %d with %s %q, want 500 with a report", r.status, loadreport.Header, r.header.Get(loadreport.Header))
		}
	})
	t.Run("websocket handshake", func(t *testing.T) {
		conn, resp, err := websocket.Dial(ctx, "ws://"+s.Addr("on")+"/ws", &websocket.DialOptions{HTTPClient: c})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.CloseNow() }()
		rep, err := loadreport.Parse(resp.Header.Get(loadreport.Header))
		// The stream holds one of the 4 slots; there is no rate limit.
		if err != nil || rep.ApplicationUtilization != 0.25 || rep.Queue != 0 {
			t.Errorf("handshake report %+v (%v), want U = 0.25 (1 of 4 slots), no queue", rep, err)
		}
	})
}

// TestGRPCLoadReports reads the per-call reports in the trailers of unary
// and streaming Echo calls on an instance with one slot and a queue of 2,
// on the fake clock: a rejection while 2 wait reports U = 1 + 2/1 = 3,
// and each served call the load it leaves behind. No call leaves the
// first second, so rps_fractional counts every call.
func TestGRPCLoadReports(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	const serviceTime = 300 * time.Millisecond
	s := startServer(t, Config{Instances: []InstanceConfig{
		grpcInstance("g", Capacity{MaxConcurrency: 1, Queue: 2, ServiceTime: serviceTime}),
	}}, clk)
	client := echopb.NewEchoClient(dialGRPC(t, s.Addr("g"), ""))
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	type result struct {
		trailer metadata.MD
		err     error
	}
	call := func() result {
		var tr metadata.MD
		_, err := client.Unary(ctx, &echopb.EchoRequest{Message: "x"}, grpc.Trailer(&tr))
		return result{tr, err}
	}
	results := make(chan result, 3)
	go func() { results <- call() }()
	if err := clk.BlockUntil(ctx, 1); err != nil { // the first call in its slot
		t.Fatal(err)
	}
	for range 2 {
		go func() { results <- call() }()
	}
	if err := s.find("g").lim.waitFor(ctx, func(_, q int) bool { return q == 2 }); err != nil {
		t.Fatal(err)
	}

	rejected := call()
	if status.Code(rejected.err) != codes.Unavailable {
		t.Fatalf("fourth call: %v, want UNAVAILABLE", rejected.err)
	}
	if diff := cmp.Diff(wantLoad(3, 4, 2), trailerReport(t, rejected.trailer)); diff != "" {
		t.Errorf("rejected call: report mismatch (-want +got):\n%s", diff)
	}
	for i, want := range []loadreport.Report{
		wantLoad(2, 4, 1), // the second call took the slot; the third waits
		wantLoad(1, 4, 0), // the third call took the slot
		wantLoad(0, 4, 0),
	} {
		if err := clk.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(serviceTime)
		r := <-results
		if r.err != nil {
			t.Fatalf("served call %d: %v", i, r.err)
		}
		if diff := cmp.Diff(want, trailerReport(t, r.trailer)); diff != "" {
			t.Errorf("served call %d: report mismatch (-want +got):\n%s", i, diff)
		}
	}

	// A stream's trailer has the report made as it ends, after its slot
	// is free: one more arrival.
	stream, err := client.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream Recv after CloseSend: %v, want EOF", err)
	}
	if diff := cmp.Diff(wantLoad(0, 5, 0), trailerReport(t, stream.Trailer())); diff != "" {
		t.Errorf("stream: report mismatch (-want +got):\n%s", diff)
	}
}

// TestGRPCOOBLoadReports reads out-of-band reports from the
// OpenRcaService: one at once, and the next one interval later on the
// fake clock, the interval being Config.ORCAMinInterval since the client
// asks for less.
func TestGRPCOOBLoadReports(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	const minInterval = 200 * time.Millisecond
	s := startServer(t, Config{
		Instances:       []InstanceConfig{grpcInstance("g", Capacity{MaxConcurrency: 4, Queue: 1, ServiceTime: time.Second})},
		ORCAMinInterval: minInterval,
	}, clk)
	cc := dialGRPC(t, s.Addr("g"), "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	served := make(chan error, 1)
	go func() {
		_, err := echopb.NewEchoClient(cc).Unary(ctx, &echopb.EchoRequest{Message: "x"})
		served <- err
	}()
	if err := clk.BlockUntil(ctx, 1); err != nil { // the call holds 1 of 4 slots
		t.Fatal(err)
	}

	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	oob, err := v3orcaservicegrpc.NewOpenRcaServiceClient(cc).StreamCoreMetrics(sctx,
		&v3orcaservicegrpc.OrcaLoadReportRequest{ReportInterval: durationpb.New(minInterval / 4)})
	if err != nil {
		t.Fatal(err)
	}
	want := wantLoad(0.25, 1, 0)
	for i := range 2 {
		m, err := oob.Recv()
		if err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
		if diff := cmp.Diff(want, loadreport.FromProto(m)); diff != "" {
			t.Errorf("report %d mismatch (-want +got):\n%s", i, diff)
		}
		if i == 0 {
			if err := clk.BlockUntil(ctx, 2); err != nil { // the service timer and the report ticker
				t.Fatal(err)
			}
			clk.Advance(minInterval)
		}
	}
	scancel()
	if _, err := oob.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel: %v, want CANCELED", err)
	}
	clk.Advance(time.Second)
	if err := <-served; err != nil {
		t.Errorf("Unary: %v", err)
	}
}

// TestGRPCLoadReportsOff checks that an instance with NoLoadReports sends
// no per-call report and has no OpenRcaService.
func TestGRPCLoadReportsOff(t *testing.T) {
	ic := grpcInstance("g", DefaultCapacity())
	ic.NoLoadReports = true
	s := startServer(t, Config{Instances: []InstanceConfig{ic}}, nil)
	cc := dialGRPC(t, s.Addr("g"), "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	var tr metadata.MD
	if _, err := echopb.NewEchoClient(cc).Unary(ctx, &echopb.EchoRequest{Message: "x"}, grpc.Trailer(&tr)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Get(loadreport.GRPCTrailer); got != nil {
		t.Errorf("trailer %s = %q, want none", loadreport.GRPCTrailer, got)
	}
	oob, err := v3orcaservicegrpc.NewOpenRcaServiceClient(cc).StreamCoreMetrics(ctx, &v3orcaservicegrpc.OrcaLoadReportRequest{})
	if err == nil {
		_, err = oob.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("StreamCoreMetrics: %v, want UNIMPLEMENTED", err)
	}
}
