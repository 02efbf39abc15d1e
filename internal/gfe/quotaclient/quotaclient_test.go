package quotaclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

const quotaConfig = `
regions: [{name: r1, zones: [{name: z1, groups: [{name: g1, instances: [{address: "127.0.0.1:9001"}]}]}]}]
services: [{name: web, backends: [{group: g1, max_rate_per_instance: 10}]}]
routes: [{service: web}]
quota:
  metrics: [{name: calls, default_limit: 600}]
  charges: [{service: web, path_prefix: /api/, metric: calls}]
  consumers: [{api_key: acme-key-0001, project: acme}]
`

// server answers AllocateQuota like the control plane (lb/quota's
// Allocator on the same clock), or with err when set.
type server struct {
	alloc *quota.Allocator
	clk   clock.Clock
	err   error
	n     int
}

func (s *server) AllocateQuota(_ context.Context, in *pb.AllocateQuotaRequest, _ ...grpc.CallOption) (*pb.AllocateQuotaResponse, error) {
	s.n++
	if s.err != nil {
		return nil, s.err
	}
	v := in.GetValues()[0]
	r := quota.Request{Consumer: in.GetConsumer(), Mode: quota.ModeBestEffort, Values: []quota.MetricValue{{Metric: v.GetMetric(), Value: v.GetValue()}}, ReturnedWindow: in.GetReturnedWindow()}
	for _, b := range in.GetReturned() {
		r.Returned = append(r.Returned, quota.MetricValue{Metric: b.GetMetric(), Value: b.GetValue()})
	}
	res, err := s.alloc.Allocate(s.clk.Now(), r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if res.Exhausted {
		st, _ := status.New(codes.ResourceExhausted, "exhausted").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)})
		return nil, st.Err()
	}
	out := &pb.AllocateQuotaResponse{Allocated: []*pb.QuotaMetricValue{{Metric: v.GetMetric(), Value: res.Allocated[0].Value}}}
	for _, b := range res.Returned {
		out.Returned = append(out.Returned, &pb.QuotaMetricValue{Metric: b.Metric, Value: b.Value})
	}
	return out, nil
}

