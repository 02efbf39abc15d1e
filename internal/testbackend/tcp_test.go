package testbackend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func tcpInstance(name string, c Capacity) InstanceConfig {
	ic := testInstance(name, c)
	ic.Proto = ProtoTCP
	return ic
}

// tcpConn is a client connection to a tcp instance.
type tcpConn struct {
	net.Conn
	r *bufio.Reader
}

// dialTCP connects to addr and returns the connection, or the dial error.
func dialTCP(ctx context.Context, addr string) (*tcpConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return &tcpConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// mustDialTCP connects to addr and reads the hello line.
func mustDialTCP(ctx context.Context, t *testing.T, addr string) (*tcpConn, string) {
	t.Helper()
	c, err := dialTCP(ctx, addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	hello, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("hello from %s: %v", addr, err)
	}
	return c, hello
}

// echo writes msg and reads as many bytes back.
func (c *tcpConn) echo(msg string) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	b := make([]byte, len(msg))
	_, err := io.ReadFull(c.r, b)
	return string(b), err
}

// adminDo sends a request to the process admin of s.
func adminDo(t *testing.T, s *Server, method, path string) response {
	t.Helper()
	return mustDo(t, newClient(t, ""), method, "http://"+s.AdminAddr()+path)
}

// TestTCPEcho checks the hello line, the echo, the connection counters and
// POST /admin/close.
func TestTCPEcho(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{tcpInstance("t", DefaultCapacity())}, AdminAddr: "127.0.0.1:0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	addr := s.Addr("t")

	c1, hello := mustDialTCP(ctx, t, addr)
	if hello != "hello t us-east us-east-b\n" {
		t.Errorf("hello = %q, want %q", hello, "hello t us-east us-east-b\n")
	}
	for _, msg := range []string{"abc", "line\n", "\x00\xff"} {
		if got, err := c1.echo(msg); err != nil || got != msg {
			t.Errorf("echo(%q) = %q, %v", msg, got, err)
		}
	}
	c2, _ := mustDialTCP(ctx, t, addr)
	st, _ := s.Stats("t")
	want := Stats{Instance: "t", Region: "us-east", Zone: "us-east-b", Proto: ProtoTCP, Healthy: true,
		Streams: 2, Messages: 3, OpenConns: 2, Conns: 2, InFlight: 2, MaxInFlight: 2,
		BySource: map[string]SourceStats{"127.0.0.0/24": {Streams: 2}}}
	if diff := cmp.Diff(want, st, ignoreUsage); diff != "" {
		t.Errorf("stats mismatch (-want +got):\n%s", diff)
	}

	r := adminDo(t, s, http.MethodPost, "/admin/close?instance=t")
	if r.status != http.StatusOK || r.body != `{"closed":2}`+"\n" {
		t.Errorf("POST /admin/close = %d %q, want 200 {\"closed\":2}", r.status, r.body)
	}
	for i, c := range []*tcpConn{c1, c2} {
		if _, err := c.r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d after /admin/close: read err %v, want EOF or reset", i+1, err)
		}
	}
	if err := s.find("t").lim.waitFor(ctx, func(inFlight, _ int) bool { return inFlight == 0 }); err != nil {
		t.Fatalf("closed connections keep their slots: %v", err)
	}
	// A client reconnects.
	c3, hello := mustDialTCP(ctx, t, addr)
	if got, err := c3.echo("again"); err != nil || got != "again" || hello != "hello t us-east us-east-b\n" {
		t.Errorf("after reconnecting: hello %q, echo %q, %v", hello, got, err)
	}
	if st, _ := s.Stats("t"); st.OpenConns != 1 || st.Conns != 3 {
		t.Errorf("stats after reconnecting: open_conns %d conns %d, want 1, 3", st.OpenConns, st.Conns)
	}
}

// TestTCPHealthToggle checks that an unhealthy tcp instance refuses new
// connections, so that a connect-only health check fails, and keeps
// serving established ones; and that it accepts again once healthy.
func TestTCPHealthToggle(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{tcpInstance("t", DefaultCapacity())}, AdminAddr: "127.0.0.1:0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	addr := s.Addr("t")
	established, _ := mustDialTCP(ctx, t, addr)

	if r := adminDo(t, s, http.MethodPost, "/admin/health?instance=t&healthy=false"); r.status != http.StatusOK {
		t.Fatalf("POST /admin/health?healthy=false = %d %q", r.status, r.body)
	}
	if c, err := dialTCP(ctx, addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial while unhealthy: %v, want connection refused", err)
	}
	if got, err := established.echo("still"); err != nil || got != "still" {
		t.Errorf("established connection while unhealthy: echo %q, %v", got, err)
	}
	var h map[string]bool
	if r := adminDo(t, s, http.MethodGet, "/admin/health?instance=t"); json.Unmarshal([]byte(r.body), &h) != nil || h["healthy"] {
		t.Errorf("GET /admin/health = %q, want healthy false", r.body)
	}

	if r := adminDo(t, s, http.MethodPost, "/admin/health?instance=t&healthy=true"); r.status != http.StatusOK {
		t.Fatalf("POST /admin/health?healthy=true = %d %q", r.status, r.body)
	}
	c, hello := mustDialTCP(ctx, t, addr)
	if got, err := c.echo("back"); err != nil || got != "back" || hello != "hello t us-east us-east-b\n" {
		t.Errorf("after healthy again: hello %q, echo %q, %v", hello, got, err)
	}
	if st, _ := s.Stats("t"); !st.Healthy || st.Conns != 2 || st.Streams != 2 {
		t.Errorf("stats: healthy %v conns %d streams %d, want true, 2, 2", st.Healthy, st.Conns, st.Streams)
	}
}

