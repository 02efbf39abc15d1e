package gfetest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// StrayCookie is the session cookie of the victim's answer (and of the
// stray response that follows it): a proxy that hands it to another client
// leaks the victim's session.
const StrayCookie = "session=victim1"

// strayResponse is the complete response a buggy backend sends unasked,
// with the victim's session cookie.
const strayResponse = "HTTP/1.1 200 OK\r\nSet-Cookie: " + StrayCookie + "\r\nContent-Length: 13\r\n\r\nvictim1-stray"

// Stray is one way a buggy HTTP/1.1 backend sends bytes after its answer
// to the victim's request (Method /victim1) that no request asked for.
// Extra is, or ends with, a complete response carrying StrayCookie, so
// that a proxy which reads it as the answer to its next request on the
// connection hands the victim's session to that request's client.
type Stray struct {
	Name string
	// Method is the victim's: GET or HEAD.
	Method string
	// Response is the answer to /victim1, as its framing says it ends.
	Response string
	// Extra follows Response, unasked; "" for a well-behaved backend.
	Extra string
	// Later sends Extra in a later segment, when the test calls
	// StrayBackend.SendExtra (once the victim's client has its answer and
	// the proxy has taken the connection back); otherwise Extra goes in
	// the same write as Response.
	Later bool
}

// Strays returns the misbehaviours of a backend that the proxy must not
// carry over to another client: a body on a HEAD response, a body on a
// 304, a body longer than its Content-Length, a second response nobody
// asked for, each in the same segment as the answer and in a later one;
// and, first, a well-behaved backend (no Extra), whose connection is
// reused.
func Strays() []Stray {
	kinds := []Stray{
		{Name: "HEAD with a body", Method: http.MethodHead,
			Response: "HTTP/1.1 200 OK\r\nSet-Cookie: " + StrayCookie + "\r\nContent-Length: " + strconv.Itoa(len(strayResponse)) + "\r\n\r\n",
			Extra:    strayResponse},
		{Name: "304 with a body", Method: http.MethodGet,
			Response: "HTTP/1.1 304 Not Modified\r\nSet-Cookie: " + StrayCookie + "\r\n\r\n",
			Extra:    strayResponse},
		{Name: "body longer than Content-Length", Method: http.MethodGet,
			Response: "HTTP/1.1 200 OK\r\nSet-Cookie: " + StrayCookie + "\r\nContent-Length: 2\r\n\r\nok",
			Extra:    "-and-more\r\n" + strayResponse},
		{Name: "second response", Method: http.MethodGet,
			Response: "HTTP/1.1 200 OK\r\nSet-Cookie: " + StrayCookie + "\r\nContent-Length: 7\r\n\r\nvictim1",
			Extra:    strayResponse},
	}
	out := []Stray{{Name: "well-behaved", Method: http.MethodGet,
		Response: "HTTP/1.1 200 OK\r\nSet-Cookie: " + StrayCookie + "\r\nContent-Length: 7\r\n\r\nvictim1"}}
	for _, later := range []bool{false, true} {
		for _, k := range kinds {
			k.Later = later
			if later {
				k.Name += ", later segment"
			} else {
				k.Name += ", same segment"
			}
			out = append(out, k)
		}
	}
	return out
}

// StrayBackend is a raw HTTP/1.1 backend that misbehaves as its Stray
// says on /victim1 and answers every other request (health checks
// included) correctly: 200 with the request's path as its body (none for
// HEAD) and no cookie. It serves every connection until its peer closes
// it, until the test ends.
type StrayBackend struct {
	// Addr is the listener's address.
	Addr string

	s        Stray
	accepted atomic.Int64
	mu       sync.Mutex
	victim   net.Conn // guarded by mu: the connection /victim1 was answered on
	// victimDone is closed when the victim's connection is closed by its
	// peer (a read of it ended).
	victimDone chan struct{}
}

// NewStrayBackend starts a StrayBackend for s on host (an IP address), at a
// free port.
func NewStrayBackend(tb testing.TB, host string, s Stray) *StrayBackend {
	tb.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	b := &StrayBackend{Addr: ln.Addr().String(), s: s, victimDone: make(chan struct{})}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		if b.victim != nil {
			b.victim.Close()
		}
		b.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.serve(c)
			}()
		}
	}()
	return b
}

// serve answers the requests of one connection, then closes it (the
// victim's under b.mu: SendExtra may be using it).
func (b *StrayBackend) serve(c net.Conn) {
	br := bufio.NewReader(c)
	isVictim := false
	defer func() {
		if !isVictim {
			c.Close()
			return
		}
		b.mu.Lock()
		c.Close()
		b.mu.Unlock()
		close(b.victimDone)
	}()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		if req.URL.Path == "/victim1" && !isVictim {
			isVictim = true
			b.mu.Lock()
			b.victim = c
			b.mu.Unlock()
			out := b.s.Response
			if !b.s.Later {
				out += b.s.Extra
			}
			if _, err := io.WriteString(c, out); err != nil {
				return
			}
			continue
		}
		body := req.URL.Path
		if req.Method == http.MethodHead {
			body = ""
		}
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), body); err != nil {
			return
		}
	}
}

// Accepted returns how many connections the backend accepted.
func (b *StrayBackend) Accepted() int64 { return b.accepted.Load() }

// SendExtra writes the Stray's Extra (if Later) on the connection /victim1
// was answered on, and returns once the peer's kernel has acknowledged
// every byte: they are in the proxy's socket, readable, when it returns.
func (b *StrayBackend) SendExtra(tb testing.TB) {
	tb.Helper()
	if !b.s.Later || b.s.Extra == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.victim
	if c == nil {
		tb.Fatal("SendExtra before /victim1 was answered")
	}
	if _, err := io.WriteString(c, b.s.Extra); err != nil {
		tb.Fatalf("writing the stray bytes: %v", err)
	}
	if err := waitAcked(c, time.Now().Add(TCPTestTimeout)); err != nil {
		tb.Fatal(err)
	}
}

// WaitVictimClosed waits until the proxy has closed the connection
// /victim1 was answered on.
func (b *StrayBackend) WaitVictimClosed(tb testing.TB) {
	tb.Helper()
	select {
	case <-b.victimDone:
	case <-time.After(TCPTestTimeout):
		tb.Fatalf("the victim's backend connection still open after %v", TCPTestTimeout)
	}
}
