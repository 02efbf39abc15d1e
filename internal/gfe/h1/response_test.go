package h1

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"testing"
)

// responses is a table of response heads with what ParseResponse must make
// of them: a framing, or an error.
var responses = []struct {
	name    string
	head    string
	isHead  bool
	framing Framing
	length  int64
	close   bool
	bad     bool
}{
	{name: "length", head: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", framing: Length, length: 3},
	{name: "chunked", head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", framing: Chunked, length: -1},
	{name: "until close", head: "HTTP/1.1 200 OK\r\n\r\n", framing: UntilClose, length: -1, close: true},
	{name: "no reason", head: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", framing: Length},
	{name: "empty reason", head: "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", framing: Length},
	{name: "204", head: "HTTP/1.1 204 No Content\r\n\r\n", framing: NoBody, length: -1},
	{name: "304 with length", head: "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", framing: NoBody, length: 10},
	{name: "103", head: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", framing: NoBody, length: -1},
	{name: "head", head: "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", isHead: true, framing: NoBody, length: 99},
	{name: "connection close", head: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", framing: Length, length: 1, close: true},
	{name: "http/1.0", head: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", framing: Length, length: 1, close: true},
	{name: "http/1.0 keep-alive", head: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n", framing: Length, length: 1},

	{name: "te with cl", head: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", bad: true},
	{name: "cl twice", head: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", bad: true},
	{name: "cl wraps int64", head: "HTTP/1.1 200 OK\r\nContent-Length: 9227000000000000000\r\n\r\n", bad: true},
	{name: "cl sign", head: "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n", bad: true},
	{name: "te gzip", head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", bad: true},
	{name: "te in http/1.0", head: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", bad: true},
	{name: "obs-fold", head: "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", bad: true},
	{name: "bare lf", head: "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", bad: true},
	{name: "space before colon", head: "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", bad: true},
	{name: "nul in value", head: "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", bad: true},
	{name: "two-digit status", head: "HTTP/1.1 20 OK\r\n\r\n", bad: true},
	{name: "status 600", head: "HTTP/1.1 600 OK\r\n\r\n", bad: true},
	{name: "http/2", head: "HTTP/2.0 200 OK\r\n\r\n", bad: true},
	{name: "lower-case version", head: "http/1.1 200 OK\r\n\r\n", bad: true},
	{name: "no space after status", head: "HTTP/1.1 200OK\r\n\r\n", bad: true},
}

func TestParseResponse(t *testing.T) {
	var r Response
	for _, tc := range responses {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ParseResponse([]byte(tc.head+"body"), tc.isHead, &r)
			if tc.bad {
				if !errors.Is(err, ErrBadResponse) {
					t.Fatalf("err = %v, want ErrBadResponse", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v (%s)", err, r.Why)
			}
			if n != len(tc.head) || r.Framing != tc.framing || r.ContentLength != tc.length || r.Close != tc.close {
				t.Errorf("n=%d framing=%d length=%d close=%v, want n=%d framing=%d length=%d close=%v",
					n, r.Framing, r.ContentLength, r.Close, len(tc.head), tc.framing, tc.length, tc.close)
			}
		})
	}
}

func TestParseResponseIncomplete(t *testing.T) {
	head := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"
	var r Response
	for i := range len(head) {
		if _, err := ParseResponse([]byte(head[:i]), false, &r); err != ErrIncomplete {
			t.Fatalf("prefix %q: err = %v, want ErrIncomplete", head[:i], err)
		}
	}
}

func TestParseChunkSize(t *testing.T) {
	for _, tc := range []struct {
		line string
		n    int64
		ok   bool
	}{
		{"0", 0, true}, {"1a", 26, true}, {"FF", 255, true}, {"5;name=v", 5, true}, {"5 ;x", 5, true},
		{"", 0, false}, {"-1", 0, false}, {"0x5", 0, false}, {"5\x00", 0, false}, {"5;\x01", 0, false},
		{"11111111111111111", 0, false}, {"7fffffffffffffff", 0, false}, {" 5", 0, false},
		{"ffffffffffffffff", 0, false}, {"8000000000000000", 0, false}, // wrap around int64
		{"4000000000000000", 1 << 62, true}, {"4000000000000001", 0, false},
	} {
		n, ok := ParseChunkSize([]byte(tc.line))
		if n != tc.n || ok != tc.ok {
			t.Errorf("ParseChunkSize(%q) = %d, %v; want %d, %v", tc.line, n, ok, tc.n, tc.ok)
		}
	}
}

func TestParseResponseAllocs(t *testing.T) {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\n")
	var r Response
	ParseResponse(head, false, &r)
	if n := testing.AllocsPerRun(100, func() { ParseResponse(head, false, &r) }); n != 0 {
		t.Errorf("%v allocations per parse, want 0", n)
	}
}

// FuzzParseResponseAgainstNetHTTP: a response head ParseResponse accepts is
// one net/http's client accepts with the same status, length and framing
// (for a response with a body: net/http reads a body framing on 1xx too,
// where RFC 9112 §6.3 says there is none).
func FuzzParseResponseAgainstNetHTTP(f *testing.F) {
	for _, tc := range responses {
		f.Add([]byte(tc.head), tc.isHead)
	}
	var r Response
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		n, err := ParseResponse(data, head, &r)
		if err != nil {
			return
		}
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data[:n])), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("head %q: net/http rejects a response the fast path takes: %v", data[:n], err)
		}
		if resp.StatusCode != r.Status {
			t.Fatalf("head %q: status %d, net/http %d", data[:n], r.Status, resp.StatusCode)
		}
		chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
		if r.Framing != NoBody && chunked != (r.Framing == Chunked) {
			t.Fatalf("head %q: framing %d, net/http chunked=%v", data[:n], r.Framing, chunked)
		}
		if r.Framing == Length && resp.ContentLength != r.ContentLength {
			t.Fatalf("head %q: length %d, net/http %d", data[:n], r.ContentLength, resp.ContentLength)
		}
		if r.Framing != NoBody && resp.Close != r.Close {
			t.Fatalf("head %q: close %v, net/http %v", data[:n], r.Close, resp.Close)
		}
	})
}
