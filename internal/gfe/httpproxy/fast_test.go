package httpproxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gfe/h1"
	"github.com/spillway-lb/spillway/internal/gfe/poller"
	"github.com/spillway-lb/spillway/lb/reqpath"
)

// viaFast makes do send its requests through the fast path (ServeFast)
// instead of ServeHTTP: TestFastPathSemantics runs the session tests so.
var viaFast bool

// fastHandedOff counts the requests doFast gave to ServeHTTP because the
// fast path does not take them.
var fastHandedOff int

// serveFastConn serves HTTP/1.x requests on c through p.ServeFast as the
// listener's fast path does, until c closes or a request is not Fast; it
// returns that request's verdict.
func serveFastConn(p *Proxy, c net.Conn, remote netip.AddrPort) h1.Verdict {
	defer c.Close()
	fr := &FastRequest{Conn: c, Client: bufio.NewReaderSize(c, 64<<10), Out: bufio.NewWriter(c), Remote: remote,
		Local: netip.MustParseAddrPort("127.0.0.1:80"), BodyTimeout: 10 * time.Second}
	for {
		buf, err := fr.Client.Peek(1)
		if err != nil {
			return h1.Fast
		}
		for {
			buf, _ = fr.Client.Peek(fr.Client.Buffered())
			n, v, err := h1.Parse(buf, &fr.Head)
			if err == nil {
				if v != h1.Fast {
					return v
				}
				fr.HeadLen = n
				break
			}
			if _, err := fr.Client.Peek(len(buf) + 1); err != nil {
				return h1.Fast
			}
		}
		if !p.ServeFast(fr) {
			return h1.Fast
		}
	}
}

// serveVia serves req through the fast path (fast: doFast) or net/http
// (p.ServeHTTP) and returns the recorded answer.
func serveVia(t testing.TB, p *Proxy, req *http.Request, fast bool) *httptest.ResponseRecorder {
	t.Helper()
	if fast {
		return doFast(t, p, req)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, req)
	return w
}

// doFast sends req through the fast path over an in-memory connection and
// records the answer; a request the fast path does not take goes to
// ServeHTTP (counted in fastHandedOff).
func doFast(t testing.TB, p *Proxy, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		t.Fatal(err)
	}
	var hr h1.Request
	if _, v, err := h1.Parse(raw.Bytes(), &hr); err != nil || v != h1.Fast {
		fastHandedOff++
		w := httptest.NewRecorder()
		req2, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw.Bytes())))
		if err != nil {
			t.Fatalf("request %q: %v", raw.Bytes(), err)
		}
		req2.RemoteAddr = req.RemoteAddr
		p.ServeHTTP(w, req2)
		return w
	}
	cc, sc := net.Pipe()
	defer cc.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveFastConn(p, sc, netip.MustParseAddrPort(req.RemoteAddr))
	}()
	go cc.Write(raw.Bytes())
	resp, err := http.ReadResponse(bufio.NewReader(cc), req)
	if err != nil {
		t.Fatalf("%s %s: reading the fast path's answer: %v", req.Method, req.URL, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the fast path's body: %v", req.Method, req.URL, err)
	}
	cc.Close()
	<-done
	w := httptest.NewRecorder()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	w.Body.Write(body)
	return w
}

// TestFastPathSemantics runs the proxy's session, retry, outlier and
// security tests with every request through the fast path: the answers,
// picks, retries, ejections and cookies must be those of the slow path.
func TestFastPathSemantics(t *testing.T) {
	tests := []struct {
		name string
		f    func(*testing.T)
	}{
		{"RetryNeverReached", TestRetryNeverReached},
		{"RetryIdempotent", TestRetryIdempotent},
		{"RouteTimeout", TestRouteTimeout},
		{"PerTryTimeout", TestPerTryTimeout},
		{"PickErrors", TestPickErrors},
		{"RetryLeavesUnreachableRegion", TestRetryLeavesUnreachableRegion},
		{"GeneratedCookieAffinity", TestGeneratedCookieAffinity},
		{"CookieRotation", TestCookieRotation},
		{"KeyAffinity", TestKeyAffinity},
		{"OutlierEjection", TestOutlierEjection},
		{"OutlierLimits", TestOutlierLimits},
		{"DrainEverything", TestDrainEverything},
		{"PassThroughHeaders", TestPassThroughHeaders},
		{"DotSegmentPaths", TestDotSegmentPaths},
	}
	viaFast = true
	defer func() { viaFast = false }()
	for _, tc := range tests {
		fastHandedOff = 0
		t.Run(tc.name, tc.f)
		t.Logf("%s: %d requests handed off to net/http", tc.name, fastHandedOff)
	}
}

