package testbackend

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/clock"
)

// Identity and rejection headers set by every instance.
const (
	HeaderBackend = "X-Spillway-Backend" // instance name, on every response
	HeaderRegion  = "X-Spillway-Region"  // instance region, on every response
	HeaderZone    = "X-Spillway-Zone"    // instance zone, on every response
	HeaderReject  = "X-Spillway-Reject"  // "queue-full" on a capacity rejection
)

// Reply is the JSON body of the 200 answer to a normal request.
type Reply struct {
	Instance string `json:"instance"`
	Region   string `json:"region"`
	Zone     string `json:"zone"`
	Method   string `json:"method"`
	Path     string `json:"path"`
	// Source is the caller's address (host:port) as the instance saw it.
	Source string `json:"source"`
}

// Stats is the JSON body of GET /admin/stats. Counters only grow; they start
// at zero when the process starts.
type Stats struct {
	Instance string `json:"instance"`
	Region   string `json:"region"`
	Zone     string `json:"zone"`
	// Healthy is what /healthz answers now.
	Healthy bool `json:"healthy"`
	// Served counts normal requests answered 200.
	Served uint64 `json:"served"`
	// Rejected counts normal requests answered 503 because the queue was
	// full.
	Rejected uint64 `json:"rejected"`
	// Canceled counts normal requests whose client went away before they
	// were served (while delayed, queued or in service).
	Canceled uint64 `json:"canceled"`
	// Probes counts /healthz and /rtt requests answered.
	Probes uint64 `json:"probes"`
	// InFlight is the number of requests holding a slot now.
	InFlight int `json:"in_flight"`
	// QueueLen is the number of requests waiting for a token or a slot now.
	QueueLen int `json:"queue_len"`
	// MaxInFlight and MaxQueueLen are the peaks of InFlight and QueueLen.
	MaxInFlight int `json:"max_in_flight"`
	MaxQueueLen int `json:"max_queue_len"`
	// BySource splits Served and Rejected by the caller's source /24 (IPv4)
	// or /64 (IPv6), keyed by prefix ("127.0.1.0/24"): where traffic came
	// from, that is which site's gfe sent it.
	BySource map[string]SourceStats `json:"by_source"`
}

// SourceStats counts the normal requests of one source prefix.
type SourceStats struct {
	Served   uint64 `json:"served"`
	Rejected uint64 `json:"rejected"`
}

// instance is the http.Handler of one backend instance. It must not be
// copied.
type instance struct {
	// Immutable after newInstance.
	cfg    InstanceConfig
	delays *DelayTable
	clock  clock.Clock
	lim    *limiter
	logger zerolog.Logger
	mux    *http.ServeMux

	// Accessed atomically.
	healthy                            atomic.Bool
	served, rejected, canceled, probes atomic.Uint64

	// Guarded by mu.
	mu       sync.Mutex
	bySource map[netip.Prefix]*SourceStats
}

func newInstance(cfg InstanceConfig, delays []DelayRule, clk clock.Clock, logger zerolog.Logger) *instance {
	in := &instance{
		cfg:      cfg,
		delays:   NewDelayTable(delays, cfg.Region),
		clock:    clk,
		lim:      newLimiter(cfg.Capacity, clk),
		logger:   logger.With().Str("instance", cfg.Name).Logger(),
		mux:      http.NewServeMux(),
		bySource: map[netip.Prefix]*SourceStats{},
	}
	in.healthy.Store(true)
	in.mux.HandleFunc("GET /healthz", in.serveHealthz)
	in.mux.HandleFunc("GET /rtt", in.serveRTT)
	in.mux.HandleFunc("GET /admin/health", in.serveGetHealth)
	in.mux.HandleFunc("POST /admin/health", in.serveSetHealth)
	in.mux.HandleFunc("GET /admin/stats", in.serveStats)
	in.mux.HandleFunc("/admin/", http.NotFound)
	in.mux.HandleFunc("/", in.serveRequest)
	return in
}

