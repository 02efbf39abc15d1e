package gfetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TCPTestTimeout bounds every blocking wait of the TCP proxy tests; it is a
// guard against hangs, never a delay the tests rely on.
const TCPTestTimeout = 10 * time.Second

// CheckLeaks fails t if goroutines started during t are still running when
// every other cleanup of t has run.
func CheckLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// EchoBackend is a real TCP server standing in for a tcp instance, like the
// test backend's tcp mode: it writes "hello <name>\n", then echoes until its
// client closes, then closes.
type EchoBackend struct {
	Name     string
	ln       net.Listener
	Accepted atomic.Int64  // connections accepted
	Open     atomic.Int64  // connections open
	closed   chan struct{} // one value per connection that ended

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewEchoBackend starts an EchoBackend; the test's cleanup stops it.
func NewEchoBackend(t *testing.T, name string) *EchoBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &EchoBackend{Name: name, ln: ln, closed: make(chan struct{}, 1024), conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	t.Cleanup(b.Stop)
	return b
}

// Addr returns the backend's address.
func (b *EchoBackend) Addr() string { return b.ln.Addr().String() }

func (b *EchoBackend) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.Accepted.Add(1)
		b.Open.Add(1)
		b.mu.Lock()
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Go(func() {
			defer func() {
				c.Close()
				b.mu.Lock()
				delete(b.conns, c)
				b.mu.Unlock()
				b.Open.Add(-1)
				b.closed <- struct{}{}
			}()
			if _, err := io.WriteString(c, "hello "+b.Name+"\n"); err != nil {
				return
			}
			io.Copy(c, c)
		})
	}
}

// Stop closes the backend and its connections; its port then refuses
// connections.
func (b *EchoBackend) Stop() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// WaitClosed waits until n of b's connections have ended.
func (b *EchoBackend) WaitClosed(t *testing.T, n int) {
	t.Helper()
	timeout := time.NewTimer(TCPTestTimeout)
	defer timeout.Stop()
	for i := range n {
		select {
		case <-b.closed:
		case <-timeout.C:
			t.Fatalf("%s: %d of %d connections closed", b.Name, i, n)
		}
	}
}

// TCPClient is a client connection through the proxy.
type TCPClient struct {
	C       net.Conn
	R       *bufio.Reader
	Backend string // from the hello line
}

// DialTCP connects to addr and reads the backend's hello line.
func DialTCP(t *testing.T, addr string) *TCPClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(TCPTestTimeout))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the hello through %s: %v", addr, err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "hello" {
		t.Fatalf("hello line %q", line)
	}
	return &TCPClient{C: c, R: r, Backend: f[1]}
}

// Echo sends msg and checks that it comes back.
func (c *TCPClient) Echo(msg string) error {
	if _, err := io.WriteString(c.C, msg+"\n"); err != nil {
		return err
	}
	got, err := c.R.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo of %q = %q", msg, got)
	}
	return nil
}

// WaitClosed reads until the proxy closes the connection (EOF or reset)
// and fails on data or a timeout.
func (c *TCPClient) WaitClosed(t *testing.T) {
	t.Helper()
	b, err := c.R.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		t.Fatalf("connection to %s: read %q, want it closed", c.Backend, b)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("connection to %s still open after %v", c.Backend, TCPTestTimeout)
	}
}
