package gfe

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/testkit"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fakeGossip is an in-memory Gossip: Publish stores this node's state next
// to states the test sets for other nodes.
type fakeGossip struct {
	mu     sync.Mutex
	node   string
	states map[string]gossip.NodeState
}

func (f *fakeGossip) Publish(s gossip.NodeState) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.Node = f.node
	f.states[f.node] = s
	return 1, nil
}

func (f *fakeGossip) Snapshot() *gossip.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := make(map[string]gossip.NodeState, len(f.states))
	var members []string
	for k, v := range f.states {
		st[k] = v
		members = append(members, k)
	}
	return &gossip.Snapshot{Members: members, States: st}
}

func (f *fakeGossip) set(s gossip.NodeState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[s.Node] = s
}

// backendServer is a real HTTP server standing in for one instance; it
// names its region in the response like the test backend does.
func backendServer(t *testing.T, region string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Spillway-Region", region)
	}))
	t.Cleanup(s.Close)
	return s
}

// twoRegionEdge returns a gfe at site nyc (us-east 5 ms, eu-west 80 ms) on
// a fake clock, serving gfetest.TwoRegionConfig with policy waterfall over
// two real backends per region (version "v1"), and a function that makes
// the same config, on the same backends, for any policy.
func twoRegionEdge(t *testing.T, g *fakeGossip) (*Daemon, *clock.Fake, func(policy string) *config.Config) {
	t.Helper()
	e1, e2 := backendServer(t, "us-east"), backendServer(t, "us-east")
	w1, w2 := backendServer(t, "eu-west"), backendServer(t, "eu-west")
	configFor := func(policy string) *config.Config {
		return gfetest.TwoRegionConfig(t, policy, addrsOf(e1, e2), addrsOf(w1, w2), 100)
	}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	e := newTestEdge(t, g, clk)
	e.rtt.Set("us-east", 5)
	e.rtt.Set("eu-west", 80)
	if err := e.ApplySnapshot(snapshot.FromConfig("v1", configFor("waterfall"))); err != nil {
		t.Fatal(err)
	}
	return e, clk, configFor
}

func newTestEdge(t *testing.T, g *fakeGossip, clk clock.Clock) *Daemon {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	cfg.Damping = 1
	var seed uint64
	e, err := New(cfg, Options{Gossip: g, Clock: clk, Rand: func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func addrsOf(ss ...*httptest.Server) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.TrimPrefix(s.URL, "http://")
	}
	return out
}

// lnTestTimeout bounds every blocking wait of the listener tests; it is a
// guard against hangs, never a delay the tests rely on.
const lnTestTimeout = 10 * time.Second

// waitUntil polls cond until it holds, failing t after lnTestTimeout.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(lnTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, not a delay the test relies on
	}
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// httpBackend is an instance for the listener tests: HTTP/1.1 and h2c. It
// answers with X-Backend (its name) and X-Proto (the protocol it was
// reached with); /body answers the length of the body it read; /slow
// answers after release is closed; /ws upgrades to an echo tunnel.
type httpBackend struct {
	name    string
	srv     *httptest.Server
	release chan struct{}
	slowIn  atomic.Int64 // requests waiting in /slow
	tunnels atomic.Int64 // open /ws tunnels
}

func newHTTPBackend(t *testing.T, name string) *httpBackend {
	t.Helper()
	b := &httpBackend{name: name, release: make(chan struct{})}
	b.srv = startH2CBackend(t, http.HandlerFunc(b.serve))
	return b
}

func (b *httpBackend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

func (b *httpBackend) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Backend", b.name)
	w.Header().Set("X-Proto", r.Proto)
	switch r.URL.Path {
	case "/body":
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	case "/slow":
		b.slowIn.Add(1)
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
		b.slowIn.Add(-1)
		fmt.Fprint(w, "slow done")
	case "/ws":
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		b.tunnels.Add(1)
		defer b.tunnels.Add(-1)
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Backend: " + b.name + "\r\n\r\n")
		rw.Flush()
		io.Copy(c, rw)
	default:
		fmt.Fprint(w, "ok")
	}
}

