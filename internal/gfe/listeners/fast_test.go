package listeners

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gfe/httpproxy"
	"github.com/spillway-lb/spillway/internal/gfe/poller"
	"github.com/spillway-lb/spillway/internal/testkit"
)

// fakeFast answers every request it gets with 200 "fast", after waiting
// on hold (if set) and recording the target.
type fakeFast struct {
	served atomic.Int64
	hold   chan struct{}
	began  chan struct{}
	// cur is the request being served, for the sweep's tests; a request
	// whose client left (FastRequest.Leave) gets no answer.
	cur atomic.Pointer[httpproxy.FastRequest]
	// polled says the last request's connection reads through the
	// fast path's poller (poller.Conn).
	polled atomic.Bool
}

func (f *fakeFast) ServeFast(fr *httpproxy.FastRequest) bool {
	f.served.Add(1)
	f.cur.Store(fr)
	_, polled := fr.Conn.(*poller.Conn)
	f.polled.Store(polled)
	if f.began != nil {
		f.began <- struct{}{}
	}
	if f.hold != nil {
		<-f.hold
	}
	if fr.Left() {
		return false
	}
	keep := !fr.Head.Close
	fr.Client.Discard(fr.HeadLen)
	if cl := fr.Head.ContentLength; cl > 0 {
		if _, err := fr.Client.Discard(int(cl)); err != nil {
			return false // the body did not come: no answer
		}
	}
	fmt.Fprintf(fr.Out, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Target: %s\r\n\r\nfast", fr.Head.Target)
	return fr.Out.Flush() == nil && keep
}

// fastManager starts a Manager whose --listen listener is l (fast_path),
// with a net/http handler answering "slow" and fast for the fast path.
func fastManager(t *testing.T, fast *fakeFast, l config.Listener) (*Manager, string) {
	t.Helper()
	return fastManagerClock(t, fast, l, nil)
}

// fastManagerClock is fastManager on clock clk (nil: the real one).
func fastManagerClock(t *testing.T, fast *fakeFast, l config.Listener, clk clock.Clock) (*Manager, string) {
	t.Helper()
	return startManager(t, l, Options{Fast: fast, Clock: clk})
}

// startManager starts a Manager with opts (Options.HTTP, when unset, is a
// handler answering "slow") whose --listen listener is l, on a free port
// of 127.0.0.1, and returns it and the listener's address.
func startManager(t *testing.T, l config.Listener, opts Options) (*Manager, string) {
	t.Helper()
	if opts.HTTP == nil {
		opts.HTTP = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Proto", r.Proto)
			if r.TLS != nil {
				w.Header().Set("X-TLS", "yes")
			}
			io.WriteString(w, "slow")
		})
	}
	// A free port of our own: a configured listener takes the --listen
	// socket over only at the port --listen names.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	m, err := New(Config{Listen: fmt.Sprintf("127.0.0.1:%d", port), DrainTimeout: 5 * time.Second, CertCheckInterval: time.Hour, FastPath: true}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	addr := m.DefaultAddr().String()
	l.Name, l.Port = "web", m.DefaultAddr().(*net.TCPAddr).Port
	if err := m.Apply([]config.Listener{l}); err != nil {
		t.Fatal(err)
	}
	return m, addr
}

func fastListener() config.Listener {
	l := config.DefaultListener(config.ListenerHTTP)
	l.FastPath = true // the default; explicit for the tests' sake
	return l
}

