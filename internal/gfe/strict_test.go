package gfe

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/testkit"
)

// strictEdge is a gfe in front of a pathBackend with three listeners: the
// --listen one with the fast path, "slow" (http) and "tls" (https) on
// net/http alone (fast_path: false).
type strictEdge struct {
	e                *runningEdge
	b                *pathBackend
	fast, slow, tlsA string
	tls              *tls.Config // a client's, for tlsA
}

func startStrictEdge(t *testing.T) *strictEdge {
	t.Helper()
	ca := testkit.NewCA(t)
	cert := gfetest.IssueCert(t, ca, t.TempDir(), "a", 100, "a.test", "a.test")
	slow, tlsPort := freePort(t), freePort(t)
	b := newPathBackend(t)
	e := startEdge(t, edgeConfig(t, []string{b.addr()}, fmt.Sprintf(`listeners:
  - {name: slow, protocol: http, port: %d, fast_path: false}
  - name: tls
    protocol: https
    port: %d
    fast_path: false
    certificates: [{cert_file: %q, key_file: %q}]
`, slow, tlsPort, cert.CertFile, cert.KeyFile)), time.Second)
	return &strictEdge{e: e, b: b, fast: e.ListenAddr().String(), slow: fmt.Sprintf("127.0.0.1:%d", slow),
		tlsA: fmt.Sprintf("127.0.0.1:%d", tlsPort), tls: &tls.Config{RootCAs: ca.Pool, ServerName: "a.test", NextProtos: []string{"http/1.1"}}}
}

