package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// lnTestTimeout bounds every blocking wait of the listener tests; it is a
// guard against hangs, never a delay the tests rely on.
const lnTestTimeout = 10 * time.Second

// waitUntil polls cond until it holds, failing t after lnTestTimeout.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(lnTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, not a delay the test relies on
	}
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// httpBackend is an instance for the listener tests: HTTP/1.1 and h2c. It
// answers with X-Backend (its name) and X-Proto (the protocol it was
// reached with); /body answers the length of the body it read; /slow
// answers after release is closed; /ws upgrades to an echo tunnel.
type httpBackend struct {
	name    string
	srv     *httptest.Server
	release chan struct{}
	slowIn  atomic.Int64 // requests waiting in /slow
	tunnels atomic.Int64 // open /ws tunnels
}

func newHTTPBackend(t *testing.T, name string) *httpBackend {
	t.Helper()
	b := &httpBackend{name: name, release: make(chan struct{})}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	b.srv.Config.Protocols = new(http.Protocols)
	b.srv.Config.Protocols.SetHTTP1(true)
	b.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	b.srv.Start()
	t.Cleanup(func() {
		b.srv.CloseClientConnections()
		b.srv.Close()
	})
	return b
}

func (b *httpBackend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

func (b *httpBackend) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Backend", b.name)
	w.Header().Set("X-Proto", r.Proto)
	switch r.URL.Path {
	case "/body":
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	case "/slow":
		b.slowIn.Add(1)
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
		b.slowIn.Add(-1)
		fmt.Fprint(w, "slow done")
	case "/ws":
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		b.tunnels.Add(1)
		defer b.tunnels.Add(-1)
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Backend: " + b.name + "\r\n\r\n")
		rw.Flush()
		io.Copy(c, rw)
	default:
		fmt.Fprint(w, "ok")
	}
}

// edgeConfig renders a config with one service "web" (round robin) over
// backends and the given listeners block (YAML, may be empty).
func edgeConfig(t testing.TB, backends []string, listeners string) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("regions:\n  - name: us-east\n    zones:\n      - name: us-east-b\n        groups:\n          - name: east\n            instances:\n")
	for _, a := range backends {
		fmt.Fprintf(&b, "              - address: %s\n", a)
	}
	b.WriteString(`services:
  - name: web
    policy: round_robin
    backends:
      - {group: east, max_rate_per_instance: 100000}
routes:
  - {host: "*", path_prefix: /, service: web}
`)
	b.WriteString(listeners)
	c, err := config.Parse([]byte(b.String()), "test.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, b.String())
	}
	return c
}

// runningEdge is an Edge serving in the background.
type runningEdge struct {
	*Edge
	cancel context.CancelFunc
	done   chan error
}

