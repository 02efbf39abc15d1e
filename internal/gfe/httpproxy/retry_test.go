package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/routing"
)

// testCounter returns the value of counter c.
func testCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func TestRetryable(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	body := func() io.ReadCloser { return io.NopCloser(strings.NewReader("x")) }
	tests := []struct {
		name   string
		method string
		body   io.ReadCloser
		err    error
		ctxErr error
		want   bool
	}{
		{"GET refused", "GET", nil, dial, nil, true},
		{"POST refused", "POST", nil, dial, nil, true},
		{"POST with unread body refused", "POST", &replayBody{rc: body()}, dial, nil, true},
		{"POST with read body refused", "POST", &replayBody{rc: body(), started: true}, dial, nil, false},
		{"POST with plain body refused", "POST", body(), dial, nil, false},
		{"GET reset", "GET", nil, reset, nil, true},
		{"HEAD EOF", "HEAD", http.NoBody, io.ErrUnexpectedEOF, nil, true},
		{"PUT reset", "PUT", nil, reset, nil, true},
		{"DELETE reset", "DELETE", nil, reset, nil, true},
		{"PUT with body reset", "PUT", &replayBody{rc: body()}, reset, nil, false},
		{"POST reset", "POST", nil, reset, nil, false},
		{"PATCH reset", "PATCH", nil, reset, nil, false},
		{"GET route timeout", "GET", nil, context.DeadlineExceeded, context.DeadlineExceeded, false},
		{"GET client gone", "GET", nil, dial, context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{Method: tt.method, Body: tt.body}
			if got := retryable(r, tt.err, tt.ctxErr); got != tt.want {
				t.Errorf("retryable(%s, %v, ctx %v) = %v, want %v", tt.method, tt.err, tt.ctxErr, got, tt.want)
			}
		})
	}
}

func TestResultOf(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tests := []struct {
		name        string
		err, ctxErr error
		want        outlier.Result
		wantOK      bool
	}{
		{"connect", dial, nil, outlier.ConnectFailure, true},
		{"reset", io.ErrUnexpectedEOF, nil, outlier.ServerError, true},
		{"route timeout", context.DeadlineExceeded, context.DeadlineExceeded, outlier.Timeout, true},
		{"client gone", context.Canceled, context.Canceled, 0, false},
	}
	for _, tt := range tests {
		got, ok := resultOf(tt.err, tt.ctxErr)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: resultOf = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// closedAddr returns the address of a listener that was closed: connecting
// to it is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// TestRetryNeverReached: requests to a backend that refuses connections are
// sent to another backend, whatever their method and body; the backend is
// ejected after consecutive_connect_failures; retries 0 turns it off.
func TestRetryNeverReached(t *testing.T) {
	b1, b2 := newTestBackend(t, "b1"), newTestBackend(t, "b2")
	dead := closedAddr(t)
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{dead, b1.addr(), b2.addr()}}}}}
	e, clk := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ""))
	for i := range 30 {
		method, body := "GET", ""
		if i%2 == 1 {
			method, body = "POST", "payload-"+strings.Repeat("x", i)
		}
		w := do(t, e, method, "192.0.2.1:1", body, nil)
		if w.Code != 200 || w.Header().Get("X-Body") != body {
			t.Fatalf("%s %d: status %d, body seen by the backend %q; want 200 and %q", method, i, w.Code, w.Header().Get("X-Body"), body)
		}
	}
	retries := testCounter(e.proxy.metrics.retries.WithLabelValues("web"))
	if retries != 3 {
		t.Errorf("retries = %v, want 3 (connect failures until ejection)", retries)
	}
	svc := e.p.Table().Services["web"]
	if h := member(t, svc, dead).Host; !h.Ejected(clk.Now()) || h.State(clk.Now()).Reason != outlier.ReasonConsecutiveConnectFailures {
		t.Errorf("dead backend state %+v, want ejected for connect failures", h.State(clk.Now()))
	}
	if got := svc.Meters().Failures.Load(); got != 0 {
		t.Errorf("failures = %d, want 0", got)
	}

	t.Run("retries 0", func(t *testing.T) {
		e, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", retries: 0"))
		codes := map[int]int{}
		for range 6 {
			codes[do(t, e, "GET", "192.0.2.1:1", "", nil).Code]++
		}
		if codes[502] != 2 || codes[200] != 4 {
			t.Errorf("retries 0: statuses %v, want 2×502 (the dead backend's turns) and 4×200", codes)
		}
	})
}

