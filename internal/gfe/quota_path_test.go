package gfe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/quotaclient"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// The quota and path tests of the second security review: a request path
// is routed, charged and forwarded in one canonical form (lb/reqpath) on
// every path a request takes — the HTTP/1.1 fast path, net/http's
// HTTP/1.1 and h2c — and a bytes charge cannot be dodged by a body of
// unknown length. Each attack is sent as raw bytes over a real listener
// of a real gfe, to a real backend.

// uriBackend answers 200 to everything and records, per request target
// as it arrived (RequestURI), how many requests and body bytes it got;
// the gfe's RTT probes (rttProbePath) are not recorded.
type uriBackend struct {
	srv   *httptest.Server
	mu    sync.Mutex
	hits  map[string]int
	bytes int64
}

func newURIBackend(t *testing.T) *uriBackend {
	t.Helper()
	b := &uriBackend{hits: map[string]int{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.RequestURI == rttProbePath {
			return
		}
		b.mu.Lock()
		b.hits[r.RequestURI]++
		b.bytes += n
		b.mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// rttProbePath is the path of the gfe's RTT probes of backends.
const rttProbePath = "/rtt"

func (b *uriBackend) snapshot() (map[string]int, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hits := make(map[string]int, len(b.hits))
	for k, v := range b.hits {
		hits[k] = v
	}
	return hits, b.bytes
}

// quotaAllocator answers AllocateQuota like the control plane: lb/quota's
// Allocator on the gfe's clock.
type quotaAllocator struct {
	clk   clock.Clock
	alloc *quota.Allocator
}

func (s *quotaAllocator) AllocateQuota(_ context.Context, in *pb.AllocateQuotaRequest, _ ...grpc.CallOption) (*pb.AllocateQuotaResponse, error) {
	v := in.GetValues()[0]
	res, err := s.alloc.Allocate(s.clk.Now(), quota.Request{Consumer: in.GetConsumer(), Mode: quota.ModeBestEffort, Values: []quota.MetricValue{{Metric: v.GetMetric(), Value: v.GetValue()}}})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if res.Exhausted {
		st, _ := status.New(codes.ResourceExhausted, "exhausted").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)})
		return nil, st.Err()
	}
	return &pb.AllocateQuotaResponse{Allocated: []*pb.QuotaMetricValue{{Metric: v.GetMetric(), Value: res.Allocated[0].Value}}}, nil
}

// quotaPathConfig routes everything to web, charges web's /api/ by
// requests (600 a minute) and POSTs to /upload/ by payload bytes (1,000 a
// minute).
func quotaPathConfig(t *testing.T, backend string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`regions: [{name: us-east, zones: [{name: us-east-b, groups: [{name: east, instances: [{address: %s}]}]}]}]
services: [{name: web, policy: round_robin, backends: [{group: east, max_rate_per_instance: 100000}]}]
routes: [{host: "*", path_prefix: /, service: web}]
quota:
  metrics: [{name: calls, default_limit: 600}, {name: upload, unit: bytes, default_limit: 1000}]
  charges:
    - {service: web, path_prefix: /api/, metric: calls}
    - {service: web, method: POST, path_prefix: /upload/, metric: upload}
  consumers: [{api_key: acme-key-0001, project: acme}]
`, backend)
	c, err := config.Parse([]byte(y), "quota-path.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startQuotaEdge runs a gfe for c, its --listen listener's fast path on
// or off, whose quota calls go to an in-process Allocator.
func startQuotaEdge(t *testing.T, c *config.Config, fast bool) *runningEdge {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.FastPath = fast
	clk := clock.NewFake(time.Unix(1_800_000_000-1_800_000_000%60, 0)) // the start of a window
	srv := &quotaAllocator{clk: clk, alloc: quota.NewAllocator(func(p, m string) (int64, bool) { l, _, ok := c.QuotaLimit(p, m); return l, ok })}
	g := &fakeGossip{node: cfg.Node, states: map[string]gossip.NodeState{}}
	e, err := New(cfg, Options{Gossip: g, Clock: clk, Quota: func() quotaclient.Allocator { return srv }})
	if err != nil {
		t.Fatal(err)
	}
	return runEdge(t, e, c)
}

// pathTransport sends one request with a raw target over one of the
// client protocols, and returns the answer's status.
type pathTransport struct {
	name string
	fast bool // the gfe's fast path on (HTTP/1.1 requests it takes go there)
	send func(t *testing.T, addr, method, target string, hdr [][2]string, body []byte, chunked bool) int
}

var pathTransports = []pathTransport{
	{"h1 fast path", true, h1Send},
	{"h1 net/http", false, h1Send},
	{"h2c", true, h2cSend},
}

// h1Send writes the request as HTTP/1.1 bytes (the body with a
// Content-Length, or chunked) and reads the answer's status.
func h1Send(t *testing.T, addr, method, target string, hdr [][2]string, body []byte, chunked bool) int {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: gfe.test\r\nConnection: close\r\n", method, target)
	for _, f := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", f[0], f[1])
	}
	switch {
	case body != nil && chunked:
		fmt.Fprintf(&b, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	case body != nil:
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	default:
		b.WriteString("\r\n")
	}
	return rawRequest(t, addr, b.String())
}

// h2cSend sends the request as raw h2c frames on a new connection: the
// :path exactly as given, the body (if any) in DATA frames, with a
// content-length only when !chunked (an HTTP/2 body of unknown length).
func h2cSend(t *testing.T, addr, method, target string, hdr [][2]string, body []byte, chunked bool) int {
	t.Helper()
	fr, block, enc := h2cOpen(t, addr, method, "gfe.test", target)
	for _, f := range hdr {
		enc.WriteField(hpack.HeaderField{Name: strings.ToLower(f[0]), Value: f[1]})
	}
	if body != nil && !chunked {
		enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: body == nil, EndHeaders: true})
	for len(body) > 0 {
		n := min(len(body), 4096)
		fr.WriteData(1, n == len(body), body[:n])
		body = body[n:]
	}
	return h2cStatus(t, fr, "h2c "+method+" "+target)
}

