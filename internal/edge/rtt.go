package edge

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/ewma"
)

// rttProber measures this node's round trip to every region: every
// RTTInterval it sends one HTTP request (RTTPath) to one instance of each
// region, over a kept-alive connection from SourceIP, and smooths the time
// to the response headers with an EWMA. Any response counts as a sample;
// a failed probe adds none (the region keeps its last estimate, and a region
// never answered has none, so the planner treats it as unreachable).
type rttProber struct {
	path     string
	interval time.Duration
	clk      clock.Clock
	log      zerolog.Logger
	client   *http.Client

	// kick starts a round at once (buffered, 1): the first control state
	// should not wait a whole interval for its first RTT estimates.
	kick chan struct{}

	mu  sync.Mutex
	rtt map[string]*ewma.Value // region -> smoothed ms; guarded by mu
}

func newRTTProber(cfg Config, dialer *net.Dialer, clk clock.Clock, log zerolog.Logger) *rttProber {
	return &rttProber{
		path:     cfg.RTTPath,
		interval: cfg.RTTInterval,
		clk:      clk,
		log:      log.With().Str("component", "rtt").Logger(),
		client: &http.Client{
			Timeout: 2 * time.Second,
			Transport: &http.Transport{
				DialContext:         dialer.DialContext,
				MaxIdleConnsPerHost: 1,
				IdleConnTimeout:     time.Minute,
			},
		},
		rtt:  map[string]*ewma.Value{},
		kick: make(chan struct{}, 1),
	}
}

// probeSoon asks for a round now. It never blocks.
func (p *rttProber) probeSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// snapshot returns a copy of the smoothed RTT per region, in milliseconds.
func (p *rttProber) snapshot() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]float64, len(p.rtt))
	for r, v := range p.rtt {
		if x, ok := v.Get(); ok {
			out[r] = x
		}
	}
	return out
}

// run probes the regions targets returns (region -> instance address) every
// interval until ctx ends. Probes of one round run in parallel.
func (p *rttProber) run(ctx context.Context, targets func() map[string]string) error {
	defer p.client.CloseIdleConnections()
	t := p.clk.NewTicker(p.interval)
	defer t.Stop()
	p.round(ctx, targets())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			p.round(ctx, targets())
		case <-p.kick:
			p.round(ctx, targets())
		}
	}
}

func (p *rttProber) round(ctx context.Context, targets map[string]string) {
	var wg sync.WaitGroup
	for region, addr := range targets {
		wg.Go(func() {
			ms, ok := p.probe(ctx, addr)
			if !ok {
				return
			}
			p.mu.Lock()
			v := p.rtt[region]
			if v == nil {
				v = &ewma.Value{Alpha: 0.3}
				p.rtt[region] = v
			}
			v.Update(ms)
			p.mu.Unlock()
		})
	}
	wg.Wait()
	p.mu.Lock()
	maps.DeleteFunc(p.rtt, func(r string, _ *ewma.Value) bool { _, ok := targets[r]; return !ok })
	p.mu.Unlock()
}

// probe returns the time to the response headers of one request, in ms.
func (p *rttProber) probe(ctx context.Context, addr string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+p.path, nil)
	if err != nil {
		return 0, false
	}
	t0 := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		p.log.Debug().Err(err).Str("backend", addr).Msg("rtt probe failed")
		return 0, false
	}
	ms := float64(time.Since(t0).Microseconds()) / 1000
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return ms, true
}

// regionTargets returns, for every region of the current config, the first
// healthy instance (in config order) to probe; a region with no healthy
// instance is probed on its first instance, so it keeps an RTT estimate.
func (e *Edge) regionTargets() map[string]string {
	cs := e.control.Load()
	if cs == nil {
		return nil
	}
	out := map[string]string{}
	for _, g := range cs.Config.Groups() {
		r := g.Region.Name
		for _, in := range g.Group.Instances {
			if _, ok := out[r]; !ok {
				out[r] = in.Address
			}
			if !cs.Unhealthy[in.Address] && cs.Unhealthy[out[r]] {
				out[r] = in.Address
			}
		}
	}
	return out
}
