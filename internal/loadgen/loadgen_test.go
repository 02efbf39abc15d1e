package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestRunCountsByRegionAndSource(t *testing.T) {
	var mu sync.Mutex
	fromIP := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		fromIP[host]++
		n := fromIP[host]
		mu.Unlock()
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		region := "us-east"
		if n%2 == 0 {
			region = "eu-west"
		}
		w.Header().Set("X-Spillway-Region", region)
		w.Header().Set("X-Spillway-Backend", "b1")
	}))
	defer srv.Close()

	res, err := Run(context.Background(), Config{
		URL:      srv.URL + "/",
		Rate:     400,
		Duration: 500 * time.Millisecond,
		Sources:  Sources(netip.MustParseAddr("127.0.3.1"), 4),
	})
	if err != nil {
		t.Fatal(err)
	}
	// 400/s for 0.5 s: exactly 200 requests, however late the generator
	// got round to starting them.
	if res.Sent != 200 {
		t.Errorf("Sent = %d, want 200 (lag up to %v)", res.Sent, res.MaxLag)
	}
	if res.OK != res.Sent || res.Failed != 0 {
		t.Errorf("OK = %d, Failed = %d, want OK = Sent = %d", res.OK, res.Failed, res.Sent)
	}
	if got := res.ByRegion["us-east"] + res.ByRegion["eu-west"]; got != res.OK {
		t.Errorf("ByRegion sums to %d, want %d", got, res.OK)
	}
	if got := res.Routed["us-east"] + res.Routed["eu-west"]; got != res.Sent {
		t.Errorf("Routed sums to %d, want %d", got, res.Sent)
	}
	mu.Lock()
	if len(fromIP) != 4 {
		t.Errorf("requests came from %d source addresses (%v), want 4", len(fromIP), fromIP)
	}
	mu.Unlock()
	if p := res.Percentile(50); p <= 0 {
		t.Errorf("Percentile(50) = %v, want > 0", p)
	}

	bad, err := Run(context.Background(), Config{URL: srv.URL + "/fail", Rate: 200, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if bad.OK != 0 || bad.Failed != bad.Sent || bad.Status[503] != bad.Sent {
		t.Errorf("failing target: OK=%d Failed=%d Status=%v Sent=%d", bad.OK, bad.Failed, bad.Status, bad.Sent)
	}
}

func TestPercentile(t *testing.T) {
	r := &Result{}
	for i := 1; i <= 100; i++ {
		r.Latencies = append(r.Latencies, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}} {
		if got := r.Percentile(tt.p); got != tt.want {
			t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestConfigRequired(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Fatal("Run(Config{}) succeeded, want error")
	}
}

func TestWarmupIsNotRecorded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL, Rate: 500, Duration: 600 * time.Millisecond, Warmup: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// 500/s: request k is due at (k+1)/500 s; those due at 0.3 s and after,
	// up to 0.6 s, are recorded: k = 149 … 299.
	if res.Sent != 151 {
		t.Errorf("Sent = %d with half the run as warmup, want 151", res.Sent)
	}
}

// TestRecordsSourceIsWhatTheServerSees checks that every recorded request
// carries the client address and port the server saw, that a new
// connection per request gives each request its own source port, and that
// the records account for every request.
func TestRecordsSourceIsWhatTheServerSees(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Spillway-Backend", r.RemoteAddr) // echo the peer the server saw
		w.Header().Set("X-Spillway-Region", "r1")
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	for _, tt := range []struct {
		name        string
		newConnEach bool
	}{{"new connection each", true}, {"keep-alive", false}} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{
				URL: srv.URL + "/", Rate: 300, Duration: 400 * time.Millisecond, Records: true,
				Sources: Sources(netip.MustParseAddr("127.0.4.1"), 3), NewConnEach: tt.newConnEach,
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(res.Records)) != res.Sent || res.Sent == 0 {
				t.Fatalf("%d records for %d sent, want equal and > 0", len(res.Records), res.Sent)
			}
			seen := map[netip.AddrPort]int{}
			for i, r := range res.Records {
				if r.Error != "" || r.Status != 200 || r.Region != "r1" {
					t.Fatalf("record %d = %+v, want status 200 from r1", i, r)
				}
				if r.Source.String() != r.Backend {
					t.Errorf("record %d: Source %v, server saw %s", i, r.Source, r.Backend)
				}
				if i > 0 && r.At < res.Records[i-1].At {
					t.Errorf("records not sorted by At: %v after %v", r.At, res.Records[i-1].At)
				}
				if r.Latency <= 0 {
					t.Errorf("record %d: Latency %v, want > 0", i, r.Latency)
				}
				seen[r.Source]++
			}
			// A new connection each: the kernel picks a free port for every
			// one, and may pick a port again once its last connection has
			// closed (a birthday collision: a few percent of runs of this
			// size see one), so nearly every request has its own.
			if tt.newConnEach && float64(len(seen)) < 0.9*float64(len(res.Records)) {
				t.Errorf("%d distinct source address:port for %d requests with a new connection each, want nearly one each", len(seen), len(res.Records))
			}
			if !tt.newConnEach && len(seen) >= len(res.Records) {
				t.Errorf("%d distinct source address:port for %d kept-alive requests, want connections reused", len(seen), len(res.Records))
			}
		})
	}

	// A failing status is recorded with its headers; a transport error with
	// Err and no status.
	res, err := Run(context.Background(), Config{URL: srv.URL + "/?fail=1", Rate: 100, Duration: 200 * time.Millisecond, Records: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		if r.Status != 503 || r.Region != "r1" || r.Error != "" {
			t.Errorf("failing record = %+v, want status 503 from r1", r)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/"
	ln.Close()
	res, err = Run(context.Background(), Config{URL: dead, Rate: 100, Duration: 200 * time.Millisecond, Records: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent == 0 || res.Failed != res.Sent || res.Errors["refused"] != res.Sent {
		t.Fatalf("closed port: Sent %d Failed %d Errors %v, want all failed, refused", res.Sent, res.Failed, res.Errors)
	}
	for _, r := range res.Records {
		if r.Error == "" || r.Status != 0 {
			t.Errorf("record to a closed port = %+v, want Error set and status 0", r)
		}
	}
}

// TestScheduleChangesRate checks that the rate follows Config.Schedule.
func TestScheduleChangesRate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{
		URL: srv.URL, Rate: 100, Duration: time.Second, Records: true,
		Schedule: []RateStep{{At: 500 * time.Millisecond, Rate: 400}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var before, after int
	for _, r := range res.Records {
		if r.At < 500*time.Millisecond {
			before++
		} else {
			after++
		}
	}
	// 100/s then 400/s for 0.5 s each: 50 requests due in (0, 0.5 s], the
	// last exactly at the step, then 200 in (0.5 s, 1 s].
	if before != 49 || after != 201 {
		t.Errorf("%d requests due before the step and %d from it on, want 49 and 201", before, after)
	}

	for _, tt := range []struct {
		name  string
		sched []RateStep
	}{
		{"negative rate", []RateStep{{At: time.Second, Rate: -1}}},
		{"descending", []RateStep{{At: 2 * time.Second, Rate: 1}, {At: time.Second, Rate: 1}}},
	} {
		if _, err := Run(context.Background(), Config{URL: srv.URL, Rate: 1, Duration: time.Millisecond, Schedule: tt.sched}); err == nil {
			t.Errorf("%s: Run succeeded, want error", tt.name)
		}
	}
}

// TestScheduleDue checks when each request is due: request k when the
// integral of the rate reaches k+1, across steps and pauses.
func TestScheduleDue(t *testing.T) {
	ms := time.Millisecond
	c := Config{Rate: 10, Schedule: []RateStep{{At: time.Second, Rate: 0}, {At: 2 * time.Second, Rate: 100}}}
	sc := c.schedule()
	for _, tt := range []struct {
		k      int
		by     time.Duration
		want   time.Duration
		wantOK bool
	}{
		{0, time.Hour, 100 * ms, true},          // 10/s: the first at 0.1 s
		{0, 99 * ms, 0, false},                  // not yet due
		{9, time.Hour, time.Second, true},       // the tenth exactly at the pause
		{10, 1500 * ms, 0, false},               // paused
		{10, time.Hour, 2010 * ms, true},        // 100/s after the pause
		{109, time.Hour, 3 * time.Second, true}, // 100 more by 3 s
	} {
		got, ok := sc.due(tt.k, tt.by)
		if ok != tt.wantOK || (ok && (got-tt.want).Abs() > time.Microsecond) {
			t.Errorf("due(%d, by %v) = %v, %v; want %v, %v", tt.k, tt.by, got, ok, tt.want, tt.wantOK)
		}
	}
	// A first step at 0 replaces Rate.
	if got, ok := (&Config{Rate: 1, Schedule: []RateStep{{At: 0, Rate: 1000}}}).schedule().due(0, time.Hour); !ok || got != ms {
		t.Errorf("with a step at 0: due(0) = %v, %v; want 1ms", got, ok)
	}
}

// TestWindow checks that a window counts the requests due in it as Run
// counts a whole run.
func TestWindow(t *testing.T) {
	ms := time.Millisecond
	r := &Result{Records: []Record{
		{At: 10 * ms, Status: 200, Region: "a", Latency: 5 * ms},
		{At: 20 * ms, Status: 503, Region: "a", Latency: 1 * ms, Lag: 7 * ms},
		{At: 30 * ms, Error: "dial tcp: connect: connection refused", ErrorKind: "refused"},
		{At: 40 * ms, Dropped: true},
		{At: 50 * ms, Status: 200, Region: "b"},
	}}
	w := r.Window(20*ms, 50*ms)
	if w.Sent != 2 || w.OK != 0 || w.Failed != 2 || w.Dropped != 1 || w.Routed["a"] != 1 || w.Errors["refused"] != 1 || w.MaxLag != 7*ms || len(w.Records) != 3 {
		t.Errorf("window [20ms, 50ms) = Sent %d OK %d Failed %d Dropped %d Routed %v Errors %v MaxLag %v, %d records; want 2 0 2 1 map[a:1] map[refused:1] 7ms, 3",
			w.Sent, w.OK, w.Failed, w.Dropped, w.Routed, w.Errors, w.MaxLag, len(w.Records))
	}
	if w := r.Window(0, time.Second); w.Sent != 4 || w.OK != 2 || w.ByRegion["b"] != 1 {
		t.Errorf("whole window: Sent %d OK %d ByRegion %v, want 4, 2, b:1", w.Sent, w.OK, w.ByRegion)
	}
}

func TestErrorKind(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&url.Error{Op: "Get", URL: "http://x", Err: context.DeadlineExceeded}, "timeout"},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "timeout"},
		{&net.OpError{Op: "dial", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}, "refused"},
		{&net.OpError{Op: "read", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, "reset"},
		{&url.Error{Op: "Get", URL: "http://x", Err: io.EOF}, "reset"},
		{errors.New("something else"), "other"},
	} {
		if got := errorKind(tt.err); got != tt.want {
			t.Errorf("errorKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