// startEdge runs a gfe on 127.0.0.1 with cfg applied and waits until it
// has a routing table. It is stopped when the test ends.
func startEdge(t *testing.T, c *config.Config, drain time.Duration) *runningEdge {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DrainTimeout = drain
	g := &fakeGossip{node: cfg.Node, states: map[string]gossip.NodeState{}}
	e, err := New(cfg, Options{Gossip: g, Clock: clock.NewFake(time.Unix(1_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ApplySnapshot(ControlState{Version: "v1", Config: c}); err != nil {
		t.Fatalf("ApplySnapshot: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	re := &runningEdge{Edge: e, cancel: cancel, done: make(chan error, 1)}
	go func() { re.done <- e.Run(ctx) }()
	t.Cleanup(func() { re.stop(t) })
	waitUntil(t, "the gfe to listen and plan", func() bool { return e.ListenAddr() != nil && e.table.Load() != nil })
	return re
}

// stop cancels Run and returns its error.
func (re *runningEdge) stop(t *testing.T) error {
	t.Helper()
	re.cancel()
	select {
	case err, ok := <-re.done:
		if ok {
			close(re.done)
		}
		return err
	case <-time.After(lnTestTimeout):
		t.Fatal("Run did not return")
		return nil
	}
}

// dialCounter counts the connections a client transport opens and records
// the serial of the certificate each TLS connection was served.
type dialCounter struct {
	dials   atomic.Int64
	mu      sync.Mutex
	serials []int64
}

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.dials.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// h2cClient returns a client speaking HTTP/2 with prior knowledge.
func h2cClient(d *dialCounter) *http.Client {
	tr := &http.Transport{DialContext: d.dial, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: lnTestTimeout}
}

// tlsClient returns an HTTP/2-only client over TLS that trusts ca and
// sends serverName as SNI.
func tlsClient(d *dialCounter, ca *testCA, serverName string) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(c, &tls.Config{RootCAs: ca.pool, ServerName: serverName, NextProtos: []string{"h2"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		d.mu.Lock()
		d.serials = append(d.serials, tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64())
		d.mu.Unlock()
		return tc, nil
	}
	return &http.Client{Transport: tr, Timeout: lnTestTimeout}
}

// get sends a GET and returns the status, the response's protocol and its
// X-Backend header.
func get(t *testing.T, c *http.Client, url string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Proto, resp.Header.Get("X-Backend")
}

// handshake makes one TLS handshake with addr and returns the served
// certificate's serial and the negotiated protocol.
func handshake(t *testing.T, addr string, ca *testCA, sni string) (int64, string) {
	t.Helper()
	// The chain is checked against ca; the name is the caller's to check
	// (an unknown SNI gets the default certificate, which does not name it).
	cfg := &tls.Config{
		ServerName:         sni,
		NextProtos:         []string{"h2", "http/1.1"},
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			opts := x509.VerifyOptions{Roots: ca.pool, Intermediates: x509.NewCertPool()}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS handshake with %s (SNI %q): %v", addr, sni, err)
	}
	defer c.Close()
	st := c.ConnectionState()
	return st.PeerCertificates[0].SerialNumber.Int64(), st.NegotiatedProtocol
}

// rawRequest sends raw on a new connection to addr and returns the status
// code of the answer (0 when the connection closed without one).
func rawRequest(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	go io.WriteString(c, raw) // the server may answer before reading it all
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestListenersHTTP checks an http listener: HTTP/1.1 and h2c, header and
// body limits, and slow clients.
func TestListenersHTTP(t *testing.T) {
	b1, b2 := newHTTPBackend(t, "b1"), newHTTPBackend(t, "b2")
	port := freePort(t)
	c := edgeConfig(t, []string{b1.addr(), b2.addr()}, fmt.Sprintf(`listeners:
  - name: plain
    protocol: http
    port: %d
    read_header_timeout: 300ms
    max_header_bytes: 4096
    max_request_body_bytes: 1024
`, port))
	e := startEdge(t, c, 5*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	url := "http://" + addr

	t.Run("h2c", func(t *testing.T) {
		var d dialCounter
		cl := h2cClient(&d)
		backends := map[string]int{}
		for range 20 {
			code, proto, be := get(t, cl, url+"/")
			if code != 200 || proto != "HTTP/2.0" {
				t.Fatalf("GET = %d %s, want 200 HTTP/2.0", code, proto)
			}
			backends[be]++
		}
		if n := d.dials.Load(); n != 1 {
			t.Errorf("20 h2c requests opened %d connections, want 1", n)
		}
		// Requests are balanced one by one, on one client connection.
		if backends["b1"] != 10 || backends["b2"] != 10 {
			t.Errorf("backends = %v, want 10 each (round robin per request)", backends)
		}
	})

	t.Run("default listener", func(t *testing.T) {
		var d dialCounter
		code, proto, _ := get(t, h2cClient(&d), "http://"+e.ListenAddr().String()+"/")
		if code != 200 || proto != "HTTP/2.0" {
			t.Errorf("GET on --listen = %d %s, want 200 HTTP/2.0", code, proto)
		}
	})

	t.Run("header limit", func(t *testing.T) {
		small := "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 2000) + "\r\n\r\n"
		if code := rawRequest(t, addr, small); code != 200 {
			t.Errorf("2 KB of headers: status %d, want 200", code)
		}
		big := "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 16<<10) + "\r\n\r\n"
		if code := rawRequest(t, addr, big); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("16 KB of headers over HTTP/1.1: status %d, want 431", code)
		}
		// Go's HTTP/2 client refuses to send more than the server
		// advertises, so the h2c request is written frame by frame. (One
		// field longer than the whole limit is a connection error in
		// HPACK decoding, and so is a header block more than twice the
		// limit; a list of fields over it gets 431.)
		if code := rawH2CStatus(t, addr, 2); code != 200 {
			t.Errorf("2 KB of headers over h2c: status %d, want 200", code)
		}
		if code := rawH2CStatus(t, addr, 6); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("6 KB of headers over h2c: status %d, want 431", code)
		}
	})

	t.Run("body limit", func(t *testing.T) {
		tests := []struct {
			name     string
			n        int
			chunked  bool
			wantCode int
			wantBody string
		}{
			{"under", 1000, false, 200, "1000"},
			{"at", 1024, false, 200, "1024"},
			{"declared over", 1025, false, 413, ""},
			{"chunked under", 1000, true, 200, "1000"},
			{"chunked over", 4096, true, 413, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var body io.Reader = strings.NewReader(strings.Repeat("x", tt.n))
				if tt.chunked {
					body = io.MultiReader(body) // unknown length: sent chunked
				}
				req, _ := http.NewRequest(http.MethodPost, url+"/body", body)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("POST: %v", err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.wantCode || (tt.wantBody != "" && string(got) != tt.wantBody) {
					t.Errorf("POST %d bytes = %d %q, want %d %q", tt.n, resp.StatusCode, got, tt.wantCode, tt.wantBody)
				}
			})
		}
	})

	t.Run("slowloris", func(t *testing.T) {
		// 100 clients send a request's headers a byte at a time; each is
		// cut off once read_header_timeout (300ms) has passed, and a normal
		// client is served quickly meanwhile.
		const slow = 100
		type result struct {
			lived time.Duration
			got   string
		}
		results := make(chan result, slow)
		var wg sync.WaitGroup
		for range slow {
			wg.Go(func() {
				t0 := time.Now()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					results <- result{got: err.Error()}
					return
				}
				defer c.Close()
				c.SetDeadline(t0.Add(lnTestTimeout))
				go func() {
					for _, ch := range []byte("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 200)) {
						if _, err := c.Write([]byte{ch}); err != nil {
							return
						}
						time.Sleep(20 * time.Millisecond) // the slow client's pace
					}
				}()
				buf, _ := io.ReadAll(c) // until the gfe closes the connection
				results <- result{lived: time.Since(t0), got: string(buf)}
			})
		}
		var worst time.Duration
		for range 50 {
			t0 := time.Now()
			code, _, _ := get(t, http.DefaultClient, url+"/")
			worst = max(worst, time.Since(t0))
			if code != 200 {
				t.Fatalf("normal client during slowloris: status %d", code)
			}
		}
		wg.Wait()
		close(results)
		var minLived, maxLived time.Duration = time.Hour, 0
		answered := 0
		for r := range results {
			// net/http closes a connection whose headers are late without an
			// answer, or with a 400 when the timeout hit while it was
			// looking for the h2c preface (the first 14 bytes).
			switch {
			case r.got == "":
			case strings.HasPrefix(r.got, "HTTP/1.1 400 "):
				answered++
			default:
				t.Errorf("slow client got %q, want the connection closed, at most with a 400", r.got)
			}
			minLived, maxLived = min(minLived, r.lived), max(maxLived, r.lived)
		}
		t.Logf("%d slow connections closed after %v..%v (%d with a 400); normal client's slowest request %v", slow, minLived, maxLived, answered, worst)
		if minLived < 250*time.Millisecond || maxLived > 2*time.Second {
			t.Errorf("slow connections closed after %v..%v, want about read_header_timeout (300ms)", minLived, maxLived)
		}
		if worst > 250*time.Millisecond {
			t.Errorf("normal client's slowest request took %v during slowloris, want < 250ms", worst)
		}
	})
}

// TestListenersHTTPS checks an https listener: the certificate by SNI, ALPN
// h2, a certificate reload that keeps the open connection, and a snapshot
// with an unreadable certificate rejected.
func TestListenersHTTPS(t *testing.T) {
	b1 := newHTTPBackend(t, "b1")
	ca := newTestCA(t)
	dir := t.TempDir()
	certA := ca.issue(t, dir, "a", 100, "a.test", "a.test")
	certB := ca.issue(t, dir, "b", 200, "b.test", "b.test", "*.b.test")
	port := freePort(t)
	listeners := func(a, b config.Certificate) string {
		return fmt.Sprintf(`listeners:
  - name: public
    protocol: https
    port: %d
    certificates:
      - {cert_file: %q, key_file: %q}
      - {cert_file: %q, key_file: %q}
`, port, a.CertFile, a.KeyFile, b.CertFile, b.KeyFile)
	}
	e := startEdge(t, edgeConfig(t, []string{b1.addr()}, listeners(certA, certB)), 5*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	t.Run("sni", func(t *testing.T) {
		tests := []struct {
			sni        string
			wantSerial int64
		}{
			{"a.test", 100},
			{"b.test", 200},
			{"x.b.test", 200},
			{"other.test", 100}, // unknown: the default (first) certificate
			{"", 100},           // no SNI: the default
		}
		for _, tt := range tests {
			serial, proto := handshake(t, addr, ca, tt.sni)
			if serial != tt.wantSerial || proto != "h2" {
				t.Errorf("SNI %q: served serial %d with ALPN %q, want %d and h2", tt.sni, serial, proto, tt.wantSerial)
			}
		}
	})

	t.Run("reload keeps connections", func(t *testing.T) {
		var d dialCounter
		cl := tlsClient(&d, ca, "a.test")
		for range 5 {
			if code, proto, be := get(t, cl, "https://"+addr+"/"); code != 200 || proto != "HTTP/2.0" || be != "b1" {
				t.Fatalf("GET = %d %s from %q, want 200 HTTP/2.0 from b1", code, proto, be)
			}
		}
		ca.issue(t, dir, "a", 101, "a.test", "a.test")
		e.listeners.tick()
		if serial, _ := handshake(t, addr, ca, "a.test"); serial != 101 {
			t.Fatalf("after the reload a.test is served serial %d, want 101", serial)
		}
		for range 5 {
			if code, _, _ := get(t, cl, "https://"+addr+"/"); code != 200 {
				t.Fatalf("GET on the connection opened before the reload = %d", code)
			}
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.dials.Load() != 1 || len(d.serials) != 1 || d.serials[0] != 100 {
			t.Errorf("client opened %d connections with serials %v, want 1 connection with the old certificate 100", d.dials.Load(), d.serials)
		}
	})

	t.Run("bad certificate", func(t *testing.T) {
		bad := config.Certificate{CertFile: dir + "/missing.crt", KeyFile: certB.KeyFile}
		err := e.ApplySnapshot(ControlState{Version: "v2", Config: edgeConfig(t, []string{b1.addr()}, listeners(certA, bad))})
		if err == nil || !strings.Contains(err.Error(), "listeners[0].certificates[1]: cert_file") {
			t.Fatalf("ApplySnapshot with a missing certificate = %v, want an error naming listeners[0].certificates[1]", err)
		}
		if v := e.control.Load().Version; v != "v1" {
			t.Errorf("control state version %q after a rejected snapshot, want v1", v)
		}
		// A file that turns bad later is logged; the loaded certificate stays.
		writeAtomic(t, certB.CertFile, []byte("garbage"))
		e.listeners.tick()
		if serial, _ := handshake(t, addr, ca, "b.test"); serial != 200 {
			t.Errorf("after certificate b turned bad, b.test is served serial %d, want the previous 200", serial)
		}
	})
}

// TestListenersReconcile checks listener changes at runtime: new settings
// keep the socket and its in-flight requests, removal refuses new
// connections, and re-adding serves again.
func TestListenersReconcile(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	port := freePort(t)
	withLimit := func(maxHeader int) *config.Config {
		return edgeConfig(t, []string{b.addr()}, fmt.Sprintf(`listeners:
  - name: plain
    protocol: http
    port: %d
    max_header_bytes: %d
`, port, maxHeader))
	}
	e := startEdge(t, withLimit(65536), 5*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	headers := "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 12<<10) + "\r\n\r\n"
	if code := rawRequest(t, addr, headers); code != 200 {
		t.Fatalf("12 KB of headers under a 64 KB limit: %d, want 200", code)
	}

	// A request in flight while the settings change finishes.
	slow := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	waitUntil(t, "the slow request to reach the backend", func() bool { return b.slowIn.Load() == 1 })
	if err := e.ApplySnapshot(ControlState{Version: "v2", Config: withLimit(1024)}); err != nil {
		t.Fatal(err)
	}
	if code := rawRequest(t, addr, headers); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("12 KB of headers after the limit became 1 KB: %d, want 431", code)
	}
	close(b.release)
	if code := <-slow; code != 200 {
		t.Errorf("request in flight across the settings change: status %d, want 200", code)
	}

	// Removed: refused. Added back: served.
	if err := e.ApplySnapshot(ControlState{Version: "v3", Config: edgeConfig(t, []string{b.addr()}, "")}); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after the listener was removed: %v, want connection refused", err)
	}
	if err := e.ApplySnapshot(ControlState{Version: "v4", Config: withLimit(65536)}); err != nil {
		t.Fatal(err)
	}
	if code := rawRequest(t, addr, headers); code != 200 {
		t.Errorf("after re-adding the listener: %d, want 200", code)
	}
}

// TestDrain checks shutdown: an in-flight request completes, new
// connections are refused, and Run returns nil.
func TestDrain(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	e := startEdge(t, edgeConfig(t, []string{b.addr()}, ""), 5*time.Second)
	addr := e.ListenAddr().String()
	const n = 10
	codes := make(chan int, n)
	for range n {
		go func() {
			resp, err := http.Get("http://" + addr + "/slow")
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	waitUntil(t, "the requests to reach the backend", func() bool { return b.slowIn.Load() == n })
	e.cancel()
	waitUntil(t, "the gfe to stop accepting", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	if e.Ready() {
		t.Error("Ready() during the drain = true, want false")
	}
	close(b.release)
	ok := 0
	for range n {
		if <-codes == 200 {
			ok++
		}
	}
	if ok != n {
		t.Errorf("%d of %d in-flight requests completed with 200 during the drain", ok, n)
	}
	if err := e.stop(t); err != nil {
		t.Errorf("Run after a clean drain = %v, want nil", err)
	}
}

// TestDrainTimeout checks that a drain gives up after DrainTimeout.
func TestDrainTimeout(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	e := startEdge(t, edgeConfig(t, []string{b.addr()}, ""), 200*time.Millisecond)
	go http.Get("http://" + e.ListenAddr().String() + "/slow")
	waitUntil(t, "the request to reach the backend", func() bool { return b.slowIn.Load() == 1 })
	t0 := time.Now()
	err := e.stop(t)
	took := time.Since(t0)
	close(b.release)
	if err == nil || !strings.Contains(err.Error(), "drain timeout") {
		t.Errorf("Run with a request outliving the drain = %v, want a drain timeout error", err)
	}
	if took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("drain took %v, want about DrainTimeout (200ms)", took)
	}
}

// rawH2CStatus sends one h2c GET with kb header fields of 1000 bytes on a
// new connection, ignoring the server's advertised header list limit, and
// returns the response's status.
func rawH2CStatus(t *testing.T, addr string, kb int) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := range kb {
		enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: strings.Repeat("a", 1000), Sensitive: true})
	}
	// HEADERS then CONTINUATION frames of at most the default 16 KB.
	const maxFrame = 16 << 10
	b := block.Bytes()
	first := b[:min(len(b), maxFrame)]
	b = b[len(first):]
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true, EndHeaders: len(b) == 0})
	for len(b) > 0 {
		chunk := b[:min(len(b), maxFrame)]
		b = b[len(chunk):]
		fr.WriteContinuation(1, len(b) == 0, chunk)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the h2c answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					code, _ := strconv.Atoi(hf.Value)
					return code
				}
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("connection closed: %v", f.ErrCode)
		}
	}
}