// dial opens a connection to the listener of path ("fast", "net/http",
// "net/http over TLS" with ALPN http/1.1 or "..., h2"), closed when the
// test ends.
func (s *strictEdge) dial(t *testing.T, path string) net.Conn {
	t.Helper()
	addr := map[string]string{"fast": s.fast, "net/http": s.slow, "net/http over TLS": s.tlsA, "net/http over TLS, h2": s.tlsA}[path]
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	switch path {
	case "net/http over TLS":
		c = tls.Client(c, s.tls)
	case "net/http over TLS, h2":
		cfg := s.tls.Clone()
		cfg.NextProtos = []string{"h2"}
		c = tls.Client(c, cfg)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	return c
}

// TestRequestHeadsAsStrictOnBothPaths: a request head the fast path
// answers 400 — two identical Content-Lengths, obsolete line folding, a
// bare LF, an absolute-form target naming another host than Host,
// Content-Length with Transfer-Encoding — is
// answered 400 on net/http's path too (an http and an https listener
// without fast_path), and on a connection the fast path handed off to
// net/http (after an Expect request), before any backend sees it, and its
// connection is closed. A head after an Upgrade or a chunked request is
// never read: that request's answer closes the connection. Well-formed
// heads, an absolute-form one naming Host's authority among them, reach
// the backend.
func TestRequestHeadsAsStrictOnBothPaths(t *testing.T) {
	s := startStrictEdge(t)
	const handedOff = "GET /first HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"
	tests := []struct {
		name string
		// first is a well-formed request sent before head on the same
		// connection ("" for none); head's path is unique to the case.
		first, head string
		want        int // head's answer (0: none, the connection closes)
	}{
		{"well-formed", "", "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"absolute-form naming Host", "", "GET http://x/abs-same HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"two identical Content-Lengths", "", "POST /dup-cl HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", 400},
		{"obsolete line folding", "", "GET /fold HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400},
		{"bare LF line endings", "", "GET /lf HTTP/1.1\nHost: x\n\n", 400},
		{"bare LF inside the head", "", "GET /lf-inside HTTP/1.1\r\nHost: x\r\nX-A: a\nSet-Cookie: b\r\n\r\n", 400},
		{"absolute-form naming another host", "", "GET http://other.test/abs-other HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"Content-Length with Transfer-Encoding", "", "POST /cl-te HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"after a handed-off request: two Content-Lengths", handedOff, "POST /dup-cl-2 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", 400},
		{"after a handed-off request: folding", handedOff, "GET /fold-2 HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n", 400},
		{"after a handed-off request: bare LF", handedOff, "GET /lf-2 HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n", 400},
		{"after a handed-off request: absolute-form", handedOff, "GET http://other.test/abs-2 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"after a handed-off request: well-formed", handedOff, "GET /ok-2 HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"after an Upgrade request", "GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "GET /after-up HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 0},
		{"after a chunked request", "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "GET /after-chunked HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 0},
	}
	for _, path := range []string{"fast", "net/http", "net/http over TLS"} {
		for _, tc := range tests {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				target := strings.Fields(tc.head)[1]
				if _, rest, ok := strings.Cut(target, "://"); ok { // absolute-form: the path
					target = rest[strings.IndexByte(rest, '/'):]
				}
				hitsBefore := s.b.count(target)
				c := s.dial(t, path)
				go io.WriteString(c, tc.first+tc.head) // the gfe may answer before reading it all
				br := bufio.NewReader(c)
				if tc.first != "" {
					resp, err := http.ReadResponse(br, nil)
					for err == nil && resp.StatusCode < 200 {
						resp, err = http.ReadResponse(br, nil)
					}
					if err != nil || resp.StatusCode != 200 {
						t.Fatalf("the first request: %v, %v", resp, err)
					}
					io.Copy(io.Discard, resp.Body)
					if tc.want == 0 && !resp.Close {
						t.Errorf("the first request's answer does not close the connection")
					}
				}
				resp, err := http.ReadResponse(br, nil)
				switch {
				case tc.want == 0 && err == nil:
					t.Errorf("%s got an answer %d, want the connection closed before it", target, resp.StatusCode)
				case tc.want == 0:
				case err != nil:
					t.Fatalf("%s: no answer: %v", target, err)
				case resp.StatusCode != tc.want:
					t.Errorf("%s: %d, want %d", target, resp.StatusCode, tc.want)
				case tc.want == 400:
					if _, err := io.Copy(io.Discard, resp.Body); err != nil {
						t.Fatalf("reading the 400: %v", err)
					}
					if more, err := http.ReadResponse(br, nil); err == nil {
						t.Errorf("after the 400 the connection answered again (%d), want it closed", more.StatusCode)
					}
				}
				wantHits := 0
				if tc.want == 200 {
					wantHits = 1
				}
				if got := s.b.count(target) - hitsBefore; got != wantHits {
					t.Errorf("%s reached the backend %d times, want %d", target, got, wantHits)
				}
			})
		}
	}
	// net/http's refusals are counted; the fast path counts its own.
	if n := counterValue(t, s.e.reg, "spillway_gfe_malformed_requests_total", "slow"); n != 10 {
		t.Errorf("spillway_gfe_malformed_requests_total{listener=slow} = %v, want 10", n)
	}
	if n := counterValue(t, s.e.reg, "spillway_gfe_malformed_requests_total", "tls"); n != 10 {
		t.Errorf("spillway_gfe_malformed_requests_total{listener=tls} = %v, want 10", n)
	}
	if n := counterValue(t, s.e.reg, "spillway_gfe_malformed_requests_total", "listen"); n != 4 {
		t.Errorf("spillway_gfe_malformed_requests_total{listener=listen} = %v, want the 4 after a handoff", n)
	}
}

// TestHTTP2RequestsAsStrict: over HTTP/2 (h2c, which the fast path hands
// to net/http whole, and h2 over TLS), a request with two Content-Length
// fields or with a Host field naming another authority than :authority is
// answered 400 before any backend sees it, on every listener; a
// well-formed one is served.
func TestHTTP2RequestsAsStrict(t *testing.T) {
	s := startStrictEdge(t)
	tests := []struct {
		name   string
		fields [][2]string
		want   int
	}{
		{"well-formed", [][2]string{{":path", "/h2-ok"}, {"content-length", "0"}}, 200},
		{"Host as :authority", [][2]string{{":path", "/h2-host-same"}, {"host", "X"}}, 200},
		{"two Content-Lengths", [][2]string{{":path", "/h2-dup-cl"}, {"content-length", "0"}, {"content-length", "0"}}, 400},
		{"Host naming another authority", [][2]string{{":path", "/h2-host-other"}, {"host", "other.test"}}, 400},
	}
	for _, path := range []string{"fast", "net/http", "net/http over TLS, h2"} {
		scheme := "http"
		if path == "net/http over TLS, h2" {
			scheme = "https"
		}
		for _, tc := range tests {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				target := tc.fields[0][1]
				before := s.b.count(target)
				c := s.dial(t, path)
				io.WriteString(c, http2.ClientPreface)
				var out bytes.Buffer
				fr := http2.NewFramer(&out, c)
				fr.WriteSettings()
				block := headerBlock(append([][2]string{{":method", "GET"}, {":scheme", scheme}, {":authority", "x"}}, tc.fields...))
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
				if _, err := c.Write(out.Bytes()); err != nil {
					t.Fatal(err)
				}
				dec := hpack.NewDecoder(4096, nil)
				status := ""
				for status == "" {
					f, err := fr.ReadFrame()
					if err != nil {
						t.Fatalf("reading the answer: %v", err)
					}
					if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 1 {
						fields, err := dec.DecodeFull(h.HeaderBlockFragment())
						if err != nil {
							t.Fatal(err)
						}
						for _, hf := range fields {
							if hf.Name == ":status" {
								status = hf.Value
							}
						}
					}
				}
				if status != fmt.Sprint(tc.want) {
					t.Errorf("%s: status %s, want %d", target, status, tc.want)
				}
				wantHits := 0
				if tc.want == 200 {
					wantHits = 1
				}
				if got := s.b.count(target) - before; got != wantHits {
					t.Errorf("%s reached the backend %d times, want %d", target, got, wantHits)
				}
			})
		}
	}
}
