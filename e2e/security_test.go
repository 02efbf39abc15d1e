package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
	"github.com/spillway-lb/spillway/internal/topology"
)

// TestRouteTimeoutCannotBeSwitchedOff (the first security review, finding 6:
// SECURITY.md): a client cannot switch the route timeout off with an Upgrade
// header or content-type application/grpc over HTTP/1.1: against backends
// that hold every request, both get 504 at the route timeout (1 s), and a
// SIGTERM with such requests in flight drains cleanly — the gfe exits 0 as
// soon as they end, not after the whole drain timeout (10 s) with status 1.
func TestRouteTimeoutCannotBeSwitchedOff(t *testing.T) {
	spec := protoSpec(63)
	spec.GFEArgs = append(spec.GFEArgs, "--drain-timeout", "10s")
	spec.EditConfig = func(y string) string {
		return strings.Replace(y, "service: web}", "service: web, timeout: 1s}", 1)
	}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	addr := gf.SourceIP + ":8080"
	for _, a := range c.Instances["us-east"] {
		postAdmin(t, "http://"+a+"/admin/hold?on=true")
	}
	headers := map[string]string{
		"upgrade": "Connection: Upgrade\r\nUpgrade: websocket\r\n",
		"grpc":    "Content-Type: application/grpc\r\n",
	}
	for name, h := range headers {
		start := time.Now()
		code := rawStatus(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n"+h+"\r\n")
		took := time.Since(start)
		if code != http.StatusGatewayTimeout || took > 5*time.Second {
			t.Errorf("%s request to a backend that holds it: %d after %v, want 504 after the route timeout (1s)", name, code, took.Round(time.Millisecond))
		}
	}

	codes := make(chan int, len(headers))
	for _, h := range headers {
		go func() { codes <- rawStatus(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n"+h+"\r\n") }()
	}
	err := topology.WaitFor(context.Background(), 10*time.Second, func() (bool, error) {
		n, err := regionInFlight(c, "us-east")
		if err != nil {
			return false, err
		}
		return n == len(headers), fmt.Errorf("%d in flight", n)
	})
	if err != nil {
		t.Fatal(err)
	}
	sig := time.Now()
	if err := gf.Proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gf.Proc.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("gfe still running 15s after SIGTERM")
	}
	exited := time.Since(sig)
	for range headers {
		if code := <-codes; code != http.StatusGatewayTimeout {
			t.Errorf("request in flight at SIGTERM: %d, want 504", code)
		}
	}
	if err := gf.Proc.Err(); err != nil || exited > 5*time.Second {
		t.Errorf("gfe exit after SIGTERM: %v after %v; want status 0 within 5s (route timeout 1s, drain timeout 10s)", err, exited.Round(time.Millisecond))
	}
}

// TestGRPCExemptionAndBoundedDrain: content-type application/grpc over
// h2c exempts a request from the route timeout only on a gRPC service
// (health_check.protocol grpc). Against backends that hold every request,
// such a request to the plain HTTP service gets 504 at its route timeout
// (1 s), while a bidi stream to the gRPC service, opened before it and
// under the same route timeout, still echoes after that 504. A SIGTERM
// with the stream still open drains for --drain-timeout (3 s), cuts it and
// exits 0 — not 1, as a held request made it before.
func TestGRPCExemptionAndBoundedDrain(t *testing.T) {
	const netN = 67
	grpcAddrs, _ := startGRPCBackends(t, netN, 1)
	spec := protoSpec(netN)
	spec.GFEArgs = append(spec.GFEArgs, "--drain-timeout", "3s")
	spec.EditConfig = func(y string) string {
		y = strings.Replace(y, "service: web}", "service: web, timeout: 1s}", 1)
		return strings.Replace(withGRPCService(y, grpcAddrs), "service: echo}", "service: echo, timeout: 1s}", 1)
	}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	addr := gf.SourceIP + ":8080"
	for _, a := range c.Instances["us-east"] {
		postAdmin(t, "http://"+a+"/admin/hold?on=true")
	}

	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := echopb.NewEchoClient(cc).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echo := func(msg string) error {
		if err := st.Send(&echopb.EchoRequest{Message: msg}); err != nil {
			return err
		}
		r, err := st.Recv()
		if err == nil && r.Message != msg {
			err = fmt.Errorf("echo %q, want %q", r.Message, msg)
		}
		return err
	}
	if err := echo("first"); err != nil {
		t.Fatalf("gRPC stream: %v", err)
	}

	// The same content-type to the plain HTTP service, over h2c.
	var l connLog
	req, _ := http.NewRequest("POST", "http://"+addr+"/x", strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	start := time.Now()
	resp, err := h2Client(&l, nil, "").Do(req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("application/grpc to the plain service: %v after %v, want 504 after the route timeout (1s)", err, took.Round(time.Millisecond))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || resp.ProtoMajor != 2 {
		t.Errorf("application/grpc over h2c to the plain service: %s %d after %v, want HTTP/2 504 at the route timeout (1s)", resp.Proto, resp.StatusCode, took.Round(time.Millisecond))
	}
	if err := echo("after the plain request's 504"); err != nil {
		t.Errorf("gRPC stream to the gRPC service, opened before the plain request timed out: %v; want it open", err)
	}

	sig := time.Now()
	if err := gf.Proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gf.Proc.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("gfe still running 15s after SIGTERM")
	}
	exited := time.Since(sig)
	if err := gf.Proc.Err(); err != nil || exited > 8*time.Second {
		t.Errorf("gfe exit after SIGTERM with a gRPC stream open: %v after %v; want status 0 once the drain timeout (3s) cut it", err, exited.Round(time.Millisecond))
	}
	if _, err := st.Recv(); err == nil {
		t.Error("the gRPC stream still answers after the gfe stopped")
	}
	t.Logf("plain application/grpc request: %d after %v; gfe exited %v after SIGTERM with the stream open", resp.StatusCode, took.Round(time.Millisecond), exited.Round(time.Millisecond))
}
