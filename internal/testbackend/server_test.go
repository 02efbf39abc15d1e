package testbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/spillway-lb/spillway/internal/clock"
)

const defaultTestTimeout = 10 * time.Second

// ignoreConnCounts leaves out of a Stats comparison the connection counts,
// which depend on how the client pools its connections and on when the
// server notices a close; tests that count connections check them apart.
var ignoreConnCounts = cmpopts.IgnoreFields(Stats{}, "OpenConns", "Conns")

// ignoreUsage leaves out of a Stats comparison the averages over the last
// second and the cores, which usage_test.go checks on their own.
var ignoreUsage = cmpopts.IgnoreFields(Stats{}, "CPUCores", "CPUs", "CPUUtilization", "Concurrency")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testInstance returns an instance on a free loopback port.
func testInstance(name string, c Capacity) InstanceConfig {
	return InstanceConfig{Name: name, Addr: "127.0.0.1:0", Region: "us-east", Zone: "us-east-b", Capacity: c}
}

// noCPU is the CPU time of a process that uses none: tests whose reports
// must be exact use it instead of the real getrusage.
func noCPU() time.Duration { return 0 }

// startServer runs a Server for cfg until the test ends and checks that it
// then shuts down cleanly. The process CPU time it reports is noCPU's.
func startServer(t *testing.T, cfg Config, clk clock.Clock) *Server {
	t.Helper()
	return startServerOpts(t, cfg, Options{Clock: clk, CPUTime: noCPU})
}

// startServerOpts is startServer with every option.
func startServerOpts(t *testing.T, cfg Config, opts Options) *Server {
	t.Helper()
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = defaultTestTimeout
	}
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// newClient returns an HTTP/1.1 client whose connections come from localIP
// ("" for the system's choice), as a site's gfe binds its own.
func newClient(t *testing.T, localIP string) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: defaultTestTimeout}
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: defaultTestTimeout}
}

type response struct {
	status int
	header http.Header
	body   string
	proto  string
	err    error
}

func do(ctx context.Context, c *http.Client, method, url string) response {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return response{err: err}
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b), proto: resp.Proto, err: err}
}

func mustDo(t *testing.T, c *http.Client, method, url string) response {
	t.Helper()
	r := do(t.Context(), c, method, url)
	if r.err != nil {
		t.Fatalf("%s %s: %v", method, url, r.err)
	}
	return r
}

func getStats(t *testing.T, c *http.Client, base string) Stats {
	t.Helper()
	r := mustDo(t, c, http.MethodGet, base+"/admin/stats")
	if r.status != http.StatusOK {
		t.Fatalf("GET /admin/stats: status %d", r.status)
	}
	var s Stats
	if err := json.Unmarshal([]byte(r.body), &s); err != nil {
		t.Fatalf("GET /admin/stats: %v in %q", err, r.body)
	}
	return s
}