// TestTCPCapacity checks that a connection waits for a slot before its
// hello and that one finding the queue full is closed without a hello.
func TestTCPCapacity(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{tcpInstance("t", Capacity{MaxConcurrency: 1, Queue: 1})}}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	addr, lim := s.Addr("t"), s.find("t").lim

	first, _ := mustDialTCP(ctx, t, addr)
	queued, err := dialTCP(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer queued.Close()
	if err := lim.waitFor(ctx, func(_, q int) bool { return q == 1 }); err != nil {
		t.Fatal(err)
	}
	rejected, err := dialTCP(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rejected.Close()
	if b, err := rejected.r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("connection beyond the queue: read %q, %v; want EOF without a hello", b, err)
	}
	first.Close()
	if hello, err := queued.r.ReadString('\n'); err != nil || hello != "hello t us-east us-east-b\n" {
		t.Errorf("queued connection once the slot is free: %q, %v", hello, err)
	}
	if st, _ := s.Stats("t"); st.Rejected != 1 || st.Streams != 2 || st.MaxQueueLen != 1 {
		t.Errorf("stats: rejected %d streams %d max_queue_len %d; want 1, 2, 1", st.Rejected, st.Streams, st.MaxQueueLen)
	}
}

// TestTCPDelay checks on a fake clock that a far client waits the RTT for
// its hello and RTT + service time for each echo.
func TestTCPDelay(t *testing.T) {
	clk := newFakeClock()
	const rtt, serviceTime = 30 * time.Millisecond, 5 * time.Millisecond
	s := startServer(t, Config{
		Instances: []InstanceConfig{tcpInstance("t", Capacity{MaxConcurrency: 1, ServiceTime: serviceTime})},
		Delays:    []DelayRule{mustRule(t, "127.0.1.0/24=30ms")},
	}, clk)
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, 3)}}
	nc, err := d.DialContext(ctx, "tcp", s.Addr("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(defaultTestTimeout))
	c := &tcpConn{Conn: nc, r: bufio.NewReader(nc)}

	advanceExactly(ctx, t, clk, "hello", rtt)
	if hello, err := c.r.ReadString('\n'); err != nil || hello != "hello t us-east us-east-b\n" {
		t.Fatalf("hello: %q, %v", hello, err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	advanceExactly(ctx, t, clk, "echo", rtt+serviceTime)
	if b, err := c.r.ReadByte(); err != nil || b != 'x' {
		t.Fatalf("echo: %q, %v", b, err)
	}
	if st, _ := s.Stats("t"); st.BySource["127.0.1.0/24"].Streams != 1 || st.Messages != 1 {
		t.Errorf("stats: by_source %v messages %d, want 1 stream from 127.0.1.0/24 and 1 message", st.BySource, st.Messages)
	}
}

// TestTCPReopenFails checks that turning a tcp instance healthy again fails
// with 500, and leaves it unhealthy, when its listener cannot be reopened.
func TestTCPReopenFails(t *testing.T) {
	s, err := New(Config{Instances: []InstanceConfig{tcpInstance("t", DefaultCapacity())}, AdminAddr: "127.0.0.1:0",
		ShutdownTimeout: defaultTestTimeout}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	errTaken := errors.New("address taken")
	s.frontends[0].(*tcpFrontend).listen = func(string) (net.Listener, error) { return nil, errTaken }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	if r := adminDo(t, s, http.MethodPost, "/admin/health?instance=t&healthy=false"); r.status != http.StatusOK {
		t.Fatalf("POST healthy=false = %d %q", r.status, r.body)
	}
	r := adminDo(t, s, http.MethodPost, "/admin/health?instance=t&healthy=true")
	if want := "instance t: set healthy=true: reopen listener: address taken\n"; r.status != http.StatusInternalServerError || r.body != want {
		t.Errorf("POST healthy=true = %d %q, want 500 %q", r.status, r.body, want)
	}
	if st, _ := s.Stats("t"); st.Healthy {
		t.Errorf("instance healthy after a failed reopen")
	}
	if err := s.SetHealthy("t", true); !errors.Is(err, errTaken) {
		t.Errorf("SetHealthy(t, true) = %v, want %v", err, errTaken)
	}
}
