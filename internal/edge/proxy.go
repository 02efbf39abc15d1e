package edge

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/outlier"
)

func randUint64() uint64 { return rand.Uint64() }

// proxy is the client-facing handler: route, pick, forward.
type proxy struct {
	e         *Edge
	transport *http.Transport
	// next carries one attempt of a request to the backend in its URL; the
	// ReverseProxy's Transport (retryTransport) sends every attempt through
	// it. backendRoundTripper by default.
	next http.RoundTripper
	rp   *httputil.ReverseProxy
	sm   *sessionMetrics
}

type pickKey struct{}

func newProxy(e *Edge, dialer *net.Dialer) *proxy {
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	// Attempts go by the request's protocol (transportFor: gRPC over h2c,
	// upgrades and gRPC calls tracked as streams, the rest over tr).
	p := &proxy{e: e, transport: tr, next: backendRoundTripper{e}, sm: newSessionMetrics(e.reg)}
	p.rp = &httputil.ReverseProxy{
		Transport:  retryTransport{p: p},
		BufferPool: &bufferPool{},
		Rewrite: func(r *httputil.ProxyRequest) {
			pk := r.In.Context().Value(pickKey{}).(*pickHolder)
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = pk.backend.Addr()
			r.Out.Host = r.In.Host
			r.SetXForwarded()
			if pk.retries > 0 && r.Out.Body != nil && r.Out.Body != http.NoBody {
				// Keep the client's body for a retry (see replayBody).
				r.Out.Body = &replayBody{rc: r.Out.Body}
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			pk := r.Context().Value(pickKey{}).(*pickHolder)
			pk.svc.meters.failures.Add(1)
			e.metrics.backendErrors.Inc()
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(r.Context().Err(), context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			http.Error(w, http.StatusText(status), status)
		},
	}
	return p
}

// copyBufferSize is the size of the buffers ReverseProxy copies response
// bodies through; 32 KiB is what it allocates itself without a pool.
const copyBufferSize = 32 << 10

// bufferPool recycles ReverseProxy's copy buffers. Without it ReverseProxy
// allocates a fresh 32 KiB buffer for every response, four fifths of the
// bytes the gfe allocated per request (bench/proxy.sh), and the GC work that
// follows cost about a quarter of the proxy's CPU. Buffers are kept as array
// pointers so that Put does not allocate. Safe for concurrent use.
type bufferPool struct {
	p sync.Pool // of *[copyBufferSize]byte
}

// Get returns a buffer of copyBufferSize bytes.
func (b *bufferPool) Get() []byte {
	if a, ok := b.p.Get().(*[copyBufferSize]byte); ok {
		return a[:]
	}
	return new([copyBufferSize]byte)[:]
}

// Put recycles buf if it came from Get; other slices are dropped.
func (b *bufferPool) Put(buf []byte) {
	if len(buf) != copyBufferSize {
		return
	}
	b.p.Put((*[copyBufferSize]byte)(buf))
}

// ServeHTTP routes r to a service, picks a backend by the service's session
// affinity and policy and forwards r to it, within the route's timeout and
// with the route's retries (retryTransport).
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := p.e
	start := e.clk.Now()
	t := e.table.Load()
	if t == nil {
		http.Error(w, "no configuration yet", http.StatusServiceUnavailable)
		return
	}
	rt, ok := t.cfg.Route(r.Host, r.URL.Path)
	if !ok {
		e.metrics.requests.WithLabelValues("", "404").Inc()
		http.Error(w, errNoRoute.Error(), http.StatusNotFound)
		return
	}
	svc := t.services[rt.Service]
	if svc == nil {
		http.Error(w, errNoBackend.Error(), http.StatusServiceUnavailable)
		return
	}
	svc.meters.demand.Add(1)

	var (
		pk  pick
		ck  cookieToSet
		err error
	)
	if svc.aff != nil {
		pk, ck, err = svc.pickAffinity(r, flowOf(r), start, e.rand)
	} else {
		pk, err = svc.pickAt(e.rand(), flowOf(r), start)
	}
	if err != nil {
		svc.meters.failures.Add(1)
		status := http.StatusServiceUnavailable
		if errors.Is(err, errAllBusy) {
			status = http.StatusTooManyRequests
		}
		e.metrics.pickErrors.WithLabelValues(svc.name, err.Error()).Inc()
		http.Error(w, err.Error(), status)
		return
	}
	svc.meters.decisions[pk.reason].Add(1)
	// The route timeout bounds the whole request, retries included. Streams
	// are exempt: an upgraded connection (WebSocket) lives as long as its
	// client keeps it, and a gRPC call carries its own deadline.
	ctx, cancel := r.Context(), context.CancelFunc(noCancel)
	if rt.Timeout > 0 && !isGRPC(r.Header) && !isUpgrade(r.Header) {
		ctx, cancel = context.WithTimeout(ctx, rt.Timeout)
	}
	defer cancel()
	ph := &pickHolder{Context: ctx, pick: pk, svc: svc, retries: rt.Retries, attempts: 1, cookie: ck, secure: r.TLS != nil}
	ph.tried[0] = pk.backend
	defer ph.done() // the pick of the last attempt
	p.rp.ServeHTTP(w, r.WithContext(ph))

	elapsed := e.clk.Since(start)
	e.metrics.latency.Observe(elapsed.Seconds())
	if e.cfg.AccessLog {
		e.log.Info().Str("service", svc.name).Str("backend", ph.backend.Addr()).Str("region", ph.region).
			Str("reason", ph.reason.String()).Int("attempts", ph.attempts).Str("method", r.Method).Str("path", r.URL.Path).
			Dur("duration", elapsed).Msg("request")
	}
}

func noCancel() {}

// pickHolder is the context of a proxied request: the route's deadline,
// and the pick of its current attempt, which Rewrite, retryTransport and
// ErrorHandler find under pickKey. Being the context itself saves the
// allocation of a context.WithValue. Used by the request's goroutine only
// (ReverseProxy calls them all synchronously).
type pickHolder struct {
	context.Context
	pick
	svc *service
	// retries is how many more attempts the route allows after the first.
	retries int
	// attempts made so far, and their backends.
	attempts int
	tried    [maxAttempts]*backend.Backend
	// cookie is the affinity cookie to set on the response (value "" for
	// none), and secure whether the client came over TLS.
	cookie cookieToSet
	secure bool
}

// Value returns the holder itself for pickKey, and otherwise the route
// context's value.
func (h *pickHolder) Value(key any) any {
	if _, ok := key.(pickKey); ok {
		return h
	}
	return h.Context.Value(key)
}

// report records the result of the current attempt with outlier detection
// at now; an ejection is counted and wakes the planner.
func (h *pickHolder) report(r outlier.Result, now time.Time) {
	if h.host != nil && h.host.Report(r, now) && h.svc.ejected != nil {
		h.svc.ejected()
	}
}

// flowOf returns the request's client and listener addresses.
func flowOf(r *http.Request) flowKey {
	var k flowKey
	k.src, _ = netip.ParseAddrPort(r.RemoteAddr)
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		ap := la.AddrPort()
		k.dst = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return k
}