func setup(t *testing.T) (*Enforcer, *config.Config, *server, *clock.Fake) {
	t.Helper()
	cfg, err := config.Parse([]byte(quotaConfig), "quota.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_800_000_000-1_800_000_000%60, 0)) // the start of a window
	srv := &server{clk: clk, alloc: quota.NewAllocator(func(p, m string) (int64, bool) { l, _, ok := cfg.QuotaLimit(p, m); return l, ok })}
	e := New(Config{}, clk, func() Allocator { return srv }, zerolog.Nop(), nil)
	e.spawn = func(f func()) { f() } // calls answer at once, in order
	return e, cfg, srv, clk
}

func request(path, key string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if key != "" {
		r.Header.Set("x-api-key", key)
	}
	return r
}

// TestEnforcer: the mapping of docs/design.md §7, end to end through the
// Enforcer: 401 without a key, admission before the first grant (up to the
// limit, never waiting for a call) then on granted budget, 429 with a
// Retry-After once the window's limit is used, and the counts.
func TestEnforcer(t *testing.T) {
	e, cfg, srv, clk := setup(t)
	if v := e.Admit(cfg, "web", request("/other", ""), clk.Now()); v.Status != 0 {
		t.Errorf("a path no charge matches: %+v, want admitted", v)
	}
	if v := e.Admit(cfg, "web", request("/api/x", ""), clk.Now()); v.Status != http.StatusUnauthorized || !strings.Contains(v.Message, "API key") {
		t.Errorf("no key: %+v, want 401", v)
	}
	if v := e.Admit(cfg, "web", request("/api/x?key=nope-nope-nope", ""), clk.Now()); v.Status != http.StatusUnauthorized {
		t.Errorf("unknown key: %+v, want 401", v)
	}
	// Before the first grant: all 10, within the limit of 600 (a lease
	// that did not know the limit admitted 3 on credit and refused the
	// 4th).
	admitted := 0
	for range 10 {
		if e.Admit(cfg, "web", request("/api/x?key=acme-key-0001", ""), clk.Now()).Status == 0 {
			admitted++
		}
	}
	if admitted != 10 || srv.n != 0 {
		t.Fatalf("before a grant: admitted %d, %d calls; want all 10 and no call on the request path", admitted, srv.n)
	}
	// Each second: at most one call; 600 a minute in all.
	total := 10
	for range 59 {
		clk.Advance(time.Second)
		e.callAll(context.Background(), clk.Now())
		for range 100 {
			v := e.Admit(cfg, "web", request("/api/x", "acme-key-0001"), clk.Now())
			switch v.Status {
			case 0:
				total++
			case http.StatusTooManyRequests:
				if v.RetryAfter <= 0 || v.RetryAfter > time.Minute {
					t.Fatalf("429 with Retry-After %v", v.RetryAfter)
				}
			default:
				t.Fatalf("Admit: %+v", v)
			}
		}
	}
	if total != 600 {
		t.Errorf("admitted %d in a window of 600, want exactly 600", total)
	}
	if srv.n > 60 {
		t.Errorf("%d calls in 59 s, want at most one a second", srv.n)
	}
	if got := testutil.ToFloat64(e.decisions.WithLabelValues("admitted")); got != float64(total) {
		t.Errorf("admitted counted %v, want %d", got, total)
	}
	if got := testutil.ToFloat64(e.decisions.WithLabelValues("unidentified")); got != 2 {
		t.Errorf("unidentified counted %v, want 2", got)
	}
}

// TestEnforcerFailures: a failing quota service (UNAVAILABLE, or no
// control plane at all) fails open and is counted; a refused call
// (FAILED_PRECONDITION) gives 409 until a call succeeds.
func TestEnforcerFailures(t *testing.T) {
	for _, tt := range []struct {
		name   string
		err    error
		noConn bool
		want   int
		result string
	}{
		{"unavailable", status.Error(codes.Unavailable, "down"), false, 0, "fail_open"},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), false, 0, "fail_open"},
		{"no control plane", nil, true, 0, "fail_open"},
		{"unknown metric", status.Error(codes.FailedPrecondition, "unknown metric"), false, http.StatusConflict, "denied"},
		{"unexpected", status.Error(codes.DataLoss, "?"), false, 0, "fail_open"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, cfg, srv, clk := setup(t)
			srv.err = tt.err
			if tt.noConn {
				e.conn = func() Allocator { return nil }
			}
			for range 3 {
				e.Admit(cfg, "web", request("/api/x", "acme-key-0001"), clk.Now()) // credit, and demand
			}
			clk.Advance(time.Second)
			e.callAll(context.Background(), clk.Now())
			for i := range 50 {
				if v := e.Admit(cfg, "web", request("/api/x", "acme-key-0001"), clk.Now()); v.Status != tt.want {
					t.Fatalf("request %d: %+v, want status %d", i, v, tt.want)
				}
			}
			if got := testutil.ToFloat64(e.decisions.WithLabelValues(tt.result)); got != 50 {
				t.Errorf("%s counted %v, want 50", tt.result, got)
			}
			// The service recovers: the next call succeeds and counting
			// resumes (the window still has room).
			srv.err = nil
			e.conn = func() Allocator { return srv }
			clk.Advance(time.Second)
			e.callAll(context.Background(), clk.Now())
			if v := e.Admit(cfg, "web", request("/api/x", "acme-key-0001"), clk.Now()); v.Status != 0 {
				t.Errorf("after recovery: %+v, want admitted from the new grant", v)
			}
			if got := testutil.ToFloat64(e.decisions.WithLabelValues("admitted")); got < 1 {
				t.Errorf("after recovery: admitted counted %v, want ≥ 1", got)
			}
		})
	}
}