// roundTrip writes raw on c and reads one response.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) (*http.Response, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	for err == nil && resp.StatusCode < 200 {
		resp, err = http.ReadResponse(br, nil) // after a 100 Continue
	}
	if err != nil {
		t.Fatalf("after %q: %v", raw, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// TestFastPathSplit: plain requests go to the fast path and stay there
// over keep-alive; a later request it does not take hands the connection,
// bytes replayed, to net/http, which keeps it.
func TestFastPathSplit(t *testing.T) {
	fast := &fakeFast{}
	_, addr := fastManager(t, fast, fastListener())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 3 {
		_, body := roundTrip(t, c, br, fmt.Sprintf("GET /f%d HTTP/1.1\r\nHost: a\r\n\r\n", i))
		if body != "fast" {
			t.Fatalf("request %d: body %q, want the fast path's", i, body)
		}
		if !fast.polled.Load() {
			t.Fatalf("request %d: the connection does not read through the poller", i)
		}
	}
	// Chunked body: handed off, and the request after it too (net/http
	// owns the connection now; a Transfer-Encoding closes it after).
	resp, body := roundTrip(t, c, br, "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	if body != "slow" || resp.Header.Get("X-Proto") != "HTTP/1.1" {
		t.Errorf("chunked request: body %q, want net/http's", body)
	}
	if got := fast.served.Load(); got != 3 {
		t.Errorf("fast path served %d, want 3", got)
	}
}

// TestFastPathHandsOff: what the fast path does not take behaves as on
// net/http alone: h2c prior knowledge, an h2c upgrade, Expect, and the
// fast path's own answers for malformed and oversized heads.
func TestFastPathHandsOff(t *testing.T) {
	fast := &fakeFast{}
	l := fastListener()
	l.MaxHeaderBytes = 1024
	l.MaxRequestBodyBytes = 10
	_, addr := fastManager(t, fast, l)

	t.Run("h2c prior knowledge", func(t *testing.T) {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || string(body) != "slow" {
			t.Errorf("proto %s body %q, want HTTP/2 from net/http", resp.Proto, body)
		}
	})
	tests := []struct {
		name, raw  string
		wantStatus int
		wantBody   string
	}{
		{"expect", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", 200, "slow"},
		{"websocket upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 200, "slow"},
		{"te with cl", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", 400, "400 Bad Request"},
		{"bare lf", "GET / HTTP/1.1\nHost: a\n\n", 400, "400 Bad Request"},
		{"head too large", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("x", 6000) + "\r\n\r\n", 431, "431 Request Header Fields Too Large"},
		{"body too large", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world", 413, "request body too large\n"},
		{"plain", "GET /p HTTP/1.1\r\nHost: a\r\n\r\n", 200, "fast"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			resp, body := roundTrip(t, c, bufio.NewReader(c), tc.raw)
			if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
}

// TestFastPathReadHeaderTimeout: a client that sends half a head is
// closed at read_header_timeout.
func TestFastPathReadHeaderTimeout(t *testing.T) {
	l := fastListener()
	l.ReadHeaderTimeout = 100 * time.Millisecond
	_, addr := fastManager(t, &fakeFast{}, l)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost:")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil {
		t.Fatalf("read %d bytes, err %v; want the connection closed", n, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection still open after 10 s; want it closed at read_header_timeout")
	}
}

// TestFastPathDeadlines: the client connection's read deadlines, which
// the fast path moves only when it must (idle_timeout at most idleSlack
// late, read_header_timeout only once a head must wait for more bytes, none
// while a body is read), still bound what they bound on net/http.
func TestFastPathDeadlines(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	// closedWithin fails unless the gfe closes c at least least after t0,
	// and well before the test's own 10 s deadline.
	closedWithin := func(t *testing.T, c net.Conn, br *bufio.Reader, t0 time.Time, least time.Duration) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := br.Read(make([]byte, 1))
		lived := time.Since(t0)
		if n != 0 || err == nil || os.IsTimeout(err) {
			t.Fatalf("read %d bytes, err %v after %v; want the connection closed", n, err, lived)
		}
		if lived < least || lived > least+3*time.Second {
			t.Errorf("closed after %v, want %v to %v", lived, least, least+3*time.Second)
		}
	}
	for _, tc := range []struct {
		name string
		l    func(*config.Listener)
		run  func(t *testing.T, c net.Conn, br *bufio.Reader)
	}{
		{"idle connection closed at idle_timeout", func(l *config.Listener) { l.IdleTimeout = 200 * time.Millisecond },
			func(t *testing.T, c net.Conn, br *bufio.Reader) {
				t0 := time.Now() // before the gfe's idle wait begins
				roundTrip(t, c, br, get)
				closedWithin(t, c, br, t0, 200*time.Millisecond)
			}},
		{"busy connection outlives idle_timeout", func(l *config.Listener) { l.IdleTimeout = 500 * time.Millisecond },
			func(t *testing.T, c net.Conn, br *bufio.Reader) {
				for i := range 20 { // 1 s and more in all, 50 ms apart
					if _, body := roundTrip(t, c, br, get); body != "fast" {
						t.Fatalf("request %d: body %q", i, body)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}},
		{"later head bounded by read_header_timeout", func(l *config.Listener) {
			l.IdleTimeout, l.ReadHeaderTimeout = 5*time.Second, 100*time.Millisecond
		}, func(t *testing.T, c net.Conn, br *bufio.Reader) {
			roundTrip(t, c, br, get)
			t0 := time.Now()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost:")
			closedWithin(t, c, br, t0, 100*time.Millisecond)
		}},
		{"pipelined head bounded by read_header_timeout", func(l *config.Listener) {
			l.IdleTimeout, l.ReadHeaderTimeout = 5*time.Second, 100*time.Millisecond
		}, func(t *testing.T, c net.Conn, br *bufio.Reader) {
			t0 := time.Now()
			if _, body := roundTrip(t, c, br, get+"GET / HTTP/1.1\r\nHost:"); body != "fast" {
				t.Fatalf("first request: body %q", body)
			}
			closedWithin(t, c, br, t0, 100*time.Millisecond)
		}},
		{"body longer than idle_timeout", func(l *config.Listener) { l.IdleTimeout = 200 * time.Millisecond },
			func(t *testing.T, c net.Conn, br *bufio.Reader) {
				roundTrip(t, c, br, get)
				io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n")
				for range 9 { // 450 ms in all, each pause far below request_body_timeout
					time.Sleep(50 * time.Millisecond)
					io.WriteString(c, "x")
				}
				if _, body := roundTrip(t, c, br, "x"); body != "fast" {
					t.Fatalf("body request: body %q", body)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := fastListener()
			tc.l(&l)
			_, addr := fastManager(t, &fakeFast{}, l)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc.run(t, c, bufio.NewReader(c))
		})
	}
}

// TestFastPathSweep: a request served for a whole sweep interval or more
// whose client closed its connection is told so (FastRequest.Leave); one
// whose client is still there, bytes of its next request waiting or not,
// is not. The sweep's rounds are called directly (its ticker is on a fake
// clock that never moves); the sockets are real.
func TestFastPathSweep(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, tc := range []struct {
		name string
		send string // what the client sends
		gone bool   // the client closes its connection once served
	}{
		{"client closed", get, true},
		{"client waits", get, false},
		{"next request waiting", get + "GET /next HTTP/1.1\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fast := &fakeFast{began: make(chan struct{}, 1), hold: make(chan struct{})}
			l := fastListener()
			m, addr := fastManagerClock(t, fast, l, clock.NewFake(time.Now()))
			release := sync.OnceFunc(func() { close(fast.hold) })
			t.Cleanup(release) // before the manager's shutdown, even after a failure
			port := m.DefaultAddr().(*net.TCPAddr).Port
			m.mu.Lock()
			p := m.ports[port]
			if p == nil {
				p = m.ports[m.defPort] // the listener took the default one over
			}
			m.mu.Unlock()
			fs := p.cur.Load().fast
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.send)
			<-fast.began
			fr := fast.cur.Load()
			if tc.gone {
				c.Close()
			}
			fs.sweepOnce() // the request has not been served a whole interval yet
			if fr.Left() {
				t.Fatal("left after one sweep round; want a whole interval served first")
			}
			deadline := time.Now().Add(10 * time.Second)
			for range 3 {
				fs.sweepOnce()
			}
			for tc.gone && !fr.Left() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // the close may take a moment to reach the socket
				fs.sweepOnce()
			}
			if fr.Left() != tc.gone {
				t.Errorf("Left() = %v, want %v", fr.Left(), tc.gone)
			}
			release()
			if tc.gone {
				return
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("answer: %v, %v", resp, err)
			}
		})
	}
}

// TestFastPathSettingsChange: a request in flight on the fast path when
// the listener's settings change finishes on its connection; idle
// connections of the old generation are closed (as net/http's Shutdown
// does), and new connections go to the new generation.
func TestFastPathSettingsChange(t *testing.T) {
	fast := &fakeFast{hold: make(chan struct{}), began: make(chan struct{}, 1)}
	l := fastListener()
	m, addr := fastManager(t, fast, l)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /inflight HTTP/1.1\r\nHost: a\r\n\r\n")
	<-fast.began
	l.IdleTimeout = 30 * time.Second // a new generation
	l.Name, l.Port = "web", m.DefaultAddr().(*net.TCPAddr).Port
	if err := m.Apply([]config.Listener{l}); err != nil {
		t.Fatal(err)
	}
	close(fast.hold)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("in-flight request cut by the settings change: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "fast" {
		t.Errorf("in-flight request: %d %q", resp.StatusCode, body)
	}
	fast.began = nil
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, body := roundTrip(t, c2, bufio.NewReader(c2), "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); body != "fast" {
		t.Errorf("new connection after the change: %q", body)
	}
}

// TestFastPathDisabled: without fast_path every request goes to net/http.
func TestFastPathDisabled(t *testing.T) {
	fast := &fakeFast{}
	l := config.DefaultListener(config.ListenerHTTP)
	l.FastPath = false
	_, addr := fastManager(t, fast, l)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, body := roundTrip(t, c, bufio.NewReader(c), "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); body != "slow" || fast.served.Load() != 0 {
		t.Errorf("body %q, fast path served %d; want net/http alone", body, fast.served.Load())
	}
}

// TestFastPathHTTPS: an https listener with fast_path handshakes itself:
// HTTP/1.1 (ALPN http/1.1 or none) goes to the fast path, ALPN h2 to
// net/http, and an HTTP/1.1 request handed off over TLS reaches net/http's
// handler with its TLS state.
func TestFastPathHTTPS(t *testing.T) {
	ca := testkit.NewCA(t)
	l := fastListener()
	l.Protocol = config.ListenerHTTPS
	l.Certificates = []config.Certificate{gfetest.IssueCert(t, ca, t.TempDir(), "a", 10, "a.test", "a.test")}
	fast := &fakeFast{}
	_, addr := fastManager(t, fast, l)
	dial := func(alpn ...string) (*tls.Conn, *bufio.Reader) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "a.test", NextProtos: alpn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	for _, alpn := range [][]string{nil, {"http/1.1"}} {
		c, br := dial(alpn...)
		if _, body := roundTrip(t, c, br, "GET /t HTTP/1.1\r\nHost: a.test\r\n\r\n"); body != "fast" {
			t.Errorf("ALPN %v: body %q, want the fast path's", alpn, body)
		}
		if fast.polled.Load() {
			t.Errorf("ALPN %v: a TLS connection reads through the poller; its records buffer in tls.Conn", alpn)
		}
	}
	c, br := dial("http/1.1")
	resp, body := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if body != "slow" || resp.Header.Get("X-TLS") != "yes" {
		t.Errorf("handed off over TLS: body %q, X-TLS %q; want net/http's with r.TLS set", body, resp.Header.Get("X-TLS"))
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "a.test"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	r2, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.ProtoMajor != 2 || string(b2) != "slow" || r2.Header.Get("X-TLS") != "yes" {
		t.Errorf("h2: %s %q X-TLS %q, want HTTP/2 from net/http over TLS", r2.Proto, b2, r2.Header.Get("X-TLS"))
	}
	if got := fast.served.Load(); got != 2 {
		t.Errorf("fast path served %d, want 2", got)
	}
}

// TestFastPathIdleHoldsNoBuffers: a cleartext fast-path connection waiting
// for its next request (and one waiting for its first) holds no
// FastRequest — its request buffers are the pool's meanwhile — and is
// served again when its bytes come.
func TestFastPathIdleHoldsNoBuffers(t *testing.T) {
	fast := &fakeFast{}
	m, addr := fastManager(t, fast, fastListener())
	// without counts the server's connections holding no FastRequest.
	without := func() int {
		s := currentFast(m)
		if s == nil {
			return -1
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for fc := range s.conns {
			if fc.fr == nil {
				n++
			}
		}
		return n
	}
	const n = 20
	var cs []net.Conn
	var brs []*bufio.Reader
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs, brs = append(cs, c), append(brs, bufio.NewReader(c))
	}
	waitFor(t, "new connections waiting without buffers", func() bool { return without() == n })
	for i, c := range cs {
		if _, body := roundTrip(t, c, brs[i], "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); body != "fast" {
			t.Fatalf("body %q, want fast", body)
		}
	}
	waitFor(t, "idle connections waiting without buffers", func() bool { return without() == n })
	for i, c := range cs {
		if _, body := roundTrip(t, c, brs[i], "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"); body != "fast" {
			t.Fatalf("second request: body %q, want fast", body)
		}
	}
	if got := fast.served.Load(); got != 2*n {
		t.Errorf("%d requests served, want %d", got, 2*n)
	}
}