// resettingBackend reads a request and closes the connection without
// answering, as a backend that dies with the request in flight.
func resettingBackend(t *testing.T) *testBackend {
	t.Helper()
	b := &testBackend{name: "reset"}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		io.Copy(io.Discard, r.Body)
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	t.Cleanup(b.Close)
	return b
}

// TestRetryIdempotent: a request that reached a backend which failed before
// answering is retried only if it is idempotent and has no body.
func TestRetryIdempotent(t *testing.T) {
	rs, ok := resettingBackend(t), newTestBackend(t, "ok")
	regions := []gfetest.Region{
		{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{rs.addr()}}, {Name: "us-east-c", Addrs: []string{ok.addr()}}}},
	}
	// consecutive_5xx high: the resetting backend stays in.
	e, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "outlier_detection: {consecutive_5xx: 1000, consecutive_connect_failures: 1000}", ""))
	tests := []struct {
		method, body string
		want         int // status when the resetting backend is picked first
	}{
		{"GET", "", 200},
		{"HEAD", "", 200},
		{"DELETE", "", 200},
		{"PUT", "", 200},
		{"PUT", "body", 502},
		{"POST", "", 502},
		{"POST", "body", 502},
	}
	for _, tt := range tests {
		codes := map[int]int{}
		for range 4 { // round robin: two of them go to the resetting backend first
			codes[do(t, e, tt.method, "192.0.2.1:1", tt.body, nil).Code]++
		}
		want := map[int]int{200: 2}
		want[tt.want] += 2
		if !maps.Equal(codes, want) {
			t.Errorf("%s with body %q: statuses %v, want %v", tt.method, tt.body, codes, want)
		}
	}
}

// TestRouteTimeout: a backend slower than the route's timeout gets the
// request cancelled, the client a 504 within about the timeout, and the
// backend a Timeout in its outlier record; the request is not retried.
func TestRouteTimeout(t *testing.T) {
	slow := &testBackend{name: "slow"}
	slow.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slow.hits.Add(1)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	fast := newTestBackend(t, "fast")
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{slow.addr()}}, {Name: "us-east-c", Addrs: []string{fast.addr()}}}}}
	e, clk := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", timeout: 200ms"))
	svc := e.p.Table().Services["web"]
	var timedOut int
	for range 2 {
		start := time.Now()
		w := do(t, e, "GET", "192.0.2.1:1", "", nil)
		took := time.Since(start)
		switch w.Code {
		case 504:
			timedOut++
			if took < 200*time.Millisecond || took > 2*time.Second {
				t.Errorf("504 after %v, want about the 200ms timeout", took)
			}
		case 200:
		default:
			t.Errorf("status %d, want 504 from the slow backend or 200 from the fast one", w.Code)
		}
	}
	if timedOut != 1 || slow.hits.Load() != 1 || fast.hits.Load() != 1 {
		t.Errorf("timed out %d, slow got %d, fast got %d; want 1 each (no retry after a timeout)", timedOut, slow.hits.Load(), fast.hits.Load())
	}
	if st := member(t, svc, slow.addr()).Host.State(clk.Now()); st.Consecutive5xx != 1 {
		t.Errorf("slow backend's 5xx run = %d, want 1 (the timeout)", st.Consecutive5xx)
	}
}

