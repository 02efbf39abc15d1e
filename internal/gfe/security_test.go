package gfe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
)

// The security tests of the client-facing request path (the first security
// review, findings 3, 5 and 10: SECURITY.md): each attack is sent as an
// attacker would, over a real listener of a real gfe on loopback, to real
// backends.

// pathBackend is an HTTP/1.1 and h2c backend that counts the requests it
// got by path; it reads every request body to its end and answers 200
// with the number of bytes read.
type pathBackend struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string]int
	all  atomic.Int64
}

func newPathBackend(t *testing.T) *pathBackend {
	t.Helper()
	b := &pathBackend{hits: map[string]int{}}
	b.srv = startH2CBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.all.Add(1)
		b.mu.Lock()
		b.hits[r.URL.Path]++
		b.mu.Unlock()
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	}))
	return b
}

func (b *pathBackend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

func (b *pathBackend) count(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[path]
}

// outlierConfig is one round-robin service "web" over addrs whose outlier
// detection ejects after 3 failures in a row, any share of the group.
func outlierConfig(t *testing.T, addrs ...string) *config.Config {
	t.Helper()
	var b strings.Builder
	writeEastInstances(&b, addrs)
	b.WriteString(`services:
  - name: web
    policy: round_robin
    backends:
      - {group: east, max_rate_per_instance: 100000}
    outlier_detection: {consecutive_5xx: 3, consecutive_connect_failures: 3, max_ejection_percent: 100}
routes:
  - {host: "*", path_prefix: /, service: web}
`)
	c, err := config.Parse([]byte(b.String()), "security.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sendRaw writes raw on a new connection to addr and returns the
// connection and a reader of its answers. The connection is closed when
// the test ends.
func sendRaw(t *testing.T, addr, raw string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// TestClientBodyFailuresSpareBackends (finding 3): twenty requests whose
// body fails on the client's side — ten with malformed chunked framing, ten
// whose declared body stalls — are answered 400 and 408 by the gfe, never
// count against a backend (no outlier run, no ejection, no backend error),
// and every backend keeps its traffic.
func TestClientBodyFailuresSpareBackends(t *testing.T) {
	b1, b2 := newPathBackend(t), newPathBackend(t)
	e := startEdge(t, outlierConfig(t, b1.addr(), b2.addr()), time.Second)
	clk := e.clk.(*clock.Fake)
	addr := e.ListenAddr().String()

	for i := range 10 {
		_, br := sendRaw(t, addr, "POST /malformed HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZZ\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Fatalf("malformed chunked body %d: %v %v, want 400 and Connection: close", i, resp, err)
		}
	}
	for i := range 10 {
		_, br := sendRaw(t, addr, "POST /stalled HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
		answer := make(chan *http.Response, 1)
		go func() {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				resp = nil
			}
			answer <- resp
		}()
		// The gfe waits for the rest of the body on its clock: advance it
		// a second at a time until the answer comes.
		start := clk.Now()
		var resp *http.Response
		deadline := time.Now().Add(lnTestTimeout)
		for resp == nil {
			select {
			case resp = <-answer:
				if resp == nil {
					t.Fatalf("stalled body %d: no answer", i)
				}
			case <-time.After(5 * time.Millisecond): // polling for the answer, not a delay the test relies on
				if time.Now().After(deadline) {
					t.Fatalf("stalled body %d: no answer %v after it stalled", i, clk.Since(start))
				}
				clk.Advance(time.Second)
			}
		}
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Fatalf("stalled body %d: %d (close %v), want 408 and Connection: close", i, resp.StatusCode, resp.Close)
		}
		if waited := clk.Since(start); waited < config.DefaultListener(config.ListenerHTTP).RequestBodyTimeout {
			t.Errorf("stalled body %d answered after %v, want request_body_timeout (10s)", i, waited)
		}
	}

	checkBackendsSpared(t, e, clk, "after 20 client failures")
	if got := counterValue(t, e.reg, "spillway_gfe_client_errors_total", "bad_body") + counterValue(t, e.reg, "spillway_gfe_client_errors_total", "body_timeout"); got != 20 {
		t.Errorf("client errors = %v, want 20", got)
	}
	// Both backends still get their share.
	checkShareAfter(t, addr, b1, b2, "the attack")
}

// counterValue returns the value of counter name summed over its series
// that have a label of value label ("" for every series), from reg.
func counterValue(t *testing.T, reg prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := label == ""
			for _, lp := range m.GetLabel() {
				ok = ok || lp.GetValue() == label
			}
			if ok {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestContentLengthWithTransferEncoding (finding 10): a request with both
// Content-Length and Transfer-Encoding is answered, and its connection
// closed after the answer (RFC 9112 §6.1): the request pipelined behind it
// on the same connection is never served.
func TestContentLengthWithTransferEncoding(t *testing.T) {
	b := newPathBackend(t)
	e := startEdge(t, outlierConfig(t, b.addr()), time.Second)
	_, br := sendRaw(t, e.ListenAddr().String(),
		"POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
			"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 400 {
		t.Errorf("CL+TE request: %d, want 200 (served) or 400", resp.StatusCode)
	}
	if !resp.Close {
		t.Errorf("CL+TE request answered without Connection: close")
	}
	if second, err := http.ReadResponse(br, nil); err == nil {
		second.Body.Close()
		t.Errorf("the pipelined request got an answer (%d) on the connection of a CL+TE request, want the connection closed", second.StatusCode)
	}
	if n := b.count("/smuggled"); n != 0 {
		t.Errorf("the pipelined request reached the backend %d times, want 0", n)
	}
}

// TestHTTP2RapidReset (finding 5, CVE-2023-44487): a client that opens and
// resets streams as fast as it can on one h2c connection gets it closed
// (reset budget), few of its requests reach a backend, and they do not
// count as the service's demand.
func TestHTTP2RapidReset(t *testing.T) {
	b := newPathBackend(t)
	e := startEdge(t, outlierConfig(t, b.addr()), time.Second)
	c, err := net.Dial("tcp", e.ListenAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	io.WriteString(c, http2.ClientPreface)
	var out bytes.Buffer
	fr := http2.NewFramer(&out, c)
	fr.WriteSettings()
	block := headerBlock([][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/reset"}})
	const streams = 5000
	for i := range streams {
		id := uint32(2*i + 1)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
		fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	// Write the flood in one go, and read what comes back until the gfe
	// closes the connection.
	writeErr := make(chan error, 1)
	go func() {
		_, err := c.Write(out.Bytes())
		writeErr <- err
	}()
	var goaway *http2.GoAwayFrame
	var readErr error
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			readErr = err
			break
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goaway = g
		}
	}
	var ne net.Error
	if errors.As(readErr, &ne) && ne.Timeout() {
		t.Fatalf("the connection of %d HEADERS+RST_STREAM was still open after %v", streams, lnTestTimeout)
	}
	<-writeErr
	hits := b.all.Load()
	arrivals := e.Table().Services["web"].Meters().Arrivals()
	t.Logf("rapid reset: %d streams sent, GOAWAY %v, read error %v; %d reached the backend, %d counted as demand; %v connections closed by the budget",
		streams, goaway, readErr, hits, arrivals, counterValue(t, e.reg, "spillway_gfe_http2_reset_budget_closes_total", ""))
	if hits > 50 {
		t.Errorf("%d requests of the flood reached the backend, want at most 50", hits)
	}
	if arrivals > hits {
		t.Errorf("%d requests counted as demand, more than the %d that reached a backend", arrivals, hits)
	}
	if n := counterValue(t, e.reg, "spillway_gfe_http2_reset_budget_closes_total", ""); n == 0 && goaway == nil {
		t.Errorf("the connection was closed, but neither by the reset budget nor by a GOAWAY")
	}
}

// TestQuietGRPCStreamKeepsItsBody: request_body_timeout does not apply to
// a gRPC call over HTTP/2: a bidi stream whose client is quiet for longer
// goes on.
func TestQuietGRPCStreamKeepsItsBody(t *testing.T) {
	_, a1 := newEchoServer(t, "g1")
	e := startEdge(t, edgeConfig(t, []string{a1}, ""), time.Second)
	clk := e.clk.(*clock.Fake)
	cc, err := grpc.NewClient("passthrough:///"+e.ListenAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), lnTestTimeout)
	defer cancel()
	st, err := echopb.NewEchoClient(cc).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := st.Send(&echopb.EchoRequest{Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if r, err := st.Recv(); err != nil || r.Seq != uint64(i+1) {
			t.Fatalf("stream reply %d after a quiet minute = %v, %v", i, r, err)
		}
		clk.Advance(time.Minute) // quiet for six request_body_timeouts
	}
}

// TestStalledHTTP2BodySparesBackends (finding 3 over h2c): an HTTP/2
// request whose declared body stalls is answered 408 after
// request_body_timeout, on the stream, and does not count against the
// backend.
func TestStalledHTTP2BodySparesBackends(t *testing.T) {
	b := newPathBackend(t)
	e := startEdge(t, outlierConfig(t, b.addr()), time.Second)
	clk := e.clk.(*clock.Fake)
	c, err := net.Dial("tcp", e.ListenAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fr := h2cHandshake(c)
	block := headerBlock([][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/stalled"}, {"content-length", "100"}})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
	fr.WriteData(1, false, []byte("0123456789"))

	status := make(chan string, 1)
	go func() {
		dec := hpack.NewDecoder(4096, nil)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				status <- "read error: " + err.Error()
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.HeadersFrame:
				fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
				for _, hf := range fields {
					if hf.Name == ":status" {
						status <- hf.Value
						return
					}
				}
			case *http2.RSTStreamFrame:
				status <- "reset " + f.ErrCode.String()
				return
			}
		}
	}()
	start := clk.Now()
	var got string
	deadline := time.Now().Add(lnTestTimeout)
	for got == "" {
		select {
		case got = <-status:
		case <-time.After(5 * time.Millisecond): // polling for the answer, not a delay the test relies on
			if time.Now().After(deadline) {
				t.Fatalf("no answer %v after the body stalled", clk.Since(start))
			}
			clk.Advance(time.Second)
		}
	}
	if got != "408" {
		t.Fatalf("stalled h2 body: %s, want :status 408", got)
	}
	if waited := clk.Since(start); waited < 10*time.Second {
		t.Errorf("answered after %v, want request_body_timeout (10s)", waited)
	}
	for _, h := range e.Table().Services["web"].Outliers().Snapshot(clk.Now()) {
		if h.Ejected || h.Consecutive5xx != 0 {
			t.Errorf("backend %s: ejected %v, run of %d 5xx; want none", h.Name, h.Ejected, h.Consecutive5xx)
		}
	}
	if got := counterValue(t, e.reg, "spillway_gfe_backend_errors_total", ""); got != 0 {
		t.Errorf("backend errors = %v, want 0", got)
	}
}
