package testbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/lb/clock"
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
	// Proto is the instance's protocol.
	Proto Proto `json:"proto"`
	// Healthy is what the instance's health check sees now: /healthz for
	// http and h2, the grpc.health.v1 status for grpc, an open listener for
	// tcp.
	Healthy bool `json:"healthy"`
	// Served counts normal requests answered 200 and unary RPCs answered
	// (including those that asked for an error status).
	Served uint64 `json:"served"`
	// Rejected counts requests, RPCs and streams refused because the queue
	// was full (HTTP 503, gRPC UNAVAILABLE, a TCP connection closed without
	// its hello).
	Rejected uint64 `json:"rejected"`
	// Canceled counts requests, RPCs and streams whose client went away (or,
	// for tcp, whose instance stopped) before they were served: while
	// delayed, queued or in service.
	Canceled uint64 `json:"canceled"`
	// Probes counts /healthz and /rtt requests and grpc.health.v1 Check
	// calls answered.
	Probes uint64 `json:"probes"`
	// Streams counts long-lived streams admitted: gRPC Stream calls,
	// WebSocket connections and tcp echo connections.
	Streams uint64 `json:"streams"`
	// Messages counts the messages echoed on streams: gRPC stream replies,
	// WebSocket messages, and tcp chunks (what one read returned). A
	// message is counted just before its reply is sent.
	Messages uint64 `json:"messages"`
	// Faulted counts normal requests answered with the injected fault
	// status (POST /admin/fault) instead of being served.
	Faulted uint64 `json:"faulted"`
	// Antagonized counts the requests, unary RPCs and stream messages
	// served while the instance's antagonist was on (--antagonist), that
	// is served slower.
	Antagonized uint64 `json:"antagonized"`
	// OpenConns is the number of client TCP connections open now, of any
	// protocol (for tcp: the echo connections, admitted or queued).
	OpenConns int `json:"open_conns"`
	// Conns counts the client TCP connections accepted.
	Conns uint64 `json:"conns"`
	// InFlight is the number of requests and streams holding a slot now.
	InFlight int `json:"in_flight"`
	// QueueLen is the number of requests waiting for a token or a slot now.
	QueueLen int `json:"queue_len"`
	// MaxInFlight and MaxQueueLen are the peaks of InFlight and QueueLen.
	MaxInFlight int `json:"max_in_flight"`
	MaxQueueLen int `json:"max_queue_len"`
	// BySource splits Served, Rejected and Streams by the caller's source
	// /24 (IPv4) or /64 (IPv6), keyed by prefix ("127.0.1.0/24"): where
	// traffic came from, that is which site's gfe sent it.
	BySource map[string]SourceStats `json:"by_source"`
	// Starting is true during the emulated cold start (--startup-delay):
	// the instance fails its health check until it ends.
	Starting bool `json:"starting"`
	// CPUCores is the process's CPU time over the last second (see "CPU
	// and concurrency" in the package doc) divided by that second: cores in
	// use, for the whole process (all its instances).
	CPUCores float64 `json:"cpu_cores"`
	// CPUs is the number of cores the process may use (--cpus, else
	// GOMAXPROCS) and CPUUtilization is CPUCores/CPUs, which the load
	// reports send as cpu_utilization when --cpus is set.
	CPUs           float64 `json:"cpus"`
	CPUUtilization float64 `json:"cpu_utilization"`
	// Concurrency is the average of InFlight over the last second.
	Concurrency float64 `json:"concurrency"`
}

// SourceStats counts the requests and streams of one source prefix.
type SourceStats struct {
	Served   uint64 `json:"served"`
	Rejected uint64 `json:"rejected"`
	Streams  uint64 `json:"streams,omitempty"`
}

