package gfe

import (
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

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/listeners"
)

// resetBackend is an h2c and HTTP/1.1 backend that counts the requests it
// got and holds those for /hold until their client goes away; it answers
// the others 200 at once.
type resetBackend struct {
	srv     *httptest.Server
	arrived atomic.Int64 // requests for /hold
}

func newResetBackend(t *testing.T) *resetBackend {
	t.Helper()
	b := &resetBackend{}
	b.srv = startH2CBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hold" {
			io.WriteString(w, "ok")
			return
		}
		b.arrived.Add(1)
		<-r.Context().Done()
	}))
	return b
}

func (b *resetBackend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

// resetConn is a raw h2c client connection that opens streams and resets
// them.
type resetConn struct {
	c      net.Conn
	mu     sync.Mutex // serializes writes on fr
	fr     *http2.Framer
	block  []byte        // the HEADERS block of GET /hold
	closed chan struct{} // closed when the gfe closes the connection
}

// dialResetConn opens an h2c connection to addr from src.
func dialResetConn(t *testing.T, addr, src string) *resetConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	block := headerBlock([][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/hold"}})
	rc := &resetConn{c: c, fr: h2cHandshake(c), block: block, closed: make(chan struct{})}
	go func() {
		defer close(rc.closed)
		for {
			f, err := rc.fr.ReadFrame()
			if err != nil {
				return
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				rc.mu.Lock()
				rc.fr.WriteSettingsAck()
				rc.mu.Unlock()
			}
		}
	}()
	return rc
}

// stream opens stream id, waits until a backend got it (arrived reaches
// want) or the gfe closed the connection, and resets it. It reports false
// when the connection was closed first.
func (rc *resetConn) stream(t *testing.T, id uint32, arrived *atomic.Int64, want int64) bool {
	t.Helper()
	rc.mu.Lock()
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block, EndStream: true, EndHeaders: true})
	rc.mu.Unlock()
	deadline := time.Now().Add(lnTestTimeout)
	for arrived.Load() < want {
		select {
		case <-rc.closed:
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %d neither reached the backend nor was its connection closed", id)
		}
		time.Sleep(time.Millisecond) // polling a condition, not a delay the test relies on
	}
	rc.mu.Lock()
	rc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	rc.mu.Unlock()
	return true
}

// TestHTTP2RapidResetAcrossConnections (rapid reset spread over
// connections): one client address resets 99 streams, each after it
// reached a backend, on each of ten h2c connections — under the
// per-connection budget (100) on every one. Its address's budget cuts it
// after DefaultMaxClientEarlyResets: the connection that passes it is
// closed, and each later connection at its first stream, which no backend
// sees; each close is counted. The charge decays on the gfe's clock, and
// another address is served as before.
func TestHTTP2RapidResetAcrossConnections(t *testing.T) {
	const (
		conns   = 10
		perConn = 99
		budget  = listeners.DefaultMaxClientEarlyResets
	)
	b := newResetBackend(t)
	e := startEdge(t, edgeConfig(t, []string{b.addr()}, ""), time.Second)
	addr := e.ListenAddr().String()
	cut := 0 // connections the gfe closed
	for range conns {
		rc := dialResetConn(t, addr, "127.0.0.1")
		for i := range perConn {
			if !rc.stream(t, uint32(2*i+1), &b.arrived, b.arrived.Load()+1) {
				cut++
				break
			}
		}
		rc.c.Close()
	}
	hits := b.arrived.Load()
	closes := counterValue(t, e.reg, "spillway_gfe_http2_client_reset_budget_closes_total", "")
	t.Logf("%d connections × %d resets from one address: %d reached the backend, %d connections cut, %v counted; per-connection budget closes %v",
		conns, perConn, hits, cut, closes, counterValue(t, e.reg, "spillway_gfe_http2_reset_budget_closes_total", ""))
	// The streams of two whole connections and one more are charged before
	// the address is over; one more may reach the backend before the
	// charge of the one before it lands.
	if hits < budget || hits > budget+3 {
		t.Errorf("%d requests reached the backend, want the budget's %d and at most 3 more", hits, budget)
	}
	if wantCut := conns - budget/perConn; cut != wantCut || closes != float64(wantCut) {
		t.Errorf("%d connections cut, %v counted; want %d (every connection from the one that passed the budget)", cut, closes, wantCut)
	}

	// The charge decays on the gfe's clock: two half-lives later (the
	// charge at a quarter, under half the budget) the address is served
	// again.
	e.clk.(*clock.Fake).Advance(2 * listeners.DefaultClientResetHalfLife)
	rc := dialResetConn(t, addr, "127.0.0.1")
	if !rc.stream(t, 1, &b.arrived, hits+1) {
		t.Errorf("the address's connection was closed two reset half-lives later, want its stream served")
	}

	// Another address: every request served, over h2c.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(c)
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for range 20 {
		req, _ := http.NewRequest("GET", "http://x/", nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("another address: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			ok++
		}
	}
	if ok != 20 {
		t.Errorf("another address: %d of 20 h2c requests 200, want 20", ok)
	}
}
