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
)

func randUint64() uint64 { return rand.Uint64() }

// proxy is the client-facing handler: route, pick, forward.
type proxy struct {
	e         *Edge
	transport *http.Transport
	rp        *httputil.ReverseProxy
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
	p := &proxy{e: e, transport: tr}
	p.rp = &httputil.ReverseProxy{
		Transport:  tr,
		BufferPool: &bufferPool{},
		Rewrite: func(r *httputil.ProxyRequest) {
			pk := r.In.Context().Value(pickKey{}).(*pickHolder)
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = pk.backend.Addr()
			r.Out.Host = r.In.Host
			r.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			pk := r.Context().Value(pickKey{}).(*pickHolder)
			if t := e.table.Load(); t != nil {
				if s := t.services[pk.serviceName]; s != nil {
					s.meters.failures.Add(1)
				}
			}
			e.metrics.backendErrors.Inc()
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) {
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

// ServeHTTP routes r to a service, picks a backend by the service's policy
// and forwards r to it.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := p.e
	start := time.Now()
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

	pk, err := svc.pick(e.rand(), flowOf(r))
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
	defer pk.done()
	svc.meters.decisions[pk.reason].Add(1)
	if l := svc.load[pk.group]; l != nil {
		l.Add(1)
	}
	ph := pickHolder{pick: pk, serviceName: svc.name}
	r = r.WithContext(context.WithValue(r.Context(), pickKey{}, &ph))
	p.rp.ServeHTTP(w, r)

	e.metrics.latency.Observe(time.Since(start).Seconds())
	if e.cfg.AccessLog {
		e.log.Info().Str("service", svc.name).Str("backend", pk.backend.Addr()).Str("region", pk.region).
			Str("reason", pk.reason.String()).Str("method", r.Method).Str("path", r.URL.Path).
			Dur("duration", time.Since(start)).Msg("request")
	}
}

// pickHolder carries the pick to Rewrite and ErrorHandler.
type pickHolder struct {
	pick
	serviceName string
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