// TestRouteTimeoutSparesStreams: an upgrade request (a WebSocket's
// handshake and tunnel) is not bounded by the route timeout.
func TestRouteTimeoutSparesStreams(t *testing.T) {
	sleepy := &testBackend{name: "sleepy"}
	sleepy.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(400 * time.Millisecond):
		}
		w.Header().Set("X-Spillway-Backend", "sleepy")
	}))
	t.Cleanup(sleepy.Close)
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{sleepy.addr()}}}}}
	e, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", timeout: 100ms"))
	if w := do(t, e, "GET", "192.0.2.1:1", "", nil); w.Code != 504 {
		t.Errorf("plain GET over the timeout: status %d, want 504", w.Code)
	}
	w := do(t, e, "GET", "192.0.2.1:1", "", http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}})
	if w.Code != 200 || w.Header().Get("X-Spillway-Backend") != "sleepy" {
		t.Errorf("upgrade request: status %d from %q, want 200 from sleepy after 400ms", w.Code, w.Header().Get("X-Spillway-Backend"))
	}
}

// BenchmarkPickAffinity measures a client-IP affinity pick.
func BenchmarkPickAffinity(b *testing.B) {
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}}}}}
	e, clk := sessionEdge(b, gfetest.SessionConfig(b, "waterfall", regions, "session_affinity: {type: client_ip}", ""))
	svc := e.p.Table().Services["web"]
	req, _ := http.NewRequest("GET", "http://gfe.test/", nil)
	now := clk.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		k := routing.Flow{Src: netip.MustParseAddrPort("192.0.2.1:5555"), Dst: netip.MustParseAddrPort("127.0.1.1:8080")}
		for pb.Next() {
			pk, _, err := pickAffinity(svc, req, k, now, e.p.Rand)
			if err != nil {
				b.Fatal(err)
			}
			pk.Done()
		}
	})
}

// TestPickErrors: a request that gets no backend is answered with a fixed
// status and message, and counted under a fixed error label.
func TestPickErrors(t *testing.T) {
	b := newTestBackend(t, "b1")
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{b.addr()}}}}}
	tests := []struct {
		name      string
		unhealthy bool // the only backend fails its health checks
		full      bool // the only backend is at its concurrency limit
		wantCode  int
		wantBody  string
		wantLabel string
	}{
		{"no backend", true, false, http.StatusServiceUnavailable, "gfe: no healthy backend\n", "no_backend"},
		{"all busy", false, true, http.StatusTooManyRequests, "gfe: every backend is at its concurrency limit\n", "all_busy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := gfetest.SessionConfig(t, "round_robin", regions, "", "")
			e, _ := sessionEdge(t, cfg)
			if tt.unhealthy {
				e.p.Apply(snapshot.FromConfig("v2", cfg, b.addr()))
				e.p.Step()
			}
			if tt.full {
				be := e.p.Builder.Backend(b.addr())
				be.SetMaxConcurrency(1)
				be.TryAcquire()
			}
			w := do(t, e, "GET", "192.0.2.1:1", "", nil)
			if w.Code != tt.wantCode || w.Body.String() != tt.wantBody {
				t.Errorf("status %d, body %q; want %d, %q", w.Code, w.Body.String(), tt.wantCode, tt.wantBody)
			}
			if got := testCounter(e.proxy.metrics.pickErrors.WithLabelValues("web", tt.wantLabel)); got != 1 {
				t.Errorf("pick errors{error=%q} = %v, want 1", tt.wantLabel, got)
			}
			if got := e.p.Table().Services["web"].Meters().Failures.Load(); got != 1 {
				t.Errorf("failures = %d, want 1", got)
			}
		})
	}
}

// newSilentBackend returns a backend that counts its requests and never
// answers them: it holds each until its client goes away or the test ends
// (a host that vanished with the request in flight).
func newSilentBackend(t *testing.T) *testBackend {
	t.Helper()
	release := make(chan struct{})
	b := &testBackend{name: "silent"}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); b.Close() })
	return b
}