// instance is one backend instance: its identity, capacity, emulated
// distance, health and counters, shared by every protocol, and the
// http.Handler of the http and h2 protocols. A frontend (see Server) puts it
// on the network. It must not be copied.
type instance struct {
	// Immutable after newInstance (onHealth: after New).
	cfg    InstanceConfig
	delays *DelayTable
	clock  clock.Clock
	lim    *limiter
	logger zerolog.Logger
	mux    *http.ServeMux
	conns  *connTracker
	// addr is the address the instance is bound to (the port chosen if
	// cfg.Addr had port 0); it stays the same when a tcp listener reopens.
	addr string
	// orcaMinInterval is Config.ORCAMinInterval or its default (grpc only).
	orcaMinInterval time.Duration
	// cpuPerRequest is Config.CPUPerRequest; cpus is Config.CPUs or its
	// default, never 0, and cpusSet says whether Config.CPUs was set (the
	// load reports then send the measured CPU as cpu_utilization).
	cpuPerRequest time.Duration
	cpus          float64
	cpusSet       bool
	// antagonist is the instance's schedule of Config.Antagonists; nil
	// when it has none.
	antagonist *antagonistSchedule
	// meter averages the process's CPU time and the instance's
	// concurrency over the last second.
	meter *usageMeter
	// onHealth, if set, applies a health change to the protocol (a gRPC
	// health status, a tcp listener) before the change is visible in
	// healthy. Called with healthMu held.
	onHealth func(healthy bool) error
	// stopCtx is done once the instance starts stopping: long-lived
	// streams watch it to end themselves.
	stopCtx context.Context
	stop    context.CancelFunc

	sessions sessionGroup

	// Accessed atomically.
	healthy atomic.Bool
	// starting is true from New until Config.StartupDelay has passed.
	starting                                              atomic.Bool
	served, rejected, canceled, probes, streams, messages atomic.Uint64
	// fault, when not 0, is the status every normal HTTP request is
	// answered with (see setFault); faulted counts those answers.
	fault   atomic.Int32
	faulted atomic.Uint64
	// antagonized counts what serviceCost slowed (Stats.Antagonized).
	antagonized atomic.Uint64
	// slowdown is the admin's slowdown factor as float64 bits; 0: none
	// (slow.go).
	slowdown atomic.Uint64
	// latency holds the last normal requests' times, for the Prequal
	// probe's estimate (probe.go).
	latency latencies

	// healthMu serializes health changes.
	healthMu sync.Mutex

	// gate, when not nil, holds every admitted normal HTTP request until it
	// is closed (see setHold). Guarded by holdMu.
	holdMu sync.Mutex
	gate   chan struct{}

	// Guarded by mu.
	mu       sync.Mutex
	bySource map[netip.Prefix]*SourceStats
}

func newInstance(cfg InstanceConfig, delays []DelayRule, clk clock.Clock, logger zerolog.Logger) *instance {
	cfg.Proto = cfg.Proto.OrDefault()
	in := &instance{
		cfg:      cfg,
		delays:   NewDelayTable(delays, cfg.Region),
		clock:    clk,
		lim:      newLimiter(cfg.Capacity, clk),
		logger:   logger.With().Str("instance", cfg.Name).Logger(),
		mux:      http.NewServeMux(),
		conns:    newConnTracker(),
		bySource: map[netip.Prefix]*SourceStats{},
	}
	in.stopCtx, in.stop = context.WithCancel(context.Background())
	in.healthy.Store(true)
	in.cpus = float64(runtime.GOMAXPROCS(0))
	in.meter = &usageMeter{cpuTime: ProcessCPUTime, busy: in.lim.busySeconds}
	in.mux.HandleFunc("GET /healthz", in.serveHealthz)
	in.mux.HandleFunc("GET /rtt", in.serveRTT)
	in.mux.HandleFunc(probeRoute, in.serveProbe)
	in.mux.HandleFunc("GET /ws", in.serveWebSocket)
	in.mux.HandleFunc("GET /admin/health", in.serveGetHealth)
	in.mux.HandleFunc("POST /admin/health", in.serveSetHealth)
	in.mux.HandleFunc("GET /admin/stats", in.serveStats)
	in.mux.HandleFunc("POST /admin/fault", in.serveSetFault)
	in.mux.HandleFunc("POST /admin/hold", in.serveSetHold)
	in.mux.HandleFunc("POST /admin/slow", in.serveSetSlow)
	in.mux.HandleFunc("/admin/", http.NotFound)
	in.mux.HandleFunc("/", in.serveRequest)
	return in
}

// setHealthy is applyHealth on an admin request, logged when it changes
// the health.
func (in *instance) setHealthy(healthy bool) error {
	changed, err := in.applyHealth(healthy)
	if changed {
		in.logger.Info().Bool("healthy", healthy).Msg("health changed by admin request")
	}
	return err
}

// beginStartup makes the instance fail its health check until endStartup,
// as a cold-starting instance does (Config.StartupDelay). Called by New
// before the instance serves.
func (in *instance) beginStartup() error {
	in.starting.Store(true)
	if _, err := in.applyHealth(false); err != nil {
		in.starting.Store(false)
		return err
	}
	return nil
}