func TestIdentityHeaders(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{
		{Name: "eu-west-c-7", Addr: "127.0.0.1:0", Region: "eu-west", Zone: "eu-west-c", Capacity: DefaultCapacity()},
	}}, nil)
	base := "http://" + s.Addr("eu-west-c-7")
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	h2Transport := &http.Transport{Protocols: h2c}
	t.Cleanup(h2Transport.CloseIdleConnections)
	clients := map[string]*http.Client{"HTTP/1.1": newClient(t, ""), "HTTP/2.0": {Transport: h2Transport, Timeout: defaultTestTimeout}}

	tests := []struct {
		name       string
		method     string
		path       string
		wantStatus int
	}{
		{name: "root", method: http.MethodGet, path: "/", wantStatus: http.StatusOK},
		{name: "any path", method: http.MethodPost, path: "/api/v1/items", wantStatus: http.StatusOK},
		{name: "healthz", method: http.MethodGet, path: "/healthz", wantStatus: http.StatusOK},
		{name: "rtt", method: http.MethodGet, path: "/rtt", wantStatus: http.StatusNoContent},
		{name: "stats", method: http.MethodGet, path: "/admin/stats", wantStatus: http.StatusOK},
		{name: "unknown admin", method: http.MethodGet, path: "/admin/nope", wantStatus: http.StatusNotFound},
	}
	for proto, c := range clients {
		for _, tt := range tests {
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				r := mustDo(t, c, tt.method, base+tt.path)
				if r.status != tt.wantStatus || r.proto != proto {
					t.Errorf("%s %s = %d over %s, want %d over %s", tt.method, tt.path, r.status, r.proto, tt.wantStatus, proto)
				}
				for h, want := range map[string]string{HeaderBackend: "eu-west-c-7", HeaderRegion: "eu-west", HeaderZone: "eu-west-c"} {
					if got := r.header.Get(h); got != want {
						t.Errorf("%s %s: header %s = %q, want %q", tt.method, tt.path, h, got, want)
					}
				}
				if tt.wantStatus != http.StatusOK || strings.HasPrefix(tt.path, "/admin") || tt.path == "/healthz" {
					return
				}
				var got Reply
				if err := json.Unmarshal([]byte(r.body), &got); err != nil {
					t.Fatalf("body %q: %v", r.body, err)
				}
				if !strings.HasPrefix(got.Source, "127.0.0.1:") {
					t.Errorf("Reply.Source = %q, want 127.0.0.1:port", got.Source)
				}
				got.Source = ""
				want := Reply{Instance: "eu-west-c-7", Region: "eu-west", Zone: "eu-west-c", Method: tt.method, Path: tt.path}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Reply mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestCapacity sends 6 parallel requests to an instance with 2 slots and a
// queue of 2: exactly 2 are rejected at once, 2 are served after one
// service time and 2 after two.
func TestCapacity(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	const serviceTime = time.Second
	s := startServer(t, Config{Instances: []InstanceConfig{
		testInstance("a", Capacity{MaxConcurrency: 2, Queue: 2, ServiceTime: serviceTime}),
	}}, clk)
	base := "http://" + s.Addr("a")
	c := newClient(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	type result struct {
		response
		at time.Duration // fake time elapsed when the answer came
	}
	start := clk.Now()
	results := make(chan result, 6)
	for i := range 6 {
		go func() {
			r := do(ctx, c, http.MethodGet, fmt.Sprintf("%s/req/%d", base, i))
			results <- result{r, clk.Since(start)}
		}()
	}
	// Rejections come at once: a request is rejected only when 2 are in
	// flight and 2 queued.
	got := map[int]int{}
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		got[r.status]++
		if r.status != http.StatusServiceUnavailable || r.header.Get(HeaderReject) != "queue-full" || r.at != 0 {
			t.Errorf("first answers: status %d, %s %q at %v; want 503 queue-full at 0", r.status, HeaderReject, r.header.Get(HeaderReject), r.at)
		}
	}
	st := getStats(t, c, base)
	if st.InFlight != 2 || st.QueueLen != 2 || st.Rejected != 2 {
		t.Errorf("after the rejections: in_flight %d, queue_len %d, rejected %d; want 2, 2, 2", st.InFlight, st.QueueLen, st.Rejected)
	}
	for round := 1; round <= 2; round++ {
		if err := clk.BlockUntil(ctx, 2); err != nil { // two service timers
			t.Fatalf("round %d: %v", round, err)
		}
		clk.Advance(serviceTime)
		for range 2 {
			r := <-results
			if r.err != nil {
				t.Fatal(r.err)
			}
			got[r.status]++
			if r.status != http.StatusOK || r.at != time.Duration(round)*serviceTime {
				t.Errorf("round %d: status %d at %v, want 200 at %v", round, r.status, r.at, time.Duration(round)*serviceTime)
			}
		}
	}
	if diff := cmp.Diff(map[int]int{http.StatusOK: 4, http.StatusServiceUnavailable: 2}, got); diff != "" {
		t.Errorf("status counts mismatch (-want +got):\n%s", diff)
	}
	st = getStats(t, c, base)
	want := Stats{Instance: "a", Region: "us-east", Zone: "us-east-b", Proto: ProtoHTTP, Healthy: true, Served: 4, Rejected: 2,
		MaxInFlight: 2, MaxQueueLen: 2, BySource: map[string]SourceStats{"127.0.0.0/24": {Served: 4, Rejected: 2}}}
	if diff := cmp.Diff(want, st, ignoreConnCounts, ignoreUsage); diff != "" {
		t.Errorf("stats mismatch (-want +got):\n%s", diff)
	}
}

// TestRateLimit checks the token bucket: with 10 rps and a burst of 2, two
// requests start at once, the third waits 100ms in the queue and a fourth,
// finding the queue (of 1) full, is rejected.
func TestRateLimit(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	s := startServer(t, Config{Instances: []InstanceConfig{
		testInstance("a", Capacity{MaxRPS: 10, Burst: 2, Queue: 1}),
	}}, clk)
	base := "http://" + s.Addr("a")
	c := newClient(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	for i := range 2 {
		if r := mustDo(t, c, http.MethodGet, base+"/"); r.status != http.StatusOK {
			t.Fatalf("request %d within the burst: status %d, want 200", i, r.status)
		}
	}
	third := make(chan response, 1)
	go func() { third <- do(ctx, c, http.MethodGet, base+"/") }()
	if err := clk.BlockUntil(ctx, 1); err != nil { // the third waits for its token
		t.Fatal(err)
	}
	if r := mustDo(t, c, http.MethodGet, base+"/"); r.status != http.StatusServiceUnavailable {
		t.Errorf("fourth request: status %d, want 503", r.status)
	}
	clk.Advance(99 * time.Millisecond)
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("after 99ms: %d timers pending, want the third request's token timer", n)
	}
	clk.Advance(time.Millisecond)
	r := <-third
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("third request after 100ms: %d, %v; want 200", r.status, r.err)
	}
	st := getStats(t, c, base)
	if st.Served != 3 || st.Rejected != 1 || st.MaxQueueLen != 1 {
		t.Errorf("stats: served %d rejected %d max_queue_len %d; want 3, 1, 1", st.Served, st.Rejected, st.MaxQueueLen)
	}
}

func TestHealthToggle(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("a", DefaultCapacity())}}, nil)
	base := "http://" + s.Addr("a")
	c := newClient(t, "")
	steps := []struct {
		name       string
		method     string
		path       string
		wantStatus int
		wantBody   string
	}{
		{name: "healthy at start", method: http.MethodGet, path: "/healthz", wantStatus: 200, wantBody: "ok\n"},
		{name: "make unhealthy", method: http.MethodPost, path: "/admin/health?healthy=false", wantStatus: 200, wantBody: `{"healthy":false}` + "\n"},
		{name: "health check fails", method: http.MethodGet, path: "/healthz", wantStatus: 503, wantBody: "unhealthy\n"},
		{name: "state readable", method: http.MethodGet, path: "/admin/health", wantStatus: 200, wantBody: `{"healthy":false}` + "\n"},
		{name: "still serves", method: http.MethodGet, path: "/x", wantStatus: 200},
		{name: "bad value", method: http.MethodPost, path: "/admin/health?healthy=maybe", wantStatus: 400},
		{name: "bad value changes nothing", method: http.MethodGet, path: "/healthz", wantStatus: 503, wantBody: "unhealthy\n"},
		{name: "make healthy", method: http.MethodPost, path: "/admin/health?healthy=true", wantStatus: 200, wantBody: `{"healthy":true}` + "\n"},
		{name: "health check passes", method: http.MethodGet, path: "/healthz", wantStatus: 200, wantBody: "ok\n"},
	}
	for _, st := range steps {
		r := mustDo(t, c, st.method, base+st.path)
		if r.status != st.wantStatus || (st.wantBody != "" && r.body != st.wantBody) {
			t.Errorf("%s: %s %s = %d %q, want %d %q", st.name, st.method, st.path, r.status, r.body, st.wantStatus, st.wantBody)
		}
	}
	if got := getStats(t, c, base); got.Probes != 4 || got.Served != 1 || !got.Healthy {
		t.Errorf("stats: probes %d served %d healthy %v; want 4, 1, true", got.Probes, got.Served, got.Healthy)
	}
}

