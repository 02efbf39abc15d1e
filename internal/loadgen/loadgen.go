// Package loadgen is an open-loop HTTP load generator for the demo, the
// end-to-end tests and the real benchmark. It sends requests at a fixed rate
// from a set of client source addresses (127.0.0.0/8 on this machine, so that
// 2- and 5-tuple hashing see real spread) and records where each request was
// served, from the X-Spillway-Region and X-Spillway-Backend response headers
// of the test backend.
package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/spillway-lb/spillway/internal/quantile"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Config describes one run. The zero value is not valid: URL, Rate and
// Duration are required.
type Config struct {
	// URL is the target, for example http://127.0.1.1:8080/.
	URL string
	// Host overrides the Host header. Empty sends the URL's host.
	Host string
	// Rate is the number of requests started per second, whatever the
	// responses do (open loop), so that overload shows as latency and
	// errors instead of slowing the generator down.
	Rate float64
	// Duration of the run.
	Duration time.Duration
	// Sources are the client addresses requests come from, used in turn.
	// Empty lets the kernel choose.
	Sources []netip.Addr
	// NewConnEach opens a new TCP connection for every request, so each
	// request has its own source port (for 5-tuple hashing). Default false:
	// connections are kept alive and reused.
	NewConnEach bool
	// Timeout bounds each request. Default 5s.
	Timeout time.Duration
	// Warmup is the first part of Duration during which requests are sent
	// but not recorded, so that a system can settle under the same load it
	// is then measured under, without a gap in between. Default 0.
	Warmup time.Duration
	// MaxInFlight bounds requests outstanding at once; a request that would
	// exceed it is not sent and counts as Dropped. Default 4096.
	MaxInFlight int
	// Schedule changes the rate during the run: from each step's At on
	// (since the start of the run) requests are started at the step's Rate
	// instead of Rate. Steps must be in ascending At order. Empty keeps Rate
	// for the whole run. A Rate of 0 pauses the load.
	Schedule []RateStep
	// Records keeps one Record per recorded request in Result.Records.
	// Default false.
	Records bool
}

// RateStep is one change of rate in Config.Schedule.
type RateStep struct {
	// At is when the step begins, since the start of the run.
	At time.Duration
	// Rate is the number of requests started per second from At on.
	Rate float64
}

// timeout returns Timeout or its default.
func (c *Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 5 * time.Second
	}
	return c.Timeout
}

// schedule is a run's rate as constant pieces, for finding when each
// request is due.
type schedule []RateStep // the first piece starts at 0

func (c *Config) schedule() schedule {
	sc := schedule{{At: 0, Rate: c.Rate}}
	for _, st := range c.Schedule {
		if st.At <= 0 {
			sc[0].Rate = st.Rate
			continue
		}
		sc = append(sc, st)
	}
	return sc
}

// due returns when request k (from 0) is due — the moment the integral of
// the rate reaches k+1 — and true if that is no later than by.
func (sc schedule) due(k int, by time.Duration) (time.Duration, bool) {
	need := float64(k + 1) // requests the integral must reach
	for i, p := range sc {
		end := by
		if i+1 < len(sc) {
			end = min(end, sc[i+1].At)
		}
		if end <= p.At {
			break
		}
		n := p.Rate * (end - p.At).Seconds()
		if n >= need && p.Rate > 0 {
			return p.At + time.Duration(need/p.Rate*float64(time.Second)), true
		}
		need -= n
	}
	return 0, false
}