// endStartup ends the start-up: the instance passes its health check from
// now on, whatever an admin request set meanwhile (see the package doc).
func (in *instance) endStartup() {
	if !in.starting.Load() {
		return
	}
	if _, err := in.applyHealth(true); err != nil {
		in.logger.Error().Err(err).Msg("start-up over but the instance cannot become healthy")
	} else {
		in.logger.Info().Msg("start-up over: healthy")
	}
	in.starting.Store(false)
}

// applyHealth makes the instance pass (true) or fail (false) its health
// check from now on, and reports whether that changed anything. For grpc
// it sets the health service's status; for tcp it closes or reopens the
// listener (see the package doc). It returns an error, and changes
// nothing, when the protocol could not apply the change.
func (in *instance) applyHealth(healthy bool) (changed bool, err error) {
	in.healthMu.Lock()
	defer in.healthMu.Unlock()
	if in.healthy.Load() == healthy {
		return false, nil
	}
	if in.onHealth != nil {
		if err := in.onHealth(healthy); err != nil {
			return false, fmt.Errorf("instance %s: set healthy=%v: %w", in.cfg.Name, healthy, err)
		}
	}
	in.healthy.Store(healthy)
	return true, nil
}

// admit waits for a capacity slot for a request, RPC or stream from src.
// It returns nil once it holds a slot, which the caller must give back with
// in.lim.release(); ErrQueueFull, counted as a rejection; or ctx's error,
// counted as a cancellation.
func (in *instance) admit(ctx context.Context, src netip.Addr) error {
	in.meter.sample(in.clock.Now()) // so that a busy instance has a sample every usageGap
	err := in.lim.acquire(ctx)
	switch {
	case errors.Is(err, ErrQueueFull):
		in.rejected.Add(1)
		in.countSource(src, func(c *SourceStats) { c.Rejected++ })
	case err != nil:
		in.canceled.Add(1)
	}
	return err
}

// startStream counts a stream from src that admit let in.
func (in *instance) startStream(src netip.Addr) {
	in.streams.Add(1)
	in.countSource(src, func(c *SourceStats) { c.Streams++ })
}

// hello is the greeting of a WebSocket or tcp stream: "hello NAME REGION
// ZONE".
func (in *instance) hello() string {
	return fmt.Sprintf("hello %s %s %s", in.cfg.Name, in.cfg.Region, in.cfg.Zone)
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
		msg := "unhealthy"
		if in.starting.Load() {
			msg = "starting"
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
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
	if err := in.setHealthy(healthy); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"healthy": healthy})
}

// serveSetFault serves POST /admin/fault?status=CODE (see setFault).
func (in *instance) serveSetFault(w http.ResponseWriter, r *http.Request) {
	status, err := faultParam(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	in.setFault(status)
	writeJSON(w, http.StatusOK, map[string]int{"status": status})
}

// faultParam reads ?status= of a fault request: 0, or an HTTP status in
// 400..599.
func faultParam(r *http.Request) (int, error) {
	status, err := strconv.Atoi(r.URL.Query().Get("status"))
	if err != nil || (status != 0 && (status < 400 || status > 599)) {
		return 0, errors.New("want status=0 (no fault) or status=400..599")
	}
	return status, nil
}

// setFault makes the instance answer every normal HTTP request (http and
// h2; not health checks, RTT probes or admin routes) with status from now
// on, after the emulated delay and without taking capacity, as a broken
// backend that still passes its health checks; 0 ends the fault.
func (in *instance) setFault(status int) {
	in.fault.Store(int32(status))
	in.logger.Info().Int("status", status).Msg("fault set by admin request")
}

// serveSetHold serves POST /admin/hold?on=BOOL (see setHold).
func (in *instance) serveSetHold(w http.ResponseWriter, r *http.Request) {
	on, err := strconv.ParseBool(r.URL.Query().Get("on"))
	if err != nil {
		http.Error(w, "want ?on=true or ?on=false", http.StatusBadRequest)
		return
	}
	in.setHold(on)
	writeJSON(w, http.StatusOK, map[string]bool{"on": on})
}

// setHold makes every normal HTTP request admitted from now on wait, holding
// its capacity slot (Stats.InFlight counts it), until the hold is lifted
// (on false) or its client goes away; lifting it lets every held request
// go on to its service time. Tests use it to have a known set of requests
// in flight at once, however slowly their client sends them.
func (in *instance) setHold(on bool) {
	in.holdMu.Lock()
	defer in.holdMu.Unlock()
	switch {
	case on && in.gate == nil:
		in.gate = make(chan struct{})
	case !on && in.gate != nil:
		close(in.gate)
		in.gate = nil
	}
	in.logger.Info().Bool("on", on).Msg("hold set by admin request")
}

// waitGate waits while a hold is on (setHold); it returns ctx's error if
// ctx ends first.
func (in *instance) waitGate(ctx context.Context) error {
	in.holdMu.Lock()
	gate := in.gate
	in.holdMu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (in *instance) serveStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, in.stats())
}

