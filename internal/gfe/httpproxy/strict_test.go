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
)

// answers sends GET / on its own connection through the fast path
// (fast) or net/http (an http.Server running the proxy), and returns the
// statuses of every answer it got, interim ones first, and the final
// answer's Set-Cookie and body.
func answers(t *testing.T, e *testGFE, fast bool) (statuses []int, setCookie []string, body string) {
	t.Helper()
	var c net.Conn
	if fast {
		cc, sc := net.Pipe()
		go serveFastConn(e.proxy, sc, netip.MustParseAddrPort("192.0.2.1:40000"))
		c = cc
	} else {
		srv := httptest.NewServer(e.proxy)
		defer srv.Close()
		var err error
		if c, err = net.Dial("tcp", srv.Listener.Addr().String()); err != nil {
			t.Fatal(err)
		}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(securityTestTimeout))
	go io.WriteString(c, "GET / HTTP/1.1\r\nHost: gfe.test\r\nConnection: close\r\n\r\n")
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading answer %d: %v", len(statuses)+1, err)
		}
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode >= 200 {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the final answer's body: %v", err)
			}
			return statuses, resp.Header.Values("Set-Cookie"), string(b)
		}
	}
}

// TestBackendHeadsAsStrictOnBothPaths: a backend's response head means the
// same on net/http's path as on the fast path. A bare LF inside a field
// value (which net/http read as the end of a line, making a Set-Cookie of
// the rest) and obsolete line folding (which it joined) are the backend's
// failure, 502, on both; at most maxInterim interim answers reach the
// client, and a backend that sends 5,000 has failed (502), where net/http
// relayed every one.
func TestBackendHeadsAsStrictOnBothPaths(t *testing.T) {
	interims := func(n int) string { return strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", n) }
	tests := []struct {
		name, resp string
		// want: the final status and how many interim answers the client
		// gets before it.
		want, wantInterim int
	}{
		{"well-formed", "HTTP/1.1 200 OK\r\nSet-Cookie: ok=1\r\nContent-Length: 2\r\n\r\nok", 200, 0},
		{"bare LF in a field value", "HTTP/1.1 200 OK\r\nX-A: a\nSet-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nok", 502, 0},
		{"bare LF ending a field", "HTTP/1.1 200 OK\nSet-Cookie: evil=1\nContent-Length: 2\n\nok", 502, 0},
		{"obsolete line folding", "HTTP/1.1 200 OK\r\nX-A: a\r\n Set-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nok", 502, 0},
		{"control character in a value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok", 502, 0},
		{"two Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", 502, 0},
		{"maxInterim interim answers", interims(maxInterim) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, maxInterim},
		{"5000 interim answers", interims(5000) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 502, maxInterim},
	}
	for _, path := range []string{"fast", "net/http"} {
		for _, tc := range tests {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				b := newRawBackend(t, tc.resp)
				e := fastEdge(t, ", retries: 0", b.addr())
				statuses, cookies, body := answers(t, e, path == "fast")
				final := statuses[len(statuses)-1]
				if final != tc.want || len(statuses)-1 != tc.wantInterim {
					t.Errorf("the client got %d interim answers and %d, want %d and %d", len(statuses)-1, final, tc.wantInterim, tc.want)
				}
				if tc.want == http.StatusOK {
					if body != "ok" {
						t.Errorf("body %q, want \"ok\"", body)
					}
					return
				}
				if len(cookies) != 0 {
					t.Errorf("a refused answer's client got Set-Cookie %q", cookies)
				}
			})
		}
	}
}