// edgeConfig renders a config with one service "web" (round robin) over
// backends and the given listeners block (YAML, may be empty).
func edgeConfig(t testing.TB, backends []string, listeners string) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("regions:\n  - name: us-east\n    zones:\n      - name: us-east-b\n        groups:\n          - name: east\n            instances:\n")
	for _, a := range backends {
		fmt.Fprintf(&b, "              - address: %s\n", a)
	}
	b.WriteString(`services:
  - name: web
    policy: round_robin
    backends:
      - {group: east, max_rate_per_instance: 100000}
routes:
  - {host: "*", path_prefix: /, service: web}
`)
	b.WriteString(listeners)
	c, err := config.Parse([]byte(b.String()), "test.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, b.String())
	}
	return c
}

// runningEdge is a Daemon serving in the background.
type runningEdge struct {
	*Daemon
	cancel context.CancelFunc
	done   chan error
}

// startEdge runs a gfe on 127.0.0.1 with cfg applied and waits until it
// has a routing table. It is stopped when the test ends.
func startEdge(t *testing.T, c *config.Config, drain time.Duration) *runningEdge {
	t.Helper()
	return startEdgeWith(t, c, drain, nil)
}

// startEdgeWith is startEdge with edit, when set, applied to the gfe's
// Config.
func startEdgeWith(t *testing.T, c *config.Config, drain time.Duration, edit func(*Config)) *runningEdge {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DrainTimeout = drain
	if edit != nil {
		edit(&cfg)
	}
	g := &fakeGossip{node: cfg.Node, states: map[string]gossip.NodeState{}}
	e, err := New(cfg, Options{Gossip: g, Clock: clock.NewFake(time.Unix(1_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	return runEdge(t, e, c)
}

// runEdge applies c to e, runs e until the test ends, and waits until it
// listens and has a routing table.
func runEdge(t *testing.T, e *Daemon, c *config.Config) *runningEdge {
	t.Helper()
	if err := e.ApplySnapshot(snapshot.FromConfig("v1", c)); err != nil {
		t.Fatalf("ApplySnapshot: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	re := &runningEdge{Daemon: e, cancel: cancel, done: make(chan error, 1)}
	go func() { re.done <- e.Run(ctx) }()
	t.Cleanup(func() { re.stop(t) })
	waitUntil(t, "the gfe to listen and plan", func() bool { return e.ListenAddr() != nil && e.table.Load() != nil })
	return re
}

// stop cancels Run and returns its error.
func (re *runningEdge) stop(t *testing.T) error {
	t.Helper()
	re.cancel()
	select {
	case err, ok := <-re.done:
		if ok {
			close(re.done)
		}
		return err
	case <-time.After(lnTestTimeout):
		t.Fatal("Run did not return")
		return nil
	}
}

// dialCounter counts the connections a client transport opens and records
// the serial of the certificate each TLS connection was served.
type dialCounter struct {
	dials   atomic.Int64
	mu      sync.Mutex
	serials []int64
}

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.dials.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// h2cClient returns a client speaking HTTP/2 with prior knowledge.
func h2cClient(d *dialCounter) *http.Client {
	tr := &http.Transport{DialContext: d.dial, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: lnTestTimeout}
}

// tlsClient returns an HTTP/2-only client over TLS that trusts ca and
// sends serverName as SNI.
func tlsClient(d *dialCounter, ca *testkit.CA, serverName string) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(c, &tls.Config{RootCAs: ca.Pool, ServerName: serverName, NextProtos: []string{"h2"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		d.mu.Lock()
		d.serials = append(d.serials, tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64())
		d.mu.Unlock()
		return tc, nil
	}
	return &http.Client{Transport: tr, Timeout: lnTestTimeout}
}

// get sends a GET and returns the status, the response's protocol and its
// X-Backend header.
func get(t *testing.T, c *http.Client, url string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Proto, resp.Header.Get("X-Backend")
}

// rawRequest sends raw on a new connection to addr and returns the status
// code of the answer (0 when the connection closed without one).
func rawRequest(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	go io.WriteString(c, raw) // the server may answer before reading it all
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// rawH2CStatus sends one h2c GET with kb header fields of 1000 bytes on a
// new connection, ignoring the server's advertised header list limit, and
// returns the response's status.
func rawH2CStatus(t *testing.T, addr string, kb int) int {
	t.Helper()
	fr, block, enc := h2cOpen(t, addr, "GET", "x", "/")
	for i := range kb {
		enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: strings.Repeat("a", 1000), Sensitive: true})
	}
	// HEADERS then CONTINUATION frames of at most the default 16 KB.
	const maxFrame = 16 << 10
	b := block.Bytes()
	first := b[:min(len(b), maxFrame)]
	b = b[len(first):]
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true, EndHeaders: len(b) == 0})
	for len(b) > 0 {
		chunk := b[:min(len(b), maxFrame)]
		b = b[len(chunk):]
		fr.WriteContinuation(1, len(b) == 0, chunk)
	}
	return h2cStatus(t, fr, "h2c GET /")
}

// h2cOpen opens an h2c connection to addr (closed when the test ends),
// sends the preface and SETTINGS, and returns its framer and a header
// block holding the pseudo-header fields of a request of method, authority
// and path, for more fields to be added with enc.
func h2cOpen(t *testing.T, addr, method, authority, path string) (fr *http2.Framer, block *bytes.Buffer, enc *hpack.Encoder) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr = http2.NewFramer(c, c)
	fr.WriteSettings()
	block = new(bytes.Buffer)
	enc = hpack.NewEncoder(block)
	for _, f := range [][2]string{{":method", method}, {":scheme", "http"}, {":authority", authority}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return fr, block, enc
}

// h2cStatus reads frames from fr until the answer's HEADERS on stream 1
// and returns its :status, acknowledging the server's SETTINGS; a reset
// of the stream, or a GOAWAY other than a graceful one (NO_ERROR: a
// refusal with Connection: close sends one, then its answer), fails the
// test. what names the request in failures.
func h2cStatus(t *testing.T, fr *http2.Framer, what string) int {
	t.Helper()
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", what, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					code, _ := strconv.Atoi(hf.Value)
					return code
				}
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("%s: stream reset: %v", what, f.ErrCode)
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				t.Fatalf("%s: connection closed: %v", what, f.ErrCode)
			}
		}
	}
}

