package httpproxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
)

// strayClient sends one request (method, path) as a client of its own at
// address remote and returns its answer, read to the end.
type strayClient func(t *testing.T, method, path, remote string) (*http.Response, string)

// fastClient is a client of e's fast path: its own connection, served by
// serveFastConn.
func fastClient(e *testGFE) strayClient {
	return func(t *testing.T, method, path, remote string) (*http.Response, string) {
		t.Helper()
		cc, sc := net.Pipe()
		defer cc.Close()
		go serveFastConn(e.proxy, sc, netip.MustParseAddrPort(remote))
		return rawExchange(t, cc, method, path)
	}
}

// slowClient is a client of e's net/http path: its own TCP connection to
// an http.Server running the proxy.
func slowClient(t *testing.T, e *testGFE) strayClient {
	srv := httptest.NewServer(e.proxy)
	t.Cleanup(srv.Close)
	return func(t *testing.T, method, path, _ string) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return rawExchange(t, c, method, path)
	}
}

// rawExchange writes one request on c and reads its answer.
func rawExchange(t *testing.T, c net.Conn, method, path string) (*http.Response, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(securityTestTimeout))
	go io.WriteString(c, method+" "+path+" HTTP/1.1\r\nHost: gfe.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp, string(body)
}

// TestStrayBytesNeverReachAnotherClient: a backend that sends bytes after
// its answer that no request asked for — a body on a HEAD response or a
// 304, a body longer than its Content-Length, a second response — in the
// same segment or in a later one, once its connection is idle in the
// pool, never has them read as the answer to another client's request:
// that client gets its own answer, without the victim's Set-Cookie, over
// a new backend connection. On both paths; a well-behaved backend's
// connection is reused.
func TestStrayBytesNeverReachAnotherClient(t *testing.T) {
	for _, path := range []string{"fast", "net/http"} {
		for _, s := range gfetest.Strays() {
			t.Run(path+"/"+s.Name, func(t *testing.T) {
				b := gfetest.NewStrayBackend(t, "127.0.0.1", s)
				e := fastEdge(t, ", retries: 0", b.Addr)
				client := fastClient(e)
				if path == "net/http" {
					client = slowClient(t, e)
				}

				resp, body := client(t, s.Method, "/victim1", "192.0.2.1:40001")
				if resp.StatusCode/100 == 5 || !strings.Contains(resp.Header.Get("Set-Cookie"), gfetest.StrayCookie) {
					t.Fatalf("the victim's own answer: %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
				}
				if strings.Contains(body, "stray") {
					t.Errorf("the victim's answer carries the stray bytes: %q", body)
				}
				b.SendExtra(t) // in the gfe's socket from here on
				if path == "net/http" && s.Extra != "" {
					// net/http's Transport closes a connection on which
					// bytes arrive while it is idle, from its own
					// goroutine: wait for that, or the next request could
					// take the connection first (net/http's race).
					b.WaitVictimClosed(t)
				}

				resp, body = client(t, http.MethodGet, "/victim2", "198.51.100.2:40002")
				if resp.StatusCode != http.StatusOK || body != "/victim2" {
					t.Errorf("another client's request got %d %q, want its own answer 200 \"/victim2\"", resp.StatusCode, body)
				}
				if sc := resp.Header.Values("Set-Cookie"); len(sc) != 0 {
					t.Errorf("another client's request got Set-Cookie %q, want none (the victim's is %q)", sc, gfetest.StrayCookie)
				}
				want := int64(2) // the victim's connection closed, a new one
				if s.Extra == "" {
					want = 1 // reused
				}
				if got := b.Accepted(); got != want {
					t.Errorf("backend connections: %d, want %d", got, want)
				}
			})
		}
	}
}

// BenchmarkQuiet measures the reuse rule's per-request cost alone: quiet
// on an idle loopback connection (one recvfrom with MSG_PEEK).
func BenchmarkQuiet(b *testing.B) {
	c, _ := loopbackPair(b)
	bc := newBackendConn(c, nil)
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := bc.quiet(); !ok {
			b.Fatal("an idle connection is not quiet")
		}
	}
}

// loopbackPair returns the two ends of a new loopback TCP connection,
// closed when the test ends.
func loopbackPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}