// TestQuotaPathBypasses (second review, items 6 and 16): the paths that
// were served without an API key where /api/x gets 401 — //api/x, /API/x
// and /api\x, and their neighbours — are charged as /api/x (401) or
// refused (400), and never reach the backend; the path residue (/a\..\x,
// /a/..;/x, %252e%252e) is refused; a double slash reaches the backend
// merged. Over the HTTP/1.1 fast path, net/http's HTTP/1.1 and h2c.
func TestQuotaPathBypasses(t *testing.T) {
	key := [][2]string{{"X-Api-Key", "acme-key-0001"}}
	for _, tr := range pathTransports {
		t.Run(tr.name, func(t *testing.T) {
			b := newURIBackend(t)
			e := startQuotaEdge(t, quotaPathConfig(t, strings.TrimPrefix(b.srv.URL, "http://")), tr.fast)
			addr := e.ListenAddr().String()
			for _, tt := range []struct {
				target string
				hdr    [][2]string
				want   int
				// at is the target the backend must get it as ("" none).
				at string
			}{
				{"/api/x", nil, 401, ""},
				{"//api/x", nil, 401, ""},
				{"/API/x", nil, 401, ""},
				{"/Api/X", nil, 401, ""},
				{`/api\x`, nil, 400, ""},
				{"/api%5Cx", nil, 400, ""},
				{"/api;v=1/x", nil, 401, ""},
				{"/%61pi/x", nil, 401, ""},
				{"///api//x", nil, 401, ""},
				{"/x/../api/x", nil, 400, ""},
				{`/a\..\x`, nil, 400, ""},
				{"/a/..;/x", nil, 400, ""},
				{"/a/%252e%252e/x", nil, 400, ""},
				{"/a/%2e%2e/x", nil, 400, ""},
				{"/%2F/api/x", nil, 400, ""},
				{"//public//x?q=1", nil, 200, "/public/x?q=1"},
				{"//api/secret", key, 200, "/api/secret"},
				{"/api/x", key, 200, "/api/x"},
			} {
				before, _ := b.snapshot()
				got := tr.send(t, addr, "GET", tt.target, tt.hdr, nil, false)
				after, _ := b.snapshot()
				if got != tt.want {
					t.Errorf("GET %s (key %v): %d, want %d", tt.target, tt.hdr != nil, got, tt.want)
				}
				for uri, n := range after {
					if d := n - before[uri]; d != 0 && uri != tt.at {
						t.Errorf("GET %s: the backend got %d request(s) for %q, want none", tt.target, d, uri)
					}
				}
				if tt.at != "" && after[tt.at]-before[tt.at] != 1 {
					t.Errorf("GET %s: the backend got %d request(s) for %q, want 1", tt.target, after[tt.at]-before[tt.at], tt.at)
				}
			}
		})
	}
}

// TestQuotaBytesNeedALength (second review, item 6): the same 5,000
// bytes that were admitted 23 times against a 1,000 B/min limit when sent
// chunked (HTTP/1.1) or without a content-length (h2c) are refused 411
// before a byte reaches the backend; declared, 5,000 bytes get 429 and
// 400 bytes pass.
func TestQuotaBytesNeedALength(t *testing.T) {
	key := [][2]string{{"X-Api-Key", "acme-key-0001"}}
	body := bytes.Repeat([]byte("x"), 5000)
	for _, tr := range pathTransports {
		t.Run(tr.name, func(t *testing.T) {
			b := newURIBackend(t)
			e := startQuotaEdge(t, quotaPathConfig(t, strings.TrimPrefix(b.srv.URL, "http://")), tr.fast)
			addr := e.ListenAddr().String()
			codes := map[int]int{}
			for range 23 {
				codes[tr.send(t, addr, "POST", "/upload/x", key, body, true)]++
			}
			if codes[http.StatusLengthRequired] != 23 {
				t.Errorf("23 length-less POSTs of 5,000 B against 1,000 B/min: answered %v, want 23 × 411", codes)
			}
			if hits, n := b.snapshot(); len(hits) != 0 || n != 0 {
				t.Errorf("after 23 length-less uploads the backend got %v, %d bytes; want nothing", hits, n)
			}
			if got := tr.send(t, addr, "POST", "/upload/x", key, body, false); got != http.StatusTooManyRequests {
				t.Errorf("POST of 5,000 B with its length, limit 1,000 B/min: %d, want 429", got)
			}
			if got := tr.send(t, addr, "POST", "/upload/x", key, body[:400], false); got != http.StatusOK {
				t.Errorf("POST of 400 B with its length: %d, want 200", got)
			}
			if hits, n := b.snapshot(); hits["/upload/x"] != 1 || n != 400 {
				t.Errorf("the backend got %v, %d bytes; want one upload of 400", hits, n)
			}
		})
	}
}
