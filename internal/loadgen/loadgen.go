// Package loadgen is an open-loop HTTP load generator for the demo, the
// end-to-end tests and the real benchmark. It sends requests at a fixed rate
// from a set of client source addresses (127.0.0.0/8 on this machine, so that
// 2- and 5-tuple hashing see real spread) and records where each request was
// served, from the X-Spillway-Region and X-Spillway-Backend response headers
// of the test backend.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	record := func(status int, region, backend string, lat time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
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
			due += now.Sub(last).Seconds() * cfg.Rate
			last = now
			for ; due >= 1; due-- {
				measured := now.Sub(start) >= cfg.Warmup
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
					status, region, backend, lat, err := send(ctx, c, cfg)
					if measured {
						record(status, region, backend, lat, err)
					}
				}()
			}
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.Sort(res.Latencies)
	return res, nil
}

func send(ctx context.Context, c *http.Client, cfg Config) (status int, region, backend string, lat time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
	if err != nil {
		return 0, "", "", 0, fmt.Errorf("loadgen: %w", err)
	}
	if cfg.Host != "" {
		req.Host = cfg.Host
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Spillway-Region"), resp.Header.Get("X-Spillway-Backend"), time.Since(t0), nil
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
