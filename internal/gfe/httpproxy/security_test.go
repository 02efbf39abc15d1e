package httpproxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// The security tests of the request path (the first security review,
// SECURITY.md): each replays an attack as a client would send it.

// securityTestTimeout bounds every blocking wait; it is a guard against a
// hang (the failure of an unfixed gfe), never a delay the tests rely on.
const securityTestTimeout = 10 * time.Second

// drainAll returns cfg with every backend group of service web drained
// (capacity_scaler 0).
func drainAll(t *testing.T, cfg *config.Config) *config.Config {
	t.Helper()
	c := *cfg
	c.Services = slices.Clone(c.Services)
	c.Services[0].Backends = slices.Clone(c.Services[0].Backends)
	for i := range c.Services[0].Backends {
		c.Services[0].Backends[i].CapacityScaler = 0
	}
	out, err := config.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDrainEverything (finding 9): capacity_scaler 0 on every group of a
// service answers every request 503 with Retry-After (DrainedRetryAfter),
// pinned clients included, and no backend gets a request.
func TestDrainEverything(t *testing.T) {
	for _, policy := range []string{"waterfall", "min_rtt", "round_robin", "least_request", "hash5"} {
		t.Run(policy, func(t *testing.T) {
			bs, regions := threeBackends(t)
			cfg := gfetest.SessionConfig(t, policy, regions, `session_affinity: {type: generated_cookie, cookie_name: SID, cookie_ttl: 1h, cookie_secret: `+testSecret+`}`, "")
			e, _ := sessionEdge(t, cfg)
			const client = "192.0.2.7:40000"
			w := do(t, e, "GET", client, "", nil)
			c, ok := cookieOf(w.Header(), "SID")
			if w.Code != 200 || !ok {
				t.Fatalf("before the drain: status %d, cookie %v; want 200 and a cookie", w.Code, ok)
			}

			e.p.Apply(snapshot.FromConfig("v2", drainAll(t, cfg)))
			e.p.Step()
			e.p.Step()
			hits := func() (n int64) {
				for _, b := range bs {
					n += b.hits.Load()
				}
				return n
			}
			before := hits()
			for i, h := range []http.Header{nil, {"Cookie": {"SID=" + c.Value}}} {
				for range 30 {
					w := do(t, e, "GET", client, "", h)
					if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != DrainedRetryAfter {
						t.Fatalf("drained, request set %d: status %d, Retry-After %q; want 503 and %q", i, w.Code, w.Header().Get("Retry-After"), DrainedRetryAfter)
					}
				}
			}
			if got := hits() - before; got != 0 {
				t.Errorf("drained: backends got %d requests, want 0", got)
			}
		})
	}
}

// TestPassThroughHeaders (finding 11): a client's X-Real-IP never reaches
// a backend, and neither does the gfe's own affinity cookie (generated
// cookies; the client's other cookies pass, and an http_cookie — the
// application's own — passes whole).
func TestPassThroughHeaders(t *testing.T) {
	_, regions := threeBackends(t)
	tests := []struct {
		name, affinity string
		cookie         []string
		want           string
	}{
		{"generated cookie alone", "{type: generated_cookie, cookie_name: SID, cookie_secret: " + testSecret + "}", []string{"SID=forged"}, ""},
		{"generated cookie among others", "{type: generated_cookie, cookie_name: SID, cookie_secret: " + testSecret + "}", []string{"a=1; SID=forged; b=2", "SID=x", "c=3"}, "a=1; b=2 | c=3"},
		{"prefix is not the name", "{type: generated_cookie, cookie_name: SID, cookie_secret: " + testSecret + "}", []string{"XSID=1; SIDX=2"}, "XSID=1; SIDX=2"},
		{"application cookie passes", "{type: http_cookie, cookie_name: app}", []string{"app=s1; b=2"}, "app=s1; b=2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "session_affinity: "+tt.affinity, ""))
			w := do(t, e, "GET", "192.0.2.9:5555", "", http.Header{"Cookie": tt.cookie, "X-Real-Ip": {"10.0.0.1"}})
			if w.Code != 200 {
				t.Fatalf("status %d", w.Code)
			}
			if got := w.Header().Get("X-Got-Cookie"); got != tt.want {
				t.Errorf("Cookie at the backend = %q, want %q", got, tt.want)
			}
			if got := w.Header().Get("X-Got-Real-Ip"); got != "" {
				t.Errorf("X-Real-IP at the backend = %q, want none", got)
			}
		})
	}
}