// BenchmarkAdmit is the request path's common case: a known key in the
// header and budget left.
// BenchmarkAdmit is what quota adds to a request in the common case:
// a charged request admitted from its lease's budget ("on"), and a
// request on a path nothing charges ("off"). Besides ns/op it reports the
// 99th percentile of single calls (p99-ns, each timed alone, so it
// includes the clock reads) and asserts no allocation.
func BenchmarkAdmit(b *testing.B) {
	cfg, err := config.Parse([]byte(quotaConfig), "quota.yaml")
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000-1_800_000_000%60, 0)
	for _, bc := range []struct{ name, path string }{{"on", "/api/x"}, {"off", "/other"}} {
		b.Run(bc.name, func(b *testing.B) {
			e := New(Config{}, clock.NewFake(now), nil, zerolog.Nop(), nil)
			e.lease(cfg, key{"web", "acme", "calls"}).Granted(now, 1<<40, false, 0)
			r := request(bc.path, "acme-key-0001")
			lat := make([]time.Duration, 0, 1<<20)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				v := e.Admit(cfg, "web", r, now)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(start))
				}
				if v.Status != 0 {
					b.Fatalf("refused: %+v", v)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkAdmitParallel is BenchmarkAdmit's "on" case from many
// goroutines at once (16 per GOMAXPROCS, as a busy gfe's handlers are):
// all on one consumer's lease ("one-consumer", the worst case for a lock
// on the lease), or spread over ten ("ten-consumers"). Every request is
// admitted from budget; ns/op is the wall time per admission over all
// goroutines.
func BenchmarkAdmitParallel(b *testing.B) {
	cfg := tenConsumers(b)
	now := time.Unix(1_800_000_000-1_800_000_000%60, 0)
	for _, bc := range []struct {
		name string
		keys []string
	}{
		{"one-consumer", []string{"acme-key-0001"}},
		{"ten-consumers", []string{"acme-key-0001", "more-key-0000", "more-key-0001", "more-key-0002", "more-key-0003", "more-key-0004", "more-key-0005", "more-key-0006", "more-key-0007", "more-key-0008"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := New(Config{}, clock.NewFake(now), nil, zerolog.Nop(), nil)
			e.lease(cfg, key{"web", "acme", "calls"}).Granted(now, 1<<39, false, 0)
			for i := range 9 {
				e.lease(cfg, key{"web", fmt.Sprintf("p%d", i), "calls"}).Granted(now, 1<<39, false, 0)
			}
			reqs := make([]*http.Request, len(bc.keys)) // read-only, shared
			for i, k := range bc.keys {
				reqs[i] = request("/api/x", k)
			}
			var next atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := reqs[int(next.Add(1))%len(reqs)]
				for pb.Next() {
					if v := e.Admit(cfg, "web", r, now); v.Status != 0 {
						b.Fatalf("refused: %+v", v)
					}
				}
			})
		})
	}
}