// TestPerTryTimeout (docs/design.md §4 retries; seen in the lab, docs/lab.md:
// a backend host that vanished with requests in flight): a GET whose backend
// sends no headers within the route's per_try_timeout is abandoned there,
// counted as that backend's timeout, and answered by another instance; a POST
// is not bounded per try (it may not be sent again) and runs into the route
// timeout instead.
func TestPerTryTimeout(t *testing.T) {
	silent := newSilentBackend(t)
	fast := newTestBackend(t, "fast")
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{silent.addr()}}, {Name: "us-east-c", Addrs: []string{fast.addr()}}}}}
	e, clk := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", timeout: 700ms, per_try_timeout: 300ms"))
	svc := e.p.Table().Services["web"]
	codes := map[int]int{}
	for i := range 2 { // round robin: one of them goes to the silent backend first
		before := silent.hits.Load()
		done := make(chan int, 1)
		go func() { done <- do(t, e, "GET", "192.0.2.1:1", "", nil).Code }()
		select {
		case c := <-done:
			codes[c]++
			continue
		case <-time.After(100 * time.Millisecond):
		}
		// Waiting: it is at the silent backend. Once its attempt is there,
		// the per-try timer (on the fake clock) expires it.
		for silent.hits.Load() == before {
			time.Sleep(time.Millisecond)
		}
		clk.BlockUntil(context.Background(), 1)
		clk.Advance(300 * time.Millisecond)
		select {
		case c := <-done:
			codes[c]++
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d: no answer 5 s after its per-try timeout", i)
		}
	}
	if codes[200] != 2 || fast.hits.Load() != 2 || silent.hits.Load() != 1 {
		t.Errorf("statuses %v, fast got %d, silent %d; want 2×200, fast 2, silent 1 (retried after the per-try timeout)", codes, fast.hits.Load(), silent.hits.Load())
	}
	if st := member(t, svc, silent.addr()).Host.State(clk.Now()); st.Consecutive5xx != 1 {
		t.Errorf("silent backend's 5xx run = %d, want 1 (the per-try timeout)", st.Consecutive5xx)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.perTryTimeouts.WithLabelValues("web")); got != 1 {
		t.Errorf("per-try timeouts counted %v, want 1", got)
	}
	// A POST is not bounded per try: the silent backend holds it until the
	// route timeout (700ms, real time), 504, not retried.
	var posted int
	for range 2 {
		if w := do(t, e, "POST", "192.0.2.1:1", "", nil); w.Code == 504 {
			posted++
		}
	}
	if posted != 1 || silent.hits.Load() != 2 {
		t.Errorf("POSTs: %d timed out, silent got %d; want 1 and 2 (no per-try timeout, no retry)", posted, silent.hits.Load())
	}
}

