package quotaclient

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// setupLimit is setup with a limit of limit a minute and uploads charged
// by payload bytes (1,000 a minute).
func setupLimit(t *testing.T, limit string) (*Enforcer, *config.Config, *server, *clock.Fake) {
	t.Helper()
	y := strings.Replace(quotaConfig, "default_limit: 600}]", "default_limit: "+limit+"}, {name: upload, unit: bytes, default_limit: 1000}]", 1)
	y = strings.Replace(y, "  charges: [{service: web, path_prefix: /api/, metric: calls}]", "  charges: [{service: web, path_prefix: /api/, metric: calls}, {service: web, path_prefix: /upload/, metric: upload}]", 1)
	cfg, err := config.Parse([]byte(y), "quota.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, _, srv, clk := setup(t)
	srv.alloc = quota.NewAllocator(func(p, m string) (int64, bool) { l, _, ok := cfg.QuotaLimit(p, m); return l, ok })
	return e, cfg, srv, clk
}

// TestEnforcerExactLimit (second security review, item 13): at 60 a
// minute, a consumer's requests in a fresh minute, one a millisecond with
// the Enforcer's calls made every 50 ms tick (each answered at once), are
// admitted exactly 60 times; the 61st gets 429 with a Retry-After of the
// rest of the minute; the quota service charged 60. (Before, the 4th got
// 429.)
func TestEnforcerExactLimit(t *testing.T) {
	e, cfg, srv, clk := setupLimit(t, "60")
	start := clk.Now()
	admitted, refusedAt := 0, 0
	var retry time.Duration
	for i := 1; i <= 61; i++ {
		v := e.Admit(cfg, "web", request("/api/x", "acme-key-0001"), clk.Now())
		switch {
		case v.Status == 0:
			admitted++
		case v.Status == http.StatusTooManyRequests:
			if refusedAt == 0 {
				refusedAt, retry = i, v.RetryAfter
			}
		default:
			t.Fatalf("request %d: %+v", i, v)
		}
		if i == 1 || clk.Now().Sub(start)%(50*time.Millisecond) == 0 {
			e.callAll(context.Background(), clk.Now()) // the wake, then Run's ticks
		}
		clk.Advance(time.Millisecond)
	}
	if admitted != 60 || refusedAt != 61 {
		t.Errorf("61 requests at 60 a minute: %d admitted, first 429 at request %d; want 60 and the 61st", admitted, refusedAt)
	}
	if want := time.Minute - 60*time.Millisecond; retry != want {
		t.Errorf("429 with Retry-After %v, want the rest of the minute, %v", retry, want)
	}
	if used := srv.alloc.Used(clk.Now(), "acme", "calls"); used != 60 {
		t.Errorf("the quota service charged %d, want the 60 admitted", used)
	}
}

// oldServer is a Quota service that does not take returns: it ignores
// the request's returned units and answers none.
type oldServer struct{ *server }

func (s oldServer) AllocateQuota(ctx context.Context, in *pb.AllocateQuotaRequest, opts ...grpc.CallOption) (*pb.AllocateQuotaResponse, error) {
	in.Returned, in.ReturnedWindow = nil, 0
	return s.server.AllocateQuota(ctx, in, opts...)
}

// TestEnforcerGivesBack: what a lease holds beyond twice its demand goes
// back to the service at the next call; a service that does not take
// returns (an older control plane) leaves the units with the lease, so the
// consumer still gets its whole limit.
func TestEnforcerGivesBack(t *testing.T) {
	for _, old := range []bool{false, true} {
		e, cfg, srv, clk := setupLimit(t, "60")
		if old {
			e.conn = func() Allocator { return oldServer{srv} }
		}
		admit := func(n int) {
			t.Helper()
			for range n {
				if v := e.Admit(cfg, "web", request("/api/x", "acme-key-0001"), clk.Now()); v.Status != 0 {
					t.Fatalf("old service %v: refused %+v", old, v)
				}
			}
		}
		admit(5)
		e.callAll(context.Background(), clk.Now()) // leases the window: 60
		clk.Advance(time.Second)
		admit(2)
		e.callAll(context.Background(), clk.Now()) // keeps 4 for twice the demand of 2
		wantUsed := int64(11)                      // 7 admitted, 4 held
		if old {
			wantUsed = 60
		}
		if used := srv.alloc.Used(clk.Now(), "acme", "calls"); used != wantUsed {
			t.Errorf("old service %v: charged %d after 7 admitted, want %d", old, used, wantUsed)
		}
		clk.Advance(time.Second)
		admit(53)
		e.callAll(context.Background(), clk.Now())
		if v := e.Admit(cfg, "web", request("/api/x", "acme-key-0001"), clk.Now()); v.Status != http.StatusTooManyRequests {
			t.Errorf("old service %v: the 61st request: %+v, want 429", old, v)
		}
		if used := srv.alloc.Used(clk.Now(), "acme", "calls"); used != 60 {
			t.Errorf("old service %v: charged %d after 60 admitted, want 60", old, used)
		}
	}
}

// TestEnforcerBytesNeedALength: a request a bytes metric charges with a
// body of unknown length is refused with 411 before anything is charged;
// with its length it is charged its length.
func TestEnforcerBytesNeedALength(t *testing.T) {
	e, cfg, srv, clk := setupLimit(t, "60")
	r := request("/upload/x", "acme-key-0001")
	r.ContentLength = -1 // chunked, or HTTP/2 without content-length
	if v := e.Admit(cfg, "web", r, clk.Now()); v.Status != http.StatusLengthRequired || !strings.Contains(v.Message, "Content-Length") {
		t.Errorf("a body of unknown length: %+v, want 411 asking for a Content-Length", v)
	}
	if got := testutil.ToFloat64(e.decisions.WithLabelValues("length_required")); got != 1 {
		t.Errorf("length_required counted %v, want 1", got)
	}
	r.ContentLength = 400
	if v := e.Admit(cfg, "web", r, clk.Now()); v.Status != 0 {
		t.Errorf("400 bytes declared: %+v, want admitted", v)
	}
	r.ContentLength = 700
	if v := e.Admit(cfg, "web", r, clk.Now()); v.Status != http.StatusTooManyRequests {
		t.Errorf("700 more bytes against 1,000 a minute: %+v, want 429", v)
	}
	e.callAll(context.Background(), clk.Now())
	if used := srv.alloc.Used(clk.Now(), "acme", "upload"); used != 1000 {
		t.Errorf("the window's first call leased %d bytes, want the 1,000 of the limit", used)
	}
}
