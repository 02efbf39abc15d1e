package httpproxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
)

// heldH2CBackend is an HTTP/1.1 and h2c backend that holds every request
// until its client goes away, and sends the path of each on arrived.
func heldH2CBackend(t *testing.T) (addr string, arrived <-chan string) {
	t.Helper()
	ch := make(chan string, 16)
	b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch <- r.URL.Path
		<-r.Context().Done()
	}))
	b.Config.Protocols = new(http.Protocols)
	b.Config.Protocols.SetHTTP1(true)
	b.Config.Protocols.SetUnencryptedHTTP2(true)
	b.Start()
	t.Cleanup(func() { b.CloseClientConnections(); b.Close() })
	return strings.TrimPrefix(b.URL, "http://"), ch
}

// h2cFront serves e's proxy over HTTP/1.1 and h2c, and returns its URL and
// a client that speaks h2c to it.
func h2cFront(t *testing.T, e *testGFE) (string, *http.Client) {
	t.Helper()
	front := httptest.NewUnstartedServer(e.proxy)
	front.Config.Protocols = new(http.Protocols)
	front.Config.Protocols.SetHTTP1(true)
	front.Config.Protocols.SetUnencryptedHTTP2(true)
	front.Start()
	t.Cleanup(front.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return front.URL, &http.Client{Transport: tr, Timeout: securityTestTimeout}
}

// grpcCall sends a gRPC-looking POST (content-type application/grpc) to
// url over h2c with ctx and returns its status, 0 when it failed.
func grpcCall(ctx context.Context, cl *http.Client, url string) int {
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := cl.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestGRPCRouteTimeoutOnlyForGRPCServices: content-type application/grpc
// over h2c exempts a request from its route's timeout only on a service the
// config declares gRPC (health_check.protocol grpc). To a plain HTTP
// service such a request gets 504 at the route timeout; a gRPC call to a
// gRPC service sent before it is still open after that 504.
func TestGRPCRouteTimeoutOnlyForGRPCServices(t *testing.T) {
	addr, arrived := heldH2CBackend(t)
	regions := []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{addr}}}}}
	plain, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "", ", timeout: 1s"))
	grpcSvc, _ := sessionEdge(t, gfetest.SessionConfig(t, "round_robin", regions, "health_check: {protocol: grpc}", ", timeout: 1s"))
	plainURL, plainClient := h2cFront(t, plain)
	grpcURL, grpcClient := h2cFront(t, grpcSvc)

	// The call to the gRPC service first: its route timeout passes first.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streamDone := make(chan int, 1)
	go func() { streamDone <- grpcCall(ctx, grpcClient, grpcURL+"/grpc.Svc/Stream") }()
	if p := <-arrived; p != "/grpc.Svc/Stream" {
		t.Fatalf("backend got %s first, want the gRPC service's call", p)
	}
	plainDone := make(chan int, 1)
	go func() { plainDone <- grpcCall(context.Background(), plainClient, plainURL+"/grpc.Svc/Call") }()
	if p := <-arrived; p != "/grpc.Svc/Call" {
		t.Fatalf("backend got %s, want the plain service's call", p)
	}
	if code := <-plainDone; code != http.StatusGatewayTimeout {
		t.Errorf("content-type application/grpc over h2c to a plain HTTP service: %d, want 504 at the route timeout", code)
	}
	select {
	case code := <-streamDone:
		t.Errorf("the gRPC call to the gRPC service ended (%d) by the time its route timeout had passed, want it open", code)
	default:
		cancel()
		<-streamDone
	}
}
