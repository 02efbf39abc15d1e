package gfe

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
)

// The slow-upload tests of the request path (the second security review):
// a client that trickles its body, never pausing as long as the listener's
// request_body_timeout but past the route timeout, is answered 408 at the
// route timeout and never counts against the backend, on the fast path
// and on net/http's, over HTTP/1.1 and h2c.

// uploadRouteTimeout is the route timeout of slowUploadConfig: short, so
// that the trickles outlast it; long enough that a loaded machine answers
// an honest request well within it.
const uploadRouteTimeout = time.Second

// slowUploadConfig is outlierConfig with the route timeout
// uploadRouteTimeout.
func slowUploadConfig(t *testing.T, addrs ...string) *config.Config {
	t.Helper()
	var b strings.Builder
	writeEastInstances(&b, addrs)
	fmt.Fprintf(&b, `services:
  - name: web
    policy: round_robin
    backends:
      - {group: east, max_rate_per_instance: 100000}
    outlier_detection: {consecutive_5xx: 3, consecutive_connect_failures: 3, max_ejection_percent: 100}
routes:
  - {host: "*", path_prefix: /, service: web, timeout: %v}
`, uploadRouteTimeout)
	c, err := config.Parse([]byte(b.String()), "uploads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// trickleLen is the declared body length of a trickling upload, and
// trickleEvery the pause between two of its bytes: a byte every 50 ms is
// far under request_body_timeout (10 s, and on the gfe's fake clock, which
// these tests do not move), and the whole body would take 4 s, four route
// timeouts.
const (
	trickleLen   = 80
	trickleEvery = 50 * time.Millisecond
)

// trickle writes one byte of body with send every trickleEvery until
// n bytes are sent or stop is closed. It is the attack's pacing, not a
// synchronisation.
func trickle(n int, stop <-chan struct{}, send func() error) {
	t := time.NewTicker(trickleEvery)
	defer t.Stop()
	for range n {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if send() != nil {
			return
		}
	}
}

// trickleHTTP1 sends an HTTP/1.1 POST whose body (Content-Length, or
// chunked) trickles, and returns the status of its answer and whether the
// answer closes the connection.
func trickleHTTP1(addr string, chunked bool) (int, bool, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, false, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	head := "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(trickleLen) + "\r\n\r\n"
	if chunked {
		head = "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	}
	first := "x"
	if chunked {
		first = "1\r\nx\r\n"
	}
	if _, err := io.WriteString(c, head+first); err != nil {
		return 0, false, err
	}
	stop := make(chan struct{})
	var mu sync.Mutex // writes of the trickle and of nothing else
	go trickle(trickleLen-1, stop, func() error {
		mu.Lock()
		defer mu.Unlock()
		b := "y"
		if chunked {
			b = "1\r\ny\r\n"
		}
		_, err := io.WriteString(c, b)
		return err
	})
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	close(stop)
	if err != nil {
		return 0, false, err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Close, nil
}

// trickleH2C sends an h2c POST whose body trickles in one-byte DATA frames
// and returns the :status of its answer ("reset CODE" for a stream reset).
func trickleH2C(addr string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	var mu sync.Mutex // the framer's writes
	write := func(f func() error) error {
		mu.Lock()
		defer mu.Unlock()
		return f()
	}
	write(func() error { return fr.WriteSettings() })
	block := headerBlock([][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/upload"}, {"content-length", strconv.Itoa(trickleLen)}})
	write(func() error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
	})
	stop := make(chan struct{})
	defer close(stop)
	go trickle(trickleLen, stop, func() error {
		return write(func() error { return fr.WriteData(1, false, []byte("y")) })
	})
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "", err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				write(func() error { return fr.WriteSettingsAck() })
			}
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, hf := range fields {
				if hf.Name == ":status" {
					return hf.Value, nil
				}
			}
		case *http2.RSTStreamFrame:
			return "reset " + f.ErrCode.String(), nil
		}
	}
}

// TestSlowUploadPastRouteTimeoutSparesBackends: twenty clients per path
// (the fast path's Content-Length bodies, net/http's chunked ones, and
// h2c) trickle their bodies a byte every 50 ms, under
// request_body_timeout but past the 1 s route timeout. Each is answered
// 408 — the gfe was waiting for the client, not for the backend — and
// counted as the client's (spillway_gfe_client_errors_total
// body_timeout); no backend is ejected or charged an error, and both keep
// their share of the requests that follow.
func TestSlowUploadPastRouteTimeoutSparesBackends(t *testing.T) {
	b1, b2 := newPathBackend(t), newPathBackend(t)
	e := startEdge(t, slowUploadConfig(t, b1.addr(), b2.addr()), time.Second)
	clk := e.clk.(*clock.Fake)
	addr := e.ListenAddr().String()
	const clients = 20
	cases := []struct {
		name string
		send func() (string, error) // the answer's status, with ",close" when it closes the connection
	}{
		{"fast path, Content-Length", func() (string, error) {
			code, closed, err := trickleHTTP1(addr, false)
			return fmt.Sprintf("%d,close=%v", code, closed), err
		}},
		{"net/http, chunked", func() (string, error) {
			code, closed, err := trickleHTTP1(addr, true)
			return fmt.Sprintf("%d,close=%v", code, closed), err
		}},
		{"net/http, h2c", func() (string, error) {
			s, err := trickleH2C(addr)
			return s + ",close=true", err // h2 has no Connection: close
		}},
	}
	total := 0.0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, clients)
			for range clients {
				go func() {
					s, err := tc.send()
					if err != nil {
						s = "error: " + err.Error()
					}
					got <- s
				}()
			}
			answers := map[string]int{}
			for range clients {
				answers[<-got]++
			}
			want := map[string]int{"408,close=true": clients}
			if fmt.Sprint(answers) != fmt.Sprint(want) {
				t.Errorf("answers of %d trickling uploads = %v, want %v", clients, answers, want)
			}
			total += clients
		})
	}

	checkBackendsSpared(t, e, clk, fmt.Sprintf("after %v slow uploads", total))
	if got := counterValue(t, e.reg, "spillway_gfe_client_errors_total", "body_timeout"); got != total {
		t.Errorf("client errors body_timeout = %v, want %v", got, total)
	}
	checkShareAfter(t, addr, b1, b2, "the slow uploads")
}