// rawBackend is a backend that answers every request on a connection with
// the next of its canned raw responses, and records the requests' heads.
type rawBackend struct {
	address string
	heads   chan string
}

func newRawBackend(t testing.TB, responses ...string) *rawBackend {
	t.Helper()
	b := &rawBackend{heads: make(chan string, 100)}
	b.address = serveTCP(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for _, resp := range responses {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			head, _ := httputil.DumpRequest(req, false)
			io.Copy(io.Discard, req.Body)
			b.heads <- string(head)
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
			if strings.Contains(resp, "Connection: close") || !strings.Contains(resp, "Content-Length") && !strings.Contains(resp, "chunked") && !strings.HasPrefix(resp[9:], "204") && !strings.HasPrefix(resp[9:], "304") {
				return
			}
		}
	})
	return b
}

func (b *rawBackend) addr() string { return b.address }

// serveTCP serves handle on every connection to a new loopback listener,
// each in its own goroutine, closing the connection when handle returns,
// until the test ends; it returns the listener's address.
func serveTCP(tb testing.TB, handle func(net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// fastEdge returns a proxy whose one route goes to addrs, round robin.
func fastEdge(t testing.TB, routeExtra string, addrs ...string) *testGFE {
	t.Helper()
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: addrs}}}}
	e, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", routeExtra))
	return e
}

// exchange writes raw requests to a fast-path connection of e and returns
// everything the gfe wrote back until it closed the connection.
func exchange(t testing.TB, e *testGFE, raw string) string {
	t.Helper()
	cc, sc := net.Pipe()
	go serveFastConn(e.proxy, sc, netip.MustParseAddrPort("192.0.2.7:4000"))
	go func() { io.WriteString(cc, raw) }()
	cc.SetDeadline(time.Now().Add(10 * time.Second))
	out, _ := io.ReadAll(cc)
	cc.Close()
	return string(out)
}