// TestDotSegmentPaths (finding 11): a path with a dot segment, decoded or
// percent-encoded, is refused with 400 before routing and never reaches a
// backend; a route for /a/ cannot be climbed out of.
func TestDotSegmentPaths(t *testing.T) {
	bs, regions := threeBackends(t)
	cfg := gfetest.SessionConfig(t, "round_robin", regions, "", "")
	c := *cfg
	c.Routes = []config.Route{{Host: "*", PathPrefix: "/a/", Service: "web", Timeout: 30 * time.Second}}
	cfg, err := config.New(c)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := sessionEdge(t, cfg)
	front := httptest.NewServer(e.proxy)
	t.Cleanup(front.Close)
	addr := strings.TrimPrefix(front.URL, "http://")
	tests := []struct {
		path string
		want int
	}{
		{"/a/../../etc/passwd", 400},
		{"/a/%2e%2e/%2e%2e/etc/passwd", 400},
		{"/a/..%2f..%2fetc/passwd", 400},
		{"/a/./x", 400},
		{"/a/..", 400},
		{"/a/x", 200},
		{"/a/x..y/.z", 200},
		{"/b/x", 404},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var hits int64
			for _, b := range bs {
				hits -= b.hits.Load()
			}
			code := rawRequest(t, addr, "GET "+tt.path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			for _, b := range bs {
				hits += b.hits.Load()
			}
			if code != tt.want {
				t.Errorf("GET %s: %d, want %d", tt.path, code, tt.want)
			}
			if wantHits := int64(0); tt.want == 200 {
				if hits != 1 {
					t.Errorf("GET %s: backends got %d requests, want 1", tt.path, hits)
				}
			} else if hits != wantHits {
				t.Errorf("GET %s: backends got %d requests, want 0", tt.path, hits)
			}
		})
	}
}

// rawRequest writes raw on a new connection to addr and returns the
// status of the answer (0 for none).
func rawRequest(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(securityTestTimeout))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// FuzzStripCookie: stripCookie never panics, removes every cookie of the
// name and keeps every other cookie pair in order.
func FuzzStripCookie(f *testing.F) {
	for _, s := range []string{"SID=1", "a=1; SID=2; b=3", "SID", ";;SID=;", "a=1;b", `SID="x"; a=";"`, ""} {
		f.Add(s, "SID")
	}
	f.Fuzz(func(t *testing.T, line, name string) {
		if name == "" || strings.ContainsAny(name, "=; ") {
			return
		}
		h := http.Header{"Cookie": {line}}
		stripCookie(h, name)
		var want []string
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			if k, _, _ := strings.Cut(part, "="); part != "" && k != name {
				want = append(want, part)
			}
		}
		got := strings.Join(h["Cookie"], "; ")
		if hasCookie([]string{line}, name) {
			if got != strings.Join(want, "; ") {
				t.Fatalf("stripCookie(%q, %q) = %q, want %q", line, name, got, strings.Join(want, "; "))
			}
		} else if got != line {
			t.Fatalf("stripCookie(%q, %q) changed a header without the cookie to %q", line, name, got)
		}
		if hasCookie(h["Cookie"], name) {
			t.Fatalf("stripCookie(%q, %q) left the cookie: %q", line, name, h["Cookie"])
		}
	})
}