// Record is one request of a run, kept when Config.Records is set. Warmup
// requests have none.
type Record struct {
	// At is when the request was due, since Result.Start: the schedule's
	// time, not the moment this process got round to sending it (At + Lag).
	At time.Duration `json:"at"`
	// Lag is how late the request was started after At: the generator's
	// own delay (a busy CPU, a slow scheduler), not the server's.
	Lag time.Duration `json:"lag"`
	// Dropped is set when the request was not sent because MaxInFlight
	// requests were outstanding; such a record has no other field set.
	Dropped bool `json:"dropped,omitempty"`
	// Source is the local address and port of the connection the request
	// went out on: on loopback, the client address the server sees. Zero
	// when no connection was obtained.
	Source netip.AddrPort `json:"source"`
	// Status is the response's HTTP status code; 0 when Error is set.
	Status int `json:"status,omitempty"`
	// Region and Backend are the response's X-Spillway-Region and
	// X-Spillway-Backend headers, whatever the status; empty when absent.
	Region  string `json:"region,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Latency is the time from sending the request to reading the whole
	// response body, or to the transport error.
	Latency time.Duration `json:"latency"`
	// Error is the transport error (dial, timeout, reset); empty when a
	// response was read.
	Error string `json:"error,omitempty"`
	// ErrorKind classes Error for Result.Errors: "timeout", "refused",
	// "reset" or "other"; empty when Error is.
	ErrorKind string `json:"error_kind,omitempty"`
}

// Result is what a run measured.
type Result struct {
	// Sent counts requests due after Warmup that were started; OK those
	// answered 2xx; Failed those with a transport error or a non-2xx
	// status; Dropped those not sent because MaxInFlight was reached.
	Sent, OK, Failed, Dropped int64
	// Status counts responses by HTTP status code.
	Status map[int]int64
	// Errors counts transport errors by kind ("timeout", "refused",
	// "reset", "other").
	Errors map[string]int64
	// ByRegion and ByBackend count 2xx responses by the serving backend's
	// X-Spillway-Region and X-Spillway-Backend headers.
	ByRegion  map[string]int64
	ByBackend map[string]int64
	// Routed counts every response that names a region (any status): where
	// the load balancer sent requests, whether or not the backend coped.
	Routed map[string]int64
	// Latencies of answered requests (any status), sorted ascending.
	Latencies []time.Duration
	// MaxLag is the largest delay between a request's due time and its
	// start (Record.Lag): how far the generator itself fell behind.
	MaxLag time.Duration
	// Elapsed is the wall time of the run including the drain of
	// outstanding requests.
	Elapsed time.Duration
	// Start is when the run started; Record.At counts from it.
	Start time.Time
	// Records holds every recorded request when Config.Records is set,
	// sorted by At. len(Records) == Sent + Dropped.
	Records []Record
}

func newResult() *Result {
	return &Result{Status: map[int]int64{}, Errors: map[string]int64{}, ByRegion: map[string]int64{}, ByBackend: map[string]int64{}, Routed: map[string]int64{}}
}

// tally adds recs to r's counts.
func (r *Result) tally(recs []Record) {
	for _, rec := range recs {
		r.MaxLag = max(r.MaxLag, rec.Lag)
		if rec.Dropped {
			r.Dropped++
			continue
		}
		r.Sent++
		if rec.Error != "" {
			r.Failed++
			r.Errors[rec.ErrorKind]++
			continue
		}
		r.Status[rec.Status]++
		if rec.Region != "" {
			r.Routed[rec.Region]++
		}
		r.Latencies = append(r.Latencies, rec.Latency)
		if rec.Status/100 == 2 {
			r.OK++
			r.ByRegion[rec.Region]++
			r.ByBackend[rec.Backend]++
		} else {
			r.Failed++
		}
	}
	slices.Sort(r.Latencies)
}

// Window returns the result of the requests of r due in [from, to) since
// r.Start, counted as Run counts them. r must hold Records (Config.Records).
func (r *Result) Window(from, to time.Duration) *Result {
	w := newResult()
	w.Start = r.Start
	lo, _ := slices.BinarySearchFunc(r.Records, from, func(rec Record, d time.Duration) int { return cmp.Compare(rec.At, d) })
	hi, _ := slices.BinarySearchFunc(r.Records, to, func(rec Record, d time.Duration) int { return cmp.Compare(rec.At, d) })
	w.Records = r.Records[lo:hi:hi]
	w.tally(w.Records)
	w.Elapsed = to - from
	return w
}

// errorKind classes a transport error for Result.Errors by what it wraps.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	}
	return "other"
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of Latencies by
// the nearest-rank rule (quantile.Of), or 0 when there are none.
func (r *Result) Percentile(p float64) time.Duration {
	return quantile.Of(r.Latencies, p/100)
}

// RegionShare returns the fraction of 2xx responses served by region.
func (r *Result) RegionShare(region string) float64 {
	if r.OK == 0 {
		return 0
	}
	return float64(r.ByRegion[region]) / float64(r.OK)
}

// Run sends load as cfg describes until cfg.Duration has passed or ctx ends,
// waits for outstanding requests (each bounded by cfg.Timeout, whether or
// not ctx has ended), and returns what it measured.
//
// Request k (from 0) is due at the moment the integral of the rate since
// the start reaches k+1, so the number of requests a run schedules depends
// only on the rate and the time it lasted, never on how punctually this
// process was scheduled: a generator starved of CPU starts its due requests
// late (Result.MaxLag says how late) but starts every one of them, each
// recorded at its due time.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.URL == "" || cfg.Rate <= 0 || cfg.Duration <= 0 {
		return nil, errors.New("loadgen: URL, Rate and Duration are required")
	}
	for i, s := range cfg.Schedule {
		if s.Rate < 0 || (i > 0 && s.At < cfg.Schedule[i-1].At) {
			return nil, fmt.Errorf("loadgen: schedule[%d]: rate must be >= 0 and steps in ascending order, got at %v rate %g", i, s.At, s.Rate)
		}
	}
	cfg.Timeout = cfg.timeout()
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4096
	}
	clients := newClients(cfg)
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()

	res := newResult()
	reqCtx := context.WithoutCancel(ctx) // ctx ends the schedule, not the requests
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, cfg.MaxInFlight)
	)
	keep := func(rec Record) {
		mu.Lock()
		defer mu.Unlock()
		res.Records = append(res.Records, rec)
	}

	start := time.Now()
	res.Start = start
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sched := cfg.schedule()
	next := 0 // index of the next request to start
	// startDue starts every request due by elapsed (capped at Duration).
	startDue := func(elapsed time.Duration) {
		for {
			at, ok := sched.due(next, min(elapsed, cfg.Duration))
			if !ok {
				return
			}
			c := clients[next%len(clients)]
			next++
			rec := Record{At: at, Lag: time.Since(start) - at}
			measured := at >= cfg.Warmup
			select {
			case sem <- struct{}{}:
			default:
				if measured {
					rec.Dropped = true
					keep(rec)
				}
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				send(reqCtx, c, cfg, &rec)
				if measured {
					keep(rec)
				}
			}()
		}
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			elapsed := now.Sub(start)
			startDue(elapsed)
			if elapsed >= cfg.Duration {
				break loop
			}
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.SortStableFunc(res.Records, func(a, b Record) int { return cmp.Compare(a.At, b.At) })
	res.tally(res.Records)
	if !cfg.Records {
		res.Records = nil
	}
	return res, nil
}

// send makes one request and fills in rec's response fields.
func send(ctx context.Context, c *http.Client, cfg Config, rec *Record) {
	if cfg.Records {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) {
				if a, ok := info.Conn.LocalAddr().(*net.TCPAddr); ok {
					ap := a.AddrPort()
					rec.Source = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
				}
			},
		})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
	if err != nil {
		rec.Error, rec.ErrorKind = "loadgen: "+err.Error(), "other"
		return
	}
	if cfg.Host != "" {
		req.Host = cfg.Host
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		rec.Latency, rec.Error, rec.ErrorKind = time.Since(t0), err.Error(), errorKind(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rec.Status, rec.Region, rec.Backend = resp.StatusCode, resp.Header.Get("X-Spillway-Region"), resp.Header.Get("X-Spillway-Backend")
	rec.Latency = time.Since(t0)
}

// newClients returns one client per source address (or one client when
// there are none), each dialing from its address.
func newClients(cfg Config) []*http.Client {
	mk := func(src netip.Addr) *http.Client {
		d := &net.Dialer{Timeout: cfg.Timeout}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		return &http.Client{
			Timeout: cfg.Timeout,
			Transport: &http.Transport{
				DialContext:         d.DialContext,
				DisableKeepAlives:   cfg.NewConnEach,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     30 * time.Second,
			},
		}
	}
	if len(cfg.Sources) == 0 {
		return []*http.Client{mk(netip.Addr{})}
	}
	cs := make([]*http.Client, len(cfg.Sources))
	for i, s := range cfg.Sources {
		cs[i] = mk(s)
	}
	return cs
}

// Sources returns n consecutive addresses starting at first, for example
// Sources(netip.MustParseAddr("127.0.3.1"), 100).
func Sources(first netip.Addr, n int) []netip.Addr {
	out := make([]netip.Addr, 0, n)
	for a := first; len(out) < n && a.IsValid(); a = a.Next() {
		out = append(out, a)
	}
	return out
}