// ServeHTTP sets the identity headers and routes the request.
func (in *instance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set(HeaderBackend, in.cfg.Name)
	h.Set(HeaderRegion, in.cfg.Region)
	h.Set(HeaderZone, in.cfg.Zone)
	in.mux.ServeHTTP(w, r)
}

// source returns the caller's address.
func source(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// delay waits the emulated RTT to the caller. It returns an error when the
// client went away meanwhile.
func (in *instance) delay(r *http.Request, src netip.Addr) error {
	return sleep(r.Context(), in.clock, in.delays.Lookup(src))
}

func (in *instance) serveHealthz(w http.ResponseWriter, r *http.Request) {
	if in.delay(r, source(r)) != nil {
		return
	}
	in.probes.Add(1)
	if !in.healthy.Load() {
		http.Error(w, "unhealthy", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (in *instance) serveRTT(w http.ResponseWriter, r *http.Request) {
	if in.delay(r, source(r)) != nil {
		return
	}
	in.probes.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

func (in *instance) serveGetHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"healthy": in.healthy.Load()})
}

func (in *instance) serveSetHealth(w http.ResponseWriter, r *http.Request) {
	healthy, err := strconv.ParseBool(r.URL.Query().Get("healthy"))
	if err != nil {
		http.Error(w, "want ?healthy=true or ?healthy=false", http.StatusBadRequest)
		return
	}
	if old := in.healthy.Swap(healthy); old != healthy {
		in.logger.Info().Bool("healthy", healthy).Msg("health changed by admin request")
	}
	writeJSON(w, http.StatusOK, map[string]bool{"healthy": healthy})
}

func (in *instance) serveStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, in.stats())
}

// stats returns a copy of the instance's counters.
func (in *instance) stats() Stats {
	s := Stats{
		Instance: in.cfg.Name,
		Region:   in.cfg.Region,
		Zone:     in.cfg.Zone,
		Healthy:  in.healthy.Load(),
		Served:   in.served.Load(),
		Rejected: in.rejected.Load(),
		Canceled: in.canceled.Load(),
		Probes:   in.probes.Load(),
		BySource: map[string]SourceStats{},
	}
	s.InFlight, s.QueueLen, s.MaxInFlight, s.MaxQueueLen = in.lim.load()
	in.mu.Lock()
	defer in.mu.Unlock()
	for p, c := range in.bySource {
		s.BySource[p.String()] = *c
	}
	return s
}

// serveRequest serves a normal request: delay, admission, service time,
// reply.
func (in *instance) serveRequest(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	src := source(r)
	if in.delay(r, src) != nil {
		in.canceled.Add(1)
		return
	}
	err := in.lim.acquire(ctx)
	switch {
	case errors.Is(err, ErrQueueFull):
		in.rejected.Add(1)
		in.countSource(src, func(c *SourceStats) { c.Rejected++ })
		w.Header().Set(HeaderReject, "queue-full")
		http.Error(w, "queue full", http.StatusServiceUnavailable)
		return
	case err != nil:
		in.canceled.Add(1)
		return
	}
	err = sleep(ctx, in.clock, in.cfg.Capacity.ServiceTime)
	in.lim.release()
	if err != nil {
		in.canceled.Add(1)
		return
	}
	in.served.Add(1)
	in.countSource(src, func(c *SourceStats) { c.Served++ })
	writeJSON(w, http.StatusOK, Reply{
		Instance: in.cfg.Name,
		Region:   in.cfg.Region,
		Zone:     in.cfg.Zone,
		Method:   r.Method,
		Path:     r.URL.Path,
		Source:   r.RemoteAddr,
	})
}

// countSource applies inc to the counters of src's prefix.
func (in *instance) countSource(src netip.Addr, inc func(*SourceStats)) {
	key := sourceKey(src)
	in.mu.Lock()
	defer in.mu.Unlock()
	c := in.bySource[key]
	if c == nil {
		c = &SourceStats{}
		in.bySource[key] = c
	}
	inc(c)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