// TestDelayMeasured measures the emulated RTT on the real clock: a caller
// in 127.0.1.0/24 waits at least 50ms for every reply, one from 127.0.0.1
// (no rule for this region) does not.
func TestDelayMeasured(t *testing.T) {
	const rtt = 50 * time.Millisecond
	s := startServer(t, Config{
		Instances: []InstanceConfig{testInstance("a", Capacity{MaxConcurrency: 1, ServiceTime: 0})},
		Delays: []DelayRule{
			mustRule(t, "127.0.1.0/24=50ms"),
			mustRule(t, "eu-west:127.0.0.0/24=10s"), // another region's rule: ignored
		},
	}, nil)
	base := "http://" + s.Addr("a")
	far, near := newClient(t, "127.0.1.5"), newClient(t, "127.0.0.1")
	for _, path := range []string{"/", "/rtt", "/healthz"} {
		startFar := time.Now()
		rf := mustDo(t, far, http.MethodGet, base+path)
		farTook := time.Since(startFar)
		startNear := time.Now()
		rn := mustDo(t, near, http.MethodGet, base+path)
		nearTook := time.Since(startNear)
		if rf.status >= 300 || rn.status >= 300 {
			t.Errorf("GET %s: statuses %d (far), %d (near), want 2xx", path, rf.status, rn.status)
		}
		if farTook < rtt {
			t.Errorf("GET %s from 127.0.1.5 took %v, want >= %v", path, farTook, rtt)
		}
		if nearTook >= rtt {
			t.Errorf("GET %s from 127.0.0.1 took %v, want < %v", path, nearTook, rtt)
		}
	}
	st := getStats(t, near, base)
	want := map[string]SourceStats{"127.0.1.0/24": {Served: 1}, "127.0.0.0/24": {Served: 1}}
	if diff := cmp.Diff(want, st.BySource); diff != "" {
		t.Errorf("by_source mismatch (-want +got):\n%s", diff)
	}
}