// stats returns a copy of the instance's counters.
func (in *instance) stats() Stats {
	s := Stats{
		Instance:    in.cfg.Name,
		Region:      in.cfg.Region,
		Zone:        in.cfg.Zone,
		Proto:       in.cfg.Proto,
		Healthy:     in.healthy.Load(),
		Served:      in.served.Load(),
		Rejected:    in.rejected.Load(),
		Canceled:    in.canceled.Load(),
		Probes:      in.probes.Load(),
		Streams:     in.streams.Load(),
		Messages:    in.messages.Load(),
		Faulted:     in.faulted.Load(),
		Antagonized: in.antagonized.Load(),
		OpenConns:   in.conns.open(),
		Conns:       in.conns.accepted.Load(),
		BySource:    map[string]SourceStats{},
	}
	s.InFlight, s.QueueLen, s.MaxInFlight, s.MaxQueueLen = in.lim.load()
	u := in.meter.read(in.clock.Now())
	s.CPUCores, s.Concurrency, s.CPUs = u.CPUCores, u.Concurrency, in.cpus
	s.CPUUtilization = u.CPUCores / in.cpus
	s.Starting = in.starting.Load()
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
	if f := in.fault.Load(); f != 0 {
		in.faulted.Add(1)
		in.setLoadHeader(w)
		http.Error(w, "fault injected", int(f))
		return
	}
	admitStart := in.clock.Now()
	if !in.admitHTTP(w, r, src) {
		return
	}
	err := in.waitGate(ctx)
	if err == nil {
		cpu, st := in.serviceCost()
		burnCPU(cpu)
		err = sleep(ctx, in.clock, st)
	}
	in.lim.release()
	if err == nil {
		in.latency.observe(in.clock.Since(admitStart))
	}
	if err != nil {
		in.canceled.Add(1)
		return
	}
	in.served.Add(1)
	in.countSource(src, func(c *SourceStats) { c.Served++ })
	in.setLoadHeader(w) // after release: the load this request leaves behind
	writeJSON(w, http.StatusOK, Reply{
		Instance: in.cfg.Name,
		Region:   in.cfg.Region,
		Zone:     in.cfg.Zone,
		Method:   r.Method,
		Path:     r.URL.Path,
		Source:   r.RemoteAddr,
	})
}

// serviceCost returns the CPU time and the service time of one request,
// unary RPC or stream message starting now: Config.CPUPerRequest and
// ServiceTime, or, while the instance's antagonist is on, Slowdown times
// each plus the antagonist's CPU (then it counts it in antagonized); both
// times the admin's slowdown when one is set (slow.go; counted the same).
func (in *instance) serviceCost() (cpu, st time.Duration) {
	cpu, st = in.cpuPerRequest, in.cfg.Capacity.ServiceTime
	slowed := false
	if in.antagonist.on(in.clock.Now()) {
		a := &in.antagonist.a
		cpu = time.Duration(float64(cpu)*a.Slowdown) + a.CPU
		st = time.Duration(float64(st) * a.Slowdown)
		slowed = true
	}
	if f := in.slowFactor(); f > 1 {
		cpu = time.Duration(float64(cpu) * f)
		st = time.Duration(float64(st) * f)
		slowed = true
	}
	if slowed {
		in.antagonized.Add(1)
	}
	return cpu, st
}

// admitHTTP admits r from src; it reports false, having answered a
// rejection with 503 (and a load report), when r must not be served.
func (in *instance) admitHTTP(w http.ResponseWriter, r *http.Request, src netip.Addr) bool {
	err := in.admit(r.Context(), src)
	if errors.Is(err, ErrQueueFull) {
		w.Header().Set(HeaderReject, "queue-full")
		in.setLoadHeader(w)
		http.Error(w, "queue full", http.StatusServiceUnavailable)
	}
	return err == nil
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
