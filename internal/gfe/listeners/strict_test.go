package listeners

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
)

// streamConn is a net.Conn whose reads return the next bytes of a stream,
// at most chunk at a time.
type streamConn struct {
	net.Conn
	r     io.Reader
	chunk int
}

func (c *streamConn) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.chunk)]) }

// readAll returns what net/http's server reads of stream as requests,
// through strictRequests (strict) or directly, with reads of at most chunk
// bytes: each request's method, target, fields and body, then the error
// that ended it.
func readAll(stream []byte, chunk int, strict bool) ([]string, error) {
	var c net.Conn = &streamConn{r: bytes.NewReader(stream), chunk: chunk}
	if strict {
		c = &strictRequests{Conn: c, limit: 1 << 16}
	}
	br := bufio.NewReader(c)
	var got []string
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return got, err
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return got, err
		}
		got = append(got, fmt.Sprintf("%s %s %v %q", req.Method, req.RequestURI, req.Header, body))
	}
}

// TestStrictRequestsFraming: strictRequests gives net/http's server
// pipelined requests whole and in order, bodies included, whatever the
// size of the reads; it stops at the first head the fast path refuses,
// where net/http then reads an unparsable request line; and it passes
// what follows HTTP/2's preface, an Upgrade or a chunked request as it is.
func TestStrictRequestsFraming(t *testing.T) {
	good := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nGET /c HTTP" + // a body that looks like a head
		"PUT /d HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz"
	bad := "GET /e HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"
	tests := []struct {
		name   string
		stream string
		want   int  // requests net/http reads
		refuse bool // then a request line it cannot parse
	}{
		{"well-formed", good, 3, false},
		{"a refused head after three", good + bad + "GET /f HTTP/1.1\r\nHost: x\r\n\r\n", 3, true},
		{"a refused first head", bad + good, 0, true},
		{"an Upgrade request, then anything", "GET /u HTTP/1.1\r\nHost: x\r\nUpgrade: ws\r\nConnection: upgrade\r\n\r\n" + bad, 2, false},
		{"a chunked request, then anything", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n" + bad, 2, false},
	}
	for _, tc := range tests {
		for _, chunk := range []int{1, 7, 4096} {
			direct, _ := readAll([]byte(tc.stream), chunk, false)
			got, err := readAll([]byte(tc.stream), chunk, true)
			if len(got) != tc.want || !slices.Equal(got, direct[:min(len(direct), len(got))]) {
				t.Errorf("%s, reads of %d: net/http read %d requests through strictRequests, want the first %d of its own:\n%q\n%q", tc.name, chunk, len(got), tc.want, got, direct)
			}
			if refused := err != nil && err != io.EOF && bytes.Contains([]byte(err.Error()), []byte("malformed HTTP request")); refused != tc.refuse {
				t.Errorf("%s, reads of %d: ended by %v, want a refusal %v", tc.name, chunk, err, tc.refuse)
			}
		}
	}
}

// FuzzStrictRequests: whatever a client sends, in reads of any size, the
// requests net/http's server reads through strictRequests are the first of
// those it reads from the same bytes alone, unchanged.
func FuzzStrictRequests(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nPOST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nokGET / HTTP/1.1\r\nHost: x\r\n\r\n"), uint8(3))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"), uint8(1))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\nContent-Length: 1\r\n\r\nx"), uint8(200))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), uint8(9))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		n := max(int(chunk), 1)
		direct, _ := readAll(stream, n, false)
		got, _ := readAll(stream, n, true)
		if len(got) > len(direct) || !slices.Equal(got, direct[:len(got)]) {
			t.Fatalf("%q in reads of %d: through strictRequests net/http read\n%q\nalone\n%q", stream, n, got, direct)
		}
	})
}