// TestFastPathFraming: every response framing reaches the client as it
// should, on one kept-alive client connection, and the backend sees the
// request as the gfe forwards it.
func TestFastPathFraming(t *testing.T) {
	tests := []struct {
		name, req, resp, want string
	}{
		{"length", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{"chunked with trailers", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3;e=1\r\nabc\r\n0\r\nX-T: v\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3;e=1\r\nabc\r\n0\r\nX-T: v\r\n\r\n"},
		{"chunked to http/1.0", "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
			"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nok"},
		{"head", "HEAD /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"},
		{"204", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 204 No Content\r\n\r\n",
			"HTTP/1.1 204 No Content\r\n\r\n"},
		{"304", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n",
			"HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n"},
		{"103 then 200", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
			"HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"},
		{"until close", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\n\r\nstream",
			"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nstream"},
		{"hop-by-hop removed", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nX-End: 2\r\nContent-Length: 0\r\n\r\n",
			"HTTP/1.1 200 OK\r\nX-End: 2\r\nContent-Length: 0\r\n\r\n"},
		{"post body", "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
			"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
			"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"},
		{"malformed response", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
			"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 12\r\n\r\nBad Gateway\n"},
		{"malformed chunk", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newRawBackend(t, tc.resp)
			e := fastEdge(t, ", retries: 0", b.addr())
			// Connection: close on the client's request ends the exchange.
			req := strings.Replace(tc.req, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
			want := tc.want
			if !strings.Contains(want, "Connection: close") {
				want = strings.Replace(want, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
				if strings.HasPrefix(want, "HTTP/1.1 103") {
					// The 103 keeps its own head; the final answer closes.
					want = "HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx"
				}
			}
			if strings.HasPrefix(tc.name, "malformed response") {
				want = strings.Replace(tc.want, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
			}
			if got := exchange(t, e, req); got != want {
				t.Errorf("client got\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestFastPathForwardedHead: what a backend receives of a client's head.
func TestFastPathForwardedHead(t *testing.T) {
	b := newRawBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	e := fastEdge(t, "", b.addr())
	exchange(t, e, "GET /p?q=1 HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\n"+
		"X-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 1\r\n"+
		"Proxy-Authorization: p\r\nTE: trailers, deflate\r\nUser-Agent: ua\r\n\r\n")
	got := <-b.heads
	want := "GET /p?q=1 HTTP/1.1\r\nHost: example.com\r\nTe: trailers\r\nUser-Agent: ua\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Host: example.com\r\nX-Forwarded-Proto: http\r\n\r\n"
	if got != want {
		t.Errorf("backend got\n%q\nwant\n%q", got, want)
	}
}

// TestFastPathKeepAlive: one client connection carries several requests,
// pipelined, over one pooled backend connection.
func TestFastPathKeepAlive(t *testing.T) {
	const n = 5
	resps := make([]string, n)
	for i := range resps {
		resps[i] = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d", i)
	}
	b := newRawBackend(t, resps...)
	e := fastEdge(t, "", b.addr())
	var req strings.Builder
	for i := range n {
		if i == n-1 {
			req.WriteString("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
		} else {
			req.WriteString("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		}
	}
	got := exchange(t, e, req.String())
	if c := strings.Count(got, "HTTP/1.1 200 OK"); c != n {
		t.Fatalf("%d answers, want %d:\n%q", c, n, got)
	}
	for i := range n {
		if !strings.Contains(got, fmt.Sprintf("\r\n\r\n%d", i)) {
			t.Errorf("answer %d missing:\n%q", i, got)
		}
	}
}

// TestFastPathStaleConnection: a pooled connection its backend closed while
// it was idle is not used for a request with a body (which could not be
// sent again): the fast path notices and dials afresh.
func TestFastPathStaleConnection(t *testing.T) {
	closed := make(chan struct{}, 10)
	addr := serveTCP(t, func(c net.Conn) {
		// One answer, then the backend's idle timeout closes it.
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err == nil {
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		c.Close()
		closed <- struct{}{}
	})
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{addr}}}}}
	e, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", retries: 0"))
	post := "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
	for i := range 2 {
		if got := exchange(t, e, post); !strings.HasPrefix(got, "HTTP/1.1 200 OK") {
			t.Fatalf("request %d: %q", i, got)
		}
		<-closed
	}
}

// TestFastPathPooledDeadline: a pooled connection keeps the route deadline
// of its last request while idle (the next attempt sets its own, one timer
// update per request); once that deadline has passed, the connection is
// still checked (quiet) and reused, for a request with a body too, which
// could not be sent again on a new connection.
func TestFastPathPooledDeadline(t *testing.T) {
	var accepts atomic.Int64
	addr := serveTCP(t, func(c net.Conn) {
		accepts.Add(1)
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{addr}}}}}
	const timeout = 200 * time.Millisecond
	e, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", timeout: 200ms, retries: 0"))
	post := "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
	for i := range 3 {
		if got := exchange(t, e, post); !strings.HasPrefix(got, "HTTP/1.1 200 OK") {
			t.Fatalf("request %d: %q", i, got)
		}
		// The socket deadline is wall-clock time: let it pass for real.
		time.Sleep(timeout + 50*time.Millisecond)
	}
	if n := accepts.Load(); n != 1 {
		t.Errorf("%d backend connections for 3 requests, want 1 reused", n)
	}
	e.proxy.fast.mu.Lock()
	defer e.proxy.fast.mu.Unlock()
	if cs := e.proxy.fast.idle[addr]; len(cs) != 1 {
		t.Errorf("%d idle backend connections, want 1", len(cs))
	} else if _, ok := cs[0].c.(*poller.Conn); !ok {
		t.Errorf("the backend connection is a %T, want it read through the poller", cs[0].c)
	}
}

// TestFastPathClientLeft: a request whose client left while its backend
// worked (FastRequest.Leave, from the listener's sweep) stops waiting at
// once: the backend connection is closed, nothing is sent again (retries:
// 1), and it counts as a canceled client, withdrawn from demand, not as a
// backend failure, as on the slow path.
func TestFastPathClientLeft(t *testing.T) {
	got, closed := make(chan struct{}, 10), make(chan struct{}, 10)
	addr := serveTCP(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		got <- struct{}{}
		io.Copy(io.Discard, c) // never answer; wait for the gfe to close
		closed <- struct{}{}
	})
	e := fastEdge(t, ", timeout: 30s, retries: 1", addr)
	svc := e.p.Table().Services["web"]
	cc, sc := net.Pipe()
	defer cc.Close()
	go io.WriteString(cc, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	go io.Copy(io.Discard, cc)
	fr := &FastRequest{Conn: sc, Client: bufio.NewReader(sc), Out: bufio.NewWriter(sc),
		Remote: netip.MustParseAddrPort("192.0.2.7:4000"), Local: netip.MustParseAddrPort("127.0.0.1:80")}
	if _, err := fr.Client.Peek(1); err != nil {
		t.Fatal(err)
	}
	buf, _ := fr.Client.Peek(fr.Client.Buffered())
	n, v, err := h1.Parse(buf, &fr.Head)
	if err != nil || v != h1.Fast {
		t.Fatalf("parse: %v, %v", v, err)
	}
	fr.HeadLen = n
	keep := make(chan bool, 1)
	go func() { keep <- e.proxy.ServeFast(fr) }()
	<-got
	fr.Leave()
	select {
	case k := <-keep:
		if k {
			t.Error("ServeFast kept the connection of a client that left")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeFast still waits for the backend 10 s after the client left")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("backend connection still open 10 s after the client left")
	}
	if n := len(got); n != 0 {
		t.Errorf("%d more attempts after the client left, want none", n)
	}
	m := svc.Meters()
	if c := testutil.ToFloat64(e.proxy.metrics.clientErrors.WithLabelValues("canceled")); c != 1 {
		t.Errorf("canceled clients %v, want 1", c)
	}
	if b, f := testutil.ToFloat64(e.proxy.metrics.backendErrors), m.Failures.Load(); b != 0 || f != 0 {
		t.Errorf("backend errors %v, service failures %d; want 0 and 0", b, f)
	}
	if a, in := m.Arrivals(), m.InFlight(); a != 0 || in != 0 {
		t.Errorf("arrivals %d, in flight %d; want 0 and 0 (withdrawn, ended)", a, in)
	}
}

// TestFastPathRouteTimeout: a backend that never answers gets the client a
// 504 at the route timeout.
func TestFastPathRouteTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it, never answer
		}
	}()
	e := fastEdge(t, ", timeout: 200ms, retries: 0", ln.Addr().String())
	got := exchange(t, e, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 504 Gateway Timeout\r\n") {
		t.Errorf("client got %q, want a 504", got)
	}
}

// TestFastPathRefusals: the gfe's own answers on the fast path.
func TestFastPathRefusals(t *testing.T) {
	b := newRawBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	e := fastEdge(t, "", b.addr())
	got := exchange(t, e, "GET /a/../b HTTP/1.1\r\nHost: h\r\n\r\n")
	if want := "HTTP/1.1 400 Bad Request\r\n"; !strings.HasPrefix(got, want) || !strings.Contains(got, "Connection: close\r\n") || !strings.HasSuffix(got, "gfe: "+reqpath.ErrDotSegment.Error()+"\n") {
		t.Errorf("dot segment: got %q", got)
	}
	got = exchange(t, e, "GET /%2e%2e/b HTTP/1.1\r\nHost: h\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 400 ") {
		t.Errorf("encoded dot segment: got %q", got)
	}
}

// TestFastPathAllocs: the fast path allocates at most once per request.
func TestFastPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h := newFastBench(t)
	for range 100 {
		h.one(t)
	}
	if n := testing.AllocsPerRun(1000, func() { h.one(t) }); n > 1 {
		t.Errorf("%v allocations per request, want <= 1", n)
	}
}

// fastBench is a fast-path connection to a backend answering every request
// with a fixed 200, driven one request at a time.
type fastBench struct {
	fr  *FastRequest
	p   *Proxy
	cc  net.Conn
	req []byte
	buf []byte
}

func newFastBench(tb testing.TB) *fastBench {
	tb.Helper()
	back := newKeepAliveBackend(tb)
	return newFastBenchTo(tb, fastEdge(tb, "", back))
}

// newFastBenchTo is newFastBench through the proxy of e, whose config
// routes to a backend of newKeepAliveBackend.
func newFastBenchTo(tb testing.TB, e *testGFE) *fastBench {
	tb.Helper()
	// A loopback TCP connection: writes land in the kernel's buffers, so
	// one goroutine drives both ends without allocating.
	cc, sc := loopbackPair(tb)
	fb := &fastBench{p: e.proxy, cc: cc, req: []byte("GET /x HTTP/1.1\r\nHost: gfe.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"), buf: make([]byte, 4096)}
	fb.fr = &FastRequest{Conn: sc, Client: bufio.NewReaderSize(sc, 64<<10), Out: bufio.NewWriter(sc),
		Remote: netip.MustParseAddrPort("192.0.2.1:40000"), Local: netip.MustParseAddrPort("127.0.0.1:80")}
	return fb
}

// one sends one request and reads its answer.
func (fb *fastBench) one(tb testing.TB) {
	if _, err := fb.cc.Write(fb.req); err != nil {
		tb.Fatal(err)
	}
	fr := fb.fr
	for {
		buf, _ := fr.Client.Peek(max(fr.Client.Buffered(), 1))
		n, v, err := h1.Parse(buf, &fr.Head)
		if err == nil {
			if v != h1.Fast {
				tb.Fatalf("verdict %v", v)
			}
			fr.HeadLen = n
			break
		}
		fr.Client.Peek(len(buf) + 1)
	}
	if !fb.p.ServeFast(fr) {
		tb.Fatal("connection not kept")
	}
	n, err := fb.cc.Read(fb.buf)
	if err != nil || !bytes.HasPrefix(fb.buf[:n], []byte("HTTP/1.1 200 OK")) {
		tb.Fatalf("answer %q, %v", fb.buf[:n], err)
	}
}

// newKeepAliveBackend is a raw backend answering every bodiless request on
// every connection with a fixed 200 "ok\n", without allocating (so that
// TestFastPathAllocs counts the gfe's allocations alone).
func newKeepAliveBackend(tb testing.TB) string {
	tb.Helper()
	return serveTCP(tb, func(c net.Conn) {
		br := bufio.NewReader(c)
		resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) == 2 { // the empty line ending a head
				if _, err := c.Write(resp); err != nil {
					return
				}
			}
		}
	})
}

