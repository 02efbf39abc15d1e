package httpproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The transports to backends.
//
// Plain requests go over the proxy's HTTP/1.1 transport (Proxy.transport).
// gRPC calls (content-type application/grpc, application/grpc+proto, ...)
// go over HTTP/2 without TLS (h2c, prior knowledge): gRPC needs HTTP/2 end
// to end for its streams and trailers, and the backends of a gfe speak
// cleartext. WebSocket and other Upgrade requests go over HTTP/1.1 and
// become a tunnel to the backend after its 101.
//
// Long-lived streams — gRPC calls and upgraded connections — are tracked by
// backend address. Connection persistence (docs/design.md §4): a stream keeps
// its backend for its whole life; it is never moved, but when its backend
// becomes unavailable (unhealthy, or gone from the config) the gfe ends it —
// it cancels a gRPC call (the client sees its stream reset) and closes a
// WebSocket's connection — so that the client reconnects and is routed
// afresh. Plan changes and spill move only new requests and connections.

// isGRPC reports whether h is the header of a gRPC call: content-type
// application/grpc, alone or with a "+codec" or parameters. gRPC-Web
// (application/grpc-web) is not gRPC over HTTP/2 and does not count.
func isGRPC(h http.Header) bool {
	ct, ok := strings.CutPrefix(h.Get("Content-Type"), "application/grpc")
	return ok && (ct == "" || ct[0] == '+' || ct[0] == ';')
}

// isUpgrade reports whether h asks for a protocol upgrade (WebSocket).
// httputil.ReverseProxy keeps the Upgrade header of the outgoing request
// when it forwards one.
func isUpgrade(h http.Header) bool { return h.Get("Upgrade") != "" }

// newH2CTransport returns the HTTP/2 cleartext transport used for gRPC
// calls, dialing with dialer (bound to the gfe's SourceIP). It has no
// response-header timeout: a streaming call's headers may come only with
// its first reply. Streams multiplex over one connection per backend; a new
// connection opens when the backend's stream limit is reached.
func newH2CTransport(dialer *net.Dialer) *http.Transport {
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		Protocols:           new(http.Protocols),
		HTTP2: &http.HTTP2Config{
			// Notice a dead backend connection under a silent stream.
			SendPingTimeout: 15 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// transportFor returns the RoundTripper that carries r, an outgoing request
// whose URL.Host is the chosen backend: the tracked h2c transport for gRPC,
// the tracked HTTP/1.1 transport for upgrades, the proxy's transport
// otherwise. Safe for concurrent use; it does not allocate.
func (p *Proxy) transportFor(r *http.Request) http.RoundTripper {
	switch {
	case isGRPC(r.Header):
		return p.grpcTransport
	case isUpgrade(r.Header):
		return p.upgradeTransport
	}
	return p.transport
}

// backendRoundTripper sends every attempt through Proxy.transportFor. It is
// the proxy's attempt transport (Proxy.next).
type backendRoundTripper struct{ p *Proxy }

// RoundTrip implements http.RoundTripper.
func (b backendRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	return b.p.transportFor(r).RoundTrip(r)
}

// trackingTransport is a RoundTripper that registers every request it
// carries, until its response body is closed, with a streamTracker.
type trackingTransport struct {
	next    http.RoundTripper
	streams *streamTracker
}

// RoundTrip implements http.RoundTripper.
func (t *trackingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(r.Context())
	s := &stream{backend: r.URL.Host, cancel: cancel}
	t.streams.add(s)
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		t.streams.remove(s)
		cancel()
		return nil, err
	}
	// Ending a stream closes its response body as well as cancelling its
	// context: a request whose body is still being sent (a client-streaming
	// call) does not notice the cancellation until that body's next read,
	// but closing the response body resets the backend stream at once, and
	// the proxy, failing to copy the response, resets the client's.
	var tracked io.ReadCloser
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		tracked = &trackedTunnel{ReadWriteCloser: rwc, s: s, streams: t.streams}
	} else {
		tracked = &trackedBody{ReadCloser: resp.Body, s: s, streams: t.streams}
	}
	if !t.streams.attach(s, resp.Body) {
		// The backend became unavailable during the round trip.
		tracked.Close()
	}
	resp.Body = tracked
	return resp, nil
}