// TestDelayHoldsNoSlot checks on a fake clock that the delay is exactly the
// rule's RTT and is spent before admission: while a far request is delayed,
// a near one takes the only slot.
func TestDelayHoldsNoSlot(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	s := startServer(t, Config{
		Instances: []InstanceConfig{testInstance("a", Capacity{MaxConcurrency: 1, Queue: 0})},
		Delays:    []DelayRule{mustRule(t, "127.0.1.0/24=80ms")},
	}, clk)
	base := "http://" + s.Addr("a")
	far, near := newClient(t, "127.0.1.5"), newClient(t, "127.0.0.1")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()

	farDone := make(chan response, 1)
	go func() { farDone <- do(ctx, far, http.MethodGet, base+"/") }()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if r := mustDo(t, near, http.MethodGet, base+"/"); r.status != http.StatusOK {
		t.Errorf("near request during the far one's delay: status %d, want 200 (the delay must hold no slot)", r.status)
	}
	clk.Advance(79 * time.Millisecond)
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("after 79ms: %d timers pending, want the far request's delay", n)
	}
	clk.Advance(time.Millisecond)
	if r := <-farDone; r.err != nil || r.status != http.StatusOK {
		t.Fatalf("far request after 80ms: %d, %v; want 200", r.status, r.err)
	}
}