// BenchmarkFastPath measures one proxied GET through the fast path, from
// a parsed head to the answer written to the client, over a kept-alive
// backend connection (the backend's own work included, the client's
// reading of the answer too).
func BenchmarkFastPath(b *testing.B) {
	h := newFastBench(b)
	b.ReportAllocs()
	for b.Loop() {
		h.one(b)
	}
}

// FuzzCopyChunked: a chunked body copyChunked accepts decodes, with
// net/http's chunked reader, to what copyChunked decodes.
func FuzzCopyChunked(f *testing.F) {
	f.Add([]byte("2\r\nok\r\n0\r\n\r\n"))
	f.Add([]byte("3;e=1\r\nabc\r\n0\r\nX-T: v\r\n\r\n"))
	f.Add([]byte("0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var raw, data bytes.Buffer
		rw, dw := bufio.NewWriter(&raw), bufio.NewWriter(&data)
		if copyChunked(rw, bufio.NewReader(bytes.NewReader(body)), true) != nil {
			return
		}
		if err := copyChunked(dw, bufio.NewReader(bytes.NewReader(body)), false); err != nil {
			t.Fatalf("%q: raw copy accepted, decoding failed: %v", body, err)
		}
		rw.Flush()
		dw.Flush()
		if !bytes.HasPrefix(body, raw.Bytes()) {
			t.Fatalf("%q: raw copy %q is not the body's prefix", body, raw.Bytes())
		}
		want, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(raw.Bytes())))
		if err != nil {
			t.Fatalf("%q: net/http rejects a chunked body copyChunked takes: %v", raw.Bytes(), err)
		}
		if !bytes.Equal(want, data.Bytes()) {
			t.Fatalf("%q: decoded %q, net/http %q", raw.Bytes(), data.Bytes(), want)
		}
	})
}

