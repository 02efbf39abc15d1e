package h1

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// smuggling is a table of request heads from the public literature on
// request smuggling and HTTP/1.1 framing, each with the verdict the fast
// path must give. Sources: RFC 9112 (§2.2 bare LF, §3 request line, §5
// field syntax and obs-fold, §6.1 Transfer-Encoding with Content-Length,
// §6.3 message body length); James Kettle, "HTTP Desync Attacks: Request
// Smuggling Reborn" (PortSwigger Research, 2019: CL.TE, TE.CL and the
// Transfer-Encoding obfuscations); Amit Klein, Chaim Linhart, Ronen
// Heled, Steve Orrin, "HTTP Request Smuggling" (Watchfire, 2005: double
// Content-Length); HAProxy's documentation of what its H1 parser rejects
// (option accept-invalid-http-request lists the relaxations it refuses by
// default).
var smuggling = []struct {
	name string
	head string
	want Verdict
}{
	// Plain requests the fast path takes.
	{"get", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", Fast},
	{"post with length", "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", Fast},
	{"http/1.0 without host", "GET / HTTP/1.0\r\n\r\n", Fast},
	{"query and escapes", "GET /a%20b?x=1&y=%2F HTTP/1.1\r\nHost: a:8080\r\n\r\n", Fast},
	{"ows around value", "GET / HTTP/1.1\r\nHost:a\r\nX-A: \t v \t\r\n\r\n", Fast},
	{"obs-text in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xc3\xa9\r\n\r\n", Fast},
	{"length zero", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", Fast},
	{"leading zeros", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\n", Fast},

	// CL.TE and TE.CL: both framings present.
	{"cl.te", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n", Reject},
	{"te.cl", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", Reject},
	// Transfer-Encoding obfuscations (TE.TE).
	{"te xchunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", Reject},
	{"te space before colon", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n", Reject},
	{"te tab before colon", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding\t: chunked\r\n\r\n", Reject},
	{"te obs-fold", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", Reject},
	{"te leading space line", "POST / HTTP/1.1\r\nHost: a\r\n Transfer-Encoding: chunked\r\n\r\n", Reject},
	{"te list", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n", Reject},
	{"te identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", Reject},
	{"te twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", Reject},
	{"te vertical tab", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\x0bchunked\r\n\r\n", Reject},
	{"te in http/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", Reject},
	{"te chunked alone", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", HandOff},
	{"te chunked upper case", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n", HandOff},
	// Content-Length ambiguities (CL.CL).
	{"cl twice differing", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", Reject},
	{"cl twice equal", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", Reject},
	{"cl list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", Reject},
	{"cl plus sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", Reject},
	{"cl negative", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", Reject},
	{"cl inner space", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\n", Reject},
	{"cl hex", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", Reject},
	{"cl empty", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", Reject},
	{"cl overflow", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", Reject},
	{"cl wraps int64", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9227000000000000000\r\n\r\n", Reject},
	{"cl at bound", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4611686018427387904\r\n\r\n", Fast},
	{"cl past bound", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4611686018427387905\r\n\r\n", Reject},
	{"cl space before colon", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n", Reject},
	// Line endings and control characters.
	{"bare lf request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", Reject},
	{"bare lf field", "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", Reject},
	{"bare lf end", "GET / HTTP/1.1\r\nHost: a\r\n\n", Reject},
	{"bare cr in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", Reject},
	{"nul in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", Reject},
	{"del in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", Reject},
	{"nul in name", "GET / HTTP/1.1\r\nHost: a\r\nX\x00: b\r\n\r\n", Reject},
	{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", Reject},
	{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nXb\r\n\r\n", Reject},
	{"name with slash", "GET / HTTP/1.1\r\nHost: a\r\nX/Y: b\r\n\r\n", Reject},
	// Request line.
	{"double space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"space in target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"tab separator", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n", Reject},
	{"http/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", Reject},
	{"http/0.9 style", "GET /\r\n\r\n", Reject},
	{"method not a token", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"non-ascii target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"bad escape", "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"empty first line", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"asterisk without options", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"relative target", "GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	// Host.
	{"no host", "GET / HTTP/1.1\r\n\r\n", Reject},
	{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Reject},
	{"host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", Reject},
	{"host with slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", Reject},
	{"empty host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", Reject},
	{"absolute-form mismatch", "GET http://b/ HTTP/1.1\r\nHost: a\r\n\r\n", Reject},
	{"absolute-form match", "GET http://a/x HTTP/1.1\r\nHost: a\r\n\r\n", HandOff},
	// What the fast path leaves to net/http.
	{"websocket", "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", HandOff},
	{"h2c upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", HandOff},
	{"expect", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", HandOff},
	{"connect", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", HandOff},
	{"options asterisk", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", HandOff},
	{"unknown method", "PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n", HandOff},
	{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", HandOff},
	{"too many fields", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: y\r\n", MaxFields) + "\r\n", HandOff},
}

// TestSmuggling holds every case of the table to its verdict and, for the
// heads the fast path takes or hands off, checks that net/http's server
// reads the same head (TestSmuggling's Fast rows are also the fuzz seeds).
func TestSmuggling(t *testing.T) {
	var r Request
	for _, tc := range smuggling {
		t.Run(tc.name, func(t *testing.T) {
			n, v, err := Parse([]byte(tc.head+"BODY"), &r)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if v != tc.want {
				t.Fatalf("verdict %v (%s), want %v", v, r.Why, tc.want)
			}
			switch v {
			case Reject:
				if n != 0 || r.Why == "" {
					t.Errorf("reject: n = %d, why %q; want 0 and a reason", n, r.Why)
				}
			default:
				if tc.name != "h2 preface" && n != len(tc.head) {
					t.Errorf("head length %d, want %d", n, len(tc.head))
				}
			}
			if v == Fast {
				if diff := compareNetHTTP([]byte(tc.head), &r); diff != "" {
					t.Error(diff)
				}
			}
		})
	}
}

// TestIncomplete: every proper prefix of a head is incomplete, never a
// verdict.
func TestIncomplete(t *testing.T) {
	head := "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"
	var r Request
	for i := range len(head) {
		if _, _, err := Parse([]byte(head[:i]), &r); !errors.Is(err, ErrIncomplete) {
			t.Fatalf("prefix of %d bytes: err %v, want ErrIncomplete", i, err)
		}
	}
}

// FuzzParseAgainstNetHTTP is the differential fuzz target of the fast path
// (docs/design.md §4, docs/listeners.md): whatever bytes the fuzzer finds, a
// head the fast path takes must be one net/http's server reads with the same
// meaning.
func FuzzParseAgainstNetHTTP(f *testing.F) {
	for _, tc := range smuggling {
		f.Add([]byte(tc.head))
	}
	var r Request
	f.Fuzz(func(t *testing.T, data []byte) {
		n, v, err := Parse(data, &r)
		if err != nil || v != Fast {
			return
		}
		if diff := compareNetHTTP(data[:n], &r); diff != "" {
			t.Fatalf("head %q: %s", data[:n], diff)
		}
	})
}

// compareNetHTTP reads head with net/http's server-side parser and returns
// how its meaning differs from r's, or "" when it does not.
func compareNetHTTP(head []byte, r *Request) string {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return "net/http rejects a head the fast path takes: " + err.Error()
	}
	type meaning struct {
		Method, Target, Host string
		Minor                int
		ContentLength        int64
		Close                bool
		Header               http.Header
	}
	want := meaning{req.Method, req.RequestURI, req.Host, req.ProtoMinor, req.ContentLength, req.Close, req.Header}
	got := meaning{string(r.Method), string(r.Target), string(r.Host), r.Minor, max(r.ContentLength, 0), r.Close, http.Header{}}
	for _, f := range r.Fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		if k == "Host" {
			continue // net/http moves it to Request.Host
		}
		got.Header[k] = append(got.Header[k], string(f.Value))
	}
	if len(got.Header) == 0 && len(want.Header) == 0 {
		got.Header, want.Header = nil, nil
	}
	return cmp.Diff(want, got)
}

// BenchmarkParse parses a typical browser request head: the fast path's
// parsing cost per request, without allocations.
func BenchmarkParse(b *testing.B) {
	head := []byte("GET /static/app.js?v=3 HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
		"Accept: */*\r\nAccept-Encoding: gzip, deflate, br\r\nAccept-Language: en-US,en;q=0.9\r\nConnection: keep-alive\r\n" +
		"Cookie: session=abcdef0123456789\r\nReferer: https://www.example.com/\r\n\r\n")
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(head)))
	for b.Loop() {
		if _, v, err := Parse(head, &r); err != nil || v != Fast {
			b.Fatal(v, err, r.Why)
		}
	}
}