// TestRetryLeavesUnreachableRegion (docs/design.md §4 retries; seen in the
// lab, docs/lab.md: both us-east zones live on one backend host whose link
// went down): at site nyc, whose idle waterfall plan row is us-east only, a
// GET whose us-east backend is unreachable is retried in eu-west, the site's
// next region, not in us-east's other zone; with the route's one retry, every
// request is answered by eu-west. Three ways a backend is unreachable: no
// response headers within per_try_timeout (a host that vanished with the
// request in flight), a connection that does not complete within
// per_try_timeout (a host whose link is down drops the SYNs), and a refused
// connection.
func TestRetryLeavesUnreachableRegion(t *testing.T) {
	const requests = 4
	t.Run("per-try timeout", func(t *testing.T) {
		silent := [2]*testBackend{newSilentBackend(t), newSilentBackend(t)}
		far := newTestBackend(t, "eu-west")
		regions := []gfetest.Region{
			{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{silent[0].addr()}}, {Name: "us-east-c", Addrs: []string{silent[1].addr()}}}},
			{Name: "eu-west", Zones: []gfetest.Zone{{Name: "eu-west-b", Addrs: []string{far.addr()}}}},
		}
		e, clk := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "", ", timeout: 10s, per_try_timeout: 300ms"))
		hits := func() int64 { return silent[0].hits.Load() + silent[1].hits.Load() }
		answered := map[string]int{}
		for i := range requests {
			before := hits()
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() { done <- do(t, e, "GET", "192.0.2.1:1", "", nil) }()
			// The attempt is at a silent us-east backend; the per-try timer
			// (on the fake clock) expires it.
			for hits() == before {
				time.Sleep(time.Millisecond)
			}
			clk.BlockUntil(context.Background(), 1)
			clk.Advance(300 * time.Millisecond)
			select {
			case w := <-done:
				answered[fmt.Sprintf("%d %s", w.Code, w.Header().Get("X-Spillway-Backend"))]++
			case <-time.After(5 * time.Second):
				t.Fatalf("request %d: no answer 5 s after its per-try timeout", i)
			}
		}
		if answered["200 eu-west"] != requests || hits() != requests || far.hits.Load() != requests {
			t.Errorf("answers %v, us-east got %d, eu-west %d; want %d × 200 from eu-west after %d per-try timeouts in us-east", answered, hits(), far.hits.Load(), requests, requests)
		}
	})
	t.Run("connection never completes", func(t *testing.T) {
		hanging := [2]string{hangingAddr(t), hangingAddr(t)}
		far := newTestBackend(t, "eu-west")
		regions := []gfetest.Region{
			{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{hanging[0]}}, {Name: "us-east-c", Addrs: []string{hanging[1]}}}},
			{Name: "eu-west", Zones: []gfetest.Zone{{Name: "eu-west-b", Addrs: []string{far.addr()}}}},
		}
		e, clk := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "", ", timeout: 10s, per_try_timeout: 300ms"))
		answered := map[string]int{}
		for i := range requests {
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() { done <- do(t, e, "GET", "192.0.2.1:1", "", nil) }()
			// The attempt is dialling a us-east backend that never
			// answers; the per-try timer (on the fake clock) ends it.
			clk.BlockUntil(context.Background(), 1)
			clk.Advance(300 * time.Millisecond)
			select {
			case w := <-done:
				answered[fmt.Sprintf("%d %s", w.Code, w.Header().Get("X-Spillway-Backend"))]++
			case <-time.After(5 * time.Second):
				t.Fatalf("request %d: no answer 5 s after its per-try timeout", i)
			}
		}
		if answered["200 eu-west"] != requests || far.hits.Load() != requests {
			t.Errorf("answers %v, eu-west got %d; want %d × 200 from eu-west", answered, far.hits.Load(), requests)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		var closed [2]string
		for i := range closed {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed[i] = ln.Addr().String()
			ln.Close()
		}
		far := newTestBackend(t, "eu-west")
		regions := []gfetest.Region{
			{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{closed[0]}}, {Name: "us-east-c", Addrs: []string{closed[1]}}}},
			{Name: "eu-west", Zones: []gfetest.Zone{{Name: "eu-west-b", Addrs: []string{far.addr()}}}},
		}
		e, _ := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "", ""))
		answered := map[string]int{}
		for range requests {
			w := do(t, e, "GET", "192.0.2.1:1", "", nil)
			answered[fmt.Sprintf("%d %s", w.Code, w.Header().Get("X-Spillway-Backend"))]++
		}
		if answered["200 eu-west"] != requests || far.hits.Load() != requests {
			t.Errorf("answers %v, eu-west got %d; want %d × 200 from eu-west", answered, far.hits.Load(), requests)
		}
	})
}

// hangingAddr returns a loopback address where a connection never
// completes, as at a host whose link is down: a listening socket with a
// backlog of 0 whose one queued connection is never accepted, so that the
// kernel drops every further SYN.
func hangingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue; until the queue is full, a dial completes.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // a SYN was dropped: the queue is full
		}
		t.Cleanup(func() { c.Close() })
		if i == 8 {
			t.Fatalf("%s still completes connections after %d", addr, i+1)
		}
	}
}
