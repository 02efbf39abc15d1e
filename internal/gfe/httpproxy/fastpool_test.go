package httpproxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
)

// nbConn is one end of a socketpair whose reads never wait: a read that
// finds nothing fails as a read past its deadline would. An exchange read
// through it ends where the bytes written to the other end do, with no
// clock involved.
type nbConn struct {
	*net.UnixConn
	raw syscall.RawConn
}

func (c *nbConn) Read(b []byte) (int, error) {
	var n int
	var err error
	if cerr := c.raw.Read(func(fd uintptr) bool {
		n, err = syscall.Read(int(fd), b)
		return true // one attempt: never wait for readability
	}); cerr != nil {
		return 0, cerr
	}
	switch {
	case err == syscall.EAGAIN:
		return 0, os.ErrDeadlineExceeded
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// socketPair returns the two ends of a new Unix stream socketpair: ours,
// whose reads never wait, and theirs, an ordinary connection. The test's
// cleanup closes both.
func socketPair(t testing.TB) (*nbConn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
		t.Cleanup(func() { c.Close() })
	}
	uc := cs[0].(*net.UnixConn)
	raw, err := uc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return &nbConn{UnixConn: uc, raw: raw}, cs[1]
}

// reusedAfter plays one exchange on a fresh backend connection as relay
// reads it — the response head, past interim heads, the body to its
// framed end — with resp the bytes the backend sent with its answer and
// trailing those it sent later, once the answer was read; it reports
// whether the reuse rule (fastpool.go) lets the connection carry another
// request: the release check after the body, then the peek right before
// the next request is written.
func reusedAfter(t testing.TB, resp, trailing []byte, head bool) bool {
	t.Helper()
	ours, theirs := socketPair(t)
	if _, err := theirs.Write(resp); err != nil {
		t.Fatal(err)
	}
	bc := newBackendConn(ours, nil)
	n, err := readResponseHead(bc, head)
	if err == nil {
		n, err = finalHead(bc, n, head, func([]byte) {})
	}
	keep := false
	if err == nil {
		bc.br.Discard(n)
		keep, err = copyBody(bufio.NewWriter(io.Discard), bc, false)
	}
	reuse, _ := reusable(bc, err == nil && keep)
	if len(trailing) > 0 {
		if _, err := theirs.Write(trailing); err != nil {
			t.Fatal(err)
		}
	}
	quiet, _ := bc.quiet()
	return reuse && quiet
}

// TestPooledReuse: the reuse rule's verdict on well-behaved answers of
// every framing (reused) and on answers followed by bytes nobody asked
// for, with them or later (closed).
func TestPooledReuse(t *testing.T) {
	const second = "HTTP/1.1 200 OK\r\nSet-Cookie: s=victim\r\nContent-Length: 1\r\n\r\nx"
	tests := []struct {
		name            string
		resp, trailing  string
		head, wantReuse bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "", false, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nT: v\r\n\r\n", "", false, true},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n", "", true, true},
		{"304", "HTTP/1.1 304 Not Modified\r\n\r\n", "", false, true},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", "", false, true},
		{"1xx then final", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", false, true},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx", "", false, true},

		{"HEAD with a body", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "", true, false},
		{"HEAD with a body later", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", "ok", true, false},
		{"304 with a body", "HTTP/1.1 304 Not Modified\r\n\r\n" + second, "", false, false},
		{"304 with a body later", "HTTP/1.1 304 Not Modified\r\n\r\n", second, false, false},
		{"body longer than Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokay", "", false, false},
		{"body longer than Content-Length later", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ay", false, false},
		{"chunked then more", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + second, "", false, false},
		{"second response later", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", second, false, false},
		{"one stray byte later", "HTTP/1.1 204 No Content\r\n\r\n", "\n", false, false},
		{"until close", "HTTP/1.1 200 OK\r\n\r\nbody", "", false, false},
		{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", "", false, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", "", false, false},
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok", "", false, false},
		{"head cut short", "HTTP/1.1 200 OK\r\nContent-Len", "", false, false},
		{"unasked 101", "HTTP/1.1 101 Switching Protocols\r\n\r\n", "", false, false},
		{"too many 1xx", string(bytes.Repeat([]byte("HTTP/1.1 100 Continue\r\n\r\n"), maxInterim+1)) + "HTTP/1.1 204 No Content\r\n\r\n", "", false, false},
		{"maxInterim 1xx", string(bytes.Repeat([]byte("HTTP/1.1 100 Continue\r\n\r\n"), maxInterim)) + "HTTP/1.1 204 No Content\r\n\r\n", "", false, true},
	}
	for _, tc := range tests {
		if got := reusedAfter(t, []byte(tc.resp), []byte(tc.trailing), tc.head); got != tc.wantReuse {
			t.Errorf("%s: reused %v, want %v", tc.name, got, tc.wantReuse)
		}
	}
}

// FuzzPooledReuse: against any bytes a backend sends with its answer
// (resp) and after it (trailing), the reuse rule lets the connection carry
// another request only if nothing came after the answer and net/http's
// reader frames resp as the same exchange — interim answers, then a final
// one that keeps the connection — ending exactly at resp's last byte.
func FuzzPooledReuse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), []byte(nil), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), []byte("ok"), true)
	f.Add([]byte("HTTP/1.1 304 Not Modified\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nX"), []byte(nil), false)
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"), []byte(nil), false)
	f.Add([]byte("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx"), []byte(nil), false)
	f.Fuzz(func(t *testing.T, resp, trailing []byte, head bool) {
		if len(resp)+len(trailing) > 32<<10 { // within a socket buffer: writes never wait
			return
		}
		if !reusedAfter(t, resp, trailing, head) {
			return
		}
		if len(trailing) > 0 {
			t.Fatalf("%q then %q: reused with %d bytes after the answer", resp, trailing, len(trailing))
		}
		req := &http.Request{Method: http.MethodGet}
		if head {
			req.Method = http.MethodHead
		}
		br := bufio.NewReader(bytes.NewReader(resp))
		for {
			r, err := http.ReadResponse(br, req)
			if err != nil {
				t.Fatalf("%q (head %v): reused, but net/http cannot read the answer: %v", resp, head, err)
			}
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				t.Fatalf("%q (head %v): reused, but net/http cannot read the body: %v", resp, head, err)
			}
			r.Body.Close()
			if r.StatusCode >= 200 {
				if r.Close {
					t.Fatalf("%q (head %v): reused, but net/http reads the connection as closing", resp, head)
				}
				break
			}
		}
		if rest, _ := io.ReadAll(br); len(rest) > 0 {
			t.Fatalf("%q (head %v): reused, but net/http's answer ends %d bytes before the bytes do: %q", resp, head, len(rest), rest)
		}
	})
}
