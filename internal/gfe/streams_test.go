package gfe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// echoServer is a gRPC Echo backend: it answers with its name in header
// metadata, in a trailer and in every reply.
type echoServer struct {
	echopb.UnimplementedEchoServer
	name    string
	streams chan struct{} // one value per Stream call started
}

func (s *echoServer) Unary(ctx context.Context, in *echopb.EchoRequest) (*echopb.EchoReply, error) {
	grpc.SetHeader(ctx, metadata.Pairs("x-spillway-backend", s.name))
	grpc.SetTrailer(ctx, metadata.Pairs("x-spillway-backend", s.name))
	return &echopb.EchoReply{Message: in.Message, Instance: s.name, Seq: 1}, nil
}

func (s *echoServer) Stream(st echopb.Echo_StreamServer) error {
	st.SetHeader(metadata.Pairs("x-spillway-backend", s.name))
	st.SetTrailer(metadata.Pairs("x-spillway-backend", s.name))
	s.streams <- struct{}{}
	var seq uint64
	for {
		in, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		seq++
		if err := st.Send(&echopb.EchoReply{Message: in.Message, Instance: s.name, Seq: seq}); err != nil {
			return err
		}
	}
}

func newEchoServer(t *testing.T, name string) (*echoServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{name: name, streams: make(chan struct{}, 100)}
	gs := grpc.NewServer()
	echopb.RegisterEchoServer(gs, s)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return s, ln.Addr().String()
}

// TestGRPCThroughGFE sends unary and streaming calls through the gfe (h2c
// from the client) to real gRPC backends, and checks header metadata,
// trailers, and that a stream is ended when its backend turns unhealthy
// while a stream to a healthy backend goes on.
func TestGRPCThroughGFE(t *testing.T) {
	s1, a1 := newEchoServer(t, "g1")
	s2, a2 := newEchoServer(t, "g2")
	c := edgeConfig(t, []string{a1, a2}, "")
	e := startEdge(t, c, 5*time.Second)
	cc, err := grpc.NewClient("passthrough:///"+e.ListenAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := echopb.NewEchoClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), lnTestTimeout)
	defer cancel()

	seen := map[string]int{}
	for i := range 10 {
		var header, trailer metadata.MD
		r, err := client.Unary(ctx, &echopb.EchoRequest{Message: fmt.Sprint(i)}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil {
			t.Fatalf("Unary: %v", err)
		}
		if r.Message != fmt.Sprint(i) || header.Get("x-spillway-backend")[0] != r.Instance || trailer.Get("x-spillway-backend")[0] != r.Instance {
			t.Fatalf("Unary = %v, header %v, trailer %v; want the message back and the instance in both", r, header, trailer)
		}
		seen[r.Instance]++
	}
	if seen["g1"] != 5 || seen["g2"] != 5 {
		t.Errorf("unary calls per backend = %v, want 5 each", seen)
	}

	// Two streams, one on each backend (round robin).
	type open struct {
		st       echopb.Echo_StreamClient
		instance string
	}
	var streams []open
	for range 2 {
		st, err := client.Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := st.Send(&echopb.EchoRequest{Message: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
			r, err := st.Recv()
			if err != nil || r.Seq != uint64(i+1) {
				t.Fatalf("stream reply %d = %v, %v", i, r, err)
			}
		}
		h, _ := st.Header()
		streams = append(streams, open{st, h.Get("x-spillway-backend")[0]})
	}
	<-s1.streams
	<-s2.streams
	if streams[0].instance == streams[1].instance {
		t.Fatalf("both streams on %s, want one per backend", streams[0].instance)
	}
	if n := e.proxy.OpenStreams(); n != 2 {
		t.Errorf("tracked streams = %d, want 2", n)
	}

	// A clean end keeps the trailers.
	bye, err := client.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bye.Send(&echopb.EchoRequest{Message: "x"})
	bye.Recv()
	bye.CloseSend()
	if _, err := bye.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after CloseSend = %v, want EOF", err)
	}
	if tr := bye.Trailer(); len(tr.Get("x-spillway-backend")) != 1 {
		t.Errorf("stream trailer = %v, want x-spillway-backend", tr)
	}

	// g1 turns unhealthy: its stream ends, g2's goes on.
	unhealthy := a1
	gone, stays := streams[0], streams[1]
	if gone.instance != "g1" {
		gone, stays = stays, gone
	}
	if err := e.ApplySnapshot(snapshot.FromConfig("v2", c, unhealthy)); err != nil {
		t.Fatal(err)
	}
	if _, err := gone.st.Recv(); err == nil {
		t.Error("stream to the unhealthy backend got a reply, want it ended")
	}
	if err := stays.st.Send(&echopb.EchoRequest{Message: "still"}); err != nil {
		t.Fatalf("stream to the healthy backend: %v", err)
	}
	if r, err := stays.st.Recv(); err != nil || r.Message != "still" || r.Instance != stays.instance {
		t.Errorf("stream to the healthy backend after the change = %v, %v; want its echo from %s", r, err, stays.instance)
	}
}

// TestUpgradeEndsWithItsBackend tunnels upgraded connections through the
// gfe and checks that those to a backend that becomes unavailable are
// closed while the others go on.
func TestUpgradeEndsWithItsBackend(t *testing.T) {
	b1, b2 := newHTTPBackend(t, "b1"), newHTTPBackend(t, "b2")
	c := edgeConfig(t, []string{b1.addr(), b2.addr()}, "")
	e := startEdge(t, c, 5*time.Second)

	type tunnel struct {
		c       net.Conn
		r       *bufio.Reader
		backend string
	}
	dial := func() tunnel {
		t.Helper()
		conn, err := net.Dial("tcp", e.ListenAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(lnTestTimeout))
		fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v, %v", resp, err)
		}
		return tunnel{conn, r, resp.Header.Get("X-Backend")}
	}
	echo := func(tn tunnel, msg string) error {
		if _, err := fmt.Fprintln(tn.c, msg); err != nil {
			return err
		}
		got, err := tn.r.ReadString('\n')
		if err != nil {
			return err
		}
		if got != msg+"\n" {
			return fmt.Errorf("echo %q, want %q", got, msg)
		}
		return nil
	}
	var tunnels []tunnel
	per := map[string]int{}
	for range 4 {
		tn := dial()
		if err := echo(tn, "hi"); err != nil {
			t.Fatal(err)
		}
		tunnels = append(tunnels, tn)
		per[tn.backend]++
	}
	if per["b1"] != 2 || per["b2"] != 2 {
		t.Fatalf("tunnels per backend = %v, want 2 each", per)
	}

	// b1 leaves the config: its tunnels close, b2's go on.
	if err := e.ApplySnapshot(snapshot.FromConfig("v2", edgeConfig(t, []string{b2.addr()}, ""))); err != nil {
		t.Fatal(err)
	}
	closed, alive := 0, 0
	for _, tn := range tunnels {
		err := echo(tn, "again")
		switch {
		case tn.backend == "b1" && err != nil:
			closed++
		case tn.backend == "b2" && err == nil:
			alive++
		default:
			t.Errorf("tunnel to %s after b1 left: echo error %v", tn.backend, err)
		}
	}
	if closed != 2 || alive != 2 {
		t.Errorf("after b1 left: %d tunnels to b1 closed, %d to b2 alive; want 2 and 2", closed, alive)
	}
	waitUntil(t, "b1's tunnels to end at the backend", func() bool { return b1.tunnels.Load() == 0 })
	if n := b2.tunnels.Load(); n != 2 {
		t.Errorf("b2 has %d open tunnels, want 2", n)
	}
}
