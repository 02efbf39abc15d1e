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
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"sync"
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

// rateAt returns the rate in force at elapsed time d.
func (c *Config) rateAt(d time.Duration) float64 {
	r := c.Rate
	for _, s := range c.Schedule {
		if d < s.At {
			break
		}
		r = s.Rate
	}
	return r
}

// Record is one request of a run, kept when Config.Records is set. Warmup
// requests and dropped requests have none.
type Record struct {
	// At is when the request was started, since Result.Start.
	At time.Duration
	// Source is the local address and port of the connection the request
	// went out on: on loopback, the client address the server sees. Zero
	// when no connection was obtained.
	Source netip.AddrPort
	// Status is the response's HTTP status code; 0 when Err is set.
	Status int
	// Region and Backend are the response's X-Spillway-Region and
	// X-Spillway-Backend headers, whatever the status; empty when absent.
	Region, Backend string
	// Latency is the time from sending the request to reading the whole
	// response body, or to the transport error.
	Latency time.Duration
	// Err is the transport error (dial, timeout, reset); nil when a
	// response was read.
	Err error
}

// Result is what a run measured.
type Result struct {
	// Sent counts requests started after Warmup; OK those answered 2xx; Failed those with
	// a transport error or a non-2xx status; Dropped those not sent because
	// MaxInFlight was reached.
	Sent, OK, Failed, Dropped int64
	// Status counts responses by HTTP status code.
	Status map[int]int64
	// ByRegion and ByBackend count 2xx responses by the serving backend's
	// X-Spillway-Region and X-Spillway-Backend headers.
	ByRegion  map[string]int64
	ByBackend map[string]int64
	// Routed counts every response that names a region (any status): where
	// the load balancer sent requests, whether or not the backend coped.
	Routed map[string]int64
	// Latencies of answered requests (any status), sorted ascending.
	Latencies []time.Duration
	// Elapsed is the wall time of the run including the drain of
	// outstanding requests.
	Elapsed time.Duration
	// Start is when the run started; Record.At counts from it.
	Start time.Time
	// Records holds every recorded request when Config.Records is set,
	// sorted by At. len(Records) == Sent.
	Records []Record
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of Latencies, or 0
// when there are none.
func (r *Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.Latencies))*p/100+0.5) - 1
	i = max(0, min(i, len(r.Latencies)-1))
	return r.Latencies[i]
}

// RegionShare returns the fraction of 2xx responses served by region.
func (r *Result) RegionShare(region string) float64 {
	if r.OK == 0 {
		return 0
	}
	return float64(r.ByRegion[region]) / float64(r.OK)
}

// Run sends load as cfg describes until cfg.Duration has passed or ctx ends,
// waits for outstanding requests, and returns what it measured.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.URL == "" || cfg.Rate <= 0 || cfg.Duration <= 0 {
		return nil, errors.New("loadgen: URL, Rate and Duration are required")
	}
	for i, s := range cfg.Schedule {
		if s.Rate < 0 || (i > 0 && s.At < cfg.Schedule[i-1].At) {
			return nil, fmt.Errorf("loadgen: schedule[%d]: rate must be >= 0 and steps in ascending order, got at %v rate %g", i, s.At, s.Rate)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4096
	}
	clients := newClients(cfg)
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()

	res := &Result{Status: map[int]int64{}, ByRegion: map[string]int64{}, ByBackend: map[string]int64{}, Routed: map[string]int64{}}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, cfg.MaxInFlight)
	)
	record := func(rec Record) {
		mu.Lock()
		defer mu.Unlock()
		if cfg.Records {
			res.Records = append(res.Records, rec)
		}
		status, region, backend, lat, err := rec.Status, rec.Region, rec.Backend, rec.Latency, rec.Err
		res.Sent++
		if err != nil {
			res.Failed++
			return
		}
		res.Status[status]++
		if region != "" {
			res.Routed[region]++
		}
		res.Latencies = append(res.Latencies, lat)
		if status/100 == 2 {
			res.OK++
			res.ByRegion[region]++
			res.ByBackend[backend]++
		} else {
			res.Failed++
		}
	}

	start := time.Now()
	res.Start = start
	interval := time.Second / 1000
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.NewTimer(cfg.Duration)
	defer end.Stop()
	var due float64
	last := start
	next := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end.C:
			break loop
		case now := <-tick.C:
			due += now.Sub(last).Seconds() * cfg.rateAt(now.Sub(start))
			last = now
			for ; due >= 1; due-- {
				at := now.Sub(start)
				measured := at >= cfg.Warmup
				select {
				case sem <- struct{}{}:
				default:
					if measured {
						mu.Lock()
						res.Dropped++
						mu.Unlock()
					}
					continue
				}
				c := clients[next%len(clients)]
				next++
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					rec := send(ctx, c, cfg)
					rec.At = at
					if measured {
						record(rec)
					}
				}()
			}
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.Sort(res.Latencies)
	slices.SortStableFunc(res.Records, func(a, b Record) int { return cmp.Compare(a.At, b.At) })
	return res, nil
}

// send makes one request. The returned Record has every field but At.
func send(ctx context.Context, c *http.Client, cfg Config) Record {
	var rec Record
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
		rec.Err = fmt.Errorf("loadgen: %w", err)
		return rec
	}
	if cfg.Host != "" {
		req.Host = cfg.Host
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		rec.Latency, rec.Err = time.Since(t0), err
		return rec
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rec.Status, rec.Region, rec.Backend = resp.StatusCode, resp.Header.Get("X-Spillway-Region"), resp.Header.Get("X-Spillway-Backend")
	rec.Latency = time.Since(t0)
	return rec
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
