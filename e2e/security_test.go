package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/topology"
)

// TestRouteTimeoutCannotBeSwitchedOff (issue #10, finding 6): a client
// cannot switch the route timeout off with an Upgrade header or
// content-type application/grpc over HTTP/1.1: against backends that hold
// every request, both get 504 at the route timeout (1 s), and a SIGTERM
// with such requests in flight drains cleanly — the gfe exits 0 as soon as
// they end, not after the whole drain timeout (10 s) with status 1.
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