// tenConsumers is quotaConfig with nine more consumers: keys
// more-key-0000 … more-key-0008 of projects p0 … p8.
func tenConsumers(tb testing.TB) *config.Config {
	tb.Helper()
	y := strings.Replace(quotaConfig, "  consumers: [{api_key: acme-key-0001, project: acme}]\n", "  consumers:\n  - {api_key: acme-key-0001, project: acme}\n", 1)
	for i := range 9 {
		y += fmt.Sprintf("  - {api_key: more-key-%04d, project: p%d}\n", i, i)
	}
	cfg, err := config.Parse([]byte(y), "quota.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// TestEnforcerConcurrent: 64 goroutines admitting at once through one
// Enforcer (run it with -race: Admit takes no lock) are admitted exactly
// what the leases have to give. Ten consumers' leases are created by the
// racing requests themselves, once each: every consumer gets exactly its
// limit (600) before the first grant, the call pays for it, and not one
// request more is admitted after: 600 a window, over 1,280 requests a
// consumer each round.
func TestEnforcerConcurrent(t *testing.T) {
	e, _, srv, clk := setup(t)
	cfg := tenConsumers(t)
	srv.alloc = quota.NewAllocator(func(p, m string) (int64, bool) { l, _, ok := cfg.QuotaLimit(p, m); return l, ok })
	keys := []string{"acme-key-0001"}
	for i := range 9 {
		keys = append(keys, fmt.Sprintf("more-key-%04d", i))
	}
	round := func() map[string]int {
		var mu sync.Mutex
		admitted := map[string]int{}
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				n := map[string]int{}
				for i := range 200 {
					k := keys[(g+i)%len(keys)]
					switch v := e.Admit(cfg, "web", request("/api/x", k), clk.Now()); v.Status {
					case 0:
						n[k]++
					case http.StatusTooManyRequests:
					default:
						t.Errorf("%s: %+v", k, v)
					}
				}
				mu.Lock()
				for k, c := range n {
					admitted[k] += c
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return admitted
	}
	want := func(phase string, got map[string]int, n int) {
		t.Helper()
		for _, k := range keys {
			if got[k] != n {
				t.Errorf("%s: %s admitted %d, want exactly %d", phase, k, got[k], n)
			}
		}
	}
	want("before a grant", round(), 600)
	if n := len(*e.leases.Load()); n != len(keys) {
		t.Errorf("%d leases, want one per consumer (%d)", n, len(keys))
	}
	clk.Advance(time.Second)
	e.callAll(context.Background(), clk.Now())
	want("after a grant", round(), 0)
	if srv.n != len(keys) {
		t.Errorf("%d calls, want one per consumer (%d)", srv.n, len(keys))
	}
	if got := testutil.ToFloat64(e.decisions.WithLabelValues("admitted")); got != 600*float64(len(keys)) {
		t.Errorf("admitted counted %v, want %d", got, 600*len(keys))
	}
}

// TestAPIKey: where the key comes from, and that finding it allocates
// nothing in the common cases (testing.AllocsPerRun).
func TestAPIKey(t *testing.T) {
	for _, tt := range []struct {
		name, target, header, want string
		allocs                     float64
	}{
		{"header", "/api/x", "acme-key-0001", "acme-key-0001", 0},
		{"header wins over the query", "/api/x?key=other", "acme-key-0001", "acme-key-0001", 0},
		{"query", "/api/x?key=acme-key-0001", "", "acme-key-0001", 0},
		{"query, among others", "/api/x?a=1&b=&key=acme-key-0001&c=3", "", "acme-key-0001", 0},
		{"query, the first of two", "/api/x?key=first&key=second", "", "first", 0},
		{"query, empty value", "/api/x?key=&key=second", "", "", 0},
		{"query, no =", "/api/x?key", "", "", 0},
		{"none", "/api/x", "", "", 0},
		{"none in a query", "/api/x?keys=a&akey=b&KEY=c", "", "", 0},
		{"semicolon: skipped as net/url does", "/api/x?a=1;key=x&key=y", "", "y", 0},
		{"bad escape: skipped", "/api/x?key=%zz&key=ok", "", "ok", 1}, // net/url's error
		{"escaped value", "/api/x?key=a%2Bb+c", "", "a+b c", 1},
		{"escaped name", "/api/x?k%65y=v", "", "v", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := request(tt.target, tt.header)
			if got := APIKey(r); got != tt.want {
				t.Errorf("APIKey(%q, header %q) = %q, want %q", tt.target, tt.header, got, tt.want)
			}
			if tt.header == "" {
				if std := r.URL.Query().Get("key"); std != tt.want {
					t.Errorf("net/url says %q, the test wants %q", std, tt.want)
				}
			}
			if got := testing.AllocsPerRun(100, func() { APIKey(r) }); got != tt.allocs {
				t.Errorf("APIKey(%q) allocates %v times, want %v", tt.target, got, tt.allocs)
			}
		})
	}
	// The whole of Admit, key in the query, admitted from budget.
	e, cfg, _, clk := setup(t)
	e.lease(cfg, key{"web", "acme", "calls"}).Granted(clk.Now(), 1<<30, false, 0)
	r := request("/api/x?v=2&key=acme-key-0001", "")
	if got := testing.AllocsPerRun(100, func() {
		if v := e.Admit(cfg, "web", r, clk.Now()); v.Status != 0 {
			t.Fatalf("refused: %+v", v)
		}
	}); got != 0 {
		t.Errorf("Admit with the key in the query allocates %v times, want 0", got)
	}
	many := strings.Repeat("a=1&", maxQueryParams) + "key=x"
	if got := queryKey(many); got != "" {
		t.Errorf("over net/url's %d parameters: %q, want none", maxQueryParams, got)
	}
}

// FuzzQueryKey: the key parameter is what net/url finds, whatever the
// query.
func FuzzQueryKey(f *testing.F) {
	for _, q := range []string{"", "key=a", "a=1&key=b", "key=%41&key=b", "k%65y=v", "key=a;b", "&&key=+", "key=%zz", "%=1&key=2", "key"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		v, _ := url.ParseQuery(q)
		if got, want := queryKey(q), v.Get("key"); got != want {
			t.Errorf("queryKey(%q) = %q, net/url says %q", q, got, want)
		}
	})
}
