package gfe

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/testkit"
)

// TestListenersHTTP checks an http listener: HTTP/1.1 and h2c, header and
// body limits, and slow clients.
func TestListenersHTTP(t *testing.T) {
	b1, b2 := newHTTPBackend(t, "b1"), newHTTPBackend(t, "b2")
	port := freePort(t)
	c := edgeConfig(t, []string{b1.addr(), b2.addr()}, fmt.Sprintf(`listeners:
  - name: plain
    protocol: http
    port: %d
    read_header_timeout: 2s
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
		// cut off once read_header_timeout (2s) has passed, and a normal
		// client is served meanwhile: each of its requests takes less than
		// half the header timeout, where one that waited behind the slow
		// clients would take the whole of it. (The timeout is long so that
		// the two stay apart on a machine whose cores are busy.)
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
		if minLived < 1600*time.Millisecond || maxLived > 5*time.Second {
			t.Errorf("slow connections closed after %v..%v, want about read_header_timeout (2s)", minLived, maxLived)
		}
		if worst > time.Second {
			t.Errorf("normal client's slowest request took %v during slowloris, want < 1s (half the header timeout)", worst)
		}
	})
}

// TestListenersHTTPS checks an https listener: the certificate by SNI, ALPN
// h2, a certificate reload that keeps the open connection, and a snapshot
// with an unreadable certificate rejected.
func TestListenersHTTPS(t *testing.T) {
	b1 := newHTTPBackend(t, "b1")
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	certA := gfetest.IssueCert(t, ca, dir, "a", 100, "a.test", "a.test")
	certB := gfetest.IssueCert(t, ca, dir, "b", 200, "b.test", "b.test", "*.b.test")
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
			serial, proto := testkit.Handshake(t, addr, ca, tt.sni)
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
		gfetest.IssueCert(t, ca, dir, "a", 101, "a.test", "a.test")
		e.listeners.Check()
		if serial, _ := testkit.Handshake(t, addr, ca, "a.test"); serial != 101 {
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
		err := e.ApplySnapshot(snapshot.FromConfig("v2", edgeConfig(t, []string{b1.addr()}, listeners(certA, bad))))
		if err == nil || !strings.Contains(err.Error(), "listeners[0].certificates[1]: cert_file") {
			t.Fatalf("ApplySnapshot with a missing certificate = %v, want an error naming listeners[0].certificates[1]", err)
		}
		if v := e.control.Load().Version; v != "v1" {
			t.Errorf("snapshot version %q after a rejected snapshot, want v1", v)
		}
		// A file that turns bad later is logged; the loaded certificate stays.
		testkit.WriteFileAtomic(t, certB.CertFile, []byte("garbage"))
		e.listeners.Check()
		if serial, _ := testkit.Handshake(t, addr, ca, "b.test"); serial != 200 {
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
	if err := e.ApplySnapshot(snapshot.FromConfig("v2", withLimit(1024))); err != nil {
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
	if err := e.ApplySnapshot(snapshot.FromConfig("v3", edgeConfig(t, []string{b.addr()}, ""))); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after the listener was removed: %v, want connection refused", err)
	}
	if err := e.ApplySnapshot(snapshot.FromConfig("v4", withLimit(65536))); err != nil {
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

// TestDrainTimeout checks that a drain gives up after DrainTimeout: the
// request still in flight is cut (its client's connection closes, counted
// in spillway_gfe_drain_cut_connections_total) and Run returns nil — a
// held request bounds the stop, it does not make it fail.
func TestDrainTimeout(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	e := startEdge(t, edgeConfig(t, []string{b.addr()}, ""), 200*time.Millisecond)
	held := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + e.ListenAddr().String() + "/slow")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		held <- err
	}()
	waitUntil(t, "the request to reach the backend", func() bool { return b.slowIn.Load() == 1 })
	t0 := time.Now()
	err := e.stop(t)
	took := time.Since(t0)
	if err != nil {
		t.Errorf("Run with a request outliving the drain = %v, want nil (the request is cut)", err)
	}
	if took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("drain took %v, want about DrainTimeout (200ms)", took)
	}
	if err := <-held; err == nil {
		t.Error("the request held past the drain timeout completed, want its connection closed")
	}
	if n := e.counter(t, "spillway_gfe_drain_cut_connections_total"); n != 1 {
		t.Errorf("spillway_gfe_drain_cut_connections_total = %v, want 1", n)
	}
	close(b.release)
}