// trackedBody is a tracked response body; Close ends the tracking.
type trackedBody struct {
	io.ReadCloser
	s       *stream
	streams *streamTracker
	once    sync.Once
}

func (b *trackedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.streams.remove(b.s); b.s.cancel() })
	return err
}

// trackedTunnel is the backend side of an upgraded connection (the body of
// a 101 response, which ReverseProxy uses as a ReadWriteCloser); Close ends
// the tracking.
type trackedTunnel struct {
	io.ReadWriteCloser
	s       *stream
	streams *streamTracker
	once    sync.Once
}

func (b *trackedTunnel) Close() error {
	err := b.ReadWriteCloser.Close()
	b.once.Do(func() { b.streams.remove(b.s); b.s.cancel() })
	return err
}

// stream is one tracked request or tunnel.
type stream struct {
	backend string
	cancel  context.CancelFunc
	// Guarded by streamTracker.mu.
	body  io.Closer // the response body (an upgraded stream's connection)
	ended bool      // ended by the tracker
}

// streamTracker holds the live long-lived streams by backend address, so
// that those of a backend that becomes unavailable can be ended. Safe for
// concurrent use; must not be copied.
type streamTracker struct {
	mu        sync.Mutex
	byBackend map[string]map[*stream]struct{} // guarded by mu
}

func newStreamTracker() *streamTracker {
	return &streamTracker{byBackend: map[string]map[*stream]struct{}{}}
}

func (t *streamTracker) add(s *stream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.byBackend[s.backend]
	if m == nil {
		m = map[*stream]struct{}{}
		t.byBackend[s.backend] = m
	}
	m[s] = struct{}{}
}

func (t *streamTracker) remove(s *stream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.byBackend[s.backend]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(t.byBackend, s.backend)
		}
	}
}

// attach records the response body of stream s. It returns false when s
// was ended meanwhile; the caller then closes the body.
func (t *streamTracker) attach(s *stream, body io.Closer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.ended {
		return false
	}
	s.body = body
	return true
}

// endWhere ends every stream whose backend address gone reports true for,
// and returns how many it ended. gone is called with t.mu held and must
// not call back into t.
func (t *streamTracker) endWhere(gone func(backend string) bool) int {
	var end []*stream
	t.mu.Lock()
	for addr, m := range t.byBackend {
		if !gone(addr) {
			continue
		}
		for s := range m {
			s.ended = true
			end = append(end, s)
		}
		delete(t.byBackend, addr)
	}
	t.mu.Unlock()
	for _, s := range end {
		s.cancel()
		if s.body != nil {
			s.body.Close()
		}
	}
	return len(end)
}

// len returns the number of live tracked streams.
func (t *streamTracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, m := range t.byBackend {
		n += len(m)
	}
	return n
}

// EndStreamsTo ends the tracked streams (gRPC calls, upgraded connections)
// whose backend address gone reports true for, counts them in
// spillway_gfe_streams_closed_total and returns how many it ended. gone
// must not call back into the proxy. Safe to call from any goroutine.
func (p *Proxy) EndStreamsTo(gone func(backend string) bool) int {
	if p.streams.len() == 0 {
		return 0
	}
	n := p.streams.endWhere(gone)
	p.metrics.streamsClosed.Add(float64(n))
	return n
}

// EndAllStreams ends every tracked stream (at shutdown: ReverseProxy's
// hijacked connections are not waited for by http.Server.Shutdown) and
// returns how many it ended.
func (p *Proxy) EndAllStreams() int {
	return p.streams.endWhere(func(string) bool { return true })
}

// OpenStreams returns the number of live tracked streams.
func (p *Proxy) OpenStreams() int { return p.streams.len() }

// BackendTransport returns the transport plain requests go to backends
// over (HTTP/1.1 from the gfe's dialer and source address, every response
// head checked as strictly as the fast path's): what the gfe's prequal
// probes (internal/gfe/prequalprobe) use, so that a probe meets a backend
// exactly as a request does. Safe for concurrent use.
func (p *Proxy) BackendTransport() http.RoundTripper { return p.transport }