// headerBlock returns fields (name, value) HPACK-encoded, in order.
func headerBlock(fields [][2]string) []byte {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return block.Bytes()
}

// startH2CBackend starts an unencrypted test server of h that speaks both
// HTTP/1.1 and h2c, closed (with its client connections) when the test
// ends.
func startH2CBackend(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// h2cHandshake sets c's deadline, sends the h2c client preface and an
// empty SETTINGS on it, and returns its framer.
func h2cHandshake(c net.Conn) *http2.Framer {
	c.SetDeadline(time.Now().Add(lnTestTimeout))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	return fr
}

// checkBackendsSpared fails the test unless service web of e has no
// backend ejected or in an outlier run, no failures, and no backend errors
// counted; after says what came before, in failures.
func checkBackendsSpared(t *testing.T, e *runningEdge, clk *clock.Fake, after string) {
	t.Helper()
	svc := e.Table().Services["web"]
	for _, h := range svc.Outliers().Snapshot(clk.Now()) {
		if h.Ejected || h.Consecutive5xx != 0 || h.ConsecutiveConnectFailures != 0 {
			t.Errorf("%s, backend %s: ejected %v, runs of %d 5xx and %d connect failures; want none", after, h.Name, h.Ejected, h.Consecutive5xx, h.ConsecutiveConnectFailures)
		}
	}
	if got := svc.Meters().Failures.Load(); got != 0 {
		t.Errorf("service failures = %d, want 0", got)
	}
	if got := counterValue(t, e.reg, "spillway_gfe_backend_errors_total", ""); got != 0 {
		t.Errorf("backend errors = %v, want 0", got)
	}
}

// checkShareAfter sends 10 GET /after to the gfe at addr and fails the
// test unless each of b1 and b2 got 5; what names what came before, in
// failures.
func checkShareAfter(t *testing.T, addr string, b1, b2 *pathBackend, what string) {
	t.Helper()
	cl := &http.Client{Timeout: lnTestTimeout}
	for range 10 {
		resp, err := cl.Get("http://" + addr + "/after")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET after %s: %v %v", what, resp, err)
		}
		resp.Body.Close()
	}
	if b1.count("/after") != 5 || b2.count("/after") != 5 {
		t.Errorf("after %s the backends got %d and %d of 10 requests, want 5 and 5", what, b1.count("/after"), b2.count("/after"))
	}
}

// writeEastInstances writes to b the regions section of a config: one
// region us-east, zone us-east-b, group east of instances at addrs.
func writeEastInstances(b *strings.Builder, addrs []string) {
	b.WriteString("regions:\n  - name: us-east\n    zones:\n      - name: us-east-b\n        groups:\n          - name: east\n            instances:\n")
	for _, a := range addrs {
		fmt.Fprintf(b, "              - address: %s\n", a)
	}
}