// TestFastPathBodyOverwritesHead: reading a body larger than the client
// buffer overwrites the head's bytes there; the answer must still be
// framed by the request's method (here the body's bytes, where the method
// was, spell HEAD: a stale read would drop the answer's body).
func TestFastPathBodyOverwritesHead(t *testing.T) {
	b := newRawBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	e := fastEdge(t, ", retries: 0", b.addr())
	head := "POST /abc HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 1024\r\n\r\n"
	for len(head)%4 != 0 { // the body's "HEAD"s land where the method was
		head = strings.Replace(head, "/abc", "/abc/", 1)
	}
	body := strings.Repeat("HEAD", 256)
	cc, sc := net.Pipe()
	fr := &FastRequest{Conn: sc, Client: bufio.NewReaderSize(sc, 256), Out: bufio.NewWriter(sc),
		Remote: netip.MustParseAddrPort("192.0.2.7:4000"), Local: netip.MustParseAddrPort("127.0.0.1:80")}
	go func() {
		defer sc.Close()
		for {
			buf, _ := fr.Client.Peek(fr.Client.Buffered())
			n, v, err := h1.Parse(buf, &fr.Head)
			if err == nil && v == h1.Fast {
				fr.HeadLen = n
				e.proxy.ServeFast(fr)
				return
			}
			if err == nil || len(buf) == fr.Client.Size() {
				t.Errorf("head not taken: %v %v", v, err)
				return
			}
			if _, err := fr.Client.Peek(len(buf) + 1); err != nil {
				return
			}
		}
	}()
	go io.WriteString(cc, head+body)
	cc.SetDeadline(time.Now().Add(10 * time.Second))
	out, _ := io.ReadAll(cc)
	if want := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"; string(out) != want {
		t.Errorf("client got %q, want %q", out, want)
	}
	if got := <-b.heads; !strings.HasPrefix(got, "POST ") {
		t.Errorf("backend got %q", got)
	}
}
