package gfe

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/spillway-lb/spillway/config"
)

// resetBatch opens an h2c connection to addr, opens n streams (GET
// /reset), waits until ready reports that they all wait in the pending
// queue, resets them all (RST_STREAM CANCEL) and returns once the gfe has
// read every reset (its answer to a PING sent after them). n stays under
// the connection's reset budget (100). The connection comes from source
// address src, so that batches from distinct addresses also stay under the
// per-address reset budget (the listener's, 200 halving every 30 s).
func resetBatch(t *testing.T, src netip.Addr, addr string, n int, ready func() bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fr := h2cHandshake(c)
	block := headerBlock([][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/reset"}})
	for i := range n {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndStream: true, EndHeaders: true})
	}
	// The gfe's SETTINGS and our ack come first; the frames read here are
	// its SETTINGS, its ack of ours, and nothing else while streams wait.
	waitUntil(t, "the streams to wait in the pending queue", ready)
	for i := range n {
		fr.WriteRSTStream(uint32(2*i+1), http2.ErrCodeCancel)
	}
	fr.WritePing(false, [8]byte{'r', 'e', 's', 'e', 't'})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the gfe's frames after %d resets: %v", n, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if f.IsAck() {
				return
			}
		}
	}
}

// TestResetStreamsAskNoCapacity replays the attack of the second security
// review on a real gfe: with the only instance of an autoscaled service
// busy, ten h2c connections each open 50 streams, let them wait in the
// pending queue, and reset them (under the reset budgets: each connection
// from a loopback address of its own), with a second of the gfe's clock
// between connections. None of the 500 waiters asks
// for capacity: no RequestCapacity call, nothing published as pending
// load. A request that really waits then asks, once it has waited
// DefaultSettle, for 1 + ceil(1/1) = 2 instances. Without the settle rule
// each of the ten batches asked for capacity.
func TestResetStreamsAskNoCapacity(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	cp := &recordingCP{}
	e, clk, g, reg := pendingEdge(t, b, cp, 30*time.Second)
	addr := e.ListenAddr().String()
	first := holdBackend(t, e, b)

	const batches, streams = 10, 50
	for i := range batches {
		src := netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)})
		resetBatch(t, src, addr, streams, func() bool { return e.pending.Waiting() == streams })
		waitUntil(t, "the reset streams to leave the queue", func() bool { return e.pending.Waiting() == 0 })
		clk.Advance(time.Second) // a capacity interval, and two plan steps that publish the load
	}
	if n, _ := waitHist(t, reg, "canceled"); n != batches*streams {
		t.Errorf("pending_wait_seconds{canceled} = %d samples, want %d", n, batches*streams)
	}
	if reqs := cp.requests(); len(reqs) != 0 {
		t.Errorf("%d capacity requests for streams reset while they waited, want 0; the first: %v", len(reqs), reqs[0])
	}
	g.mu.Lock()
	published := g.states["gfe-nyc"].Load["east"].Pending
	g.mu.Unlock()
	if published != 0 {
		t.Errorf("published pending load = %v, want 0", published)
	}
	for _, m := range []string{"spillway_gfe_http2_reset_budget_closes_total", "spillway_gfe_http2_client_reset_budget_closes_total"} {
		if n := counterValue(t, reg, m, ""); n != 0 {
			t.Errorf("%s = %v, want 0: the attack stays under the reset budgets", m, n)
		}
	}

	live := getAsync(e, "/live")
	waitUntil(t, "the live request to wait", func() bool { return e.pending.Waiting() == 1 })
	clk.Advance(100 * time.Millisecond) // it settles (pending.DefaultSettle)
	waitUntil(t, "a capacity request", func() bool { return len(cp.requests()) == 1 })
	req := cp.requests()[0]
	if req.GetWantedInstances() != 2 || req.GetDetail() != "1 requests pending for 0.1s" {
		t.Errorf("capacity request for one waiting request = %d instances, %q; want 2, %q", req.GetWantedInstances(), req.GetDetail(), "1 requests pending for 0.1s")
	}
	close(b.release)
	if a := <-first; a.err != nil || a.code != http.StatusOK {
		t.Fatalf("first request: %d %v", a.code, a.err)
	}
	if a := awaitAnswer(t, clk, live, "the live request served"); a.err != nil || a.code != http.StatusOK {
		t.Fatalf("live request: %d %q %v, want 200", a.code, a.body, a.err)
	}
}

// TestPendingQueueFull: a service whose max_pending_requests is 2 has two
// requests waiting for its busy instance; a third is answered at once 429
// with the Retry-After of a wait that ran out (cold start 1.5s → 2), and
// counted in spillway_gfe_pending_full_total{bound="service"}; the two
// are served as the slot frees.
func TestPendingQueueFull(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	cp := &recordingCP{}
	e, clk, _, reg := pendingEdgeWith(t, b, cp, 30*time.Second, func(c *config.Config) { c.Services[0].MaxPendingRequests = 2 })
	first := holdBackend(t, e, b)
	waiting := []<-chan answer{getAsync(e, "/w1")}
	waitUntil(t, "one request to wait", func() bool { return e.pending.Waiting() == 1 })
	waiting = append(waiting, getAsync(e, "/w2"))
	waitUntil(t, "two requests to wait", func() bool { return e.pending.Waiting() == 2 })

	cl := &http.Client{Timeout: lnTestTimeout} // without the bound it would wait
	resp, err := cl.Get("http://" + e.ListenAddr().String() + "/third")
	if err != nil {
		t.Fatalf("a third request with max_pending_requests 2: %v, want an answer at once", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" || string(body) != "gfe: too many requests are waiting for this service\n" {
		t.Errorf("a third request with max_pending_requests 2: %d, Retry-After %q, %q; want 429, 2, the queue-full message", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if got := counterValue(t, reg, "spillway_gfe_pending_full_total", "service"); got != 1 {
		t.Errorf("spillway_gfe_pending_full_total{bound=service} = %v, want 1", got)
	}
	if got := e.pending.Waiting(); got != 2 {
		t.Errorf("waiting after the refusal = %d, want 2", got)
	}
	close(b.release)
	if a := <-first; a.err != nil || a.code != http.StatusOK {
		t.Fatalf("first request: %d %v", a.code, a.err)
	}
	for i, w := range waiting {
		if a := awaitAnswer(t, clk, w, "a waiting request served"); a.err != nil || a.code != http.StatusOK {
			t.Errorf("waiting request %d: %d %q %v, want 200", i+1, a.code, a.body, a.err)
		}
	}
}