// hangingBackend is a backend whose requests wait until the test ends,
// except /ws, which upgrades to an echo tunnel. arrived receives the
// request path of every request when it arrives.
func hangingBackend(t *testing.T) (addr string, arrived chan string) {
	t.Helper()
	arrived = make(chan string, 16)
	done := make(chan struct{})
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		if r.URL.Path == "/ws" {
			c, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			rw.Flush()
			io.Copy(c, rw)
			return
		}
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); b.CloseClientConnections(); b.Close() })
	return strings.TrimPrefix(b.URL, "http://"), arrived
}

// TestRouteTimeoutExemption (finding 6): a client cannot switch the route
// timeout off with a header: an HTTP/1.1 request with an Upgrade header (no
// 101 from its backend) or content-type application/grpc gets 504 at the
// route timeout, on the gfe's clock. A real upgrade (the backend's 101)
// outlives it.
func TestRouteTimeoutExemption(t *testing.T) {
	addr, arrived := hangingBackend(t)
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{addr}}}}}
	e, clk := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", timeout: 2s"))
	front := httptest.NewServer(e.proxy)
	t.Cleanup(front.Close)
	gfeAddr := strings.TrimPrefix(front.URL, "http://")

	for _, tt := range []struct{ name, header string }{
		{"upgrade header", "Connection: Upgrade\r\nUpgrade: websocket\r\n"},
		{"bare upgrade header", "Upgrade: h2c\r\n"},
		{"grpc over HTTP/1.1", "Content-Type: application/grpc\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			codes := make(chan int, 1)
			go func() {
				c, err := net.Dial("tcp", gfeAddr)
				if err != nil {
					codes <- -1
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(securityTestTimeout))
				io.WriteString(c, "GET /hang HTTP/1.1\r\nHost: x\r\n"+tt.header+"\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					codes <- 0
					return
				}
				resp.Body.Close()
				codes <- resp.StatusCode
			}()
			select {
			case <-arrived:
			case <-time.After(securityTestTimeout):
				t.Fatal("the request never reached the backend")
			}
			clk.Advance(2 * time.Second)
			if code := <-codes; code != http.StatusGatewayTimeout {
				t.Errorf("after the route timeout: %d, want 504", code)
			}
		})
	}

	t.Run("real upgrade outlives the timeout", func(t *testing.T) {
		c, err := net.Dial("tcp", gfeAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(securityTestTimeout))
		io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v, want 101", resp, err)
		}
		<-arrived
		clk.Advance(time.Minute)
		io.WriteString(c, "ping")
		buf := make([]byte, 4)
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
			t.Errorf("tunnel a minute after its 101 (route timeout 2s): read %q, %v; want the echo", buf, err)
		}
	})
}

// TestCancelledRequestsAreNotDemand (finding 5): a request whose client
// went away before any backend answered — reset before the gfe got to it,
// or while its backend was working — is not the service's demand, and one
// reset before the gfe got to it never reaches a backend.
func TestCancelledRequestsAreNotDemand(t *testing.T) {
	addr, arrived := hangingBackend(t)
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{addr}}}}}
	e, clk := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ""))
	e.p.Builder.Demand(clk.Now()) // starts the rate's window

	const early = 50
	for range early {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequest("GET", "http://gfe.test/x", nil).WithContext(ctx)
		req.RemoteAddr = "192.0.2.1:1"
		e.proxy.ServeHTTP(httptest.NewRecorder(), req)
	}
	const late = 5
	for range late {
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest("GET", "http://gfe.test/x", nil).WithContext(ctx)
		req.RemoteAddr = "192.0.2.1:1"
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.proxy.ServeHTTP(httptest.NewRecorder(), req)
		}()
		select {
		case <-arrived:
		case <-time.After(securityTestTimeout):
			t.Fatal("the request never reached the backend")
		}
		cancel()
		<-done
	}
	select {
	case p := <-arrived:
		t.Errorf("a request reset before the gfe got to it reached the backend (%s)", p)
	default:
	}
	clk.Advance(10 * time.Second) // ten time constants of the demand
	if got := e.p.Builder.Demand(clk.Now())["web"]; got > 0.01 {
		t.Errorf("demand after %d early and %d late client resets = %.2f req/s, want 0", early, late, got)
	}
}