// TestStats checks the counters, including per-source splits and a request
// canceled by its client while queued.
func TestStats(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	s := startServer(t, Config{Instances: []InstanceConfig{
		testInstance("a", Capacity{MaxConcurrency: 1, Queue: 1, ServiceTime: time.Second}),
	}}, clk)
	base := "http://" + s.Addr("a")
	lim := s.instances[0].lim
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	siteA, siteA2, siteB, admin := newClient(t, "127.0.1.7"), newClient(t, "127.0.1.8"), newClient(t, "127.0.2.9"), newClient(t, "")

	// A from site B takes the slot; C from site A queues and gives up;
	// D from site A queues; E from site A is rejected.
	held := make(chan response, 1)
	go func() { held <- do(ctx, siteB, http.MethodGet, base+"/b") }()
	if err := lim.waitFor(ctx, func(inFlight, _ int) bool { return inFlight == 1 }); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	gaveUp := make(chan response, 1)
	go func() { gaveUp <- do(cctx, siteA, http.MethodGet, base+"/c") }()
	if err := lim.waitFor(ctx, func(_, queued int) bool { return queued == 1 }); err != nil {
		t.Fatal(err)
	}
	ccancel()
	if r := <-gaveUp; !errors.Is(r.err, context.Canceled) {
		t.Errorf("canceled request: err %v, want context.Canceled", r.err)
	}
	if err := lim.waitFor(ctx, func(_, queued int) bool { return queued == 0 }); err != nil {
		t.Fatalf("canceled request did not leave the queue: %v", err)
	}
	queued := make(chan response, 1)
	go func() { queued <- do(ctx, siteA2, http.MethodGet, base+"/d") }()
	if err := lim.waitFor(ctx, func(_, queued int) bool { return queued == 1 }); err != nil {
		t.Fatal(err)
	}
	if r := mustDo(t, siteA, http.MethodGet, base+"/e"); r.status != http.StatusServiceUnavailable {
		t.Errorf("request beyond the queue: status %d, want 503", r.status)
	}
	for _, ch := range []chan response{held, queued} {
		if err := clk.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if r := <-ch; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("held/queued request: %d, %v; want 200", r.status, r.err)
		}
	}
	_ = mustDo(t, siteB, http.MethodGet, base+"/rtt")

	want := Stats{
		Instance: "a", Region: "us-east", Zone: "us-east-b", Proto: ProtoHTTP, Healthy: true,
		Served: 2, Rejected: 1, Canceled: 1, Probes: 1, MaxInFlight: 1, MaxQueueLen: 1,
		BySource: map[string]SourceStats{
			"127.0.1.0/24": {Served: 1, Rejected: 1},
			"127.0.2.0/24": {Served: 1},
		},
	}
	if diff := cmp.Diff(want, getStats(t, admin, base), ignoreConnCounts, ignoreUsage); diff != "" {
		t.Errorf("GET /admin/stats mismatch (-want +got):\n%s", diff)
	}
	if got, ok := s.Stats("a"); !ok || !cmp.Equal(want, got, ignoreConnCounts, ignoreUsage) {
		t.Errorf("Server.Stats(a) = %+v, %v; want %+v, true", got, ok, want)
	}
	if _, ok := s.Stats("nope"); ok {
		t.Errorf("Server.Stats(nope) found an instance")
	}
}

// TestServeSeveralInstances runs two instances in one Server and checks
// each answers as itself.
func TestServeSeveralInstances(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{
		testInstance("a", DefaultCapacity()),
		{Name: "b", Addr: "127.0.0.1:0", Region: "asia-east", Zone: "asia-east-a", Capacity: DefaultCapacity()},
	}}, nil)
	c := newClient(t, "")
	for _, name := range []string{"a", "b"} {
		r := mustDo(t, c, http.MethodGet, "http://"+s.Addr(name)+"/")
		if got := r.header.Get(HeaderBackend); got != name {
			t.Errorf("instance %s answered as %q", name, got)
		}
	}
	if got := s.Addr("c"); got != "" {
		t.Errorf("Addr(c) = %q, want empty", got)
	}
}

func TestNewErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name          string
		cfg           Config
		wantErrSubstr string
	}{
		{name: "invalid", cfg: Config{}, wantErrSubstr: "testbackend: invalid config: instances: at least one"},
		{name: "address in use", cfg: Config{Instances: []InstanceConfig{
			testInstance("a", DefaultCapacity()),
			{Name: "b", Addr: busy.Addr().String(), Region: "r", Zone: "z"},
		}}, wantErrSubstr: "testbackend: instance b: listen tcp " + busy.Addr().String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg, Options{})
			if err == nil {
				_ = s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
				t.Errorf("New() error = %v, want it to contain %q", err, tt.wantErrSubstr)
			}
		})
	}
}

// TestGracefulShutdown checks that Run, once its context is done, lets an
// admitted request finish before returning.
func TestGracefulShutdown(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	s, err := New(Config{Instances: []InstanceConfig{testInstance("a", Capacity{MaxConcurrency: 1, ServiceTime: time.Second})},
		ShutdownTimeout: defaultTestTimeout}, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	c := newClient(t, "")
	inflight := make(chan response, 1)
	go func() { inflight <- do(ctx, c, http.MethodGet, "http://"+s.Addr("a")+"/") }()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	stop()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while a request was in flight", err)
	case r := <-inflight:
		t.Fatalf("request finished before its service time: %d, %v", r.status, r.err)
	default:
	}
	clk.Advance(time.Second)
	if r := <-inflight; r.err != nil || r.status != http.StatusOK {
		t.Errorf("in-flight request during shutdown: %d, %v; want 200", r.status, r.err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run after shutdown: %v, want nil", err)
	}
	if r := do(ctx, c, http.MethodGet, "http://"+s.Addr("a")+"/"); r.err == nil {
		t.Errorf("request after shutdown succeeded with %d, want a connection error", r.status)
	}
}
